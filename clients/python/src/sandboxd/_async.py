"""The asyncio client: :class:`AsyncSidecar`.

Same protocol core (:class:`~sandboxd._protocol.Session`) as the threaded
client, driven by an asyncio subprocess and a reader task. Cancelling the
task that awaits a run sends ``$/cancelRequest`` so the guest really stops,
instead of burning a worker until its deadline.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from ._params import compile_params, instantiate_params, run_params
from ._plugin import AsyncPlugin, PluginOpening, plugin_options
from ._process import BUILD_HINT, StderrTail, find_binary, not_running, sidecar_argv, sidecar_env
from ._protocol import (
    Call, Session, Transform, parse_any, parse_instantiated, parse_module, parse_object, parse_run_result,
    read_failure, release_params,
)
from ._types import Limits, Module, OnLog, OnOutput, RunOptions, RunResult
from .errors import SidecarError

__all__ = ["AsyncSidecar"]

_READ_CHUNK = 1 << 16


class _AsyncConnection:
    """One sidecar process with its reader and stderr-drain tasks."""

    @classmethod
    async def start(cls, argv: Sequence[str], env: Optional[Dict[str, str]]) -> "_AsyncConnection":
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env)
        except OSError as e:
            raise SidecarError("cannot start the sidecar %r: %s; %s" % (argv[0], e, BUILD_HINT)) from e
        return cls(proc)

    def __init__(self, proc: "asyncio.subprocess.Process") -> None:
        self.proc = proc
        self.tail = StderrTail()
        self.session = Session(self.tail.text)
        self.info: Optional[Dict[str, Any]] = None  # the initialize result, once asked for
        # Frames are written whole by one synchronous write(); the lock only
        # keeps drain() single-file (concurrent drains assert on Python 3.9).
        self._drain_lock = asyncio.Lock()
        self._closing = False
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._reader_task = asyncio.ensure_future(self._read_stdout())

    @property
    def dead(self) -> bool:
        return self.session.closed

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        try:
            while True:
                chunk = await self.proc.stderr.read(_READ_CHUNK)
                if not chunk:
                    return
                self.tail.add(chunk)
        except (OSError, ValueError):
            return

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        failure: Optional[str] = None
        try:
            while True:
                chunk = await self.proc.stdout.read(_READ_CHUNK)
                if not chunk:
                    break
                self.session.feed(chunk)
        except asyncio.CancelledError:
            failure = "the client's reader task was cancelled"
            self._kill()
        except Exception as e:  # never leave callers waiting on a dead reader
            failure, kill = read_failure(e, "task")
            if kill:
                self._kill()
        await self._stream_ended(failure)

    def _kill(self) -> None:
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass

    async def _stream_ended(self, failure: Optional[str]) -> None:
        # As in the threaded client: let the process be reaped and the last
        # of stderr arrive, so the error says how it died and why.
        try:
            await asyncio.wait_for(self.proc.wait(), 1.0)
        except asyncio.TimeoutError:
            pass
        try:
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 0.5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass  # the report just has less stderr; the calls must still fail
        self.session.output_ended(failure, self.proc.returncode, self._closing)

    def _write_now(self, frame: bytes) -> bool:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return False
        stdin.write(frame)
        return True

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
                   on_output: Optional[OnOutput] = None, on_late: Optional[Callable[[Any], None]] = None) -> Any:
        fut = asyncio.get_running_loop().create_future()

        def settle(result: Any, exc: Optional[BaseException]) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)

        call, frame = self.session.start(method, params, settle, on_log, transform, on_output, on_late)
        sent = False
        try:
            async with self._drain_lock:
                if not self._write_now(frame):
                    raise ConnectionResetError("the sidecar's stdin is closed")
                sent = True
                assert self.proc.stdin is not None
                await self.proc.stdin.drain()
        except (OSError, RuntimeError) as e:  # ConnectionError is an OSError
            # Let the reader, which will see EOF, fail the call with the exit
            # status and stderr; only if it does not, report the write error.
            try:
                await asyncio.wait_for(asyncio.shield(self._reader_task), 2.0)
            except asyncio.TimeoutError:
                pass
            self.session.send_failed(call, e)
        except BaseException:  # cancelled while writing
            self._abandon(call, sent)
            raise
        try:
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
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), max(0.05, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            self._kill()
        await self.dispose()

    async def dispose(self) -> None:
        if self.proc.returncode is None:
            self._kill()
        await self.proc.wait()
        for task in (self._reader_task, self._stderr_task):
            try:
                await asyncio.wait_for(asyncio.shield(task), 2.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        self.session.end("the sidecar was closed")


class AsyncSidecar:
    """The asyncio twin of :class:`sandboxd.Sidecar`: same arguments, same
    methods, awaited. ``async with sandboxd.AsyncSidecar() as sb:`` starts
    the process (so does the first call); many calls may be awaited at once
    (``asyncio.gather``). Cancelling a task awaiting :meth:`run` sends
    ``$/cancelRequest`` and the sidecar stops the guest within milliseconds.

    The binary is looked up by the constructor, so a missing binary raises
    SidecarError right away; the process itself starts on ``__aenter__``,
    :meth:`start` or the first call.
    """

    def __init__(self, binary: Optional[str] = None, args: Sequence[str] = (),
                 max_concurrency: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                 restart: bool = False) -> None:
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
        return "<sandboxd.AsyncSidecar pid=%d %s>" % (self._conn.proc.pid, state)

    @property
    def pid(self) -> Optional[int]:
        """Process id of the current sidecar process (None before start)."""
        return self._conn.proc.pid if self._conn is not None else None

    @property
    def returncode(self) -> Optional[int]:
        """Exit status of the current sidecar process; None while it runs."""
        return self._conn.proc.returncode if self._conn is not None else None

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
                    raise not_running("AsyncSidecar", conn.proc.returncode, conn.tail.text())
                await conn.dispose()
                conn = None
            if conn is None:
                self._conn = conn = await _AsyncConnection.start(self._argv, self._env)
            return conn

    async def run(self, options: Optional[RunOptions] = None, /, **keywords: Any) -> RunResult:
        """See :meth:`sandboxd.Sidecar.run` (same arguments). ``on_log`` and
        ``on_output`` run on the event loop, from the reader task, before this coroutine
        returns. Cancelling the awaiting task cancels the run."""
        opts = RunOptions.build(options, keywords)
        params = run_params(opts)
        conn = await self._connection()
        result: RunResult = await conn.call("run", params, opts.on_log, parse_run_result, on_output=opts.on_output)
        return result

    async def compile(self, *, wat: Optional[str] = None, wasm: Optional[bytes] = None,
                      path: Any = None, module: Any = None, limits: Optional[Limits] = None) -> Module:
        """See :meth:`sandboxd.Sidecar.compile`."""
        params = compile_params(wat, wasm, path, module, limits)
        conn = await self._connection()
        result: Module = await conn.call("compile", params, None, parse_module)
        return result

    def plugin(self, **keywords: Any) -> PluginOpening:
        """Instantiate a module (see :meth:`sandboxd.Sidecar.plugin`, same
        keywords): ``async with sb.plugin(...) as p:`` releases the instance
        on the way out, or ``p = await sb.plugin(...)`` gives the
        :class:`~sandboxd.AsyncPlugin` to release yourself. Arguments are
        checked here, before anything is awaited. Cancelling the awaiting
        task cancels the instantiation (an instance made anyway is
        released)."""
        opts = plugin_options(keywords, "plugin()")
        params = instantiate_params(opts)

        async def open() -> AsyncPlugin:
            conn = await self._connection()
            info = await conn.call("instantiate", params, opts.on_log, parse_instantiated,
                                   on_output=opts.on_output, on_late=conn.release_late)
            return AsyncPlugin(conn, info, params.get("capabilities", {}))

        return PluginOpening(open)

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
