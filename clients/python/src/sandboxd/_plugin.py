"""Long-lived instances: :class:`Plugin` (threads) and :class:`AsyncPlugin`
(asyncio), the handles ``Sidecar.plugin()`` and ``AsyncSidecar.plugin()``
return (docs/protocol.md, "Instances and plugins").

An instance is a module instantiated once in the sidecar and called many
times: its memory, globals and, for an Extism plugin, its vars persist
between calls. Calls to one instance run one at a time in the order they
were sent; different instances run concurrently. A fence or trap in a call
closes the instance (its state can no longer be trusted); a plugin error
does not. Instances live in the sidecar process and die with it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from ._hostcalls import HostFunctions
from ._params import call_params, instantiate_params
from ._results import Instantiated, call_result_parser, release_params
from ._types import CallResult, Limits, OnLog, OnOutput, RunOptions
from .errors import InstanceClosed, InvalidParams, SandboxError, SidecarError

if TYPE_CHECKING:  # pragma: no cover
    from ._async import _AsyncConnection
    from ._client import RunHandle
    from ._connection import _Connection

__all__ = ["Plugin", "AsyncPlugin", "Opening", "plugin_options", "instantiate_request"]


def plugin_options(keywords: Dict[str, Any], caller: str) -> RunOptions:
    """The options of ``plugin(**keywords)``: those of ``run()`` that
    describe an instance (module source, limits, capabilities, ``config``,
    ``on_log``/``on_output`` for instantiation), plus ``module_id=``."""
    if "module_id" in keywords:
        module_id = keywords.pop("module_id")
        if keywords.get("module") is not None:
            raise InvalidParams("give exactly one module source: wat=, wasm=, path=, module= or module_id= "
                                "(got module=, module_id=)")
        if not isinstance(module_id, str):
            raise InvalidParams("module_id= needs a str (a Module's id), got %s" % type(module_id).__name__)
        keywords["module"] = module_id
    return RunOptions.build(None, keywords, caller)


def instantiate_request(keywords: Dict[str, Any], caller: str, sidecar_functions: HostFunctions
                        ) -> Tuple[RunOptions, Dict[str, Any], HostFunctions]:
    """``plugin(**keywords)``'s options, its ``instantiate`` params and the
    host functions of the instance (its own over the sidecar's), which
    serve the host calls of its instantiation and of every call."""
    opts = plugin_options(keywords, caller)
    functions = sidecar_functions.merged(opts.host_functions, "host_functions")
    return opts, instantiate_params(opts, functions), functions


class _Instance:
    """What every handle of an instance shares (a plugin's, a session's):
    its id, whether it was released here, and the errors of a call on an
    instance that is closed."""

    _conn: Any  # the _Connection or _AsyncConnection it lives on

    def __init__(self, id: str) -> None:
        self._id = id
        self._released = False

    @property
    def id(self) -> str:
        """The instance id (opaque; unique within the sidecar's life)."""
        return self._id

    @property
    def released(self) -> bool:
        """:meth:`release` was called (or the block left)."""
        return self._released

    def _live_conn(self) -> Any:
        """The connection to send a call on, or the InstanceClosed a call
        gets on an instance released here or whose sidecar is gone."""
        if self._released:
            raise self._closed_here()
        conn = self._conn
        if conn.dead:
            raise self._gone(conn.session.closed_error())
        return conn

    def _closed_here(self) -> InstanceClosed:
        return _closed(self.id, "released")

    def _gone(self, cause: Optional[BaseException]) -> InstanceClosed:
        """The error for a call on an instance whose sidecar is gone."""
        why = str(cause).split("\n", 1)[0] if cause is not None else "it ended"
        err = _closed(self.id, "its sidecar is gone, and instances die with the sidecar (%s)" % why)
        err.__cause__ = cause
        return err

    def __repr__(self) -> str:
        return "<sandboxd.%s %s%s>" % (type(self).__name__, self.id, " released" if self._released else "")


def _raise_unless_dead(conn: Any) -> None:
    """In ``except``: a release that failed because the sidecar went away
    meanwhile is done (the instance died with it); else re-raise."""
    if not conn.dead:
        raise


class _SyncInstance(_Instance):
    """An instance of a :class:`~sandboxd.Sidecar`: a context manager that
    releases it."""

    def __init__(self, conn: "_Connection", id: str) -> None:
        super().__init__(id)
        self._conn = conn
        self._lock = threading.Lock()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.release()
        except SandboxError:
            if exc is None:
                raise
            # the body's exception is the one to see

    def release(self) -> None:
        """Release the instance: the sidecar frees it, answers its queued
        calls InstanceClosed (reason ``released``) and cancels a running
        one. Idempotent; a no-op once the sidecar is gone (the instance
        died with it)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        conn = self._conn
        if not conn.dead:
            try:
                conn.call("release", release_params(self.id))
            except SidecarError:
                _raise_unless_dead(conn)


class _AsyncInstance(_Instance):
    """An instance of an :class:`~sandboxd.AsyncSidecar`: an async context
    manager that releases it."""

    def __init__(self, conn: "_AsyncConnection", id: str) -> None:
        super().__init__(id)
        self._conn = conn

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.release()
        except SandboxError:
            if exc is None:
                raise

    async def release(self) -> None:
        """See :meth:`Plugin.release`."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        if not conn.dead:
            try:
                await conn.call("release", release_params(self.id))
            except SidecarError:
                _raise_unless_dead(conn)


class _PluginBase:
    """What the two plugin handles share: the instance's description and
    the checks of a call's arguments."""

    id: str

    def __init__(self, info: Instantiated, capabilities: Mapping[str, Any], host_functions: HostFunctions) -> None:
        self._info = info
        self._host_functions = host_functions
        self._granted_log = bool(capabilities.get("log"))
        self._granted_wasi = "wasi" in capabilities

    @property
    def module_id(self) -> str:
        """The id of the module it is an instance of (usable as ``module=``)."""
        return self._info.module_id

    @property
    def exports(self) -> List[Dict[str, Any]]:
        """The module's exports, as ``Module.exports``."""
        return self._info.exports

    @property
    def is_plugin(self) -> bool:
        """The module imports ``extism:host/env``: its exports with no
        parameters and one i32 result are plugin functions, called with an
        input and answering an output."""
        return self._info.plugin

    @property
    def logs(self) -> List[str]:
        """Log lines of the instantiation (start function, ``_initialize``)."""
        return self._info.logs

    @property
    def raw(self) -> Dict[str, Any]:
        """The whole ``instantiate`` result (fuelConsumed, elapsedMicros, ...)."""
        return self._info.raw

    def _params(self, function: Any, input: Any, args: Any, limits: Optional[Limits],
                overrides: Mapping[str, Any], on_log: Optional[OnLog], on_output: Optional[OnOutput]) -> Dict[str, Any]:
        if on_log is not None and not self._granted_log:
            raise InvalidParams("on_log= needs an instance made with log=True (its guest gets log functions only "
                                "when granted)")
        if on_output is not None and not self._granted_wasi:
            raise InvalidParams("on_output= needs an instance made with wasi= (only a WASI guest has stdout "
                                "and stderr)")
        return call_params(self.id, function, input, args, limits, overrides)


def _closed(instance: str, reason: str) -> InstanceClosed:
    return InstanceClosed("instance %s is closed: %s" % (instance, reason),
                          data={"instance": instance, "reason": reason})


class Plugin(_PluginBase, _SyncInstance):
    """An instance in a :class:`~sandboxd.Sidecar`, from ``sb.plugin(...)``.

    ``with sb.plugin(path="plugin.wasm", wasi=True) as p:`` instantiates,
    and leaving the block releases the instance, also when the body raised.
    Without ``with``, call :meth:`release` (the sidecar also evicts an
    instance after its idle time, ``serve --instance-idle``). Thread safe:
    calls from several threads are sent at once and the sidecar runs them
    one at a time, in the order it read them.
    """

    def __init__(self, conn: "_Connection", info: Instantiated, capabilities: Mapping[str, Any],
                 host_functions: HostFunctions) -> None:
        _PluginBase.__init__(self, info, capabilities, host_functions)
        _SyncInstance.__init__(self, conn, info.id)

    def __enter__(self) -> "Plugin":
        return self

    def call(self, function: str, input: Any = None, *, args: Any = (), limits: Optional[Limits] = None,
             fuel: Optional[int] = None, timeout: Optional[float] = None, log_bytes: Optional[int] = None,
             output_bytes: Optional[int] = None, on_log: Optional[OnLog] = None,
             on_output: Optional[OnOutput] = None) -> CallResult:
        """Call ``function`` of the instance and wait for its result.

        For a plugin function, ``input`` (bytes, or a str as its UTF-8) is
        what it reads and the result's ``output`` (bytes) what it set; for a
        plain function, ``args`` are its arguments and ``values`` its
        results. ``fuel``, ``timeout`` (seconds), ``log_bytes`` and
        ``output_bytes`` (or ``limits=Limits(...)`` with only those) fence
        this call; by default the instance's. ``on_log(line)`` gets each
        log line (a :class:`~sandboxd.LogLine`, whose ``level`` Extism
        ``log_*`` lines carry) and ``on_output(stream, data)`` each piece
        of a WASI guest's output, on the thread reading the sidecar's output,
        before this returns.

        Raises :class:`~sandboxd.PluginError` when the plugin reports an
        error (the instance stays usable), the fence's or trap's error
        (``Timeout``, ``Trap``, ...; the instance is then closed),
        :class:`~sandboxd.InstanceClosed` for a closed instance,
        ``ExportError`` for a missing function, InvalidParams for bad
        arguments. Ctrl-C while waiting cancels the call (which closes the
        instance if it was running).
        """
        return self.submit(function, input, args=args, limits=limits, fuel=fuel, timeout=timeout,
                           log_bytes=log_bytes, output_bytes=output_bytes, on_log=on_log,
                           on_output=on_output).result()

    def submit(self, function: str, input: Any = None, *, args: Any = (), limits: Optional[Limits] = None,
               fuel: Optional[int] = None, timeout: Optional[float] = None, log_bytes: Optional[int] = None,
               output_bytes: Optional[int] = None, on_log: Optional[OnLog] = None,
               on_output: Optional[OnOutput] = None) -> "RunHandle":
        """Send a call (same arguments as :meth:`call`) and return at once
        with a :class:`~sandboxd.RunHandle` whose ``result()`` is the
        CallResult and whose ``cancel()`` sends ``$/cancelRequest``: a
        queued call is answered Cancelled and the instance stays open; a
        running one is stopped and the instance closed."""
        from ._client import RunHandle

        params = self._params(function, input, args, limits,
                              {"fuel": fuel, "timeout": timeout, "log_bytes": log_bytes, "output_bytes": output_bytes},
                              on_log, on_output)
        conn = self._live_conn()
        call, out = conn.start("call", params, on_log, call_result_parser(self.id, self.module_id), on_output,
                               host_functions=self._host_functions)
        return RunHandle(conn, call, out)


class AsyncPlugin(_PluginBase, _AsyncInstance):
    """An instance in an :class:`~sandboxd.AsyncSidecar`:
    ``async with sb.plugin(...) as p: r = await p.call("greet", "Ada")``,
    or ``p = await sb.plugin(...)`` and later ``await p.release()``.
    Calls may be awaited concurrently (they run one at a time, in the order
    sent); cancelling a task awaiting :meth:`call` sends
    ``$/cancelRequest`` (a running call is stopped and the instance
    closed; a queued one is dropped and the instance stays open)."""

    def __init__(self, conn: "_AsyncConnection", info: Instantiated, capabilities: Mapping[str, Any],
                 host_functions: HostFunctions) -> None:
        _PluginBase.__init__(self, info, capabilities, host_functions)
        _AsyncInstance.__init__(self, conn, info.id)

    async def __aenter__(self) -> "AsyncPlugin":
        return self

    async def call(self, function: str, input: Any = None, *, args: Any = (), limits: Optional[Limits] = None,
                   fuel: Optional[int] = None, timeout: Optional[float] = None, log_bytes: Optional[int] = None,
                   output_bytes: Optional[int] = None, on_log: Optional[OnLog] = None,
                   on_output: Optional[OnOutput] = None) -> CallResult:
        """See :meth:`Plugin.call`; ``on_log``/``on_output`` run on the
        event loop."""
        params = self._params(function, input, args, limits,
                              {"fuel": fuel, "timeout": timeout, "log_bytes": log_bytes, "output_bytes": output_bytes},
                              on_log, on_output)
        conn = self._live_conn()
        result: CallResult = await conn.call("call", params, on_log, call_result_parser(self.id, self.module_id),
                                             on_output=on_output, host_functions=self._host_functions)
        return result


class Opening:
    """What ``AsyncSidecar.plugin(...)`` and ``AsyncSidecar.session(...)``
    return: await it for the :class:`AsyncPlugin` (the
    :class:`~sandboxd.AsyncSession`), or use it with ``async with`` (which
    releases the instance on the way out)."""

    def __init__(self, open: Any) -> None:
        self._open = open  # a coroutine function making the handle
        self._plugin: Optional[_AsyncInstance] = None

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> Any:
        self._plugin = await self._open()
        return self._plugin

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._plugin is not None:
            await self._plugin.__aexit__(exc_type, exc, tb)
