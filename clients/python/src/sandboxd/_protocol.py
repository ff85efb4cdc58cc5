"""The I/O-free core of the client, shared by Sidecar and AsyncSidecar.

:class:`Session` owns the table of pending requests: it numbers requests,
routes ``log`` and ``output`` notifications and responses to them, and turns responses into
results or exceptions, and decides what pending calls are told when the
sidecar goes away. The two clients only move bytes and wake waiters
(``concurrent.futures`` for threads, ``asyncio`` futures for the event
loop), so both behave identically by construction.
"""

from __future__ import annotations

import collections
import itertools
import re
import threading
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from ._bytes import bytes_from_wire
from ._framing import FrameDecoder, FramingError, encode_message
from ._process import describe_exit, sidecar_failure
from ._results import Transform, parse_any
from ._types import LogLine, OnLog, OnOutput
from .errors import SidecarError, error_from_rpc

Settle = Callable[[Any, Optional[BaseException]], None]
#: Handles a notification's params; gets the pending call whose id the
#: params carry (``params["id"]``), or None.
NotificationHandler = Callable[[Any, Optional["Call"]], None]


# --------------------------------------------------------------------------
# Why the sidecar's output stopped


def read_failure(exc: BaseException, reader: str) -> Tuple[str, bool]:
    """Why reading the sidecar's stdout stopped with ``exc`` (raised by the
    ``reader`` -- "thread" or "task" -- while reading or in
    :meth:`Session.feed`), and whether the process must be killed: after
    broken framing its output cannot be trusted, and after a failure of the
    reader itself nobody reads its output any more."""
    if isinstance(exc, FramingError):
        return "the sidecar broke the message framing (%s); it was stopped" % exc, True
    if isinstance(exc, (OSError, ValueError)):
        return "reading from the sidecar failed: %s" % exc, False
    return "the client's reader %s failed: %r" % (reader, exc), True


# --------------------------------------------------------------------------
# The pending-request table


class Call:
    """One request awaiting its response."""

    __slots__ = ("id", "method", "settle", "on_log", "on_output", "transform", "logs", "outputs", "failure",
                 "size", "on_late")

    def __init__(self, id: int, method: str, settle: Settle, on_log: Optional[OnLog],
                 transform: Transform, size: int, on_output: Optional[OnOutput] = None,
                 on_late: Optional[Callable[[Any], None]] = None) -> None:
        self.id = id
        self.method = method
        self.settle = settle
        self.on_log = on_log
        self.on_output = on_output
        self.transform = transform
        self.logs: List[str] = []
        self.outputs = 0  # output notifications seen (the next seq)
        self.failure: Optional[BaseException] = None  # raised instead of the result
        self.size = size  # body bytes, to attribute an "id": null size error
        # Called (on the reader) with the result of this call if it arrives
        # after the call was abandoned: an instantiate whose caller gave up
        # releases the instance it did not want.
        self.on_late = on_late


_SIZE_RE = re.compile(r"message of (\d+) bytes")


class Session:
    """Request ids, the pending table and message dispatch; no I/O.

    Thread safety: ``start``/``abandon``/``close`` may be called from any
    thread; ``feed``/``receive`` by one reader at a time (which is what
    keeps each call's log lines and output in order). ``settle``, ``on_log``
    and ``on_output`` callbacks run in the reader, outside the lock.

    ``stderr_tail`` returns the sidecar's recent stderr, for the errors that
    report a failed or vanished sidecar.
    """

    def __init__(self, stderr_tail: Callable[[], str] = lambda: "") -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: Dict[int, Call] = {}
        self._late: Dict[int, Call] = {}  # abandoned calls whose late result still matters
        self._closed: Optional[Callable[[], BaseException]] = None
        self._stderr_tail = stderr_tail
        self._decoder = FrameDecoder()
        self._inbox: Deque[Dict[str, Any]] = collections.deque()
        self._notifications: Dict[str, NotificationHandler] = {"log": self._log, "output": self._output}

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Handle notifications of ``method`` with ``handler`` (replacing an
        earlier one). Run-scoped notifications carry the request id as
        ``params["id"]``; the handler gets that pending call. Notifications
        without a handler are ignored. Handlers run on the reader."""
        self._notifications[method] = handler

    # -- requests

    def start(self, method: str, params: Any, settle: Settle, on_log: Optional[OnLog] = None,
              transform: Transform = parse_any, on_output: Optional[OnOutput] = None,
              on_late: Optional[Callable[[Any], None]] = None) -> Tuple[Call, bytes]:
        """Register a request; returns it and its frame, to be written next.
        ``on_late(result)`` is called if a result arrives after the call was
        abandoned (see :meth:`abandon`)."""
        if self._closed is not None:
            raise self._closed()
        id = next(self._ids)  # atomic: count() is a C iterator, and the GIL is held
        message: Dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        frame = encode_message(message)  # outside the lock: may be megabytes
        call = Call(id, method, settle, on_log, transform, len(frame) - frame.index(b"\r\n\r\n") - 4, on_output,
                    on_late)
        with self._lock:
            if self._closed is not None:
                raise self._closed()
            self._pending[id] = call
        return call, frame

    @staticmethod
    def notification(method: str, params: Any = None) -> bytes:
        message: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        return encode_message(message)

    def abandon(self, id: int) -> bool:
        """Forget a call (cancelled by the caller); its late response and
        logs are then dropped, except that a late result goes to the call's
        ``on_late``. Returns whether it was still pending."""
        with self._lock:
            call = self._pending.pop(id, None)
            if call is not None and call.on_late is not None and self._closed is None:
                self._late[id] = call
            return call is not None

    def fail(self, id: int, exc: BaseException) -> None:
        with self._lock:
            call = self._pending.pop(id, None)
        if call is not None:
            call.settle(None, exc)

    def send_failed(self, call: Call, exc: BaseException) -> None:
        """Writing ``call``'s frame failed with ``exc``: fail the call saying
        so, unless the reader has failed it already with the better story
        (exit status, stderr), which is why clients give their reader a
        moment to see EOF before calling this."""
        self.fail(call.id, sidecar_failure(
            "cannot send %s to the sidecar (%s)" % (call.method, exc), self._stderr_tail()))

    def close(self, error: Callable[[], BaseException]) -> None:
        """Fail every pending call (each with a fresh exception from
        ``error``) and refuse new ones the same way. Idempotent."""
        with self._lock:
            if self._closed is None:
                self._closed = error
            calls = list(self._pending.values())
            self._pending.clear()
            self._late.clear()
        for call in calls:
            call.settle(None, error())

    def end(self, what: str) -> None:
        """:meth:`close` with a SidecarError saying ``what``, which carries
        the sidecar's stderr tail as it is now."""
        tail = self._stderr_tail()
        self.close(lambda: sidecar_failure(what, tail))

    def output_ended(self, failure: Optional[str], returncode: Optional[int], closing: bool) -> None:
        """The sidecar's stdout ended, or reading it failed (``failure``, see
        :func:`read_failure`): :meth:`end` the session, saying why. In order:
        the client was ``closing`` it; the read failure; a message torn off
        mid-way; else how the process ended (``returncode``, None while it
        runs)."""
        if closing:
            what = "the sidecar was closed"
        elif failure is not None:
            what = failure
        elif self._decoder.mid_message:
            what = "the sidecar's output ended in the middle of a message"
        elif returncode is None:
            what = "the sidecar closed its stdout (but is still running)"
        else:
            what = "the sidecar %s" % describe_exit(returncode)
        self.end(what)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def closed_error(self) -> Optional[BaseException]:
        """A fresh copy of the error calls get once the session is closed
        (None while it is open)."""
        error = self._closed
        return error() if error is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    # -- incoming messages

    def feed(self, chunk: bytes) -> None:
        """Decode a chunk of the sidecar's stdout and :meth:`receive` every
        message it completes. Raises FramingError if the stream is broken.
        Messages not yet received when something (a KeyboardInterrupt)
        interrupts it wait for the next feed (``feed(b"")`` receives them:
        see :meth:`has_unread`)."""
        inbox = self._inbox
        if chunk:
            inbox.extend(self._decoder.feed(chunk))
        while inbox:
            self.receive(inbox.popleft())

    def has_unread(self) -> bool:
        """Decoded messages are waiting to be received."""
        return bool(self._inbox)

    def receive(self, message: Dict[str, Any]) -> None:
        if "method" in message:
            handler = self._notifications.get(message["method"]) if isinstance(message["method"], str) else None
            if handler is not None:
                params = message.get("params")
                call = None
                id = params.get("id") if isinstance(params, dict) else None
                if isinstance(id, int) and not isinstance(id, bool):
                    with self._lock:
                        call = self._pending.get(id)
                handler(params, call)
            return
        id = message.get("id")
        if id is None:
            self._orphan(message)
            return
        if isinstance(id, bool) or not isinstance(id, int):
            return  # not one of ours: we only send integer ids
        with self._lock:
            call = self._pending.pop(id, None)
            late = self._late.pop(id, None) if call is None and self._late else None
        if call is None:
            # An abandoned (cancelled) call, e.g. its -32800 reply; or one
            # whose result must not be lost.
            if late is not None and late.on_late is not None and "result" in message:
                try:
                    late.on_late(message["result"])
                except Exception:  # best effort: the reader must go on
                    pass
            return
        self._complete(call, message)

    def _complete(self, call: Call, message: Dict[str, Any]) -> None:
        result: Any = None
        exc: Optional[BaseException] = call.failure
        if exc is None:
            if "error" in message:
                exc = error_from_rpc(message["error"], self._stderr_tail())
            elif "result" in message:
                try:
                    result = call.transform(message["result"], call)
                except (ValueError, TypeError, KeyError) as e:
                    exc = SidecarError("malformed %s result from the sidecar: %s" % (call.method, e),
                                       data={"result": message["result"]})
            else:
                exc = SidecarError("response to %s has neither result nor error: %r" % (call.method, message))
        call.settle(result, exc)

    def _log(self, params: Any, call: Optional[Call]) -> None:
        if call is None or not isinstance(params, dict):
            return
        id = call.id
        text, seq, level = params.get("line"), params.get("seq"), params.get("level")
        line = LogLine(text if isinstance(text, str) else str(text), level if isinstance(level, str) else None)
        if seq != len(call.logs) and call.failure is None:
            # The server promises in-order delivery; a gap or reordering
            # would silently corrupt the caller's log, so it is an error.
            call.failure = SidecarError("log notification out of order for request %d: expected seq %d, got %r"
                                        % (id, len(call.logs), seq))
        call.logs.append(line)
        if call.on_log is not None and call.failure is None:
            try:
                call.on_log(line)
            except Exception as e:  # re-raised by run() once the response arrives
                call.failure = e

    def _output(self, params: Any, call: Optional[Call]) -> None:
        if call is None or not isinstance(params, dict):
            return
        seq, stream = params.get("seq"), params.get("stream")
        data = bytes_from_wire(params.get("data"))
        if call.failure is None:
            # As for log lines: a gap, a reordering or a piece we cannot
            # read would silently corrupt the caller's view of the output.
            if seq != call.outputs:
                call.failure = SidecarError("output notification out of order for request %d: expected seq %d, got %r"
                                            % (call.id, call.outputs, seq))
            elif stream not in ("stdout", "stderr") or data is None:
                call.failure = SidecarError("malformed output notification for request %d: %r" % (call.id, params))
        call.outputs += 1
        if call.on_output is not None and call.failure is None:
            try:
                call.on_output(stream, data)
            except Exception as e:  # re-raised by run() once the response arrives
                call.failure = e

    def _orphan(self, message: Dict[str, Any]) -> None:
        """An error with ``id: null``: the server could not read the id.

        For an oversized message the server names the byte count, which is
        how we find the call; if there is exactly one call pending it must be
        that one. Otherwise nobody can tell whose it was: every pending call
        is failed, because waiting forever would be worse.
        """
        error = message.get("error")
        text = error.get("message", "") if isinstance(error, dict) else ""
        m = _SIZE_RE.search(text if isinstance(text, str) else "")
        with self._lock:
            victims: List[Call] = []
            if m:
                size = int(m.group(1))
                sized = sorted((c for c in self._pending.values() if c.size == size), key=lambda c: c.id)
                victims = sized[:1]
            if not victims and len(self._pending) == 1:
                victims = list(self._pending.values())
            if not victims:
                victims = list(self._pending.values())
            for c in victims:
                del self._pending[c.id]
        for c in victims:
            exc = error_from_rpc(error, self._stderr_tail())
            if len(victims) > 1:
                exc = SidecarError("the sidecar answered an error without a request id, which could belong "
                                   "to any of %d pending calls: %s" % (len(victims), exc),
                                   code=exc.code, data=exc.data, stderr_tail=self._stderr_tail())
            c.settle(None, exc)
