"""The threaded client: :class:`Sidecar`.

One sidecar process, any number of caller threads whose requests are
pipelined over the one stdin (a lock keeps frames whole), a thread that
drains its stderr, and a reader token: a caller waiting for its answer
reads the sidecar's stdout itself and dispatches what it reads, so a
sequential call wakes no other thread; a background reader thread steps in
when no caller can (see :class:`_Connection`).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from ._params import compile_params, instantiate_params, run_request
from ._plugin import Plugin, plugin_options
from ._process import BUILD_HINT, StderrTail, find_binary, not_running, sidecar_argv, sidecar_env
from ._protocol import (
    Call, Session, Transform, parse_any, parse_instantiated, parse_module, parse_object, parse_run_result,
    read_failure, release_params,
)
from ._types import Limits, Module, OnLog, OnOutput, RunOptions, RunResult
from .errors import InvalidParams, SidecarError

__all__ = ["Sidecar", "RunHandle"]

_READ_CHUNK = 1 << 16


#: How long a sent request may go unread (nobody waiting for it) before the
#: background reader thread reads for it; see _Connection.
_UNREAD_GRACE = 0.002

#: The reader token's holder while the background thread reads.
_BACKGROUND = "background"


def _keep_signals_for_callers() -> None:
    """Block SIGINT in a helper thread, so that the kernel delivers a Ctrl-C
    to a thread that can act on it (the main thread, perhaps blocked in a
    read for its own answer, which the signal interrupts)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


class _Outcome:
    """How one request ended: set once by its settle callback."""

    __slots__ = ("done", "result", "exc", "waiter")

    def __init__(self) -> None:
        self.done = False
        self.result: Any = None
        self.exc: Optional[BaseException] = None
        self.waiter: Optional[_Waiter] = None  # the thread blocked on it, if any


class _Waiter:
    """A blocked thread: woken once, by its outcome or by the reader token
    coming free."""

    __slots__ = ("lock", "woken")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.woken = False

    def wake(self) -> None:  # with the connection's lock held
        if not self.woken:
            self.woken = True
            self.lock.release()


class _Connection:
    """One sidecar process: its pipes, threads and pending-request table.

    Reading the sidecar's stdout is a token that one thread holds at a time.
    A caller waiting (without a timeout) for its answer takes the token and
    reads itself, so a sequential call costs no thread hand-off: the thread
    that wrote the request is the one the kernel wakes with the answer. What
    it reads for other calls it settles for them; when its own answer has
    come, it passes the token to another waiting caller. The background
    reader thread takes the token only when nobody else can: for callers
    that wait with a timeout (a blocked read cannot time out), for requests
    nobody waits for (left unread for :data:`_UNREAD_GRACE`, so the sidecar
    never blocks writing and their callbacks run), and when the sidecar's
    stderr has ended (it is exiting: read its stdout to the end and fail
    what is pending, also while nobody calls).
    """

    def __init__(self, argv: Sequence[str], env: Optional[Dict[str, str]]) -> None:
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, close_fds=True, bufsize=0)
        except OSError as e:
            raise SidecarError("cannot start the sidecar %r: %s; %s" % (argv[0], e, BUILD_HINT)) from e
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in_fd = self.proc.stdin.fileno()
        self._out_fd = self.proc.stdout.fileno()
        self.tail = StderrTail()
        self.session = Session(self.tail.text)
        self.info: Optional[Dict[str, Any]] = None  # the initialize result, once asked for
        self._write_lock = threading.Lock()
        self._closing = False
        # The reader token and who waits for what, under _lock.
        self._lock = threading.Lock()
        self._wake_background = threading.Condition(self._lock)
        self._reader: Any = None  # None, _BACKGROUND, or the _Outcome of the caller reading
        self._inline: Dict[_Outcome, _Waiter] = {}  # callers that would read, in arrival order
        self._timed = 0  # callers waiting with a timeout: they need the background reader
        self._reads = 0  # reads done, to tell an unread request from a busy one
        self._background_idle = False
        self._stderr_ended = False
        self._ended = threading.Event()  # stdout has been read to its end (or reading failed)
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name="sandboxd-stderr-%d" % self.proc.pid, daemon=True)
        self._reader_thread = threading.Thread(
            target=self._background, name="sandboxd-reader-%d" % self.proc.pid, daemon=True)
        self._stderr_thread.start()
        self._reader_thread.start()

    @property
    def dead(self) -> bool:
        """The sidecar's output has ended: no call can succeed any more."""
        return self.session.closed

    # -- reading

    def _drain_stderr(self) -> None:
        _keep_signals_for_callers()
        stream = self.proc.stderr
        assert stream is not None
        try:
            while True:
                chunk = stream.read(_READ_CHUNK)
                if not chunk:
                    break
                self.tail.add(chunk)
        except (OSError, ValueError):
            pass  # pipe closed under us during close()
        with self._lock:  # the sidecar is ending: its stdout must be read to the end now
            self._stderr_ended = True
            self._wake_background.notify()

    def _read_once(self) -> None:
        """Read one chunk of stdout and dispatch it (the token is held).
        A KeyboardInterrupt in the read consumes nothing; one in the
        dispatch leaves the rest of the chunk to the next reader."""
        if self.session.has_unread():
            self.session.feed(b"")
            return
        try:
            chunk = os.read(self._out_fd, _READ_CHUNK)
        except OSError as e:
            self._stream_ended(read_failure(e, "thread")[0])
            return
        if not chunk:
            self._stream_ended(None)
            return
        try:
            self.session.feed(chunk)
        except Exception as e:  # never leave callers waiting on a broken stream
            failure, kill = read_failure(e, "thread")
            if kill:
                self.proc.kill()
            self._stream_ended(failure)

    def _stream_ended(self, failure: Optional[str]) -> None:
        # Give the process a moment to be reaped and the drainer to collect
        # the last of stderr, so the error says how it died and why.
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if threading.current_thread() is not self._stderr_thread:
            self._stderr_thread.join(timeout=0.5)
        self.session.output_ended(failure, self.proc.poll(), self._closing)
        self._ended.set()

    def _release_token(self) -> None:
        """Give the reader token up (lock held) and pass it on: to a caller
        waiting to read, else to the background thread if it is needed now."""
        self._reader = None
        self._reads += 1
        self._pass_token()

    def _pass_token(self) -> None:  # lock held, token free
        for waiter in self._inline.values():
            if not waiter.woken:
                waiter.wake()
                return
        if self._timed or self._stderr_ended:
            self._wake_background.notify()

    def _background(self) -> None:
        """The background reader: reads only when no caller can (see the
        class docstring); otherwise it checks every _UNREAD_GRACE while
        requests are pending, and sleeps while none are."""
        _keep_signals_for_callers()
        unread_at = -1  # self._reads when an unread request was last seen
        with self._lock:
            while not self._ended.is_set():
                if self._reader is None:
                    pending = len(self.session) > 0 or self.session.has_unread()
                    overdue = pending and not self._inline and unread_at == self._reads
                    if self._timed or self._stderr_ended or overdue:
                        self._reader = _BACKGROUND
                        self._lock.release()
                        try:
                            self._read_once()
                        finally:
                            self._lock.acquire()
                            self._release_token()
                        # keep reading for what nobody else reads
                        unread_at = self._reads
                        continue
                    unread_at = self._reads if pending else -1
                if self._reader is not None or len(self.session) > 0:
                    self._wake_background.wait(_UNREAD_GRACE)
                else:
                    self._background_idle = True
                    self._wake_background.wait()
                    self._background_idle = False

    # -- waiting

    def _settle(self, out: _Outcome, result: Any, exc: Optional[BaseException]) -> None:
        with self._lock:
            if out.done:
                return
            out.result, out.exc, out.done = result, exc, True
            waiter = out.waiter
            if waiter is not None:
                out.waiter = None
                waiter.wake()

    def await_outcome(self, out: _Outcome, timeout: Optional[float] = None) -> None:
        """Block until ``out`` is settled, reading for it if nobody else is
        (see the class docstring). Raises concurrent.futures.TimeoutError
        after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        lock = self._lock
        while True:
            lock.acquire()
            if out.done:
                lock.release()
                return
            if timeout is None and self._reader is None and not self._ended.is_set():
                self._reader = out
                lock.release()
                try:
                    self._read_once()
                finally:
                    with lock:
                        self._release_token()
                continue
            waiter = _Waiter()
            out.waiter = waiter
            if timeout is None:
                self._inline[out] = waiter
            else:
                self._timed += 1
                if self._reader is None:
                    self._wake_background.notify()
            lock.release()
            woken = False
            try:
                if deadline is None:
                    woken = waiter.lock.acquire()
                else:
                    woken = waiter.lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
            finally:
                with lock:
                    if out.waiter is waiter:
                        out.waiter = None
                    if timeout is None:
                        self._inline.pop(out, None)
                    else:
                        self._timed -= 1
                    # Chosen to read, it loops and takes the token; leaving
                    # (done, timed out, interrupted), it must not strand
                    # the callers behind it.
                    taking = woken and not out.done and self._reader is None
                    if not taking and self._reader is None:
                        self._pass_token()
                    timed_out = not woken and not out.done
            if timed_out:
                raise concurrent.futures.TimeoutError()

    def _await_end(self, timeout: float) -> None:
        """Wait (bounded) until stdout has been read to its end."""
        with self._lock:
            self._stderr_ended = True  # no more answers are coming: read to the end
            if self._reader is None:
                self._wake_background.notify()
        self._ended.wait(timeout)

    # -- requests

    def send(self, frame: bytes) -> None:
        view = memoryview(frame)
        with self._write_lock:
            while view:
                view = view[os.write(self._in_fd, view):]

    def notify(self, method: str, params: Any = None) -> None:
        try:
            self.send(Session.notification(method, params))
        except (OSError, ValueError):
            pass  # a dead sidecar needs no notification; the reader reports it

    def start(self, method: str, params: Any = None, on_log: Optional[OnLog] = None,
              transform: Transform = parse_any, on_output: Optional[OnOutput] = None,
              on_late: Optional[Callable[[Any], None]] = None) -> Tuple[Call, _Outcome]:
        """Send a request; returns it and the outcome its response settles."""
        out = _Outcome()
        call, frame = self.session.start(method, params, functools.partial(self._settle, out), on_log,
                                         transform, on_output, on_late)
        try:
            self.send(frame)
        except (OSError, ValueError) as e:  # ValueError: stdin already closed
            # The process is probably gone; reading its output to the end
            # fails this call with the better story (exit status, stderr).
            self._await_end(2.0)
            self.session.send_failed(call, e)
        if self._background_idle:
            with self._lock:
                self._wake_background.notify()  # a request that may go unread
        return call, out

    def release_late(self, result: Any) -> None:
        """An instantiate whose caller gave up (Ctrl-C) succeeded after all:
        release the instance nobody holds. Called by a reader, which must
        not block on stdin, so the release is sent from a thread of its own."""
        instance = result.get("instance") if isinstance(result, dict) else None
        if not isinstance(instance, str):
            return

        def send() -> None:
            try:
                self.start("release", release_params(instance))
            except SidecarError:
                pass  # the sidecar is gone, and the instance with it

        threading.Thread(target=send, name="sandboxd-release", daemon=True).start()

    def cancel(self, call: Call) -> None:
        """Ask the sidecar to stop ``call``; its answer (-32800) settles it."""
        self.notify("$/cancelRequest", {"id": call.id})

    def wait(self, call: Call, out: _Outcome, wait: Optional[float]) -> Any:
        """``out``'s result, or raise its error. Interrupted (Ctrl-C) or
        timed out, the request is abandoned and cancelled."""
        try:
            self.await_outcome(out, wait)
        except BaseException:
            if not out.done:
                # Stop the run rather than leave it burning a worker.
                if self.session.abandon(call.id):
                    self.cancel(call)
            raise
        if out.exc is not None:
            raise out.exc
        return out.result

    def call(self, method: str, params: Any = None, on_log: Optional[OnLog] = None,
             transform: Transform = parse_any, wait: Optional[float] = None) -> Any:
        call, out = self.start(method, params, on_log, transform)
        return self.wait(call, out, wait)

    def shutdown(self, timeout: float) -> None:
        """shutdown request, exit notification, then wait (kill if late)."""
        deadline = time.monotonic() + timeout
        self._closing = True
        if not self.dead:
            try:
                self.call("shutdown", wait=max(0.0, timeout))
            except (SidecarError, concurrent.futures.TimeoutError):
                pass
            self.notify("exit")
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # EOF: the sidecar exits even if it missed exit
        except OSError:
            pass
        try:
            self.proc.wait(timeout=max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.dispose()

    def dispose(self) -> None:
        """Reap the process and join the threads (it must be dead or dying)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._await_end(2.0)
        self._reader_thread.join(timeout=2.0)
        self._stderr_thread.join(timeout=2.0)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self.session.end("the sidecar was closed")


class Sidecar:
    """A ``sandboxd serve`` child process, driven over its stdin/stdout.

    Thread safe: any number of threads may call :meth:`run` at once; the
    requests are pipelined and the sidecar runs them concurrently (up to its
    ``--max-concurrency``). Use as a context manager, or call :meth:`close`.

    Args:
        binary: the sandboxd executable; default ``$SANDBOXD_BIN``, then
            ``sandboxd`` on PATH. Raises SidecarError (with how to build it)
            if none is found.
        args: extra command-line flags for ``sandboxd serve``.
        max_concurrency: passed as ``--max-concurrency N``.
        env: environment variables added to (overriding) this process's
            environment for the child.
        restart: if the sidecar dies, start a fresh one on the next call
            (calls pending at the time of death still fail with
            SidecarError). Without it, later calls raise SidecarError.

    The process is started by the constructor. If this process dies without
    calling close(), the sidecar sees EOF on stdin and exits by itself.
    """

    def __init__(self, binary: Optional[str] = None, args: Sequence[str] = (),
                 max_concurrency: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                 restart: bool = False) -> None:
        self._argv = sidecar_argv(find_binary(binary), args, max_concurrency)
        self._env = sidecar_env(env)
        self._restart = restart
        self._lock = threading.Lock()
        self._closed = False
        self._conn = _Connection(self._argv, self._env)

    # -- lifecycle

    def __enter__(self) -> "Sidecar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("dead" if self._conn.dead else "running")
        return "<sandboxd.Sidecar pid=%d %s>" % (self._conn.proc.pid, state)

    @property
    def pid(self) -> int:
        """Process id of the current sidecar process."""
        return self._conn.proc.pid

    @property
    def returncode(self) -> Optional[int]:
        """Exit status of the current sidecar process; None while it runs."""
        return self._conn.proc.poll()

    def close(self, timeout: float = 5.0) -> None:
        """Shut the sidecar down: ``shutdown`` (which lets in-flight runs
        finish), then ``exit``, then wait up to ``timeout`` seconds in all
        before killing it. Idempotent; calls made afterwards raise
        SidecarError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn = self._conn
        conn.shutdown(timeout)

    def _connection(self) -> _Connection:
        with self._lock:
            if self._closed:
                raise SidecarError("the sidecar is closed")
            conn = self._conn
            if conn.dead:
                if not self._restart:
                    raise not_running("Sidecar", conn.proc.poll(), conn.tail.text())
                conn.dispose()
                self._conn = conn = _Connection(self._argv, self._env)
            return conn

    # -- methods

    def run(self, options: Optional[RunOptions] = None, /, **keywords: Any) -> RunResult:
        """Run ``function`` of a module with ``args`` under the given fences.

        Takes a :class:`RunOptions`, keywords, or both (keywords override the
        options, see :meth:`RunOptions.with_options`). The keywords: exactly
        one module source, ``wat`` (text), ``wasm`` (bytes), ``path`` (a file
        the sidecar reads) or ``module`` (from compile()); ``function``
        (default "run"; for a WASI run the sidecar's ``_start``) and ``args``; the limits ``fuel``, ``timeout``
        (seconds), ``memory_bytes``, ``table_elements``, ``instances``,
        ``memories``, ``log_bytes`` or ``limits=Limits(...)`` (default: the
        sidecar's); the grants ``log``, ``random_seed``, ``clock`` or
        ``capabilities=Capabilities(...)`` (default: nothing); ``wasi``
        (a :class:`Wasi`, a dict of its fields, or True) runs a WASI preview1
        program; ``input`` (bytes or str) and ``config`` (str to str) for
        an Extism plugin, which is then instantiated, called and released in
        one request (the result's ``output`` is what the function set; see
        :meth:`plugin` to keep an instance); ``on_log``, ``on_output``.
        ``on_log(line)`` is called for each guest log line, and
        ``on_output(stream, data)`` for each piece of a WASI guest's
        ``"stdout"`` or ``"stderr"`` (bytes), in order, on the thread reading the sidecar's output
        and before run() returns (do not call the Sidecar from them; an
        exception one raises is re-raised by run()).

        Returns a RunResult; raises a SandboxError subclass named after the
        reason the run stopped (FuelExhausted, Timeout, Trap, ...),
        InvalidParams for arguments refused before sending or by the
        sidecar, or SidecarError for protocol failures and a dead sidecar.
        To be able to cancel the run from another thread, use
        :meth:`submit`.
        """
        conn, call, out = self._send_run(options, keywords)
        if not out.done:  # as RunHandle.result(), without making one
            try:
                conn.await_outcome(out)
            except KeyboardInterrupt:
                if not out.done:
                    conn.cancel(call)
                raise
        if out.exc is not None:
            raise out.exc
        result: RunResult = out.result
        return result

    def submit(self, options: Optional[RunOptions] = None, /, **keywords: Any) -> "RunHandle":
        """Send a run (same arguments as :meth:`run`) and return at once with
        a :class:`RunHandle`: ``result(timeout=None)`` waits for it,
        ``cancel()`` stops it (``$/cancelRequest``; the result then raises
        Cancelled)."""
        return RunHandle(*self._send_run(options, keywords))

    def _send_run(self, options: Optional[RunOptions], keywords: Dict[str, Any]) -> Tuple[_Connection, Call, _Outcome]:
        params, on_log, on_output = run_request(options, keywords)
        conn = self._connection()
        call, out = conn.start("run", params, on_log, parse_run_result, on_output)
        return conn, call, out

    def compile(self, *, wat: Optional[str] = None, wasm: Optional[bytes] = None, path: Any = None,
                module: Any = None, limits: Optional[Limits] = None) -> Module:
        """Compile (and cache) a module in the sidecar; returns a Module with
        its id, imports and exports, to run later with ``module=``.
        ``limits`` may set ``compile_timeout`` and ``compile_memory_bytes``
        (the sidecar refuses other fields with InvalidParams naming them);
        past them the compile raises CompileLimitExceeded."""
        params = compile_params(wat, wasm, path, module, limits)
        result: Module = self._connection().call("compile", params, None, parse_module)
        return result

    def plugin(self, **keywords: Any) -> Plugin:
        """Instantiate a module once, to call it many times: returns a
        :class:`~sandboxd.Plugin`, best used as a context manager (leaving
        the block releases the instance)::

            with sb.plugin(path="plugin.wasm", wasi=True, config={"k": "v"}) as p:
                p.call("greet", "Ada").output      # b"Hello, Ada!"

        Keywords: one module source (``wat``, ``wasm``, ``path``,
        ``module`` or ``module_id``); ``config`` (str to str, what an
        Extism plugin's ``config_get`` reads); the limits of :meth:`run`
        and ``var_bytes`` (a plugin's vars), or ``limits=``:
        ``memory_bytes``, ``table_elements``, ``instances``, ``memories``
        and ``var_bytes`` hold for the instance's life, ``fuel``,
        ``timeout``, ``log_bytes`` and ``output_bytes`` fence the
        instantiation and are each call's defaults; the grants ``log``
        (needed for a plugin's ``log_*``), ``random_seed``, ``clock``,
        ``wasi`` (needed by plugins built for WASI, such as Go PDK ones),
        or ``capabilities=``; ``on_log``/``on_output`` for what the
        instantiation (start function, ``_initialize``) writes.

        Raises what a run would (``Timeout`` in ``_initialize``,
        ``DisallowedImport``, ...), :class:`~sandboxd.TooManyInstances`
        when the sidecar holds its maximum of live instances. The instance
        lives in the sidecar process and dies with it. Ctrl-C while
        waiting cancels the instantiation.
        """
        return self._instantiate(keywords, "plugin()")

    def instantiate(self, **keywords: Any) -> Plugin:
        """:meth:`plugin` by the protocol's name, for any module: an
        instance that keeps its memory and globals between calls
        (``p.call("add", args=[5])``). Same keywords, same errors."""
        return self._instantiate(keywords, "instantiate()")

    def _instantiate(self, keywords: Dict[str, Any], caller: str) -> Plugin:
        opts = plugin_options(keywords, caller)
        params = instantiate_params(opts)
        conn = self._connection()
        call, out = conn.start("instantiate", params, opts.on_log, parse_instantiated, opts.on_output,
                               on_late=conn.release_late)
        info = conn.wait(call, out, None)
        return Plugin(conn, info, params.get("capabilities", {}))

    def stats(self) -> Dict[str, Any]:
        """The sidecar's counters (the ``stats`` method) as a dict."""
        result: Dict[str, Any] = self._connection().call("stats", None, None, parse_object)
        return result

    def initialize(self) -> Dict[str, Any]:
        """The ``initialize`` handshake: server info, engine versions,
        capabilities, default and maximum limits, maxConcurrency, maxQueue.
        Optional (runs work without it); the result is kept as :attr:`info`.
        """
        conn = self._connection()
        result: Dict[str, Any] = conn.call("initialize", {}, None, parse_object)
        conn.info = result
        return result

    @property
    def info(self) -> Dict[str, Any]:
        """The ``initialize`` result of the current sidecar process (sent
        the first time this is read, then kept; a restarted process is asked
        again)."""
        conn = self._connection()
        info = conn.info
        return info if info is not None else self.initialize()


class RunHandle:
    """A run sent by :meth:`Sidecar.submit` (or a call sent by
    :meth:`Plugin.submit`), like a concurrent.futures.Future.

    ``result(timeout=None)`` waits for the outcome: the RunResult (a
    CallResult for a call), or the exception :meth:`Sidecar.run` would raise. A ``timeout`` (seconds) that
    passes raises TimeoutError and leaves the run going (``cancel()`` it, or
    wait again). ``cancel()`` sends ``$/cancelRequest``: the sidecar stops
    the guest, queued or running, within milliseconds, and ``result()``
    raises :class:`~sandboxd.Cancelled`, with the fuel it had consumed.
    Interrupting ``result()`` (KeyboardInterrupt) cancels the run too.
    """

    def __init__(self, conn: _Connection, call: Call, out: _Outcome) -> None:
        self._conn = conn
        self._call = call
        self._out = out

    @property
    def id(self) -> int:
        """The JSON-RPC request id of the run."""
        return self._call.id

    def done(self) -> bool:
        """The run has finished (result() will not block)."""
        return self._out.done

    def cancel(self) -> bool:
        """Ask the sidecar to stop the run; False if it had finished already."""
        if self._out.done:
            return False
        self._conn.cancel(self._call)
        return True

    def result(self, timeout: Optional[float] = None) -> Any:
        """The run's RunResult; raises its error. See the class docstring."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise InvalidParams("timeout must be a number of seconds, got %r" % (timeout,))
        out = self._out
        if not out.done:
            try:
                self._conn.await_outcome(out, timeout)
            except concurrent.futures.TimeoutError:
                raise TimeoutError("%s %d did not finish within %s s; it is still running"
                                   % (self._call.method, self.id, timeout)) from None
            except KeyboardInterrupt:
                self.cancel()
                raise
        if out.exc is not None:
            raise out.exc
        return out.result

    def __repr__(self) -> str:
        return "<sandboxd.RunHandle id=%d %s>" % (self.id, "done" if self.done() else "pending")
