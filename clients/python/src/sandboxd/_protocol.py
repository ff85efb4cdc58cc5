"""The I/O-free core of the client, shared by Sidecar and AsyncSidecar.

:class:`Session` owns the table of pending requests: it numbers requests,
routes ``log`` and ``output`` notifications and responses to them, and turns responses into
results or exceptions, and decides what pending calls are told when the
sidecar goes away. It also keeps the table of the sidecar's ``host/call``
requests: it finds the handler a call is served by, answers at once what
cannot be served, and cancels what the sidecar cancels. The two clients
only move bytes, wake waiters (``concurrent.futures`` for threads,
``asyncio`` futures for the event loop) and run handlers, so both behave
identically by construction.
"""

from __future__ import annotations

import collections
import itertools
import re
import threading
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from ._bytes import bytes_from_wire
from ._framing import FrameDecoder, FramingError, encode_message
from ._hostcalls import (
    BAD_ARGUMENTS, HANDLER_FAILED, NO_HANDLER, NO_HOST_FUNCTIONS, HostCall, HostCallProblem, HostFunctions,
    answer_message, current_for, decode_args, describe_failure, encode_results, error_message, unencodable,
)
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
                 "size", "on_late", "host_functions", "host_calls", "owner")

    def __init__(self, id: int, method: str, settle: Settle, on_log: Optional[OnLog],
                 transform: Transform, size: int, on_output: Optional[OnOutput] = None,
                 on_late: Optional[Callable[[Any], None]] = None,
                 host_functions: HostFunctions = NO_HOST_FUNCTIONS, owner: Any = None) -> None:
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
        self.host_functions = host_functions  # what its guest's host calls are served by
        self.host_calls: Optional[List[HostCall]] = None  # those outstanding (made at the first)
        # The client's object waiting for this call (an _Outcome, a future),
        # for the client to route its host calls to whoever waits.
        self.owner = owner


_SIZE_RE = re.compile(r"message of (\d+) bytes")

#: The methods whose guests may call host functions; sent from a handler,
#: they name its host call (``hostCall``).
_RUNS_GUESTS = frozenset({"run", "call", "instantiate", "eval"})


class Session:
    """Request ids, the pending table and message dispatch; no I/O.

    Thread safety: ``start``/``abandon``/``close``/``finish_host_call`` may
    be called from any thread; ``feed``/``receive`` by one reader at a time
    (which is what keeps each call's log lines and output in order).
    ``settle``, ``on_log``, ``on_output``, ``serve`` and ``reply`` callbacks
    run in the reader, outside the lock.

    ``stderr_tail`` returns the sidecar's recent stderr, for the errors that
    report a failed or vanished sidecar. ``serve(host_call)`` is given each
    host call to run its handler (and answer with :meth:`finish_host_call`);
    ``reply(frame)`` must write, without blocking the reader, an answer the
    Session makes itself (a host call that cannot be served). Without them
    host calls are answered NO_HANDLER, or not at all.
    """

    def __init__(self, stderr_tail: Callable[[], str] = lambda: "",
                 serve: Optional[Callable[[HostCall], None]] = None,
                 reply: Optional[Callable[[bytes], None]] = None) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: Dict[int, Call] = {}
        self._late: Dict[int, Call] = {}  # abandoned calls whose late result still matters
        self._closed: Optional[Callable[[], BaseException]] = None
        self._stderr_tail = stderr_tail
        self._decoder = FrameDecoder()
        self._inbox: Deque[Dict[str, Any]] = collections.deque()
        self._notifications: Dict[str, NotificationHandler] = {
            "log": self._log, "output": self._output, "$/cancelRequest": self._cancel_host_call}
        self._host_calls: Dict[Any, HostCall] = {}  # the sidecar's outstanding host/call requests by id
        self._serve = serve
        self._reply = reply

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Handle notifications of ``method`` with ``handler`` (replacing an
        earlier one). Run-scoped notifications carry the request id as
        ``params["id"]``; the handler gets that pending call. Notifications
        without a handler are ignored. Handlers run on the reader."""
        self._notifications[method] = handler

    # -- requests

    def start(self, method: str, params: Any, settle: Settle, on_log: Optional[OnLog] = None,
              transform: Transform = parse_any, on_output: Optional[OnOutput] = None,
              on_late: Optional[Callable[[Any], None]] = None,
              host_functions: HostFunctions = NO_HOST_FUNCTIONS, owner: Any = None) -> Tuple[Call, bytes]:
        """Register a request; returns it and its frame, to be written next.
        ``on_late(result)`` is called if a result arrives after the call was
        abandoned (see :meth:`abandon`). ``host_functions`` serve the host
        calls its guest makes; ``owner`` is the client's, see Call.

        A request sent from a handler of this session's host call names it
        (``hostCall``), so that the sidecar refuses at once a call to the
        instance waiting for that handler instead of letting it wait for
        itself."""
        if self._closed is not None:
            raise self._closed()
        id = next(self._ids)  # atomic: count() is a C iterator, and the GIL is held
        message: Dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
            if method in _RUNS_GUESTS and type(params) is dict:
                serving = current_for(self)
                if serving is not None:
                    params["hostCall"] = serving.id
        frame = encode_message(message)  # outside the lock: may be megabytes
        call = Call(id, method, settle, on_log, transform, len(frame) - frame.index(b"\r\n\r\n") - 4, on_output,
                    on_late, host_functions, owner)
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
            host_calls = list(self._host_calls.values())
            self._host_calls.clear()
        for host_call in host_calls:  # nobody can take their answers any more
            host_call.cancel()
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
            if "id" in message:
                self._request(message)
                return
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
            host_calls = self._forget_host_calls(call) if call is not None and call.host_calls else None
        if host_calls:  # the run ended (its deadline, say) while they waited
            for host_call in host_calls:
                host_call.cancel()
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

    # -- host calls (the sidecar's requests)

    def _request(self, message: Dict[str, Any]) -> None:
        """A request from the sidecar: ``host/call`` is handed to ``serve``
        when a handler is registered for it, and answered at once with an
        error otherwise (never left unanswered: the guest waits for it)."""
        id, method, params = message["id"], message["method"], message.get("params")
        if method != "host/call":
            self._answer_now(id, NO_HANDLER, "method not found: this client serves host/call only, not %r" % (method,))
            return
        if self._serve is None:
            self._answer_now(id, NO_HANDLER, "this client serves no host calls")
            return
        try:
            host_call = self._open_host_call(id, params)
        except HostCallProblem as problem:
            self._answer_now(id, problem.code, str(problem))
            return
        self._serve(host_call)

    def _open_host_call(self, id: Any, params: Any) -> HostCall:
        """Register a host/call, or raise the HostCallProblem its answer names."""
        if not isinstance(params, dict):
            raise HostCallProblem(BAD_ARGUMENTS, "host/call params must be an object, got %r" % (params,))
        request_id, module, name = params.get("id"), params.get("module"), params.get("name")
        with self._lock:
            call = self._pending.get(request_id) if type(request_id) is int else None
        if call is None:
            raise HostCallProblem(NO_HANDLER, "no request %r of this client is waiting for %s::%s (it ended, or "
                                              "was never sent)" % (request_id, module, name))
        function = call.host_functions.get(module, name)
        if function is None:
            raise HostCallProblem(NO_HANDLER, "no handler for host function %s::%s in request %d (%s)"
                                  % (module, name, request_id, call.method))
        args = decode_args(function, params.get("args"))
        instance = params.get("instance")
        host_call = HostCall(id, request_id, instance if isinstance(instance, str) else None, function, args,
                             call, self)
        with self._lock:
            if not isinstance(id, (str, int)) or id in self._host_calls:
                raise HostCallProblem(BAD_ARGUMENTS, "host/call id %r is already outstanding" % (id,))
            if self._pending.get(request_id) is not call:  # ended meanwhile
                raise HostCallProblem(NO_HANDLER, "request %d ended before its host call" % request_id)
            self._host_calls[id] = host_call
            if call.host_calls is None:
                call.host_calls = []
            call.host_calls.append(host_call)
        return host_call

    def finish_host_call(self, host_call: HostCall, returned: Any = None, failure: Optional[BaseException] = None,
                         problem: Optional[HostCallProblem] = None) -> Optional[bytes]:
        """The answer frame to write for ``host_call``: its handler
        ``returned`` a value, or raised ``failure``, or it cannot be served
        (``problem``). None when no answer must be sent: the sidecar
        cancelled it (or the sidecar is gone, or it was answered)."""
        frame = b""
        if problem is None and failure is None:
            try:
                # outside the lock: may be megabytes
                frame = encode_message(answer_message(host_call.id, encode_results(host_call.function, returned)))
            except HostCallProblem as p:
                problem = p
            except Exception as e:  # what the handler returned, the encoder refused: the guest still gets an answer
                problem = unencodable(host_call.function, returned, e)
        if failure is not None:
            frame = encode_message(error_message(host_call.id, HANDLER_FAILED, describe_failure(failure)))
        elif problem is not None:
            frame = encode_message(error_message(host_call.id, problem.code, str(problem)))
        with self._lock:
            if self._host_calls.get(host_call.id) is not host_call:
                return None
            del self._host_calls[host_call.id]
            calls = host_call.call.host_calls
            if calls is not None and host_call in calls:
                calls.remove(host_call)
        return frame

    def _answer_now(self, id: Any, code: int, message: str) -> None:
        if self._reply is not None and isinstance(id, (str, int)):
            self._reply(encode_message(error_message(id, code, message)))

    def _cancel_host_call(self, params: Any, _call: Optional[Call]) -> None:
        """``$/cancelRequest`` from the sidecar: its run's deadline passed or
        the run was cancelled; no answer may follow."""
        id = params.get("id") if isinstance(params, dict) else None
        if not isinstance(id, (str, int)):
            return
        with self._lock:
            host_call = self._host_calls.pop(id, None)
            if host_call is not None and host_call.call.host_calls:
                host_call.call.host_calls.remove(host_call)
        if host_call is not None:
            host_call.cancel()

    def _forget_host_calls(self, call: Call) -> List[HostCall]:  # lock held
        calls, call.host_calls = call.host_calls or [], None
        for host_call in calls:
            self._host_calls.pop(host_call.id, None)
        return calls

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
