"""Plain data types of the public API: Limits, RunResult, Module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

__all__ = ["Limits", "RunResult", "Module"]


@dataclass(frozen=True)
class Limits:
    """The fences of one run; ``None`` fields take the sidecar's defaults.

    ``timeout`` is in seconds (sent as ``timeoutMs``); the rest are the
    protocol's integers. Keyword arguments given to ``run()`` override the
    fields of a ``limits=`` object, so a shared Limits can be a baseline.
    The sidecar validates the values (and names the field it refuses).
    """

    fuel: Optional[int] = None
    timeout: Optional[float] = None
    memory_bytes: Optional[int] = None
    table_elements: Optional[int] = None
    instances: Optional[int] = None
    memories: Optional[int] = None
    log_bytes: Optional[int] = None


@dataclass
class RunResult:
    """The outcome of a successful run.

    ``values`` are Python ints (i32/i64) and floats (f32/f64, decoded from
    their bits, so -0.0, infinities and NaN payloads are exact);
    ``raw_values`` are the wire objects they came from. ``logs`` are the
    guest's ``host::log`` lines in order. ``elapsed`` and ``queued`` are in
    seconds (``elapsedMicros``/``queuedMicros``). ``raw`` is the whole
    result object, for fields this client does not model.
    """

    values: List[Union[int, float]]
    raw_values: List[Dict[str, Any]]
    fuel_consumed: int
    peak_memory_bytes: int
    logs: List[str]
    elapsed: float
    queued: float
    module_id: str
    log_lines: int
    log_truncated: bool
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Module:
    """A module compiled (and cached) by the sidecar; pass it as ``module=``.

    ``imports`` and ``exports`` are the protocol's lists of dicts, e.g.
    ``{"name": "add", "kind": "func", "params": ["i32", "i32"],
    "results": ["i32"]}``. The id is only meaningful to the sidecar process
    that compiled it (a restarted sidecar has an empty cache).
    """

    id: str
    imports: List[Dict[str, Any]] = field(default_factory=list)
    exports: List[Dict[str, Any]] = field(default_factory=list)
    cached: bool = False
    compile_time: float = 0.0  # seconds (compileMicros / 1e6)

    def __hash__(self) -> int:  # the lists are unhashable; the id identifies
        return hash(self.id)

    def export(self, name: str) -> Optional[Dict[str, Any]]:
        """The export called ``name``, or None."""
        for e in self.exports:
            if e.get("name") == name:
                return e
        return None
