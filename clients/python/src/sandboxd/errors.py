"""Exceptions raised by the sandboxd client.

A run that does not produce values fails with a JSON-RPC error whose
``data.kind`` says why (docs/protocol.md, "Errors"). Each kind has its own
exception class so callers can write ``except sandboxd.FuelExhausted``; the
kind/code table below must match the Go table (testdata/wire/error-kinds.json,
checked by the tests). Arguments refused by the client or the sidecar raise
:class:`InvalidParams`. Everything else that is not a run outcome --
protocol errors, a busy queue, a missing or crashed sidecar -- is a
:class:`SidecarError`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Type

from ._bytes import bytes_from_wire

__all__ = [
    "SandboxError", "HostError", "FuelExhausted", "Timeout", "MemoryLimitExceeded",
    "DisallowedImport", "InvalidModule", "ExportError", "Trap", "Cancelled",
    "CompileLimitExceeded", "HostFunctionError", "ScriptError", "PluginError", "InstanceClosed", "TooManyInstances", "InvalidParams", "SidecarError",
    "KIND_CLASSES", "error_from_rpc",
]


class SandboxError(Exception):
    """Base class of every error from sandboxd.

    Attributes:
        kind: the stable kind string (``data.kind``), e.g. ``"trap"``;
            ``"sidecar"`` for :class:`SidecarError`.
        code: the JSON-RPC error code (the CLI exit code of the kind, or
            -32800 for cancelled, -326xx/-32000 for protocol errors), or
            ``None`` when no response was received at all.
        data: the error's ``data`` object (an empty dict if there was none).
        fuel_consumed, peak_memory_bytes: what the run used before it
            stopped; ``None`` if the run never got as far as a store.
        stdout, stderr: a WASI run's output until it stopped, as bytes
            (``None`` when the error's data carries none: not a WASI run,
            or it failed before the guest started); ``output_truncated``
            says bytes past ``limits.outputBytes`` were dropped.
    """

    #: Class-level defaults: the kind, CLI exit code and JSON-RPC code.
    kind: str = "unknown"
    exit_code: Optional[int] = None
    rpc_code: Optional[int] = None

    def __init_subclass__(cls, *, kind: Optional[str] = None, exit_code: Optional[int] = None,
                          rpc_code: Optional[int] = None, **kwargs: Any) -> None:
        """A kind's class is declared ``class X(SandboxError, kind=..., exit_code=N)``.

        Its JSON-RPC code is its exit code, unless ``rpc_code`` says
        otherwise (cancelled: -32800). Without keywords a subclass inherits
        all three.
        """
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind
        if exit_code is not None:
            cls.exit_code = exit_code
            cls.rpc_code = exit_code if rpc_code is None else rpc_code
        elif rpc_code is not None:
            cls.rpc_code = rpc_code

    def __init__(self, message: str, *, kind: Optional[str] = None, code: Optional[int] = None,
                 data: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind if kind is not None else type(self).kind
        self.code = code if code is not None else type(self).rpc_code
        self.data: Dict[str, Any] = dict(data or {})
        self.fuel_consumed: Optional[int] = self.data.get("fuelConsumed")
        self.peak_memory_bytes: Optional[int] = self.data.get("peakMemoryBytes")
        self.stdout: Optional[bytes] = bytes_from_wire(self.data.get("stdout"))
        self.stderr: Optional[bytes] = bytes_from_wire(self.data.get("stderr"))
        self.output_truncated: bool = self.data.get("outputTruncated") is True
        self._read_details(self.data)

    def _read_details(self, data: Dict[str, Any]) -> None:
        """Subclasses copy their kind's fields out of ``data`` here."""

    def __reduce__(self) -> Any:  # keyword-only __init__ needs help to pickle
        return (_rebuild, (type(self), self.message, self.kind, self.code, self.data, self.__dict__))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: Type[SandboxError], message: str, kind: str, code: Optional[int],
             data: Dict[str, Any], state: Dict[str, Any]) -> SandboxError:
    err = cls.__new__(cls)
    SandboxError.__init__(err, message, kind=kind, code=code, data=data)
    err.__dict__.update(state)
    return err


class HostError(SandboxError, kind="host", exit_code=1):
    """The host failed while running the guest (kind ``host``)."""


class FuelExhausted(SandboxError, kind="fuel_exhausted", exit_code=2):
    """The fuel budget ran out. ``budget`` is the fuel limit of the run."""

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.budget: Optional[int] = data.get("budget")


class Timeout(SandboxError, kind="timeout", exit_code=3):
    """The wall-clock deadline passed. ``timeout`` is the deadline in seconds."""

    def _read_details(self, data: Dict[str, Any]) -> None:
        ms = data.get("timeoutMs")
        self.timeout: Optional[float] = ms / 1000.0 if isinstance(ms, (int, float)) else None


class MemoryLimitExceeded(SandboxError, kind="memory_limit_exceeded", exit_code=4):
    """A memory or table growth was denied by a cap.

    ``resource`` is ``"memory"``, ``"table"``, ``"memories"`` (or
    ``"tables"``); ``limit`` is the cap and ``requested`` what the guest
    asked for (bytes or elements; ``None`` when not known).
    """

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.limit: Optional[int] = data.get("limit")
        self.requested: Optional[int] = data.get("requested")
        self.resource: Optional[str] = data.get("resource")


class DisallowedImport(SandboxError, kind="disallowed_import", exit_code=5):
    """The module imports ``module``::``name``, which was not granted."""

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.module: Optional[str] = data.get("module")
        self.name: Optional[str] = data.get("name")


class InvalidModule(SandboxError, kind="invalid_module", exit_code=6):
    """The bytes or text are not a valid module (or a module id is unknown)."""


class ExportError(SandboxError, kind="export", exit_code=7):
    """The export ``function`` is missing or its signature does not fit."""

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.function: Optional[str] = data.get("function")


class Trap(SandboxError, kind="trap", exit_code=8):
    """The guest trapped.

    ``trap_code`` is the stable code (``"integer_divide_by_zero"``, ...);
    ``frames`` the wasm frames, innermost first, as dicts with ``func``,
    ``funcIndex`` and ``moduleOffset``.
    """

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.trap_code: Optional[str] = data.get("trapCode")
        self.frames: List[Dict[str, Any]] = list(data.get("frames") or [])


class Cancelled(SandboxError, kind="cancelled", exit_code=9, rpc_code=-32800):
    """The run was cancelled (by ``$/cancelRequest`` or sidecar shutdown)."""


class CompileLimitExceeded(SandboxError, kind="compile_limit_exceeded", exit_code=11):
    """Compiling the module passed the compile time or memory limit.

    ``resource`` says which (``"compile_time"`` or ``"compile_memory"``);
    ``limit`` is the limit that was passed (milliseconds or bytes).
    """

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.resource: Optional[str] = data.get("resource")
        self.limit: Optional[int] = data.get("limit")


class HostFunctionError(SandboxError, kind="host_function_error", exit_code=12):
    """A host function served by the parent failed: the parent answered its
    ``host/call`` with an error, or with values that do not fit.

    ``function`` names it (``"env::lookup"``); ``host_message`` is the
    parent's own message, when it answered with one.
    """

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.function: Optional[str] = data.get("function")
        self.host_message: Optional[str] = data.get("message")


class ScriptError(SandboxError, kind="script_error", exit_code=13):
    """A snippet failed in its own language: a syntax error, an exception it
    did not catch, a value JSON cannot carry (docs/snippets.md).

    ``script_message`` is the language's one line (``"ReferenceError: x is
    not defined"``); ``line`` and ``column`` where it failed (1-based, 0
    when the language gives none); ``text`` the language's own rendering,
    with its stack trace or traceback; ``language`` ``"js"``, ``"lua"`` or
    ``"starlark"``. A session stays usable after one.
    """

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.language: Optional[str] = data.get("language")
        self.script_message: Optional[str] = data.get("message")
        self.line: Optional[int] = data.get("line")
        self.column: Optional[int] = data.get("column")
        self.text: Optional[str] = data.get("text")


class PluginError(SandboxError, kind="plugin_error", exit_code=10):
    """An Extism plugin function reported an error: it set an error message
    or returned non-zero. The instance stays usable.

    ``message`` is the plugin's own message (``data.message``; the
    sidecar's error message when the data has none, and ``str(e)`` is
    always the sidecar's), ``function`` the plugin function,
    ``return_code`` what it returned. ``plugin_message`` is ``message``
    (its earlier name).
    """

    def _read_details(self, data: Dict[str, Any]) -> None:
        own = data.get("message")
        self._text = self.message
        if isinstance(own, str):
            self.message = own
        self.plugin_message: Optional[str] = own if isinstance(own, str) else None
        self.function: Optional[str] = data.get("function")
        self.return_code: Optional[int] = data.get("returnCode")

    def __str__(self) -> str:
        return self._text


class InstanceClosed(SandboxError, kind="instance_closed", rpc_code=-32001):
    """A call named an instance that is closed or unknown (JSON-RPC code
    -32001): it was released, evicted after its idle time, closed by a fence
    or trap in an earlier call, or it died with its sidecar (then ``code``
    is None: the client knew without asking).

    ``instance`` is the instance id, ``reason`` why it is closed, e.g.
    ``"closed after timeout in a call of \"spin\""``, ``"released"``.
    """

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.instance: Optional[str] = data.get("instance")
        self.reason: Optional[str] = data.get("reason")


class TooManyInstances(SandboxError, kind="too_many_instances", rpc_code=-32002):
    """``instantiate`` was refused because the sidecar holds its maximum of
    live instances (JSON-RPC code -32002; ``serve --max-instances``):
    release one. ``instances`` and ``max_instances`` are the counts."""

    def _read_details(self, data: Dict[str, Any]) -> None:
        self.instances: Optional[int] = data.get("instances")
        self.max_instances: Optional[int] = data.get("maxInstances")


class InvalidParams(SandboxError, ValueError, TypeError, kind="invalid_params"):
    """A call was refused for its arguments, naming the field: by this client
    before anything was sent (two module sources, a bool as a wasm value, a
    wrapper value out of range), or by the sidecar (its -32602 answer: a
    limit out of range, an argument of the wrong type for its parameter).

    It is also a ValueError and a TypeError, the exceptions such mistakes
    raised before this class existed, so ``except ValueError`` still works.
    """

    rpc_code = -32602


class SidecarError(SandboxError, kind="sidecar"):
    """The sidecar itself failed: it is missing, crashed, was closed, broke
    the protocol, or refused a request (-326xx codes, -32000 busy).

    ``stderr_tail`` holds the last few KiB of the sidecar's stderr, which is
    usually where the reason is.
    """

    def __init__(self, message: str, *, code: Optional[int] = None,
                 data: Optional[Mapping[str, Any]] = None, stderr_tail: str = "",
                 kind: Optional[str] = None) -> None:
        super().__init__(message, kind=kind, code=code, data=data)
        self.stderr_tail = stderr_tail


#: kind -> exception class, for every run outcome kind of the protocol.
KIND_CLASSES: Dict[str, Type[SandboxError]] = {
    cls.kind: cls
    for cls in (HostError, FuelExhausted, Timeout, MemoryLimitExceeded, DisallowedImport,
                InvalidModule, ExportError, Trap, Cancelled, PluginError, CompileLimitExceeded,
                HostFunctionError, ScriptError)
}

_CODE_CLASSES: Dict[int, Type[SandboxError]] = {
    cls.rpc_code: cls for cls in KIND_CLASSES.values() if cls.rpc_code is not None
}

#: Errors of the instance methods, which the protocol tells by code alone
#: (in JSON-RPC's server range, and without ``data.kind``).
INSTANCE_CODE_CLASSES: Dict[int, Type[SandboxError]] = {
    InstanceClosed.rpc_code: InstanceClosed, TooManyInstances.rpc_code: TooManyInstances,  # type: ignore[dict-item]
}


def error_from_rpc(error: Any, stderr_tail: str = "") -> SandboxError:
    """The exception for a JSON-RPC ``error`` object.

    Mapped by ``data.kind`` first (the protocol's contract), if it is a run
    outcome kind. Otherwise -32001 and -32002 are :class:`InstanceClosed`
    and :class:`TooManyInstances`, -32602 is :class:`InvalidParams`, and another code in JSON-RPC's reserved range
    (-32768..-32000: parse/request/params errors, busy) is a protocol error,
    i.e. :class:`SidecarError`, whatever its ``data.kind`` (the server tags
    busy errors ``"busy"``); an error without a kind is mapped by its code.
    A kind this client does not know, with a non-reserved code (a newer
    server), becomes a plain :class:`SandboxError` carrying that kind rather
    than being misreported.
    """
    if not isinstance(error, dict):
        return SidecarError("malformed error object from sidecar: %r" % (error,), stderr_tail=stderr_tail)
    code = error.get("code")
    message = error.get("message")
    if not isinstance(message, str):
        message = "error %r from sidecar" % (code,)
    data = error.get("data")
    if not isinstance(data, dict):
        data = {"value": data} if data is not None else {}
    kind = data.get("kind")
    cls = KIND_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is not None:
        return cls(message, code=code, data=data)
    if isinstance(code, int) and not isinstance(code, bool):
        if code in INSTANCE_CODE_CLASSES:
            return INSTANCE_CODE_CLASSES[code](message, code=code, data=data)
        if code == InvalidParams.rpc_code:
            return InvalidParams(message, code=code, data=data)
        if -32768 <= code <= -32000 and code not in _CODE_CLASSES:
            return SidecarError(message, code=code, data=data, stderr_tail=stderr_tail)
        if not isinstance(kind, str) and code in _CODE_CLASSES:
            return _CODE_CLASSES[code](message, code=code, data=data)
    if isinstance(kind, str) and kind != SidecarError.kind:
        return SandboxError(message, kind=kind, code=code, data=data)
    return SidecarError(message, code=code, data=data, stderr_tail=stderr_tail)
