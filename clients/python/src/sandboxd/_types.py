"""Plain data types of the public API: RunOptions, Limits, Capabilities,
Wasi, Dir, RunResult, CallResult, EvalResult, LogLine, Module."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from .errors import InvalidParams

__all__ = ["RunOptions", "Limits", "Capabilities", "Wasi", "Dir", "RunResult", "CallResult", "EvalResult", "LogLine",
           "Module"]


class LogLine(str):
    """A guest's log line: a ``str`` (it compares equal to its text) with the
    line's ``level``: ``"trace"``, ``"debug"``, ``"info"``, ``"warn"`` or
    ``"error"`` for an Extism plugin's ``log_*`` lines, None for
    ``host::log`` lines, which have no level."""

    __slots__ = ("level",)
    level: Optional[str]

    def __new__(cls, text: str, level: Optional[str] = None) -> "LogLine":
        line = super().__new__(cls, text)
        line.level = level
        return line

    def __repr__(self) -> str:
        if self.level is None:
            return "LogLine(%s)" % str.__repr__(self)
        return "LogLine(%s, %r)" % (str.__repr__(self), self.level)

    def __reduce__(self) -> Any:
        return (LogLine, (str(self), self.level))


#: ``on_log(line)``: ``line`` is a :class:`LogLine` (a str with ``.level``).
OnLog = Callable[[str], Any]
#: ``on_output(stream, data)``: ``stream`` is ``"stdout"`` or ``"stderr"``.
OnOutput = Callable[[str, bytes], Any]
#: A WASI input: bytes as they are, a str as its UTF-8 bytes.
BytesInput = Union[bytes, bytearray, memoryview, str]


@dataclass(frozen=True)
class Limits:
    """The fences of one run; ``None`` fields take the sidecar's defaults.

    ``timeout`` and ``compile_timeout`` are in seconds (sent as
    ``timeoutMs`` and ``compileTimeoutMs``); the rest are the protocol's
    integers. ``output_bytes`` caps a WASI guest's stdout and stderr (each)
    and a plugin function's output; ``var_bytes`` a plugin instance's vars
    (keys and values; instantiate only). ``compile_timeout`` and ``compile_memory_bytes`` fence
    compiling a module the sidecar has not compiled before; they are the
    only fields ``compile()`` accepts. Keyword arguments given to ``run()``
    override the fields of a ``limits=`` object, so a shared Limits can be
    a baseline. The sidecar validates the values (and names the field it
    refuses).
    """

    fuel: Optional[int] = None
    timeout: Optional[float] = None
    memory_bytes: Optional[int] = None
    table_elements: Optional[int] = None
    instances: Optional[int] = None
    memories: Optional[int] = None
    log_bytes: Optional[int] = None
    compile_timeout: Optional[float] = None
    compile_memory_bytes: Optional[int] = None
    output_bytes: Optional[int] = None  # a WASI guest's stdout and stderr, each; a plugin's output
    var_bytes: Optional[int] = None  # a plugin's vars, keys and values (instantiate only)


@dataclass(frozen=True)
class Dir:
    """A host directory preopened for a WASI guest at ``guest`` (default:
    ``host`` as written), read-only unless ``writable``. The sidecar must
    have been started allowing it: ``Sidecar(args=["--allow-dir", PATH])``
    for ``host`` at or under PATH. A relative ``host`` is made absolute
    against this process's current directory."""

    host: Any
    guest: Optional[str] = None
    writable: bool = False


@dataclass(frozen=True)
class Wasi:
    """The WASI preview1 grant (``capabilities.wasi``); every field is
    optional and the guest sees exactly what is given.

    ``args`` are argv after argv[0]; ``env`` is the whole environment
    (nothing is inherited); ``stdin`` is what fd 0 reads, then end of file;
    ``files`` maps absolute guest paths to read-only file contents; ``dirs``
    are :class:`Dir` (or dicts with the same keys). Bytes travel as they
    are, a str as its UTF-8 bytes.
    """

    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: Optional[BytesInput] = None
    files: Mapping[str, BytesInput] = field(default_factory=dict)
    dirs: Sequence[Union[Dir, Mapping[str, Any]]] = ()


@dataclass(frozen=True)
class Capabilities:
    """The host functions granted to one run; nothing is granted by default.

    ``log`` grants ``host::log`` (needed for ``on_log``), ``random_seed=N``
    a ``host::random`` seeded with N (and WASI's ``random_get``), ``clock``
    grants ``host::now_ns``. ``wasi`` grants WASI preview1: a :class:`Wasi`,
    a dict with its fields, or True (the empty grant).
    """

    log: bool = False
    random_seed: Optional[int] = None
    clock: bool = False
    wasi: Union[Wasi, Mapping[str, Any], bool, None] = None


_LIMIT_KEYWORDS = frozenset(f.name for f in dataclasses.fields(Limits))
_CAPABILITY_KEYWORDS = frozenset(f.name for f in dataclasses.fields(Capabilities))


@dataclass(frozen=True)
class RunOptions:
    """Everything one ``run`` call says, as one value to build once and reuse.

    Give exactly one module source: ``wat`` (text), ``wasm`` (bytes),
    ``path`` (a file the sidecar reads) or ``module`` (a :class:`Module`
    from ``compile()``, or its id). ``limits`` and ``capabilities`` default
    to the sidecar's limits and to nothing granted. ``on_log(line)`` is
    called for each guest log line, in order, before ``run`` returns, and
    ``on_output(stream, data)`` for each piece of a WASI guest's stdout or
    stderr (bytes), in the order written, before ``run`` returns.
    ``function`` defaults to ``"run"``, or for a WASI run (``wasi=``) to
    the sidecar's default, ``_start``. For an Extism plugin (a module that
    imports ``extism:host/env``), ``input`` is what its plugin function
    reads (bytes, or a str as its UTF-8) and ``config`` what ``config_get``
    reads (str to str); the run instantiates, calls and releases in one
    request and the result's ``output`` is what the function set.
    ``host_functions`` (:class:`~sandboxd.HostFunction`) are declared to
    the guest and serve its calls of them, over the sidecar's of the same
    name.

    ``Sidecar.run`` takes a RunOptions, keywords, or both: keywords are
    :meth:`with_options` applied to the options.
    """

    wat: Optional[str] = None
    wasm: Optional[bytes] = None
    path: Any = None
    module: Any = None
    function: Optional[str] = None
    args: Sequence[Any] = ()
    limits: Limits = field(default_factory=Limits)
    capabilities: Capabilities = field(default_factory=Capabilities)
    on_log: Optional[OnLog] = None
    on_output: Optional[OnOutput] = None
    input: Optional[BytesInput] = None
    config: Optional[Mapping[str, str]] = None
    host_functions: Sequence[Any] = ()  # sandboxd.HostFunction

    def with_options(self, **keywords: Any) -> "RunOptions":
        """A copy with ``keywords`` applied: any field of RunOptions, and as
        shortcuts any field of :class:`Limits` (``fuel=``, ``timeout=``, ...)
        or of :class:`Capabilities` (``log=``, ``random_seed=``, ``clock=``, ``wasi=``),
        which override the matching field of ``limits``/``capabilities``.
        A ``None`` shortcut leaves the field as it is."""
        return self._apply(keywords, "run()")

    def _apply(self, keywords: Mapping[str, Any], caller: str, fresh: bool = False) -> "RunOptions":
        own: Dict[str, Any] = {}
        limits: Dict[str, Any] = {}
        caps: Dict[str, Any] = {}
        for k, v in keywords.items():
            if k in _OPTION_KEYWORDS:
                own[k] = v
            elif k in _LIMIT_KEYWORDS:
                if v is not None:
                    limits[k] = v
            elif k in _CAPABILITY_KEYWORDS:
                if v is not None:
                    caps[k] = v
            else:
                unknown = sorted(k for k in keywords if k not in _OPTION_KEYWORDS and k not in _LIMIT_KEYWORDS
                                 and k not in _CAPABILITY_KEYWORDS)
                raise InvalidParams("%s got unexpected keyword argument(s): %s" % (caller, ", ".join(unknown)))
        # a fresh RunOptions is built directly: replace() costs a pass over every field
        out = RunOptions(**own) if fresh else dataclasses.replace(self, **own)
        if limits:
            out = dataclasses.replace(out, limits=_replace(out.limits, Limits, "limits", limits))
        if caps:
            out = dataclasses.replace(out, capabilities=_replace(out.capabilities, Capabilities, "capabilities", caps))
        return out

    @classmethod
    def build(cls, options: Optional["RunOptions"], keywords: Mapping[str, Any],
              caller: str = "run()") -> "RunOptions":
        """``options`` (default: empty) with ``keywords`` applied; errors
        name ``caller``."""
        if options is None:
            return _EMPTY_OPTIONS._apply(keywords, caller, fresh=True) if keywords else cls()
        if not isinstance(options, cls):
            raise InvalidParams("%s takes a sandboxd.RunOptions as its positional argument, got %s"
                                % (caller, type(options).__name__))
        return options._apply(keywords, caller) if keywords else options


_OPTION_KEYWORDS = frozenset(f.name for f in dataclasses.fields(RunOptions))
_EMPTY_OPTIONS = RunOptions()


def _replace(value: Any, kind: type, name: str, changes: Mapping[str, Any]) -> Any:
    if value is None:
        value = kind()
    elif not isinstance(value, kind):
        raise InvalidParams("%s= needs a sandboxd.%s, got %s" % (name, kind.__name__, type(value).__name__))
    return dataclasses.replace(value, **changes)


@dataclass
class RunResult:
    """The outcome of a successful run.

    ``values`` are Python ints (i32/i64) and floats (f32/f64, decoded from
    their bits, so -0.0, infinities and NaN payloads are exact);
    ``raw_values`` are the wire objects they came from. ``logs`` are the
    guest's ``host::log`` lines in order. ``elapsed`` and ``queued`` are in
    seconds (``elapsedMicros``/``queuedMicros``). A WASI run adds
    ``exit_code`` (its ``proc_exit`` status, 0 when ``_start`` returned;
    None for other runs), ``stdout`` and ``stderr`` (bytes, each at most
    ``limits.outputBytes``) and ``output_truncated``. A plugin function's
    run or call has ``output``: the bytes it set (None for a function that
    is not a plugin function), ``output_truncated`` when they were cut at
    ``output_bytes``. ``logs`` are :class:`LogLine` strings, whose
    ``level`` a plugin's ``log_*`` lines carry; ``log_dropped`` counts a
    plugin's lines dropped for want of the ``log`` capability. ``raw`` is
    the whole result object, for fields this client does not model.
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
    log_dropped: int = 0
    exit_code: Optional[int] = None
    stdout: bytes = b""
    stderr: bytes = b""
    output_truncated: bool = False
    output: Optional[bytes] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class CallResult(RunResult):
    """The outcome of a successful call on an instance (``Plugin.call``):
    the fields of :class:`RunResult` (``output``, ``values``,
    ``fuel_consumed``, ``peak_memory_bytes``, ``elapsed``, ``queued`` --
    the time spent behind the instance's earlier calls and waiting for a
    worker -- ``logs``, ...; ``module_id`` is the instance's module) and
    ``instance``, the instance id."""

    instance: str = ""


@dataclass
class EvalResult:
    """The outcome of a snippet that ended with a value (``eval``, in a
    fresh interpreter or in a :class:`~sandboxd.Session`; docs/snippets.md).

    ``value`` is the snippet's value, decoded from its JSON (``None`` for
    JSON null: a snippet without a value, a function, NaN). ``stdout`` and
    ``stderr`` are what it printed (bytes, each at most ``output_bytes``;
    ``output_truncated`` when some was dropped), also streamed to
    ``on_output`` as it printed it. ``fuel_consumed``,
    ``peak_memory_bytes``, ``elapsed`` and ``queued`` (seconds; in a
    session the time behind its earlier evaluations) are the evaluation's
    alone, never the interpreter's start. ``raw`` is the whole result
    object.
    """

    value: Any
    language: str
    fuel_consumed: int
    peak_memory_bytes: int
    elapsed: float
    queued: float
    stdout: bytes = b""
    stderr: bytes = b""
    output_truncated: bool = False
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
