"""Snippets: ``eval`` of JavaScript, Lua or Starlark in a fresh interpreter,
and sessions, interpreters that keep their state between evaluations
(docs/snippets.md; docs/protocol.md, ``eval``). :class:`Session` and
:class:`AsyncSession` are the handles ``Sidecar.session()`` and
``AsyncSidecar.session()`` return.

A session is an instance (``instantiate`` with ``language``): it counts
toward the sidecar's maximum of instances, is evicted when idle, released
like a plugin, and its evaluations run one at a time in the order sent. A
script error leaves it usable; a fence (fuel, deadline, memory cap) or a
cancelled running evaluation closes it (``data["instanceClosed"]``), and
later evaluations raise :class:`~sandboxd.InstanceClosed`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional

from ._params import call_limits, limits_object
from ._plugin import Opening, _AsyncInstance, _SyncInstance
from ._results import SessionInfo, parse_eval_result, parse_session
from ._types import EvalResult, Limits, OnOutput
from .errors import InvalidParams

if TYPE_CHECKING:  # pragma: no cover
    from ._async import _AsyncConnection
    from ._client import RunHandle
    from ._connection import _Connection

__all__ = ["Session", "AsyncSession", "Snippets", "AsyncSnippets", "LANGUAGES"]

#: The languages of the sidecar's interpreter runtimes.
LANGUAGES = ("js", "lua", "starlark")

_INPUT_CHECK = json.JSONEncoder(allow_nan=False, check_circular=True)


def _language(language: Any) -> str:
    if not isinstance(language, str):
        raise InvalidParams("language must be a str (one of %s), got %r" % (", ".join(LANGUAGES), language))
    if language not in LANGUAGES:
        hint = ' (Python is not available; Starlark, a dialect of Python, is "starlark")' \
            if language.lower() in ("python", "py") else ""
        raise InvalidParams("language: unknown language %r: give one of %s%s" % (language, ", ".join(LANGUAGES), hint))
    return language


def _code(code: Any) -> str:
    if not isinstance(code, str):
        raise InvalidParams("code must be a str (the snippet's source), got %s" % type(code).__name__)
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate would reach the sidecar as U+FFFD
        raise InvalidParams("code: not valid UTF-8 at character %d: %s" % (e.start, e.reason)) from None
    return code


def _input(value: Any) -> Any:
    """``input`` checked to be JSON before anything is sent: what
    ``json.dumps`` would refuse, or write as something that is not JSON
    (NaN, infinities), raises InvalidParams naming ``input``."""
    try:
        _INPUT_CHECK.encode(value)
    except (TypeError, ValueError) as e:
        raise InvalidParams("input must be a JSON value (dict, list, str, int, float, bool or None): %s" % e) from None
    except RecursionError:
        raise InvalidParams("input: nested too deeply to encode (the sidecar takes at most 1,000 levels)") from None
    return value


def on_output_callback(on_output: Any) -> Optional[OnOutput]:
    if on_output is not None and not callable(on_output):
        raise InvalidParams("on_output must be callable as on_output(stream, data), got %r" % (on_output,))
    return on_output


def _snippet(params: Dict[str, Any], code: Any, input: Any, limits: Dict[str, int]) -> Dict[str, Any]:
    params["code"] = _code(code)
    if input is not None:
        params["input"] = _input(input)
    if limits:
        params["limits"] = limits
    return params


def eval_params(code: Any, language: Any, input: Any, limits: Optional[Limits],
                overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``eval`` params of a one-shot evaluation; raises InvalidParams
    before anything is sent."""
    return _snippet({"language": _language(language)}, code, input, limits_object(limits, overrides))


def session_params(language: Any, limits: Optional[Limits], overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``instantiate`` params of a session."""
    params: Dict[str, Any] = {"language": _language(language)}
    lim = limits_object(limits, overrides)
    if lim:
        params["limits"] = lim
    return params


def session_eval_params(instance: str, code: Any, input: Any, limits: Optional[Limits],
                        overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``eval`` params of an evaluation in a session: only a call's
    limits (fuel, timeout, log_bytes, output_bytes) apply."""
    return _snippet({"instance": instance}, code, input, call_limits(limits, overrides))


class _SessionInfo:
    """What the two session handles share: the description ``instantiate``
    gave."""

    def __init__(self, info: SessionInfo) -> None:
        self._info = info

    @property
    def language(self) -> str:
        """``"js"``, ``"lua"`` or ``"starlark"``."""
        return self._info.language

    @property
    def raw(self) -> Dict[str, Any]:
        """The whole ``instantiate`` result: what starting the interpreter
        consumed (fuelConsumed, peakMemoryBytes, elapsedMicros, ...)."""
        return self._info.raw

    @property
    def closed(self) -> bool:
        """:meth:`close` was called (or the block left), or the sidecar is
        gone. A session a fence closed is learnt of at its next evaluation."""
        return self._released or self._conn.dead  # type: ignore[attr-defined]


class Session(_SessionInfo, _SyncInstance):
    """An interpreter in a :class:`~sandboxd.Sidecar` that keeps its state
    (variables, functions) from one evaluation to the next, from
    ``sb.session("js")``::

        with sb.session("js") as s:
            s.eval("let n = 41")
            s.eval("n + 1").value      # 42

    Leaving the block closes it (``release`` in the protocol), also when
    the body raised; without ``with``, call :meth:`close`. Thread safe:
    evaluations sent from several threads run one at a time, in the order
    the sidecar read them. The memory cap given at ``session()`` holds for
    the session's life.
    """

    def __init__(self, conn: "_Connection", info: SessionInfo) -> None:
        _SessionInfo.__init__(self, info)
        _SyncInstance.__init__(self, conn, info.id)

    def __enter__(self) -> "Session":
        return self

    def eval(self, code: str, *, input: Any = None, limits: Optional[Limits] = None, fuel: Optional[int] = None,
             timeout: Optional[float] = None, output_bytes: Optional[int] = None,
             on_output: Optional[OnOutput] = None) -> EvalResult:
        """Evaluate ``code`` in the session and wait for its value.

        ``input`` (any JSON value) is the snippet's global ``input``;
        ``fuel``, ``timeout`` (seconds) and ``output_bytes`` (or
        ``limits=Limits(...)`` with only those and ``log_bytes``) fence this
        evaluation, by default the session's. ``on_output(stream, data)``
        gets what the snippet prints as it prints it, on the thread reading
        the sidecar's output, before this returns.

        Raises :class:`~sandboxd.ScriptError` when the snippet fails in its
        language (the session stays usable), the fence's error
        (``Timeout``, ``FuelExhausted``, ``MemoryLimitExceeded``; the
        session is then closed), :class:`~sandboxd.InstanceClosed` for a
        closed session, InvalidParams for bad arguments. Ctrl-C while
        waiting cancels the evaluation (which closes the session if it was
        running).
        """
        return self.submit(code, input=input, limits=limits, fuel=fuel, timeout=timeout,
                           output_bytes=output_bytes, on_output=on_output).result()

    def submit(self, code: str, *, input: Any = None, limits: Optional[Limits] = None, fuel: Optional[int] = None,
               timeout: Optional[float] = None, output_bytes: Optional[int] = None,
               on_output: Optional[OnOutput] = None) -> "RunHandle":
        """Send an evaluation (same arguments as :meth:`eval`) and return at
        once with a :class:`~sandboxd.RunHandle` whose ``result()`` is the
        EvalResult and whose ``cancel()`` sends ``$/cancelRequest``: a
        queued evaluation is answered Cancelled and the session stays open;
        a running one is stopped and the session closed."""
        from ._client import RunHandle

        params = session_eval_params(self.id, code, input, limits,
                                     {"fuel": fuel, "timeout": timeout, "output_bytes": output_bytes})
        on_output = on_output_callback(on_output)
        conn = self._live_conn()
        call, out = conn.start("eval", params, None, parse_eval_result, on_output)
        return RunHandle(conn, call, out)

    def close(self) -> None:
        """Close the session (``release``): the sidecar frees the
        interpreter, answers its queued evaluations InstanceClosed and
        cancels a running one. Idempotent; a no-op once the sidecar is
        gone."""
        self.release()


class AsyncSession(_SessionInfo, _AsyncInstance):
    """A session in an :class:`~sandboxd.AsyncSidecar`:
    ``async with sb.session("lua") as s: r = await s.eval("return 1")``, or
    ``s = await sb.session("lua")`` and later ``await s.close()``.
    Evaluations may be awaited concurrently (they run one at a time, in
    the order sent); cancelling a task awaiting :meth:`eval` sends
    ``$/cancelRequest`` (a running evaluation is stopped and the session
    closed; a queued one is dropped and the session stays open)."""

    def __init__(self, conn: "_AsyncConnection", info: SessionInfo) -> None:
        _SessionInfo.__init__(self, info)
        _AsyncInstance.__init__(self, conn, info.id)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def eval(self, code: str, *, input: Any = None, limits: Optional[Limits] = None,
                   fuel: Optional[int] = None, timeout: Optional[float] = None, output_bytes: Optional[int] = None,
                   on_output: Optional[OnOutput] = None) -> EvalResult:
        """See :meth:`Session.eval`; ``on_output`` runs on the event loop."""
        params = session_eval_params(self.id, code, input, limits,
                                     {"fuel": fuel, "timeout": timeout, "output_bytes": output_bytes})
        on_output = on_output_callback(on_output)
        conn = self._live_conn()
        result: EvalResult = await conn.call("eval", params, None, parse_eval_result, on_output=on_output)
        return result

    async def close(self) -> None:
        """See :meth:`Session.close`."""
        await self.release()


class Snippets:
    """:class:`~sandboxd.Sidecar`'s methods of snippets."""

    def _connection(self) -> "_Connection":
        raise NotImplementedError  # pragma: no cover (the Sidecar's)

    def eval(self, code: str, *, language: str, input: Any = None, limits: Optional[Limits] = None,
             fuel: Optional[int] = None, timeout: Optional[float] = None, memory_bytes: Optional[int] = None,
             output_bytes: Optional[int] = None, on_output: Optional[OnOutput] = None) -> EvalResult:
        """Evaluate a snippet of ``language`` (``"js"``, ``"lua"`` or
        ``"starlark"``) in a fresh interpreter and return its value
        (docs/snippets.md says what each language's value is)::

            sb.eval("[1, 2, 3].map(x => x * 2)", language="js").value    # [2, 4, 6]

        ``input`` (any JSON value: dict, list, str, number, bool, None) is
        the snippet's global ``input``. ``fuel``, ``timeout`` (seconds),
        ``memory_bytes`` and ``output_bytes`` (or ``limits=Limits(...)``)
        fence it; by default the language's (a memory cap that fits its
        interpreter) and the sidecar's. ``on_output(stream, data)`` gets
        what the snippet prints (``"stdout"`` or ``"stderr"``, bytes) as it
        prints it, on the thread reading the sidecar's output, before this
        returns; the result has it too.

        Returns an :class:`~sandboxd.EvalResult`; raises
        :class:`~sandboxd.ScriptError` for an error in the snippet's own
        language (with its line and column), the fence's error
        (``Timeout``, ``FuelExhausted``, ``MemoryLimitExceeded``),
        InvalidParams for arguments refused before sending or by the
        sidecar, ``HostError`` when the sidecar has no runtime for the
        language. Ctrl-C while waiting cancels the evaluation; to cancel it
        from another thread, use :meth:`submit_eval`.
        """
        return self.submit_eval(code, language=language, input=input, limits=limits, fuel=fuel, timeout=timeout,
                                memory_bytes=memory_bytes, output_bytes=output_bytes, on_output=on_output).result()

    def submit_eval(self, code: str, *, language: str, input: Any = None, limits: Optional[Limits] = None,
                    fuel: Optional[int] = None, timeout: Optional[float] = None, memory_bytes: Optional[int] = None,
                    output_bytes: Optional[int] = None, on_output: Optional[OnOutput] = None) -> "RunHandle":
        """Send an evaluation (same arguments as :meth:`eval`) and return at
        once with a :class:`~sandboxd.RunHandle` whose ``result()`` is the EvalResult
        and whose ``cancel()`` stops it (the result then raises
        Cancelled)."""
        from ._client import RunHandle

        params = eval_params(code, language, input, limits, {
            "fuel": fuel, "timeout": timeout, "memory_bytes": memory_bytes, "output_bytes": output_bytes})
        on_output = on_output_callback(on_output)
        conn = self._connection()
        call, out = conn.start("eval", params, None, parse_eval_result, on_output)
        return RunHandle(conn, call, out)

    def session(self, language: str, *, limits: Optional[Limits] = None, fuel: Optional[int] = None,
                timeout: Optional[float] = None, memory_bytes: Optional[int] = None,
                output_bytes: Optional[int] = None) -> Session:
        """Start an interpreter of ``language`` that keeps its state
        between evaluations: returns a :class:`~sandboxd.Session`, best
        used as a context manager (leaving the block closes it)::

            with sb.session("starlark") as s:
                s.eval("def double(n): return n * 2")
                s.eval("double(input)", input=21).value     # 42

        ``memory_bytes`` (default: the language's) holds for the session's
        life; ``fuel``, ``timeout`` and ``output_bytes`` are each
        evaluation's defaults. A session is an instance: it counts toward
        the sidecar's maximum (:class:`~sandboxd.TooManyInstances`), is
        evicted when idle, and dies with the sidecar. Ctrl-C while waiting
        cancels the start.
        """
        params = session_params(language, limits, {
            "fuel": fuel, "timeout": timeout, "memory_bytes": memory_bytes, "output_bytes": output_bytes})
        conn = self._connection()
        call, out = conn.start("instantiate", params, None, parse_session, on_late=conn.release_late)
        return Session(conn, conn.wait(call, out, None))


class AsyncSnippets:
    """:class:`~sandboxd.AsyncSidecar`'s methods of snippets."""

    async def _connection(self) -> "_AsyncConnection":
        raise NotImplementedError  # pragma: no cover (the AsyncSidecar's)

    async def eval(self, code: str, *, language: str, input: Any = None, limits: Optional[Limits] = None,
                   fuel: Optional[int] = None, timeout: Optional[float] = None, memory_bytes: Optional[int] = None,
                   output_bytes: Optional[int] = None, on_output: Optional[OnOutput] = None) -> EvalResult:
        """See :meth:`sandboxd.Sidecar.eval`; ``on_output`` runs on the event
        loop. Cancelling the awaiting task cancels the evaluation."""
        params = eval_params(code, language, input, limits, {
            "fuel": fuel, "timeout": timeout, "memory_bytes": memory_bytes, "output_bytes": output_bytes})
        on_output = on_output_callback(on_output)
        conn = await self._connection()
        result: EvalResult = await conn.call("eval", params, None, parse_eval_result, on_output=on_output)
        return result

    def session(self, language: str, *, limits: Optional[Limits] = None, fuel: Optional[int] = None,
                timeout: Optional[float] = None, memory_bytes: Optional[int] = None,
                output_bytes: Optional[int] = None) -> Opening:
        """See :meth:`sandboxd.Sidecar.session`: ``async with sb.session("js")
        as s:`` closes it on the way out; ``await sb.session("js")`` gives
        the :class:`~sandboxd.AsyncSession` (checked here, before anything
        is awaited; cancelling the awaiting task cancels the start)."""
        params = session_params(language, limits, {
            "fuel": fuel, "timeout": timeout, "memory_bytes": memory_bytes, "output_bytes": output_bytes})

        async def open() -> AsyncSession:
            conn = await self._connection()
            info = await conn.call("instantiate", params, None, parse_session, on_late=conn.release_late)
            return AsyncSession(conn, info)

        return Opening(open)
