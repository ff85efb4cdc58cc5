"""The package installs with pip, and README.md's Python snippet works as
printed: it is extracted from README.md (so the README cannot drift), run
with the package installed by pip against the real binary, found the way a
user's would be, and what it prints is compared with the README's output
block."""

import os
import re
import subprocess
import sys
import tempfile
import unittest
import zipfile

from _support import CLIENT, REPO, IntegrationTest


def readme_block(marker: str) -> str:
    """The fenced block that follows ``<!-- marker ...-->`` in README.md."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- %s\b[^>]*-->\s*```[a-z]*\n(.*?)```" % re.escape(marker), text, re.S)
    if m is None:
        raise AssertionError("README.md has no fenced block after <!-- %s -->" % marker)
    return m.group(1)


def pip_install(target: str, *extra: str) -> None:
    """``pip install ./clients/python`` into ``target``, offline (--no-index):
    the build backend needs nothing but the standard library."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--no-index",
                    "--disable-pip-version-check", "--target", target, *extra, str(CLIENT)],
                   check=True, timeout=120, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def user_env(pythonpath: str) -> dict:
    """This environment as a user's would be: the package only where pip put
    it, no $SANDBOXD_BIN, and no sandboxd on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOXD_BIN", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not os.path.exists(os.path.join(d, "sandboxd")))
    env["PYTHONPATH"] = pythonpath
    return env


class PackagingTest(unittest.TestCase):
    def test_pip_install_offline(self):
        with tempfile.TemporaryDirectory(prefix="sandboxd-pip-") as target:
            pip_install(target)
            out = subprocess.run(
                [sys.executable, "-c", "import sandboxd, sys; print(sandboxd.__file__); print(sandboxd.__version__)"],
                env=user_env(target), cwd=target, check=True, timeout=60, stdout=subprocess.PIPE, text=True).stdout
            path, version = out.split()
            self.assertTrue(path.startswith(target), path)
            self.assertEqual(version, "0.1.0")
            self.assertTrue(os.path.exists(os.path.join(target, "sandboxd", "py.typed")))
            with open(os.path.join(target, "sandboxd-0.1.0.dist-info", "METADATA")) as f:
                meta = f.read()
            self.assertIn("Name: sandboxd\n", meta)
            self.assertIn("Requires-Python: >=3.9\n", meta)

    def test_backend_hooks(self):
        sys.path.insert(0, str(CLIENT / "_build"))
        self.addCleanup(sys.path.remove, str(CLIENT / "_build"))
        import sandboxd_build as backend

        # the pre-3.11 reader agrees with tomllib on the [project] table
        text = (CLIENT / "pyproject.toml").read_text()
        fallback = backend._read_project_table(text)
        try:
            import tomllib
        except ImportError:
            pass
        else:
            table = tomllib.loads(text)["project"]
            self.assertEqual(fallback, {k: v for k, v in table.items() if isinstance(v, str)})
        self.assertEqual(fallback["name"], "sandboxd")
        with tempfile.TemporaryDirectory() as d:
            wheel = backend.build_wheel(d)
            with zipfile.ZipFile(os.path.join(d, wheel)) as zf:
                names = zf.namelist()
                self.assertIn("sandboxd/__init__.py", names)
                self.assertFalse([n for n in names if "__pycache__" in n], names)
                record = zf.read("sandboxd-0.1.0.dist-info/RECORD").decode()
                self.assertEqual(len(record.splitlines()), len(names))
            editable = backend.build_editable(d)
            with zipfile.ZipFile(os.path.join(d, editable)) as zf:
                self.assertEqual(zf.read("_sandboxd_editable.pth").decode().strip(), str(CLIENT / "src"))
            sdist = backend.build_sdist(d)
            self.assertTrue(sdist.endswith(".tar.gz"))


class ReadmeSnippetTest(IntegrationTest):
    def test_python_snippet_runs_as_printed(self):
        self.check_snippet("python")

    def test_wasi_python_snippet_runs_as_printed(self):
        self.check_snippet("wasi-python")

    def test_plugin_python_snippet_runs_as_printed(self):
        self.check_snippet("plugin-python")

    def check_snippet(self, name):
        snippet = readme_block("snippet: " + name)
        expected = readme_block("output: " + name)
        if not os.access(REPO / "bin" / "sandboxd", os.X_OK):
            raise AssertionError("the README snippet finds bin/sandboxd of the checkout: run `make build` in %s"
                                 % REPO)
        with tempfile.TemporaryDirectory(prefix="sandboxd-readme-") as target:
            pip_install(target)
            script = os.path.join(target, "example.py")
            with open(script, "w") as f:
                f.write(snippet)
            # run from the checkout, as the README says
            proc = subprocess.run([sys.executable, script], env=user_env(target), cwd=str(REPO),
                                  timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, expected)


if __name__ == "__main__":
    unittest.main()
