"""Python client for sandboxd, a sidecar that runs untrusted WebAssembly
under fuel, deadline and memory fences.

    import sandboxd
    with sandboxd.Sidecar() as sb:
        r = sb.run(wat=WAT, function="add", args=[2, 40])
        r.values            # [42]

:class:`Sidecar` is the threaded client, :class:`AsyncSidecar` the asyncio
one; both speak the JSON-RPC protocol of docs/protocol.md to a
``sandboxd serve`` child process. ``sb.plugin(...)`` keeps an instance
(an Extism plugin or any module) to call many times::

    with sb.plugin(path="plugin.wasm", wasi=True) as p:
        p.call("greet", "Ada").output   # b"Hello, Ada!"

``sb.eval(code, language="js")`` runs a snippet of JavaScript, Lua or
Starlark in a fresh interpreter, ``sb.session("js")`` keeps one to
evaluate many snippets in. Failed runs raise a :class:`SandboxError`
subclass named after the fence or fault that stopped them.
"""

from ._async import AsyncSidecar
from ._client import RunHandle, Sidecar
from ._hostcalls import HostCall, HostFunction, current_host_call, host_function
from ._plugin import AsyncPlugin, Plugin
from ._snippets import AsyncSession, Session
from ._types import CallResult, Capabilities, Dir, EvalResult, Limits, LogLine, Module, RunOptions, RunResult, Wasi
from ._values import F32, F64, I32, I64, WasmValue
from .errors import (
    Cancelled, CompileLimitExceeded, DisallowedImport, ExportError, FuelExhausted, HostError, HostFunctionError,
    InstanceClosed,
    InvalidModule, InvalidParams, MemoryLimitExceeded, PluginError, SandboxError, ScriptError, SidecarError, Timeout,
    TooManyInstances, Trap,
)

__version__ = "0.1.0"

__all__ = [
    "Sidecar", "AsyncSidecar", "RunHandle", "RunOptions", "Limits", "Capabilities", "Wasi", "Dir", "Module", "RunResult",
    "Plugin", "AsyncPlugin", "CallResult", "LogLine", "InstanceClosed", "TooManyInstances",
    "Session", "AsyncSession", "EvalResult",
    "HostFunction", "HostCall", "host_function", "current_host_call",
    "I32", "I64", "F32", "F64", "WasmValue",
    "SandboxError", "HostError", "FuelExhausted", "Timeout", "MemoryLimitExceeded",
    "DisallowedImport", "InvalidModule", "ExportError", "Trap", "Cancelled", "PluginError", "CompileLimitExceeded",
    "HostFunctionError", "ScriptError", "InvalidParams", "SidecarError",
]
