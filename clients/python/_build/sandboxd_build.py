"""The package's own PEP 517 build backend, standard library only.

Why not setuptools: building a wheel with setuptools needs the ``wheel``
package too, and pip installs build requirements from PyPI into an
isolated environment. Where PyPI is out of reach (this project's machines,
many CI sandboxes) ``pip install ./clients/python`` would then fail. This
backend requires nothing, so pip's isolated build environment stays empty
and the install works offline. A wheel is a zip of ``src/sandboxd`` plus
three metadata files (PEP 427, PEP 566), and an editable install is a wheel
holding one ``.pth`` file (PEP 660).

The wheel carries the sandboxd binary, as ruff's and uv's carry theirs: a
copy of the checkout's ``bin/`` directory (the binary and whatever ``make
build`` puts next to it) as ``sandboxd/bin/``, which the client runs before
looking anywhere else. ``make binary`` in the checkout (this package's
``../..``) brings ``bin/sandboxd`` up to date first (a second or so when it
is), so the wheel never carries a stale build; where make or Go is missing
an existing ``bin/sandboxd`` is taken as it is. Because it holds a native
program, the wheel is tagged for this platform (``py3-none-linux_x86_64``),
not ``any``. An editable install carries no binary: the client then finds
the checkout's ``bin/sandboxd`` itself.

Metadata comes from pyproject.toml's ``[project]`` table: read with tomllib
where it exists (3.11+), else with :func:`_read_project_table`, which
understands the simple ``key = "string"`` lines that table is written in.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "sandboxd"
SOURCE = ROOT / "src" / PACKAGE

#: The module path in a sandboxd checkout's go.mod.
GO_MODULE = "github.com/sandboxd/sandboxd"

#: A file of a wheel: its path in the zip, its bytes, its mode.
WheelFile = Tuple[str, bytes, int]

#: Zip entries need a timestamp; a fixed one makes builds reproducible.
_EPOCH = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]


def _read_project_table(text: str) -> Dict[str, str]:
    """The string-valued keys of the ``[project]`` table (pre-3.11 Pythons)."""
    out: Dict[str, str] = {}
    in_project = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            in_project = stripped == "[project]"
            continue
        m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:#.*)?$', stripped)
        if in_project and m:
            out[m.group(1)] = m.group(2).encode("utf-8").decode("unicode_escape")
    return out


def project() -> Dict[str, str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:
        return _read_project_table(text)
    table = tomllib.loads(text)["project"]
    return {k: v for k, v in table.items() if isinstance(v, str)}


def _dist_name(p: Dict[str, str]) -> str:
    return "%s-%s" % (re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"])


def metadata() -> str:
    """The core metadata (METADATA / PKG-INFO), README as the long description."""
    p = project()
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + p["name"],
        "Version: " + p["version"],
        "Summary: " + p.get("description", ""),
    ]
    if "license" in p:
        lines.append("License: " + p["license"])
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + (ROOT / "README.md").read_text(encoding="utf-8")


def _package_files() -> List[WheelFile]:
    files = []
    for path in sorted(SOURCE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append((path.relative_to(SOURCE.parent).as_posix(), path.read_bytes(), 0o644))
    return files


def checkout() -> Optional[Path]:
    """The sandboxd checkout this package is in (``../..``, whose go.mod
    declares the module), or None: an unpacked sdist is in none."""
    root = ROOT.parent.parent
    try:
        for line in (root / "go.mod").read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if fields[:1] == ["module"]:
                return root if fields[1:2] == [GO_MODULE] else None
    except OSError:
        pass
    return None


def bundle_files() -> List[WheelFile]:
    """The checkout's ``bin/`` as ``sandboxd/bin/``, after ``make binary``
    has brought ``bin/sandboxd`` up to date."""
    root = checkout()
    if root is None:
        raise RuntimeError("the sandboxd wheel carries the sandboxd binary, built in a sandboxd checkout: build it "
                           "from the checkout's clients/python (pip install <checkout>/clients/python), not from "
                           "an sdist")
    binary = root / "bin" / "sandboxd"
    if shutil.which("make") and shutil.which(os.environ.get("GO", "go")):
        proc = subprocess.run(["make", "-C", str(root), "binary"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise RuntimeError("`make binary` in %s failed (it needs Go and gcc):\n%s"
                               % (root, proc.stdout.decode("utf-8", "replace")[-4000:]))
    elif not os.access(str(binary), os.X_OK):
        raise RuntimeError("%s is missing and there is no make and Go to build it with" % binary)
    else:
        print("sandboxd_build: no make or Go here: the wheel carries %s as it is" % binary, file=sys.stderr)
    files = []
    for path in sorted((root / "bin").rglob("*")):
        if path.is_file():
            mode = 0o755 if os.access(str(path), os.X_OK) else 0o644
            files.append(("%s/bin/%s" % (PACKAGE, path.relative_to(root / "bin").as_posix()), path.read_bytes(), mode))
    return files


def platform_tag() -> str:
    """This platform's wheel tag (PEP 425): linux_x86_64, macosx_14_0_arm64."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def _write_wheel(directory: str, files: List[WheelFile], tag: str) -> str:
    p = project()
    dist = _dist_name(p)
    info = dist + ".dist-info"
    wheel = "Wheel-Version: 1.0\nGenerator: sandboxd_build\nRoot-Is-Purelib: %s\nTag: %s\n" % (
        "true" if tag.endswith("-any") else "false", tag)
    files = files + [
        (info + "/METADATA", metadata().encode("utf-8"), 0o644),
        (info + "/WHEEL", wheel.encode("ascii"), 0o644),
    ]
    record = io.StringIO()
    for name, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.write("%s,sha256=%s,%d\n" % (name, digest, len(data)))
    record.write(info + "/RECORD,,\n")
    files.append((info + "/RECORD", record.getvalue().encode("utf-8"), 0o644))
    filename = "%s-%s.whl" % (dist, tag)
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in files:
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.external_attr = (stat.S_IFREG | mode) << 16  # pip keeps the executable bits of regular files
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    return filename


# -- PEP 517 hooks


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, _package_files() + bundle_files(), "py3-none-" + platform_tag())


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose only module is a .pth putting src/ on sys.path."""
    pth = (str(SOURCE.parent) + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, [("_%s_editable.pth" % PACKAGE, pth, 0o644)], "py3-none-any")


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    dist = _dist_name(project())
    filename = dist + ".tar.gz"
    members = [("PKG-INFO", metadata().encode("utf-8"))]
    for rel in ("pyproject.toml", "README.md", "_build/sandboxd_build.py"):
        members.append((rel, (ROOT / rel).read_bytes()))
    members += [("src/" + name, data) for name, data, _ in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            entry = tarfile.TarInfo("%s/%s" % (dist, name))
            entry.size = len(data)
            entry.mode = 0o644
            entry.mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
            tf.addfile(entry, io.BytesIO(data))
    return filename
