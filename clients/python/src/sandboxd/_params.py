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
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _values
from ._hostcalls import NO_HOST_FUNCTIONS, HostFunctions
from ._types import Capabilities, Dir, Limits, Module, OnLog, OnOutput, RunOptions, Wasi
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
    which the server would refuse. Zero, a negative, NaN or an infinite
    timeout is refused here, naming the argument as the caller wrote it
    (the server would name its wire field, in milliseconds: "limits.timeoutMs:
    must be > 0, got -1000"). How large a timeout may be is the server's to
    say (its maximum is a flag).
    """
    if isinstance(seconds, datetime.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidParams("%s must be a number of seconds, got %r" % (name, seconds))
    if not seconds > 0 or seconds == float("inf"):
        raise InvalidParams("%s must be a positive, finite number of seconds, got %r" % (name, seconds))
    ms = int(round(seconds * 1000))
    if seconds > 0 and ms == 0:
        ms = 1
    return ms


_LIMIT_FIELDS = (
    ("fuel", "fuel"), ("memory_bytes", "memoryBytes"), ("table_elements", "tableElements"),
    ("instances", "instances"), ("memories", "memories"), ("log_bytes", "logBytes"),
    ("compile_memory_bytes", "compileMemoryBytes"),
    ("output_bytes", "outputBytes"), ("var_bytes", "varBytes"),
)


_WIRE_LIMITS = dict(_LIMIT_FIELDS)
_NO_LIMITS = Limits()


def limits_object(limits: Optional[Limits], overrides: Mapping[str, Any]) -> Dict[str, int]:
    """The ``limits`` object: fields of ``limits`` overridden by keywords."""
    if limits is None:
        limits = _NO_LIMITS
    elif not isinstance(limits, Limits):
        raise InvalidParams("limits= needs a sandboxd.Limits, got %s" % type(limits).__name__)
    values: Mapping[str, Any] = vars(limits)  # a frozen dataclass's fields, without a pass of getattr
    if overrides:
        values = dict(values)
        values.update((k, v) for k, v in overrides.items() if v is not None)
    out: Dict[str, int] = {}
    for attr, v in values.items():
        if v is None:
            continue
        if attr == "timeout":
            out["timeoutMs"] = timeout_ms(v)
        elif attr == "compile_timeout":
            out["compileTimeoutMs"] = timeout_ms(v, "compile_timeout")
        else:
            out[_WIRE_LIMITS[attr]] = _limit_int(attr, v)
    return out


def compile_params(wat: Optional[str], wasm: Optional[bytes], path: Any, module: Any,
                   limits: Optional[Limits], preinitialize: bool = False) -> Dict[str, Any]:
    """The ``compile`` params; raises InvalidParams before anything is sent.
    Only the compile fields of ``limits`` mean something there: the
    sidecar refuses the others, naming them. ``preinitialize`` is sent
    only when true, so a plain compile's params are what they always were."""
    if not isinstance(preinitialize, bool):
        raise InvalidParams("preinitialize must be True or False, got %r" % (preinitialize,))
    params: Dict[str, Any] = {"module": module_source(wat, wasm, path, module)}
    if limits is not None:
        lim = limits_object(limits, {})
        if lim:
            params["limits"] = lim
    if preinitialize:
        params["preinitialize"] = True
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
    if caps.wasi is not None and caps.wasi is not False:
        out["wasi"] = wasi_object(caps.wasi)
    return out


_WASI_FIELDS = frozenset(f.name for f in dataclasses.fields(Wasi))
_DIR_FIELDS = frozenset(f.name for f in dataclasses.fields(Dir))


def _fields(value: Mapping[str, Any], allowed: frozenset, where: str) -> Dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidParams("%s needs a mapping, got %s" % (where, type(value).__name__))
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise InvalidParams("%s: unknown key(s) %s (known: %s)" % (where, ", ".join(unknown), ", ".join(sorted(allowed))))
    return dict(value)


def bytes_input(value: Any, where: str) -> Any:
    """A WASI input on the wire: a str as a plain JSON string (its UTF-8
    bytes), bytes as ``{"base64": ...}``; an object already in wire form
    (``{"text"}`` or ``{"base64"}``) passes through for the sidecar to check."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping) and len(value) == 1 and ("text" in value or "base64" in value):
        return dict(value)
    raise InvalidParams("%s needs bytes or a str, got %s" % (where, type(value).__name__))


def _strings(value: Any, where: str) -> List[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidParams("%s needs a list of str, got %s" % (where, type(value).__name__))
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise InvalidParams("%s[%d] must be a str, got %r" % (where, i, v))
    return list(value)


def _dir_object(d: Any, where: str) -> Dict[str, Any]:
    if isinstance(d, Dir):
        d = {f: getattr(d, f) for f in _DIR_FIELDS}
    fields = _fields(d, _DIR_FIELDS, where)
    if fields.get("host") is None:
        raise InvalidParams("%s.host is required" % where)
    try:
        host = os.path.abspath(os.fspath(fields["host"]))
    except TypeError:
        raise InvalidParams("%s.host needs a path, got %r" % (where, fields["host"])) from None
    guest = fields.get("guest")
    if guest is None:
        guest = os.fspath(fields["host"])
    if not isinstance(guest, str):
        raise InvalidParams("%s.guest must be a str, got %r" % (where, guest))
    out: Dict[str, Any] = {"host": host, "guest": guest}
    writable = fields.get("writable", False)
    if not isinstance(writable, bool):
        raise InvalidParams("%s.writable must be a bool, got %r" % (where, writable))
    if writable:
        out["writable"] = True
    return out


def wasi_object(wasi: Any) -> Any:
    """``capabilities.wasi``: True, or the object of a Wasi (or of a dict
    with its fields)."""
    if wasi is True:
        return True
    if isinstance(wasi, Wasi):
        wasi = {f: getattr(wasi, f) for f in _WASI_FIELDS}
    w = _fields(wasi, _WASI_FIELDS, "wasi")
    out: Dict[str, Any] = {}
    if w.get("args"):
        out["args"] = _strings(w["args"], "wasi.args")
    env = w.get("env")
    if env:
        if not isinstance(env, Mapping):
            raise InvalidParams("wasi.env needs a mapping of str to str, got %s" % type(env).__name__)
        for k, v in env.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidParams("wasi.env[%r] must map a str to a str, got %r" % (k, v))
        out["env"] = dict(env)
    if w.get("stdin") is not None:
        out["stdin"] = bytes_input(w["stdin"], "wasi.stdin")
    files = w.get("files")
    if files:
        if not isinstance(files, Mapping):
            raise InvalidParams("wasi.files needs a mapping of guest path to bytes, got %s" % type(files).__name__)
        out["files"] = {}
        for k, v in files.items():
            if not isinstance(k, str):
                raise InvalidParams("wasi.files: a guest path must be a str, got %r" % (k,))
            out["files"][k] = bytes_input(v, "wasi.files[%r]" % k)
    dirs = w.get("dirs")
    if dirs:
        if isinstance(dirs, (str, bytes, Mapping, Dir)) or not isinstance(dirs, (list, tuple)):
            raise InvalidParams("wasi.dirs needs a list of sandboxd.Dir, got %s" % type(dirs).__name__)
        out["dirs"] = [_dir_object(d, "wasi.dirs[%d]" % i) for i, d in enumerate(dirs)]
    return out


def config_object(config: Any) -> Dict[str, str]:
    """A plugin's ``config``: a mapping of str to str (what ``config_get``
    reads)."""
    if not isinstance(config, Mapping):
        raise InvalidParams("config needs a mapping of str to str, got %s" % type(config).__name__)
    for k, v in config.items():
        if not isinstance(k, str):
            raise InvalidParams("config: a key must be a str, got %r" % (k,))
        if not isinstance(v, str):
            raise InvalidParams("config.%s: must be a string, got %r" % (k, v))
    return dict(config)


def _grants(options: RunOptions) -> Dict[str, Any]:
    """The ``capabilities`` object, checking the callbacks need what was
    granted."""
    caps = options.capabilities
    if options.on_log is not None and not (caps is not None and caps.log):
        # Without the grant the guest cannot even link host::log, so the
        # callback could never fire; say so instead of silently ignoring it.
        raise InvalidParams("on_log= needs log=True (the guest gets host::log only when granted)")
    cap = capabilities_object(caps)  # checks its type first
    if options.on_output is not None and "wasi" not in cap:
        raise InvalidParams("on_output= needs wasi= (only a WASI guest has stdout and stderr)")
    return cap


def run_params(options: RunOptions, host_functions: HostFunctions = NO_HOST_FUNCTIONS) -> Dict[str, Any]:
    """The ``run`` params, declaring ``host_functions``; raises
    InvalidParams before anything is sent."""
    cap = _grants(options)
    function = options.function
    if function is None and "wasi" not in cap:
        function = "run"
    if function is not None and not isinstance(function, str):
        raise InvalidParams("function must be a str, got %r" % (function,))
    params: Dict[str, Any] = {
        "module": module_source(options.wat, options.wasm, options.path, options.module),
    }
    if function is not None:  # a WASI run without one: the sidecar calls _start
        params["function"] = function
    params["args"] = _values.encode_args(options.args)
    if options.input is not None:
        params["input"] = bytes_input(options.input, "input")
    if options.config is not None:
        params["config"] = config_object(options.config)
    lim = limits_object(options.limits, {})
    if lim:
        params["limits"] = lim
    if cap:
        params["capabilities"] = cap
    declare(params, host_functions)
    return params


def declare(params: Dict[str, Any], host_functions: HostFunctions) -> None:
    """``hostFunctions`` of a run or an instantiation; absent when there
    are none (declaring nothing changes nothing)."""
    if host_functions:
        params["hostFunctions"] = host_functions.declarations()


_PLAIN_RUN_KEYWORDS = frozenset({"wat", "wasm", "path", "module", "function", "args"})


def plain_run_params(keywords: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """:func:`run_params` for a run given only a module source, ``function``
    and ``args`` -- the repeated call of a hot loop -- without building a
    RunOptions; None for any other keywords (then use run_params)."""
    if not keywords.keys() <= _PLAIN_RUN_KEYWORDS:
        return None
    function = keywords.get("function")
    if function is None:
        function = "run"
    elif not isinstance(function, str):
        raise InvalidParams("function must be a str, got %r" % (function,))
    return {"module": module_source(keywords.get("wat"), keywords.get("wasm"), keywords.get("path"),
                                    keywords.get("module")),
            "function": function, "args": _values.encode_args(keywords.get("args", ()))}


def run_request(options: Optional[RunOptions], keywords: Mapping[str, Any],
                sidecar_functions: HostFunctions = NO_HOST_FUNCTIONS
                ) -> Tuple[Dict[str, Any], Optional[OnLog], Optional[OnOutput], HostFunctions]:
    """The ``run`` params, the run's on_log and on_output and the host
    functions serving it (the run's over the sidecar's) from run()'s
    arguments (an options object, keywords, or both): the plain path when
    only keywords of a plain run are given, else through RunOptions."""
    params = plain_run_params(keywords) if options is None else None
    if params is not None:
        declare(params, sidecar_functions)
        return params, None, None, sidecar_functions
    opts = RunOptions.build(options, keywords)
    functions = sidecar_functions.merged(opts.host_functions, "host_functions")
    return run_params(opts, functions), opts.on_log, opts.on_output, functions


#: The keywords of ``plugin()`` that belong to a run or a call, not to an
#: instance, and what to use instead.
_NOT_FOR_INSTANTIATE = {
    "function": "name the function in call()",
    "args": "pass args= to call()",
    "input": "pass the input to call()",
}


def instantiate_params(options: RunOptions, host_functions: HostFunctions = NO_HOST_FUNCTIONS) -> Dict[str, Any]:
    """The ``instantiate`` params from a RunOptions built of ``plugin()``'s
    keywords (its module source, limits, capabilities and config),
    declaring ``host_functions``."""
    for name, instead in _NOT_FOR_INSTANTIATE.items():
        value = getattr(options, name)
        if value is not None and value != ():
            raise InvalidParams("plugin() takes no %s= (%s)" % (name, instead))
    cap = _grants(options)
    params: Dict[str, Any] = {
        "module": module_source(options.wat, options.wasm, options.path, options.module),
    }
    if cap:
        params["capabilities"] = cap
    lim = limits_object(options.limits, {})
    if lim:
        params["limits"] = lim
    if options.config is not None:
        params["config"] = config_object(options.config)
    declare(params, host_functions)
    return params


#: The Limits fields that apply to one call; the rest hold for the
#: instance's life, fixed at instantiate.
CALL_LIMITS = ("fuel", "timeout", "log_bytes", "output_bytes")
_WIRE_NAMES = dict(_LIMIT_FIELDS, timeout="timeoutMs", compile_timeout="compileTimeoutMs")


def call_limits(limits: Optional[Limits], overrides: Mapping[str, Any]) -> Dict[str, int]:
    """A call's ``limits`` object; a field other than :data:`CALL_LIMITS`
    raises InvalidParams, as the sidecar would."""
    if limits is not None and isinstance(limits, Limits):
        for f in dataclasses.fields(Limits):
            if f.name not in CALL_LIMITS and getattr(limits, f.name) is not None:
                raise InvalidParams("limits.%s: fixed at instantiate (only fuel, timeoutMs, logBytes, outputBytes "
                                    "apply to a call)" % _WIRE_NAMES[f.name])
    return limits_object(limits, overrides)


def call_params(instance: str, function: Any, input: Any, args: Any, limits: Optional[Limits],
                overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``call`` params; raises InvalidParams before anything is sent."""
    if not isinstance(function, str):
        raise InvalidParams("function must be a str, got %r" % (function,))
    params: Dict[str, Any] = {"instance": instance, "function": function}
    if input is not None:
        params["input"] = bytes_input(input, "input")
    encoded = _values.encode_args(args)
    if encoded:
        params["args"] = encoded
    lim = call_limits(limits, overrides)
    if lim:
        params["limits"] = lim
    return params
