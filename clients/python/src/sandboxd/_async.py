"""The asyncio client: :class:`AsyncSidecar`.

Same protocol core (:class:`~sandboxd._protocol.Session`) as the threaded
client, driven by the event loop's callbacks on the sidecar's pipes. Cancelling the
task that awaits a run sends ``$/cancelRequest`` so the guest really stops,
instead of burning a worker until its deadline. A host call's handler runs
at once up to its first wait, then as a task of its own, which the
sidecar's ``$/cancelRequest`` cancels.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set

from ._hostcalls import NO_HOST_FUNCTIONS, HostCall, HostFunction, HostFunctions, mark_current, start_eagerly
from ._params import compile_params, run_request
from ._plugin import AsyncPlugin, Opening, instantiate_request
from ._process import BUILD_HINT, StderrTail, find_binary, not_running, sidecar_argv, sidecar_env
from ._protocol import Call, Session, read_failure
from ._results import (
    Transform, parse_any, parse_instantiated, parse_module, parse_object, parse_run_result, release_params,
)
from ._snippets import AsyncSnippets
from ._types import Limits, Module, OnLog, OnOutput, RunOptions, RunResult
from .errors import SidecarError

__all__ = ["AsyncSidecar"]



class _ReadPipe(asyncio.Protocol):
    """One of the sidecar's output pipes: each chunk goes straight to
    ``on_data`` from the event loop's read callback (no reader task, and
    not the subprocess transport, which adds a loop iteration per chunk)."""

    def __init__(self, on_data: Callable[[bytes], None], on_lost: Callable[[Optional[Exception]], None]) -> None:
        self._on_data = on_data
        self._on_lost = on_lost

    def data_received(self, data: bytes) -> None:
        self._on_data(data)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._on_lost(exc)


class _WritePipe(asyncio.BaseProtocol):
    """The sidecar's stdin: flow control for large frames."""

    def __init__(self, conn: "_AsyncConnection") -> None:
        self._conn = conn

    def pause_writing(self) -> None:
        self._conn._paused = True

    def resume_writing(self) -> None:
        self._conn._resume_writing()


class _AsyncConnection:
    """One sidecar process, driven by the protocol callbacks of its pipes
    (POSIX pipes, through the event loop's own reader and writer).

    Writes: a frame goes to stdin at once, except while the event loop is
    resuming the callers whose answers one chunk of stdout settled: the
    frames those callers send next are joined and written once, after them
    (under load, one write for many requests instead of one each).
    """

    @classmethod
    async def start(cls, argv: Sequence[str], env: Optional[Dict[str, str]]) -> "_AsyncConnection":
        loop = asyncio.get_running_loop()
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, close_fds=True, bufsize=0)
        except OSError as e:
            raise SidecarError("cannot start the sidecar %r: %s; %s" % (argv[0], e, BUILD_HINT)) from e
        conn = cls(loop, proc)
        try:
            await loop.connect_read_pipe(lambda: _ReadPipe(conn._stdout_data, conn._stdout_lost), proc.stdout)
            await loop.connect_read_pipe(lambda: _ReadPipe(conn.tail.add, conn._stderr_lost), proc.stderr)
            conn._stdin, _ = await loop.connect_write_pipe(lambda: _WritePipe(conn), proc.stdin)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return conn

    def __init__(self, loop: asyncio.AbstractEventLoop, proc: "subprocess.Popen[bytes]") -> None:
        self._loop = loop
        self.proc = proc
        self.tail = StderrTail()
        self.session = Session(self.tail.text, serve=self._serve_host_call, reply=self._write_now)
        self._handlers: Set["asyncio.Task[None]"] = set()  # host calls being served (the loop keeps weak refs)
        self.info: Optional[Dict[str, Any]] = None  # the initialize result, once asked for
        self._stdin: Any = None  # the write pipe transport
        self._closing = False
        self._broken = False  # stdout's framing broke: ignore the rest
        self._stdout_ended = False
        self._paused = False  # stdin's buffer is past its high-water mark
        self._drained: List["asyncio.Future[None]"] = []
        self._batch: Optional[List[bytes]] = None  # frames to join, while the window is open
        self._stderr_done: "asyncio.Future[None]" = loop.create_future()
        self._ended: "asyncio.Future[None]" = loop.create_future()

    @property
    def dead(self) -> bool:
        return self.session.closed

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.poll()

    async def _exit(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the process to exit (polled: this
        only runs when the sidecar is ending)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.002)
        return True

    @staticmethod
    def _set(fut: "asyncio.Future[None]") -> None:
        if not fut.done():
            fut.set_result(None)

    # -- reading (protocol callbacks, on the event loop)

    def _stdout_data(self, data: bytes) -> None:
        if self._broken:
            return
        opened = self._batch is None
        if opened:
            self._batch = []
        try:
            self.session.feed(data)
        except Exception as e:  # never leave callers waiting on a broken stream
            failure, kill = read_failure(e, "task")
            self._broken = True
            if kill:
                self._kill()
            self._stdout_lost(None, failure)
        if opened:
            # the callers it settled run next; the frames they write are joined
            self._loop.call_soon(self._flush)

    def _stdout_lost(self, exc: Optional[Exception], failure: Optional[str] = None) -> None:
        if self._stdout_ended:
            return
        self._stdout_ended = True
        if failure is None and exc is not None:
            failure = read_failure(exc, "task")[0]
        asyncio.ensure_future(self._stream_ended(failure))

    def _stderr_lost(self, exc: Optional[Exception]) -> None:
        self._set(self._stderr_done)

    def _kill(self) -> None:
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    async def _stream_ended(self, failure: Optional[str]) -> None:
        # As in the threaded client: let the process be reaped and the last
        # of stderr arrive, so the error says how it died and why.
        await self._exit(1.0)
        try:
            await asyncio.wait_for(asyncio.shield(self._stderr_done), 0.5)
        except asyncio.TimeoutError:
            pass  # the report just says less; the calls must still fail
        self.session.output_ended(failure, self.returncode, self._closing)
        self._set(self._ended)

    # -- writing

    def _write_now(self, frame: Optional[bytes]) -> bool:
        stdin = self._stdin
        if frame is None or stdin is None or stdin.is_closing():
            return False
        if self._batch is not None:
            self._batch.append(frame)
        else:
            stdin.write(frame)
        return True

    def _flush(self) -> None:
        batch, self._batch = self._batch, None
        stdin = self._stdin
        if batch and stdin is not None and not stdin.is_closing():
            # A failed write closes the pipe; the calls are failed when
            # stdout ends (the sidecar is gone), like any pending call.
            stdin.write(batch[0] if len(batch) == 1 else b"".join(batch))

    def _resume_writing(self) -> None:
        self._paused = False
        drained, self._drained = self._drained, []
        for fut in drained:
            self._set(fut)

    async def _drain(self) -> None:
        if self._paused:
            fut: "asyncio.Future[None]" = self._loop.create_future()
            self._drained.append(fut)
            await fut

    # -- host calls

    def _serve_host_call(self, call: HostCall) -> None:
        """Run a host call's handler (called by the reader): at once, up to
        its first wait, the rest as a task (start_eagerly)."""
        task = start_eagerly(self._loop, self._answer(call))
        if task is None:
            return  # answered already
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        call.on_cancel = task.cancel

    async def _answer(self, call: HostCall) -> None:
        mark_current(call)  # in this task's own context: current_host_call() across its awaits
        try:
            returned = call.function.handler(*call.args)
            if inspect.isawaitable(returned):
                returned = await returned
        except asyncio.CancelledError:
            if call.cancelled:
                return  # by the sidecar: no answer
            self._write_now(self.session.finish_host_call(call, failure=RuntimeError("the handler was cancelled")))
            raise
        except Exception as e:
            frame = self.session.finish_host_call(call, failure=e)
        else:
            frame = self.session.finish_host_call(call, returned)
        if frame is not None:
            self._write_now(frame)

    def notify(self, method: str, params: Any = None) -> None:
        try:
            self._write_now(Session.notification(method, params))
        except (OSError, RuntimeError):
            pass

    def _abandon(self, call: Call, sent: bool) -> None:
        """The awaiting task was cancelled (or gave up): tell the server to
        stop the request; its -32800 reply will find no pending call."""
        if self.session.abandon(call.id) and sent:
            self.notify("$/cancelRequest", {"id": call.id})

    def release_late(self, result: Any) -> None:
        """An instantiate whose awaiting task was cancelled succeeded after
        all: release the instance nobody holds (nobody waits for the answer)."""
        instance = result.get("instance") if isinstance(result, dict) else None
        if not isinstance(instance, str):
            return
        try:
            _call, frame = self.session.start("release", release_params(instance), lambda result, exc: None)
            self._write_now(frame)
        except (SidecarError, OSError, RuntimeError):
            pass  # the sidecar is gone, and the instance with it

    async def call(self, method: str, params: Any = None, on_log: Optional[OnLog] = None,
                   transform: Transform = parse_any, wait: Optional[float] = None,
                   on_output: Optional[OnOutput] = None, on_late: Optional[Callable[[Any], None]] = None,
                   host_functions: HostFunctions = NO_HOST_FUNCTIONS) -> Any:
        fut = self._loop.create_future()

        def settle(result: Any, exc: Optional[BaseException]) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

        call, frame = self.session.start(method, params, settle, on_log, transform, on_output, on_late,
                                         host_functions, fut)
        try:
            if not self._write_now(frame):
                raise ConnectionResetError("the sidecar's stdin is closed")
        except (OSError, RuntimeError) as e:  # ConnectionError is an OSError
            # Let the end of stdout fail the call with the exit status and
            # stderr; only if it does not come, report the write error.
            try:
                await asyncio.wait_for(asyncio.shield(self._ended), 2.0)
            except asyncio.TimeoutError:
                pass
            self.session.send_failed(call, e)
        try:
            if self._paused:
                await self._drain()
            if wait is None:
                return await fut
            return await asyncio.wait_for(fut, wait)
        except BaseException:
            if not fut.done() or fut.cancelled():
                self._abandon(call, True)
            raise

    async def shutdown(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._closing = True
        if not self.dead:
            try:
                await self.call("shutdown", wait=max(0.0, timeout))
            except (SidecarError, asyncio.TimeoutError):
                pass
            self.notify("exit")
        self._flush()
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()
        if not await self._exit(max(0.05, deadline - time.monotonic())):
            self._kill()
        await self.dispose()

    async def dispose(self) -> None:
        if self.proc.poll() is None:
            self._kill()
        await self._exit(5.0)
        try:
            await asyncio.wait_for(asyncio.shield(self._ended), 2.0)
        except asyncio.TimeoutError:
            pass
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()
        self.session.end("the sidecar was closed")


class AsyncSidecar(AsyncSnippets):
    """The asyncio twin of :class:`sandboxd.Sidecar`: same arguments, same
    methods, awaited. A host function's handler may be an ``async def``
    (run as a task, cancelled when the sidecar cancels the call) or a
    plain function (run on the event loop). ``async with sandboxd.AsyncSidecar() as sb:`` starts
    the process (so does the first call); many calls may be awaited at once
    (``asyncio.gather``). Cancelling a task awaiting :meth:`run` sends
    ``$/cancelRequest`` and the sidecar stops the guest within milliseconds.

    The binary is looked up by the constructor, so a missing binary raises
    SidecarError right away; the process itself starts on ``__aenter__``,
    :meth:`start` or the first call.
    """

    def __init__(self, binary: Optional[str] = None, args: Sequence[str] = (),
                 max_concurrency: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                 restart: bool = False, host_functions: Sequence[HostFunction] = ()) -> None:
        self._host_functions = NO_HOST_FUNCTIONS.merged(host_functions, "host_functions")
        self._argv = sidecar_argv(find_binary(binary), args, max_concurrency)
        self._env = sidecar_env(env)
        self._restart = restart
        self._closed = False
        self._conn: Optional[_AsyncConnection] = None
        self._start_lock: Optional[asyncio.Lock] = None  # made inside the loop (3.9 binds locks to a loop)

    async def __aenter__(self) -> "AsyncSidecar":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        if self._conn is None:
            return "<sandboxd.AsyncSidecar not started>"
        state = "closed" if self._closed else ("dead" if self._conn.dead else "running")
        return "<sandboxd.AsyncSidecar pid=%d %s>" % (self._conn.pid, state)

    @property
    def pid(self) -> Optional[int]:
        """Process id of the current sidecar process (None before start)."""
        return self._conn.pid if self._conn is not None else None

    @property
    def returncode(self) -> Optional[int]:
        """Exit status of the current sidecar process; None while it runs."""
        return self._conn.returncode if self._conn is not None else None

    async def start(self) -> None:
        """Start the sidecar process now rather than on the first call, and
        send ``initialize`` (its result is :attr:`info`)."""
        await self.initialize()

    async def close(self, timeout: float = 5.0) -> None:
        """``shutdown``, ``exit``, wait up to ``timeout`` s, then kill. Idempotent."""
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn is not None:
            await conn.shutdown(timeout)

    async def _connection(self) -> _AsyncConnection:
        conn = self._conn
        if conn is not None and not self._closed and not conn.dead:
            return conn  # the common case, without the lock
        if self._closed:
            raise SidecarError("the sidecar is closed")
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._closed:
                raise SidecarError("the sidecar is closed")
            conn = self._conn
            if conn is not None and conn.dead:
                if not self._restart:
                    raise not_running("AsyncSidecar", conn.returncode, conn.tail.text())
                await conn.dispose()
                conn = None
            if conn is None:
                self._conn = conn = await _AsyncConnection.start(self._argv, self._env)
            return conn

    async def run(self, options: Optional[RunOptions] = None, /, **keywords: Any) -> RunResult:
        """See :meth:`sandboxd.Sidecar.run` (same arguments). ``on_log`` and
        ``on_output`` run on the event loop, as the sidecar's output is read, before this coroutine
        returns. Cancelling the awaiting task cancels the run."""
        params, on_log, on_output, functions = run_request(options, keywords, self._host_functions)
        conn = await self._connection()
        result: RunResult = await conn.call("run", params, on_log, parse_run_result, on_output=on_output,
                                            host_functions=functions)
        return result

    async def compile(self, *, wat: Optional[str] = None, wasm: Optional[bytes] = None,
                      path: Any = None, module: Any = None, limits: Optional[Limits] = None,
                      preinitialize: bool = False) -> Module:
        """See :meth:`sandboxd.Sidecar.compile`."""
        params = compile_params(wat, wasm, path, module, limits, preinitialize)
        conn = await self._connection()
        result: Module = await conn.call("compile", params, None, parse_module)
        return result

    def plugin(self, **keywords: Any) -> Opening:
        """Instantiate a module (see :meth:`sandboxd.Sidecar.plugin`, same
        keywords): ``async with sb.plugin(...) as p:`` releases the instance
        on the way out, or ``p = await sb.plugin(...)`` gives the
        :class:`~sandboxd.AsyncPlugin` to release yourself. Arguments are
        checked here, before anything is awaited. Cancelling the awaiting
        task cancels the instantiation (an instance made anyway is
        released)."""
        return self._instantiate(keywords, "plugin()")

    def instantiate(self, **keywords: Any) -> Opening:
        """:meth:`plugin` by the protocol's name, for any module (see
        :meth:`sandboxd.Sidecar.instantiate`)."""
        return self._instantiate(keywords, "instantiate()")

    def _instantiate(self, keywords: Dict[str, Any], caller: str) -> Opening:
        opts, params, functions = instantiate_request(keywords, caller, self._host_functions)

        async def open() -> AsyncPlugin:
            conn = await self._connection()
            info = await conn.call("instantiate", params, opts.on_log, parse_instantiated,
                                   on_output=opts.on_output, on_late=conn.release_late, host_functions=functions)
            return AsyncPlugin(conn, info, params.get("capabilities", {}), functions)

        return Opening(open)

    async def stats(self) -> Dict[str, Any]:
        """See :meth:`sandboxd.Sidecar.stats`."""
        conn = await self._connection()
        result: Dict[str, Any] = await conn.call("stats", None, None, parse_object)
        return result

    async def initialize(self) -> Dict[str, Any]:
        """See :meth:`sandboxd.Sidecar.initialize`; the result is kept as :attr:`info`."""
        conn = await self._connection()
        result: Dict[str, Any] = await conn.call("initialize", {}, None, parse_object)
        conn.info = result
        return result

    @property
    def info(self) -> Optional[Dict[str, Any]]:
        """The ``initialize`` result of the current sidecar process: set by
        :meth:`start` (so inside ``async with``) and by :meth:`initialize`;
        None before either ran on this process."""
        return self._conn.info if self._conn is not None else None
