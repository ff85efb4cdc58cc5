"""The package's own PEP 517 build backend, standard library only.

Why not setuptools: building a wheel with setuptools needs the ``wheel``
package too, and pip installs build requirements from PyPI into an
isolated environment. Where PyPI is out of reach (this project's machines,
many CI sandboxes) ``pip install ./clients/python`` would then fail. This
backend requires nothing, so pip's isolated build environment stays empty
and the install works offline. The package is pure Python: a wheel is a zip
of ``src/sandboxd`` plus three metadata files (PEP 427, PEP 566), and an
editable install is a wheel holding one ``.pth`` file (PEP 660).

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
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "sandboxd"
SOURCE = ROOT / "src" / PACKAGE

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
    if "requires-python" in p:
        lines.append("Requires-Python: " + p["requires-python"])
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + (ROOT / "README.md").read_text(encoding="utf-8")


def _package_files() -> List[Tuple[str, bytes]]:
    files = []
    for path in sorted(SOURCE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append((path.relative_to(SOURCE.parent).as_posix(), path.read_bytes()))
    return files


def _write_wheel(directory: str, files: List[Tuple[str, bytes]]) -> str:
    p = project()
    dist = _dist_name(p)
    info = dist + ".dist-info"
    files = files + [
        (info + "/METADATA", metadata().encode("utf-8")),
        (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: sandboxd_build\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = io.StringIO()
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.write("%s,sha256=%s,%d\n" % (name, digest, len(data)))
    record.write(info + "/RECORD,,\n")
    files.append((info + "/RECORD", record.getvalue().encode("utf-8")))
    filename = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.external_attr = 0o644 << 16
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
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose only module is a .pth putting src/ on sys.path."""
    pth = (str(SOURCE.parent) + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, [("_%s_editable.pth" % PACKAGE, pth)])


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    dist = _dist_name(project())
    filename = dist + ".tar.gz"
    members = [("PKG-INFO", metadata().encode("utf-8"))]
    for rel in ("pyproject.toml", "README.md", "_build/sandboxd_build.py"):
        members.append((rel, (ROOT / rel).read_bytes()))
    members += [("src/" + name, data) for name, data in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            entry = tarfile.TarInfo("%s/%s" % (dist, name))
            entry.size = len(data)
            entry.mode = 0o644
            entry.mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
            tf.addfile(entry, io.BytesIO(data))
    return filename
