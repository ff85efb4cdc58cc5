"""Finding, starting arguments and post-mortems of the sidecar process.

Shared by the threaded and the asyncio client: which binary to run, with
which argv and environment, how to describe its exit, and how to keep the
tail of its stderr for error reports.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from typing import Dict, List, Mapping, Optional, Sequence

from .errors import InvalidParams, SidecarError

BUILD_HINT = ("build it with `make build` in the sandboxd repository (needs Go and gcc), "
              "then pass binary=..., set SANDBOXD_BIN, or put it on PATH (`make install`); "
              "`pip install <checkout>/clients/python` installs a package that carries it")

#: Where a wheel keeps the files it carries: the sandboxd binary and what
#: `make build` puts next to it (a copy of the checkout's bin/).
BUNDLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")

#: How much of the sidecar's stderr is kept for error reports.
STDERR_TAIL_BYTES = 4096

#: The module path in a sandboxd checkout's go.mod.
GO_MODULE = "github.com/sandboxd/sandboxd"


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_checkout(start: str) -> Optional[str]:
    """The sandboxd repository holding ``start``: the nearest directory at or
    above it whose go.mod declares module github.com/sandboxd/sandboxd."""
    here = os.path.abspath(start)
    while True:
        try:
            with open(os.path.join(here, "go.mod"), encoding="utf-8") as f:
                for line in f:
                    fields = line.split()
                    if fields[:1] == ["module"]:
                        if fields[1:2] == [GO_MODULE]:
                            return here
                        break
        except OSError:
            pass
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def checkout_roots() -> List[str]:
    """Where to look for a checkout's bin/sandboxd: above this package's own
    files (a client used from the repository or installed editable), then
    above the current directory (a script run inside the repository)."""
    return [os.path.dirname(os.path.abspath(__file__)), os.getcwd()]


def bundled_binary() -> Optional[str]:
    """The binary this package carries (an installed wheel has it; a
    package used from its source tree does not)."""
    path = os.path.join(BUNDLE_DIR, "sandboxd")
    return path if _executable(path) else None


def find_binary(binary: Optional[str]) -> str:
    """Resolve the sidecar executable: ``binary``, else $SANDBOXD_BIN, else
    the binary this package carries, else ``sandboxd`` on PATH, else
    ``bin/sandboxd`` of the sandboxd checkout this package or the current
    directory is in (see :func:`find_checkout`). A configured path that
    does not exist is an error (not a silent fall-through, which would run
    some other build)."""
    if binary is not None:
        candidate, source = os.fspath(binary), "binary=%r" % (binary,)
    elif os.environ.get("SANDBOXD_BIN"):
        candidate = os.environ["SANDBOXD_BIN"]
        source = "$SANDBOXD_BIN=%r" % candidate
    else:
        return _find_default()
    if os.sep in candidate or (os.altsep and os.altsep in candidate):
        path: Optional[str] = candidate if _executable(candidate) else None
    else:
        path = shutil.which(candidate)
    if path is None:
        raise SidecarError("the sandboxd binary was not found (%s is not an executable file); %s"
                           % (source, BUILD_HINT))
    return path


def _find_default() -> str:
    found = bundled_binary() or shutil.which("sandboxd")
    if found is not None:
        return found
    return checkout_binary()


def checkout_binary() -> str:
    """``bin/sandboxd`` of the checkout this package or the current
    directory is in; a SidecarError naming where it looked if there is
    none."""
    roots = checkout_roots()
    checkouts: List[str] = []
    for start in roots:
        root = find_checkout(start)
        if root is None or root in checkouts:
            continue
        checkouts.append(root)
        path = os.path.join(root, "bin", "sandboxd")
        if _executable(path):
            return path
    if checkouts:
        where = "the sandboxd checkout at %s has no bin/sandboxd" % " or ".join(checkouts)
    else:
        where = ("neither this package nor the current directory is inside a sandboxd checkout "
                 "(looked above %s)" % " and ".join(roots))
    raise SidecarError("the sandboxd binary was not found: $SANDBOXD_BIN is not set, this package carries "
                       "none, there is no sandboxd on PATH, and %s; %s" % (where, BUILD_HINT))


def sidecar_argv(binary: str, args: Sequence[str], max_concurrency: Optional[int]) -> List[str]:
    argv = [binary, "serve"]
    if max_concurrency is not None:
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise InvalidParams("max_concurrency must be a positive int, got %r" % (max_concurrency,))
        argv += ["--max-concurrency", str(max_concurrency)]
    if isinstance(args, (str, bytes)):
        raise InvalidParams("args must be a sequence of strings, not a single string")
    argv += [os.fspath(a) for a in args]
    return argv


def sidecar_env(env: Optional[Mapping[str, str]]) -> Optional[Dict[str, str]]:
    """``env`` adds to (and overrides) the parent's environment."""
    if env is None:
        return None
    merged = dict(os.environ)
    merged.update(env)
    return merged


def describe_exit(returncode: Optional[int]) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal %d" % -returncode
        return "was killed by %s" % name
    return "exited with status %d" % returncode


class StderrTail:
    """The last few KiB of the sidecar's stderr, appended to by a drainer.

    Draining continuously matters: a child whose stderr pipe fills up blocks
    on its next log write, and would then stop answering us.
    """

    def __init__(self, limit: int = STDERR_TAIL_BYTES) -> None:
        self._limit = limit
        self._buf = bytearray()
        self._lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self._buf += chunk
            if len(self._buf) > self._limit:
                del self._buf[: len(self._buf) - self._limit]

    def text(self) -> str:
        with self._lock:
            return self._buf.decode("utf-8", errors="replace")


def sidecar_failure(what: str, tail: str) -> SidecarError:
    """A SidecarError whose message ends with the interesting part of stderr."""
    message = what
    shown = tail.strip()
    if shown:  # all of it: the first line of a usage or panic report matters
        message += "\n--- sidecar stderr (tail) ---\n" + shown
    return SidecarError(message, stderr_tail=tail)


def not_running(client: str, returncode: Optional[int], tail: str) -> SidecarError:
    """The error for a call to a ``client`` (class name) whose sidecar died
    while ``restart`` is off."""
    return sidecar_failure(
        "sidecar is not running (it %s); create a new %s, or pass restart=True "
        "to start a fresh one automatically" % (describe_exit(returncode), client), tail)
