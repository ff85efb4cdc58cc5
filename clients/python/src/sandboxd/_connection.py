"""One ``sandboxd serve`` process driven by threads: :class:`_Connection`.

Any number of caller threads pipeline their requests over the one stdin (a
lock keeps frames whole), a thread drains stderr, and a reader token decides
who reads stdout: a caller waiting for its answer reads and dispatches what
it reads itself, so a sequential call wakes no other thread; a background
reader thread steps in when no caller can (see :class:`_Connection`).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._hostcalls import NO_HOST_FUNCTIONS, HostCall, HostFunctions, answer_plain
from ._process import BUILD_HINT, StderrTail
from ._protocol import Call, Session, read_failure
from ._results import Transform, parse_any, release_params
from ._types import OnLog, OnOutput
from .errors import SidecarError

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
    """How one request ended: set once by its settle callback. Meanwhile
    the host calls its guest makes wait here for the thread that waits for
    it to serve them."""

    __slots__ = ("done", "result", "exc", "waiter", "host_calls")

    def __init__(self) -> None:
        self.done = False
        self.result: Any = None
        self.exc: Optional[BaseException] = None
        self.waiter: Optional[_Waiter] = None  # the thread blocked on it, if any
        self.host_calls: List[HostCall] = []  # to serve on that thread


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

    A host call is served by the thread waiting for the request whose guest
    made it: whoever reads the ``host/call`` queues it on that request's
    outcome and wakes its thread, which gives the token up and runs the
    handler (so the handler may send requests of its own, read for them,
    and answer). A request nobody waits for (``submit()`` without
    ``result()``, a wait that timed out) has its host calls served on a
    thread of their own.
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
        self.session = Session(self.tail.text, serve=self._route_host_call, reply=self._send_soon)
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
        and serving its host calls (see the class docstring). Raises
        concurrent.futures.TimeoutError after ``timeout`` seconds."""
        try:
            self._await(out, timeout)
        except BaseException:
            # Leaving without the outcome (timed out, interrupted): host
            # calls queued for this thread go to threads of their own.
            with self._lock:
                calls, out.host_calls = out.host_calls, []
            for host_call in calls:
                self._serve_apart(host_call)
            raise

    def _await(self, out: _Outcome, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        lock = self._lock
        while True:
            lock.acquire()
            if out.done:
                lock.release()
                return
            if out.host_calls:
                # Its guest waits for a host function: serve it here, and
                # let another caller read meanwhile.
                calls, out.host_calls = out.host_calls, []
                if self._reader is None:
                    self._pass_token()
                lock.release()
                for i, host_call in enumerate(calls):
                    try:
                        self._serve(host_call)
                    except BaseException:  # interrupted: the rest are still to serve
                        with lock:
                            out.host_calls[:0] = calls[i + 1:]
                        raise
                continue
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

    # -- host calls

    def _route_host_call(self, host_call: HostCall) -> None:
        """Give a host call to the thread waiting for its request (see the
        class docstring); called by the reader."""
        out = host_call.call.owner
        with self._lock:
            if isinstance(out, _Outcome) and not out.done and (out.waiter is not None or self._reader is out):
                out.host_calls.append(host_call)
                if out.waiter is not None:
                    out.waiter.wake()
                return
        self._serve_apart(host_call)

    def _serve_apart(self, host_call: HostCall) -> None:
        def serve() -> None:
            _keep_signals_for_callers()
            self._serve(host_call)

        threading.Thread(target=serve, name="sandboxd-host-call", daemon=True).start()

    def _serve(self, host_call: HostCall) -> None:
        """Run a host call's handler on this thread and send its answer."""
        if host_call.cancelled:
            return
        frame = answer_plain(host_call, self.session.finish_host_call)
        if frame is not None:
            try:
                self.send(frame)
            except (OSError, ValueError):
                pass  # the sidecar is gone; the reader tells the waiting calls

    def _send_soon(self, frame: bytes) -> None:
        """Send an answer the reader made, from a thread of its own: the
        reader must not block writing to a sidecar that waits for it to read."""
        def send() -> None:
            try:
                self.send(frame)
            except (OSError, ValueError):
                pass

        threading.Thread(target=send, name="sandboxd-reply", daemon=True).start()

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
              on_late: Optional[Callable[[Any], None]] = None,
              host_functions: HostFunctions = NO_HOST_FUNCTIONS) -> Tuple[Call, _Outcome]:
        """Send a request; returns it and the outcome its response settles.
        ``host_functions`` serve its guest's host calls."""
        out = _Outcome()
        call, frame = self.session.start(method, params, functools.partial(self._settle, out), on_log,
                                         transform, on_output, on_late, host_functions, out)
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
