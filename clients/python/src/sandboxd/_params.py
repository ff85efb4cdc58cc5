"""Request parameters built from the keyword API (docs/protocol.md, `run`).

Everything here raises InvalidParams (also a ValueError and a TypeError)
before a byte is sent, for the
mistakes the client can see by itself (two module sources, a bool argument);
range checks of limits are left to the sidecar, which knows its maximums and
names the offending field.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import os
from typing import Any, Dict, Mapping, Optional

from . import _values
from ._types import Capabilities, Limits, Module, RunOptions
from .errors import InvalidParams


def module_source(wat: Optional[str] = None, wasm: Optional[bytes] = None, path: Any = None,
                  module: Any = None) -> Dict[str, str]:
    """The protocol's ``module`` object from exactly one of the four sources.

    A relative ``path`` is made absolute here, against the caller's current
    directory: the sidecar would otherwise resolve it against its own, which
    is the directory at spawn time.
    """
    given = [name for name, v in (("wat", wat), ("wasm", wasm), ("path", path), ("module", module))
             if v is not None]
    if len(given) != 1:
        raise InvalidParams("give exactly one module source: wat=, wasm=, path= or module= (got %s)"
                         % (", ".join(n + "=" for n in given) or "none"))
    if wat is not None:
        if isinstance(wat, (bytes, bytearray)):
            wat = bytes(wat).decode("utf-8")
        if not isinstance(wat, str):
            raise InvalidParams("wat= needs a str of WebAssembly text, got %s" % type(wat).__name__)
        return {"wat": wat}
    if wasm is not None:
        if isinstance(wasm, str):
            raise InvalidParams("wasm= needs bytes (a binary module); pass text as wat=")
        return {"wasm": base64.b64encode(bytes(wasm)).decode("ascii")}
    if path is not None:
        return {"path": os.path.abspath(os.fspath(path))}
    if isinstance(module, Module):
        return {"id": module.id}
    if isinstance(module, str):
        return {"id": module}
    raise InvalidParams("module= needs a sandboxd.Module (from compile()) or its id, got %s"
                    % type(module).__name__)


def _limit_int(name: str, v: Any) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidParams("%s must be an int, got %r" % (name, v))
    return v


def timeout_ms(seconds: Any, name: str = "timeout") -> int:
    """Seconds (or a timedelta) to the protocol's whole milliseconds.

    Rounded to nearest (0.05 * 1000 is 50.000000000000007 in binary floating
    point; ceil would make it 51). A positive timeout never rounds to 0 ms,
    which the server would refuse; zero or negative ones are sent as is so
    the server reports them, naming the field.
    """
    if isinstance(seconds, datetime.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidParams("%s must be a number of seconds, got %r" % (name, seconds))
    ms = int(round(seconds * 1000))
    if seconds > 0 and ms == 0:
        ms = 1
    return ms


_LIMIT_FIELDS = (
    ("fuel", "fuel"), ("memory_bytes", "memoryBytes"), ("table_elements", "tableElements"),
    ("instances", "instances"), ("memories", "memories"), ("log_bytes", "logBytes"),
    ("compile_memory_bytes", "compileMemoryBytes"),
)


def limits_object(limits: Optional[Limits], overrides: Mapping[str, Any]) -> Dict[str, int]:
    """The ``limits`` object: fields of ``limits`` overridden by keywords."""
    if limits is None:
        limits = Limits()
    elif not isinstance(limits, Limits):
        raise InvalidParams("limits= needs a sandboxd.Limits, got %s" % type(limits).__name__)
    merged = dataclasses.replace(limits, **{k: v for k, v in overrides.items() if v is not None})
    out: Dict[str, int] = {}
    for attr, wire in _LIMIT_FIELDS:
        v = getattr(merged, attr)
        if v is not None:
            out[wire] = _limit_int(attr, v)
    if merged.timeout is not None:
        out["timeoutMs"] = timeout_ms(merged.timeout)
    if merged.compile_timeout is not None:
        out["compileTimeoutMs"] = timeout_ms(merged.compile_timeout, "compile_timeout")
    return out


def compile_params(wat: Optional[str], wasm: Optional[bytes], path: Any, module: Any,
                   limits: Optional[Limits]) -> Dict[str, Any]:
    """The ``compile`` params; raises InvalidParams before anything is sent.
    Only the compile fields of ``limits`` mean something there: the
    sidecar refuses the others, naming them."""
    params: Dict[str, Any] = {"module": module_source(wat, wasm, path, module)}
    if limits is not None:
        lim = limits_object(limits, {})
        if lim:
            params["limits"] = lim
    return params


def capabilities_object(caps: Optional[Capabilities]) -> Dict[str, Any]:
    if caps is None:
        caps = Capabilities()
    elif not isinstance(caps, Capabilities):
        raise InvalidParams("capabilities= needs a sandboxd.Capabilities, got %s" % type(caps).__name__)
    out: Dict[str, Any] = {}
    if caps.log:
        out["log"] = True
    seed = caps.random_seed
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidParams("random_seed must be an int, got %r" % (seed,))
        out["random"] = {"seed": seed if seed <= _values.MAX_SAFE_INTEGER else str(seed)}
    if caps.clock:
        out["clock"] = True
    return out


def run_params(options: RunOptions) -> Dict[str, Any]:
    """The ``run`` params; raises InvalidParams before anything is sent."""
    caps = options.capabilities
    if options.on_log is not None and not (caps is not None and caps.log):
        # Without the grant the guest cannot even link host::log, so the
        # callback could never fire; say so instead of silently ignoring it.
        raise InvalidParams("on_log= needs log=True (the guest gets host::log only when granted)")
    if not isinstance(options.function, str):
        raise InvalidParams("function must be a str, got %r" % (options.function,))
    params: Dict[str, Any] = {
        "module": module_source(options.wat, options.wasm, options.path, options.module),
        "function": options.function,
        "args": _values.encode_args(options.args),
    }
    lim = limits_object(options.limits, {})
    if lim:
        params["limits"] = lim
    cap = capabilities_object(caps)
    if cap:
        params["capabilities"] = cap
    return params
