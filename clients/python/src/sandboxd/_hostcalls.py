"""Host functions served by this process (docs/protocol.md, "Host functions
served by the parent"): the declarations, the table a request's host calls
are served from, and the codec of a ``host/call``'s arguments and answer.
No I/O here: the Session routes a call, the clients run its handler.

A guest's call of a declared import reaches the parent as a ``host/call``
request naming the parent's request (``params.id``); the handler registered
for that request -- the run's, else the instance's, else the sidecar's --
gets the arguments as Python values and its return value goes back as the
answer.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import dataclasses
import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ._bytes import bytes_from_wire
from ._values import WasmValue, decode_value, encode_float
from .errors import InvalidParams

__all__ = ["HostFunction", "HostCall", "host_function", "current_host_call"]

#: The types a declaration may use: wasm's numbers, and ``bytes``, an
#: Extism memory handle whose bytes travel on the wire.
HOST_TYPES = ("i32", "i64", "f32", "f64", "bytes")

#: JSON-RPC error codes of the answers this client sends. The sidecar ends
#: the run with host_function_error carrying the message whatever the
#: code; the code tells a log reader which side of the call failed.
NO_HANDLER = -32601  # no such function served here (or no such request)
BAD_ARGUMENTS = -32602  # the sidecar's arguments do not fit the declaration
HANDLER_FAILED = -32000  # the handler raised, or returned what cannot be sent

#: An error answer's message is cut to this many bytes of UTF-8: the sidecar
#: keeps 16 KiB of it, and a traceback-sized message is not worth sending.
MAX_MESSAGE_BYTES = 16 << 10

_INT_WIDTH = {"i32": 32, "i64": 64}


@dataclass(frozen=True)
class HostFunction:
    """A function of this process that guests may import, as
    ``module::name``, with wasm's types: ``params`` and ``results`` are
    lists of ``"i32"``, ``"i64"``, ``"f32"``, ``"f64"`` and ``"bytes"`` (an
    Extism memory handle, an i64 in the module, for plugins).

    ``handler(*args)`` is called with the arguments as Python values (int
    for i32/i64, float for f32/f64, bytes for bytes) and returns the
    results: nothing (None) for no result, the value for one, a tuple or
    list for several. A result of type bytes may be bytes-like or a str
    (sent as its UTF-8). Calling the HostFunction calls the handler.
    """

    module: str
    name: str
    params: Sequence[str] = ()
    results: Sequence[str] = ()
    handler: Callable[..., Any] = dataclasses.field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        where = "HostFunction %s::%s" % (self.module, self.name)
        for field in ("module", "name"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value:
                raise InvalidParams("%s: %s must be a non-empty str, got %r" % (where, field, value))
        for field in ("params", "results"):
            types = getattr(self, field)
            if isinstance(types, str) or not isinstance(types, (list, tuple)):
                raise InvalidParams("%s: %s must be a list of types, got %r" % (where, field, types))
            for i, t in enumerate(types):
                if t not in HOST_TYPES:
                    raise InvalidParams("%s: %s[%d]: unknown type %r (%s)" % (where, field, i, t, ", ".join(HOST_TYPES)))
            object.__setattr__(self, field, tuple(types))
        if not callable(self.handler):
            raise InvalidParams("%s: handler must be callable, got %r" % (where, self.handler))

    def __call__(self, *args: Any) -> Any:
        return self.handler(*args)

    def __str__(self) -> str:
        return "%s::%s" % (self.module, self.name)

    def signature(self) -> str:
        """``(i64, bytes) -> (i32)``, as errors name it."""
        return "(%s) -> (%s)" % (", ".join(self.params), ", ".join(self.results))

    def declaration(self) -> Dict[str, Any]:
        """The entry of ``hostFunctions`` on the wire."""
        return {"module": self.module, "name": self.name, "params": list(self.params), "results": list(self.results)}


def host_function(module: str, name: str, params: Sequence[str] = (),
                  results: Sequence[str] = ()) -> Callable[[Callable[..., Any]], HostFunction]:
    """A decorator making a :class:`HostFunction` of the function it decorates::

        @sandboxd.host_function("env", "lookup", params=["i64"], results=["i32"])
        def lookup(key):
            return table.get(key, -1)
    """
    def wrap(handler: Callable[..., Any]) -> HostFunction:
        return HostFunction(module, name, params, results, handler)
    return wrap


class HostFunctions:
    """An immutable table of host functions by ``(module, name)``: what one
    request declares and serves. :meth:`merged` puts a more specific list
    over it (the run's over the sidecar's)."""

    __slots__ = ("_by_name", "_declarations")

    def __init__(self, functions: Mapping[Tuple[str, str], HostFunction]) -> None:
        self._by_name = dict(functions)
        self._declarations: Optional[List[Dict[str, Any]]] = None

    @staticmethod
    def check(functions: Any, where: str) -> Dict[Tuple[str, str], HostFunction]:
        """``functions`` (an iterable of HostFunction) by name; raises
        InvalidParams for anything else, or a function given twice."""
        if functions is None:
            return {}
        if isinstance(functions, (str, bytes, HostFunction, Mapping)) or not isinstance(functions, Iterable):
            raise InvalidParams("%s needs a list of sandboxd.HostFunction, got %s" % (where, type(functions).__name__))
        out: Dict[Tuple[str, str], HostFunction] = {}
        for i, f in enumerate(functions):
            if not isinstance(f, HostFunction):
                raise InvalidParams("%s[%d] must be a sandboxd.HostFunction, got %s" % (where, i, type(f).__name__))
            key = (f.module, f.name)
            if key in out:
                raise InvalidParams("%s[%d]: %s is given twice" % (where, i, f))
            out[key] = f
        return out

    def merged(self, functions: Any, where: str) -> "HostFunctions":
        """This table with ``functions`` added, replacing those of the same
        name (the more specific registration wins)."""
        more = self.check(functions, where)
        if not more:
            return self
        return HostFunctions({**self._by_name, **more})

    def get(self, module: Any, name: Any) -> Optional[HostFunction]:
        return self._by_name.get((module, name)) if isinstance(module, str) and isinstance(name, str) else None

    def declarations(self) -> List[Dict[str, Any]]:
        """``hostFunctions`` on the wire (a new list each time: params get
        mutated by nobody, but are the caller's to keep)."""
        if self._declarations is None:
            self._declarations = [f.declaration() for f in self._by_name.values()]
        return list(self._declarations)

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


NO_HOST_FUNCTIONS = HostFunctions({})


class HostCallProblem(Exception):
    """A host/call that cannot be served: answered with ``code`` and this message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


#: Guards HostCall's cancelled flag and its Event, made on demand (held
#: for a few assignments only).
_wakeup_lock = threading.Lock()


class HostCall:
    """One call of a host function by a guest, while its handler runs:
    :func:`current_host_call` returns it inside the handler.

    ``id`` is the sidecar's id of the ``host/call`` request; ``request_id``
    the id of this client's ``run``, ``call`` or ``instantiate`` whose guest
    made it, and ``instance`` the instance (None for a run); ``module``,
    ``name``, ``args`` (decoded) and ``function`` (the HostFunction) say
    what was called.

    The sidecar cancels the call when the run's deadline passes or the run
    is cancelled: then ``cancelled`` is true and no answer is sent. A
    handler of :class:`~sandboxd.AsyncSidecar` is cancelled as a task; a
    handler of :class:`~sandboxd.Sidecar` runs on a thread, which cannot be
    interrupted, so a long one should look at ``cancelled`` (or wait with
    :meth:`wait_cancelled`) and give up.
    """

    __slots__ = ("id", "request_id", "instance", "module", "name", "args", "function", "call", "session",
                 "_cancelled", "_wakeup", "on_cancel")

    def __init__(self, id: Any, request_id: int, instance: Optional[str], function: HostFunction, args: List[Any],
                 call: Any, session: Any) -> None:
        self.id = id
        self.request_id = request_id
        self.instance = instance
        self.module = function.module
        self.name = function.name
        self.function = function
        self.args = args
        self.call = call  # the pending Call whose guest made it
        self.session = session  # whose requests may name it as their hostCall
        # A flag, and an Event made only for wait_cancelled (under
        # _wakeup_lock): a threading.Event per call cost the round trip
        # a Condition and two locks, for a wait few handlers make.
        self._cancelled = False
        self._wakeup: Optional[threading.Event] = None
        #: Called once when the sidecar cancels it (set by the client that
        #: runs the handler: the asyncio one cancels the handler's task).
        self.on_cancel: Optional[Callable[[], None]] = None

    @property
    def cancelled(self) -> bool:
        """The sidecar cancelled the call (the run's deadline passed, or it
        was cancelled); whatever the handler returns now is dropped."""
        return self._cancelled

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Block the handler's thread until the call is cancelled or
        ``timeout`` seconds pass; returns :attr:`cancelled`. (Threads only:
        in a coroutine, cancellation is the task's.)"""
        with _wakeup_lock:
            if self._cancelled:
                return True
            if self._wakeup is None:
                self._wakeup = threading.Event()
            wakeup = self._wakeup
        return wakeup.wait(timeout)

    def cancel(self) -> None:
        """Mark it cancelled and tell whoever runs the handler (called by the
        Session, once)."""
        with _wakeup_lock:
            self._cancelled = True
            wakeup = self._wakeup
        if wakeup is not None:
            wakeup.set()
        hook = self.on_cancel
        if hook is not None:
            hook()

    def __repr__(self) -> str:
        return "<sandboxd.HostCall %s %s%s>" % (self.id, self.function, " cancelled" if self.cancelled else "")


_current: "contextvars.ContextVar[Optional[HostCall]]" = contextvars.ContextVar("sandboxd_host_call", default=None)


def current_host_call() -> Optional[HostCall]:
    """The :class:`HostCall` whose handler is running in this thread or
    task, or None outside a handler."""
    return _current.get()


def run_handler(call: HostCall) -> Any:
    """Call ``call``'s handler with its arguments, :func:`current_host_call`
    answering ``call`` meanwhile (and requests sent from it naming it)."""
    token = _current.set(call)
    try:
        return call.function.handler(*call.args)
    finally:
        _current.reset(token)


def mark_current(call: HostCall) -> None:
    """Make ``call`` the current host call for the rest of this context (a
    task's own: its handler's awaits keep it)."""
    _current.set(call)


def start_eagerly(loop: Any, coro: Any) -> Optional[Any]:
    """Run ``coro`` (an AsyncSidecar's answer to a host call) at once, up
    to its first wait, in a copy of this context, as Python 3.12's eager
    tasks do; None if it ended there, else the task that runs the rest in
    the same context. A handler that does not wait (most answer from what
    they have) thus answers within the read that brought the call, with
    no loop iteration and no task in between: on a host call's round trip
    these cost as much as the sidecar's own part (bench row 17)."""
    context = contextvars.copy_context()
    try:
        first = context.run(coro.send, None)
    except (StopIteration, asyncio.CancelledError):
        # Ended, or raised CancelledError of its own accord, which a task
        # would have kept: it must not reach the reader's callback.
        return None
    return loop.create_task(_rest(coro, first), context=context)


async def _rest(coro: Any, first: Any) -> Any:
    return await _Resume(coro, first)


class _Resume:
    """The rest of a coroutine whose first step ran already and yielded
    ``first``: what it yields goes to the task, what the task sends or
    throws in (a cancel) goes to it."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Any, first: Any) -> None:
        self.coro, self.first = coro, first

    def __await__(self) -> Any:
        coro, yielded = self.coro, self.first
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # the task's cancel
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


def answer_plain(call: HostCall, finish: Callable[..., Optional[bytes]]) -> Optional[bytes]:
    """Run ``call``'s handler, a plain function, on this thread; returns the
    answer ``finish`` (Session.finish_host_call) makes of what it returned
    or raised. An exception that is not an Exception (KeyboardInterrupt)
    propagates, unanswered."""
    try:
        returned = run_handler(call)
    except Exception as e:
        return finish(call, failure=e)
    if inspect.isawaitable(returned):
        if inspect.iscoroutine(returned):
            returned.close()  # never to be awaited: no warning about it
        return finish(call, problem=HostCallProblem(
            HANDLER_FAILED, "the handler of %s returned an awaitable: Sidecar calls plain functions "
                            "(an async def handler needs AsyncSidecar)" % call.function))
    return finish(call, returned)


def current_for(session: Any) -> Optional[HostCall]:
    """The host call being served in this context, if ``session`` asked for
    it: a request sent from its handler names it as ``hostCall`` (a handler
    may use other sidecars too, which never heard of it)."""
    call = _current.get()
    return call if call is not None and call.session is session else None


# --------------------------------------------------------------------------
# The codec


def decode_args(function: HostFunction, raw: Any) -> List[Any]:
    """A host/call's ``args`` as Python values, checked against the
    declaration; raises HostCallProblem(BAD_ARGUMENTS)."""
    if not isinstance(raw, list) or len(raw) != len(function.params):
        count = len(raw) if isinstance(raw, list) else raw
        raise HostCallProblem(BAD_ARGUMENTS, "%s takes %s; the call has %s arguments"
                              % (function, function.signature(), count))
    args = []
    for i, (t, value) in enumerate(zip(function.params, raw)):
        got = value.get("type") if isinstance(value, dict) else None
        if got != t:
            raise HostCallProblem(BAD_ARGUMENTS, "args[%d] is %r; %s takes %s" % (i, value, function, function.signature()))
        try:
            if t == "bytes":
                data = bytes_from_wire(value.get("value"))
                if data is None:
                    raise ValueError("not a {\"text\"} or {\"base64\"} object: %r" % (value.get("value"),))
                args.append(data)
            else:
                args.append(decode_value(value))
        except ValueError as e:
            raise HostCallProblem(BAD_ARGUMENTS, "args[%d]: %s" % (i, e)) from None
    return args


def encode_results(function: HostFunction, returned: Any) -> List[Dict[str, Any]]:
    """A handler's return value as the answer's ``values``; raises
    HostCallProblem(HANDLER_FAILED) naming what does not fit."""
    results = function.results
    if len(results) == 0:
        if returned is None or returned == ():
            return []
        raise HostCallProblem(HANDLER_FAILED, "the handler of %s returned %s; %s returns nothing"
                              % (function, _short(returned), function))
    if len(results) == 1:
        values: Sequence[Any] = (returned,)
    elif isinstance(returned, (tuple, list)) and len(returned) == len(results):
        values = returned
    else:
        raise HostCallProblem(HANDLER_FAILED, "the handler of %s returned %s; %s returns %d values %s"
                              % (function, _short(returned), function, len(results), function.signature()))
    return [_encode_result(function, i, t, v) for i, (t, v) in enumerate(zip(results, values))]


def _encode_result(function: HostFunction, i: int, t: str, v: Any) -> Dict[str, Any]:
    def wrong(why: str) -> HostCallProblem:
        where = "result" if len(function.results) == 1 else "result %d" % i
        return HostCallProblem(HANDLER_FAILED, "the handler of %s returned %s as its %s: %s"
                               % (function, _short(v), where, why))

    if t == "bytes":
        if isinstance(v, (bytes, bytearray, memoryview)):
            return {"type": "bytes", "value": {"base64": base64.b64encode(v).decode("ascii")}}
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise wrong("a str that is not valid UTF-8 (%s)" % e.reason) from None
            return {"type": "bytes", "value": v}  # a JSON string: its UTF-8 bytes
        raise wrong("a bytes result needs bytes or a str")
    if isinstance(v, WasmValue):
        if v.type != t:
            raise wrong("an %s where %s returns %s" % (v.type, function, t))
        return v.to_wire()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise wrong("%s needs %s" % (t, "an int" if t in _INT_WIDTH else "a float"))
    if t in _INT_WIDTH:
        width = _INT_WIDTH[t]
        if not isinstance(v, int):
            raise wrong("%s needs an int" % t)
        if not -(1 << (width - 1)) <= v < 1 << width:  # unsigned values wrap, as run's arguments do
            raise wrong("out of range for %s" % t)
        return {"type": t, "value": v if t == "i32" else str(v)}
    try:
        x = float(v)
    except OverflowError:
        raise wrong("an int too large for %s" % t) from None
    return {"type": t, "value": encode_float(x)}


def unencodable(function: HostFunction, returned: Any, exc: Exception) -> HostCallProblem:
    """The error answer for a handler's result that the codec let through
    and the JSON encoder refused (``exc``): a bare NaN or Infinity, which
    the encoder refuses (``allow_nan=False``: they are not JSON, and the
    sidecar could not read the answer), or anything else it cannot write."""
    why = describe_failure(exc)
    if isinstance(exc, ValueError) and "Out of range float" in str(exc):
        why = ("NaN/Infinity are not JSON (a float result given as a float or sandboxd.F64 "
               "travels as the protocol's \"NaN\" or \"Infinity\")")
    return HostCallProblem(HANDLER_FAILED, "the handler of %s returned %s, which cannot be sent: %s"
                           % (function, _short(returned), why))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_failure(exc: BaseException) -> str:
    """What an error answer says of an exception a handler raised: its type
    and message, as a traceback's last line does."""
    text = str(exc)
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


def bounded(message: str) -> str:
    """``message`` cut to :data:`MAX_MESSAGE_BYTES` of UTF-8 (on a
    character boundary)."""
    data = message.encode("utf-8", "replace")
    if len(data) <= MAX_MESSAGE_BYTES:
        return message
    return data[:MAX_MESSAGE_BYTES - 3].decode("utf-8", "ignore") + "..."


def answer_message(id: Any, values: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": {"values": values}}


def error_message(id: Any, code: int, message: str) -> Dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": bounded(message)}}
