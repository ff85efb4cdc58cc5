"""Shared paths and helpers for the test suite.

Integration tests need the real sidecar. It is found through $SANDBOXD_BIN
(the Makefile exports it) or at bin/sandboxd in the repository. If it is
missing the integration tests FAIL, so a broken build cannot pass as an
all-skipped run; set SANDBOXD_SKIP_INTEGRATION=1 to skip them on purpose.
"""

import atexit
import os
import shutil
import stat
import sys
import tempfile
import time
import unittest
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLIENT = TESTS.parent
REPO = TESTS.parents[2]
WAT = REPO / "testdata" / "wat"
WIRE = REPO / "testdata" / "wire"


def wat(name: str) -> str:
    """The text of a guest fixture in testdata/wat."""
    return (WAT / name).read_text()


def sandboxd_bin() -> str:
    return os.environ.get("SANDBOXD_BIN") or str(REPO / "bin" / "sandboxd")


class IntegrationTest(unittest.TestCase):
    """Base for tests against the real binary (see the module docstring)."""

    BIN = ""

    @classmethod
    def setUpClass(cls) -> None:
        path = sandboxd_bin()
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            if os.environ.get("SANDBOXD_SKIP_INTEGRATION") == "1":
                raise unittest.SkipTest("SANDBOXD_SKIP_INTEGRATION=1 and no binary at %s" % path)
            raise AssertionError(
                "sandboxd binary not found at %s: run `make build` in %s (or set SANDBOXD_BIN); "
                "set SANDBOXD_SKIP_INTEGRATION=1 to skip the integration tests on purpose" % (path, REPO))
        cls.BIN = path


class SharedSidecarTest(IntegrationTest):
    """One real sidecar for all of a class's tests, started with
    ``sidecar_options()`` and closed after them."""

    sb = None

    @classmethod
    def sidecar_options(cls) -> dict:
        return {}

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        import sandboxd

        cls.sb = sandboxd.Sidecar(binary=cls.BIN, **cls.sidecar_options())

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.sb is not None:
            cls.sb.close()
        super().tearDownClass()


def wait_running(sb, bound: float = 120) -> None:
    """Wait until a run, call or evaluation is executing in the sidecar
    ``sb`` (``stats().inFlight``); ``bound`` seconds is a hang bound, never
    a timing assertion."""
    deadline = time.monotonic() + bound
    while sb.stats()["inFlight"] < 1:
        if time.monotonic() > deadline:
            raise AssertionError("nothing started executing in %s s" % bound)
        time.sleep(0.01)


_fake_dir = None


def fake_sidecar_bin() -> str:
    """An executable that runs tests/fake_sidecar.py with this interpreter.

    The client runs `<binary> serve ...`; a tiny shell wrapper gives the
    fake that shape without depending on file modes in the checkout.
    """
    global _fake_dir
    if _fake_dir is None:
        _fake_dir = tempfile.mkdtemp(prefix="sandboxd-fake-")
        atexit.register(shutil.rmtree, _fake_dir, True)
    path = os.path.join(_fake_dir, "fake-sandboxd")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, TESTS / "fake_sidecar.py"))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
