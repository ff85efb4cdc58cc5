"""Reading the sidecar's results: each method's result object as the
value its caller gets (a ``Transform`` of :class:`~sandboxd._protocol.Call`),
strict on the fields the client relies on, so that a malformed answer is a
SidecarError naming the field instead of a wrong value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

from . import _values
from ._bytes import bytes_from_wire
from ._types import CallResult, EvalResult, Module, RunResult

if TYPE_CHECKING:  # pragma: no cover
    from ._protocol import Call

#: Turns a result object into what the caller gets; raises ValueError,
#: TypeError or KeyError for a malformed one.
Transform = Callable[[Any, "Call"], Any]

def _need(result: Any, key: str, types: Tuple[type, ...]) -> Any:
    if not isinstance(result, dict) or key not in result:
        raise ValueError("missing %r" % key)
    v = result[key]
    if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
        raise ValueError("%r has the wrong type: %r" % (key, v))
    return v


def _micros(result: Dict[str, Any], key: str, required: bool) -> float:
    v = result.get(key)
    if type(v) is int or type(v) is float:  # the common case, without _need's checks
        return v / 1e6
    if v is None and not required:
        return 0.0
    return _need(result, key, (int, float)) / 1e6


def _count(result: Dict[str, Any], key: str) -> int:
    v = result.get(key)
    return v if type(v) is int else _need(result, key, (int,))


def _run_fields(result: Any, call: "Call") -> Dict[str, Any]:
    """The fields a ``run`` and a ``call`` result share, as RunResult's
    keyword arguments."""
    if not isinstance(result, dict):
        raise ValueError("expected an object, got %r" % (result,))
    raw_values = result.get("values")
    if type(raw_values) is not list:
        raw_values = _need(result, "values", (list,))
    values = [_values.decode_value(v) for v in raw_values]
    exit_code = result.get("exitCode")
    wasi = exit_code is not None
    if wasi and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise ValueError("'exitCode' has the wrong type: %r" % (exit_code,))
    return dict(
        values=values,
        raw_values=raw_values,
        fuel_consumed=_count(result, "fuelConsumed"),
        peak_memory_bytes=_count(result, "peakMemoryBytes"),
        logs=call.logs,
        elapsed=_micros(result, "elapsedMicros", True),
        queued=_micros(result, "queuedMicros", False),
        log_lines=result.get("logLines", len(call.logs)),
        log_truncated=bool(result.get("logTruncated", False)),
        log_dropped=_count(result, "logDropped") if "logDropped" in result else 0,
        exit_code=exit_code,
        stdout=_output(result, "stdout") if wasi else b"",
        stderr=_output(result, "stderr") if wasi else b"",
        output=_output(result, "output") if "output" in result else None,
        output_truncated=bool(result.get("outputTruncated", False)),
        raw=result,
    )


def parse_run_result(result: Any, call: "Call") -> RunResult:
    """A ``run`` result object as a RunResult (strict on the core fields)."""
    fields = _run_fields(result, call)
    return RunResult(module_id=_need(result, "moduleId", (str,)), **fields)


def call_result_parser(instance: str, module_id: str) -> Transform:
    """The transform of a ``call`` on ``instance`` (of ``module_id``, which
    the call result may repeat)."""
    def parse(result: Any, call: "Call") -> CallResult:
        fields = _run_fields(result, call)
        mid = result.get("moduleId")
        return CallResult(module_id=mid if isinstance(mid, str) else module_id, instance=instance, **fields)
    return parse


class Instantiated:
    """An ``instantiate`` result, parsed: what the clients build a plugin
    handle from."""

    __slots__ = ("id", "module_id", "plugin", "exports", "fuel_consumed", "peak_memory_bytes", "elapsed",
                 "queued", "logs", "raw")

    def __init__(self, result: Any, call: "Call") -> None:
        self.id: str = _need(result, "instance", (str,))
        if not self.id:
            raise ValueError("'instance' is empty")
        self.module_id: str = _need(result, "moduleId", (str,))
        self.plugin: bool = bool(result.get("plugin", False))
        self.exports: List[Dict[str, Any]] = list(_need(result, "exports", (list,)))
        self.fuel_consumed: int = result.get("fuelConsumed", 0)
        self.peak_memory_bytes: int = result.get("peakMemoryBytes", 0)
        self.elapsed: float = result.get("elapsedMicros", 0) / 1e6
        self.queued: float = result.get("queuedMicros", 0) / 1e6
        self.logs: List[str] = call.logs
        self.raw: Dict[str, Any] = result


def parse_instantiated(result: Any, call: "Call") -> Instantiated:
    return Instantiated(result, call)


def parse_eval_result(result: Any, call: "Call") -> EvalResult:
    """An ``eval`` result object as an EvalResult: ``value`` as it was
    decoded from the frame (any JSON), the rest strict."""
    if not isinstance(result, dict) or "value" not in result:
        raise ValueError("missing 'value'")
    return EvalResult(
        value=result["value"],
        language=_need(result, "language", (str,)),
        fuel_consumed=_count(result, "fuelConsumed"),
        peak_memory_bytes=_count(result, "peakMemoryBytes"),
        elapsed=_micros(result, "elapsedMicros", True),
        queued=_micros(result, "queuedMicros", False),
        stdout=_output(result, "stdout"),
        stderr=_output(result, "stderr"),
        output_truncated=bool(result.get("outputTruncated", False)),
        raw=result,
    )


class SessionInfo:
    """An ``instantiate`` result for a session (``language`` instead of a
    module), parsed: what the clients build a session handle from."""

    __slots__ = ("id", "language", "fuel_consumed", "peak_memory_bytes", "elapsed", "queued", "raw")

    def __init__(self, result: Any, call: "Call") -> None:
        self.id: str = _need(result, "instance", (str,))
        if not self.id:
            raise ValueError("'instance' is empty")
        self.language: str = _need(result, "language", (str,))
        self.fuel_consumed: int = _count(result, "fuelConsumed")
        self.peak_memory_bytes: int = _count(result, "peakMemoryBytes")
        self.elapsed: float = _micros(result, "elapsedMicros", False)
        self.queued: float = _micros(result, "queuedMicros", False)
        self.raw: Dict[str, Any] = result


def parse_session(result: Any, call: "Call") -> SessionInfo:
    return SessionInfo(result, call)


def release_params(instance: str) -> Dict[str, str]:
    return {"instance": instance}


def _output(result: Dict[str, Any], key: str) -> bytes:
    data = bytes_from_wire(result.get(key))
    if data is None:
        raise ValueError("%r is not a bytes object ({\"text\"} or {\"base64\"}): %r" % (key, result.get(key)))
    return data


def parse_module(result: Any, call: "Call") -> Module:
    return Module(
        id=_need(result, "moduleId", (str,)),
        imports=list(_need(result, "imports", (list,))),
        exports=list(_need(result, "exports", (list,))),
        cached=bool(result.get("cached", False)),
        compile_time=result.get("compileMicros", 0) / 1e6,
    )


def parse_object(result: Any, call: "Call") -> Dict[str, Any]:
    if not isinstance(result, dict):
        raise ValueError("expected an object, got %r" % (result,))
    return result


def parse_any(result: Any, call: "Call") -> Any:
    return result
