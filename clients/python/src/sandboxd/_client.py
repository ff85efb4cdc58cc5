"""The threaded client: :class:`Sidecar` and :class:`RunHandle`.

The process, its pipes and who reads them are :class:`~sandboxd._connection._Connection`'s;
this module is the public API over it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from ._connection import _Connection, _Outcome
from ._hostcalls import NO_HOST_FUNCTIONS, HostFunction
from ._params import compile_params, run_request
from ._plugin import Plugin, instantiate_request
from ._process import find_binary, not_running, sidecar_argv, sidecar_env
from ._protocol import Call
from ._results import parse_instantiated, parse_module, parse_object, parse_run_result
from ._snippets import Snippets
from ._types import Limits, Module, RunOptions, RunResult
from .errors import InvalidParams, SidecarError

__all__ = ["Sidecar", "RunHandle"]


class Sidecar(Snippets):
    """A ``sandboxd serve`` child process, driven over its stdin/stdout.

    Thread safe: any number of threads may call :meth:`run` at once; the
    requests are pipelined and the sidecar runs them concurrently (up to its
    ``--max-concurrency``). Use as a context manager, or call :meth:`close`.

    Args:
        binary: the sandboxd executable; default ``$SANDBOXD_BIN``, then
            ``sandboxd`` on PATH. Raises SidecarError (with how to build it)
            if none is found.
        args: extra command-line flags for ``sandboxd serve``.
        max_concurrency: passed as ``--max-concurrency N``.
        env: environment variables added to (overriding) this process's
            environment for the child.
        restart: if the sidecar dies, start a fresh one on the next call
            (calls pending at the time of death still fail with
            SidecarError). Without it, later calls raise SidecarError.
        host_functions: :class:`~sandboxd.HostFunction` s declared to every
            run and instance of this sidecar, serving their guests' calls
            unless a run or an instance registers its own of the same name.

    The process is started by the constructor. If this process dies without
    calling close(), the sidecar sees EOF on stdin and exits by itself.
    """

    def __init__(self, binary: Optional[str] = None, args: Sequence[str] = (),
                 max_concurrency: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                 restart: bool = False, host_functions: Sequence[HostFunction] = ()) -> None:
        self._host_functions = NO_HOST_FUNCTIONS.merged(host_functions, "host_functions")
        self._argv = sidecar_argv(find_binary(binary), args, max_concurrency)
        self._env = sidecar_env(env)
        self._restart = restart
        self._lock = threading.Lock()
        self._closed = False
        self._conn = _Connection(self._argv, self._env)

    # -- lifecycle

    def __enter__(self) -> "Sidecar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("dead" if self._conn.dead else "running")
        return "<sandboxd.Sidecar pid=%d %s>" % (self._conn.proc.pid, state)

    @property
    def pid(self) -> int:
        """Process id of the current sidecar process."""
        return self._conn.proc.pid

    @property
    def returncode(self) -> Optional[int]:
        """Exit status of the current sidecar process; None while it runs."""
        return self._conn.proc.poll()

    def close(self, timeout: float = 5.0) -> None:
        """Shut the sidecar down: ``shutdown`` (which lets in-flight runs
        finish), then ``exit``, then wait up to ``timeout`` seconds in all
        before killing it. Idempotent; calls made afterwards raise
        SidecarError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn = self._conn
        conn.shutdown(timeout)

    def _connection(self) -> _Connection:
        with self._lock:
            if self._closed:
                raise SidecarError("the sidecar is closed")
            conn = self._conn
            if conn.dead:
                if not self._restart:
                    raise not_running("Sidecar", conn.proc.poll(), conn.tail.text())
                conn.dispose()
                self._conn = conn = _Connection(self._argv, self._env)
            return conn

    # -- methods

    def run(self, options: Optional[RunOptions] = None, /, **keywords: Any) -> RunResult:
        """Run ``function`` of a module with ``args`` under the given fences.

        Takes a :class:`RunOptions`, keywords, or both (keywords override the
        options, see :meth:`RunOptions.with_options`). The keywords: exactly
        one module source, ``wat`` (text), ``wasm`` (bytes), ``path`` (a file
        the sidecar reads) or ``module`` (from compile()); ``function``
        (default "run"; for a WASI run the sidecar's ``_start``) and ``args``; the limits ``fuel``, ``timeout``
        (seconds), ``memory_bytes``, ``table_elements``, ``instances``,
        ``memories``, ``log_bytes`` or ``limits=Limits(...)`` (default: the
        sidecar's); the grants ``log``, ``random_seed``, ``clock`` or
        ``capabilities=Capabilities(...)`` (default: nothing); ``wasi``
        (a :class:`Wasi`, a dict of its fields, or True) runs a WASI preview1
        program; ``input`` (bytes or str) and ``config`` (str to str) for
        an Extism plugin, which is then instantiated, called and released in
        one request (the result's ``output`` is what the function set; see
        :meth:`plugin` to keep an instance); ``on_log``, ``on_output``.
        ``on_log(line)`` is called for each guest log line, and
        ``on_output(stream, data)`` for each piece of a WASI guest's
        ``"stdout"`` or ``"stderr"`` (bytes), in order, on the thread reading the sidecar's output
        and before run() returns (do not call the Sidecar from them; an
        exception one raises is re-raised by run()).

        Returns a RunResult; raises a SandboxError subclass named after the
        reason the run stopped (FuelExhausted, Timeout, Trap, ...),
        InvalidParams for arguments refused before sending or by the
        sidecar, or SidecarError for protocol failures and a dead sidecar.
        To be able to cancel the run from another thread, use
        :meth:`submit`.
        """
        conn, call, out = self._send_run(options, keywords)
        if not out.done:  # as RunHandle.result(), without making one
            try:
                conn.await_outcome(out)
            except KeyboardInterrupt:
                if not out.done:
                    conn.cancel(call)
                raise
        if out.exc is not None:
            raise out.exc
        result: RunResult = out.result
        return result

    def submit(self, options: Optional[RunOptions] = None, /, **keywords: Any) -> "RunHandle":
        """Send a run (same arguments as :meth:`run`) and return at once with
        a :class:`RunHandle`: ``result(timeout=None)`` waits for it,
        ``cancel()`` stops it (``$/cancelRequest``; the result then raises
        Cancelled)."""
        return RunHandle(*self._send_run(options, keywords))

    def _send_run(self, options: Optional[RunOptions], keywords: Dict[str, Any]) -> Tuple[_Connection, Call, _Outcome]:
        params, on_log, on_output, functions = run_request(options, keywords, self._host_functions)
        conn = self._connection()
        call, out = conn.start("run", params, on_log, parse_run_result, on_output, host_functions=functions)
        return conn, call, out

    def compile(self, *, wat: Optional[str] = None, wasm: Optional[bytes] = None, path: Any = None,
                module: Any = None, limits: Optional[Limits] = None, preinitialize: bool = False) -> Module:
        """Compile (and cache) a module in the sidecar; returns a Module with
        its id, imports and exports, to run later with ``module=``.
        ``limits`` may set ``compile_timeout`` and ``compile_memory_bytes``
        (the sidecar refuses other fields with InvalidParams naming them);
        past them the compile raises CompileLimitExceeded.

        ``preinitialize=True`` compiles a reactor (a Go PDK plugin, any
        module exporting ``_initialize``) pre-initialised: its initialiser
        runs once, here, and every later instance starts from the state it
        left (docs/preinit.md). The Module has an id of its own and no
        ``_initialize`` export. It takes the module's bytes (``wasm`` or
        ``path``); a module that cannot be pre-initialised (text, no
        initialiser, an initialiser that traps) raises InvalidModule."""
        params = compile_params(wat, wasm, path, module, limits, preinitialize)
        result: Module = self._connection().call("compile", params, None, parse_module)
        return result

    def plugin(self, **keywords: Any) -> Plugin:
        """Instantiate a module once, to call it many times: returns a
        :class:`~sandboxd.Plugin`, best used as a context manager (leaving
        the block releases the instance)::

            with sb.plugin(path="plugin.wasm", wasi=True, config={"k": "v"}) as p:
                p.call("greet", "Ada").output      # b"Hello, Ada!"

        Keywords: one module source (``wat``, ``wasm``, ``path``,
        ``module`` or ``module_id``); ``config`` (str to str, what an
        Extism plugin's ``config_get`` reads); the limits of :meth:`run`
        and ``var_bytes`` (a plugin's vars), or ``limits=``:
        ``memory_bytes``, ``table_elements``, ``instances``, ``memories``
        and ``var_bytes`` hold for the instance's life, ``fuel``,
        ``timeout``, ``log_bytes`` and ``output_bytes`` fence the
        instantiation and are each call's defaults; the grants ``log``
        (needed for a plugin's ``log_*``), ``random_seed``, ``clock``,
        ``wasi`` (needed by plugins built for WASI, such as Go PDK ones),
        or ``capabilities=``; ``on_log``/``on_output`` for what the
        instantiation (start function, ``_initialize``) writes.

        Raises what a run would (``Timeout`` in ``_initialize``,
        ``DisallowedImport``, ...), :class:`~sandboxd.TooManyInstances`
        when the sidecar holds its maximum of live instances. The instance
        lives in the sidecar process and dies with it. Ctrl-C while
        waiting cancels the instantiation.
        """
        return self._instantiate(keywords, "plugin()")

    def instantiate(self, **keywords: Any) -> Plugin:
        """:meth:`plugin` by the protocol's name, for any module: an
        instance that keeps its memory and globals between calls
        (``p.call("add", args=[5])``). Same keywords, same errors."""
        return self._instantiate(keywords, "instantiate()")

    def _instantiate(self, keywords: Dict[str, Any], caller: str) -> Plugin:
        opts, params, functions = instantiate_request(keywords, caller, self._host_functions)
        conn = self._connection()
        call, out = conn.start("instantiate", params, opts.on_log, parse_instantiated, opts.on_output,
                               on_late=conn.release_late, host_functions=functions)
        info = conn.wait(call, out, None)
        return Plugin(conn, info, params.get("capabilities", {}), functions)

    def stats(self) -> Dict[str, Any]:
        """The sidecar's counters (the ``stats`` method) as a dict."""
        result: Dict[str, Any] = self._connection().call("stats", None, None, parse_object)
        return result

    def initialize(self) -> Dict[str, Any]:
        """The ``initialize`` handshake: server info, engine versions,
        capabilities, default and maximum limits, maxConcurrency, maxQueue.
        Optional (runs work without it); the result is kept as :attr:`info`.
        """
        conn = self._connection()
        result: Dict[str, Any] = conn.call("initialize", {}, None, parse_object)
        conn.info = result
        return result

    @property
    def info(self) -> Dict[str, Any]:
        """The ``initialize`` result of the current sidecar process (sent
        the first time this is read, then kept; a restarted process is asked
        again)."""
        conn = self._connection()
        info = conn.info
        return info if info is not None else self.initialize()


class RunHandle:
    """A run sent by :meth:`Sidecar.submit` (or a call sent by
    :meth:`Plugin.submit`), like a concurrent.futures.Future.

    ``result(timeout=None)`` waits for the outcome: the RunResult (a
    CallResult for a call, an EvalResult for an evaluation), or the exception :meth:`Sidecar.run` would raise. A ``timeout`` (seconds) that
    passes raises TimeoutError and leaves the run going (``cancel()`` it, or
    wait again). ``cancel()`` sends ``$/cancelRequest``: the sidecar stops
    the guest, queued or running, within milliseconds, and ``result()``
    raises :class:`~sandboxd.Cancelled`, with the fuel it had consumed.
    Interrupting ``result()`` (KeyboardInterrupt) cancels the run too.
    """

    def __init__(self, conn: _Connection, call: Call, out: _Outcome) -> None:
        self._conn = conn
        self._call = call
        self._out = out

    @property
    def id(self) -> int:
        """The JSON-RPC request id of the run."""
        return self._call.id

    def done(self) -> bool:
        """The run has finished (result() will not block)."""
        return self._out.done

    def cancel(self) -> bool:
        """Ask the sidecar to stop the run; False if it had finished already."""
        if self._out.done:
            return False
        self._conn.cancel(self._call)
        return True

    def result(self, timeout: Optional[float] = None) -> Any:
        """The run's RunResult; raises its error. See the class docstring."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise InvalidParams("timeout must be a number of seconds, got %r" % (timeout,))
        out = self._out
        if not out.done:
            try:
                self._conn.await_outcome(out, timeout)
            except concurrent.futures.TimeoutError:
                raise TimeoutError("%s %d did not finish within %s s; it is still running"
                                   % (self._call.method, self.id, timeout)) from None
            except KeyboardInterrupt:
                self.cancel()
                raise
        if out.exc is not None:
            raise out.exc
        return out.result

    def __repr__(self) -> str:
        return "<sandboxd.RunHandle id=%d %s>" % (self.id, "done" if self.done() else "pending")
