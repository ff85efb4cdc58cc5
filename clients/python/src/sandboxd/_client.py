"""The threaded client: :class:`Sidecar`.

One sidecar process, one reader thread that dispatches every frame the
sidecar writes, one thread that drains its stderr, and any number of caller
threads whose requests are pipelined over the one stdin (a lock keeps
frames whole). A call blocks only its own thread, on its own future.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import threading
import time
from typing import Any, Dict, Mapping, Optional, Sequence

from ._params import OnLog, module_source, run_params
from ._process import BUILD_HINT, StderrTail, find_binary, not_running, sidecar_argv, sidecar_env
from ._protocol import (
    Session, Transform, parse_any, parse_module, parse_object, parse_run_result, read_failure,
)
from ._types import Limits, Module, RunResult
from .errors import SidecarError

__all__ = ["Sidecar"]

_READ_CHUNK = 1 << 16


class _Connection:
    """One sidecar process: its pipes, threads and pending-request table."""

    def __init__(self, argv: Sequence[str], env: Optional[Dict[str, str]]) -> None:
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, close_fds=True)
        except OSError as e:
            raise SidecarError("cannot start the sidecar %r: %s; %s" % (argv[0], e, BUILD_HINT)) from e
        self.tail = StderrTail()
        self.session = Session(self.tail.text)
        self._write_lock = threading.Lock()
        self._closing = False
        self._stderr_thread = threading.Thread(
            target=self._drain_stderr, name="sandboxd-stderr-%d" % self.proc.pid, daemon=True)
        self._reader = threading.Thread(
            target=self._read_stdout, name="sandboxd-reader-%d" % self.proc.pid, daemon=True)
        self._stderr_thread.start()
        self._reader.start()

    @property
    def dead(self) -> bool:
        """The reader saw the end of stdout: no call can succeed any more."""
        return self.session.closed

    # -- threads

    def _drain_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        try:
            while True:
                chunk = stream.read1(_READ_CHUNK)  # type: ignore[attr-defined]
                if not chunk:
                    return
                self.tail.add(chunk)
        except (OSError, ValueError):
            return  # pipe closed under us during close()

    def _read_stdout(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        failure: Optional[str] = None
        try:
            while True:
                chunk = stream.read1(_READ_CHUNK)  # type: ignore[attr-defined]
                if not chunk:
                    break
                self.session.feed(chunk)
        except BaseException as e:  # never leave callers waiting on a dead reader
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
        self._stderr_thread.join(timeout=0.5)
        self.session.output_ended(failure, self.proc.poll(), self._closing)

    # -- requests

    def send(self, frame: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with self._write_lock:
            stdin.write(frame)
            stdin.flush()

    def notify(self, method: str, params: Any = None) -> None:
        try:
            self.send(Session.notification(method, params))
        except (OSError, ValueError):
            pass  # a dead sidecar needs no notification; the reader reports it

    def call(self, method: str, params: Any = None, on_log: Optional[OnLog] = None,
             transform: Transform = parse_any, wait: Optional[float] = None) -> Any:
        fut: "concurrent.futures.Future[Any]" = concurrent.futures.Future()

        def settle(result: Any, exc: Optional[BaseException]) -> None:
            try:
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            except concurrent.futures.InvalidStateError:
                pass

        call, frame = self.session.start(method, params, settle, on_log, transform)
        try:
            self.send(frame)
        except (OSError, ValueError) as e:  # ValueError: stdin already closed
            # The process is probably gone; its reader will fail this call
            # with the better story (exit status, stderr) once it sees EOF.
            if threading.current_thread() is not self._reader:
                self._reader.join(timeout=2.0)
            self.session.send_failed(call, e)
        try:
            return fut.result(wait)
        except BaseException:
            if not fut.done():
                # Interrupted (KeyboardInterrupt) or timed out: stop the
                # run rather than leave it burning a worker.
                if self.session.abandon(call.id):
                    self.notify("$/cancelRequest", {"id": call.id})
            raise

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
        self._reader.join(timeout=2.0)
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

    def run(self, *, wat: Optional[str] = None, wasm: Optional[bytes] = None, path: Any = None,
            module: Any = None, function: str = "run", args: Sequence[Any] = (),
            limits: Optional[Limits] = None, fuel: Optional[int] = None, timeout: Optional[float] = None,
            memory_bytes: Optional[int] = None, table_elements: Optional[int] = None,
            instances: Optional[int] = None, memories: Optional[int] = None, log_bytes: Optional[int] = None,
            log: bool = False, random_seed: Optional[int] = None, clock: bool = False,
            on_log: Optional[OnLog] = None) -> RunResult:
        """Run ``function`` of a module with ``args`` under the given fences.

        Give exactly one module source: ``wat`` (text), ``wasm`` (bytes),
        ``path`` (a file the sidecar reads) or ``module`` (from compile()).
        Limits default to the sidecar's; ``timeout`` is in seconds; keyword
        limits override the fields of ``limits``. ``log``/``random_seed``/
        ``clock`` grant the host functions (nothing is granted by default).
        ``on_log(line)`` is called for each guest log line, in order, on the
        reader thread and before run() returns (do not call the Sidecar from
        it; an exception it raises is re-raised by run()).

        Returns a RunResult; raises a SandboxError subclass named after the
        reason the run stopped (FuelExhausted, Timeout, Trap, ...), or
        SidecarError for protocol failures and a dead sidecar.
        """
        params = run_params(
            wat=wat, wasm=wasm, path=path, module=module, function=function, args=args, limits=limits,
            limit_overrides=dict(fuel=fuel, timeout=timeout, memory_bytes=memory_bytes,
                                 table_elements=table_elements, instances=instances, memories=memories,
                                 log_bytes=log_bytes),
            log=log, random_seed=random_seed, clock=clock, on_log=on_log)
        result: RunResult = self._connection().call("run", params, on_log, parse_run_result)
        return result

    def compile(self, *, wat: Optional[str] = None, wasm: Optional[bytes] = None, path: Any = None,
                module: Any = None) -> Module:
        """Compile (and cache) a module in the sidecar; returns a Module with
        its id, imports and exports, to run later with ``module=``."""
        params = {"module": module_source(wat, wasm, path, module)}
        result: Module = self._connection().call("compile", params, None, parse_module)
        return result

    def stats(self) -> Dict[str, Any]:
        """The sidecar's counters (the ``stats`` method) as a dict."""
        result: Dict[str, Any] = self._connection().call("stats", None, None, parse_object)
        return result

    def initialize(self) -> Dict[str, Any]:
        """The optional ``initialize`` handshake: server info, capabilities,
        default and maximum limits, maxConcurrency. Runs work without it."""
        result: Dict[str, Any] = self._connection().call("initialize", {}, None, parse_object)
        return result
