"""The package installs with pip and carries the binary, and README.md's
Python snippets work as printed: each is extracted from README.md (so the
README cannot drift), run with the package installed by pip, outside the
checkout where the README says nothing else, with the binary the package
carries (no $SANDBOXD_BIN, no sandboxd on PATH), and what it prints is
compared with the README's output block."""

import os
import re
import stat
import subprocess
import sys
import sysconfig
import tempfile
import unittest
import zipfile

from _support import CLIENT, REPO, IntegrationTest

VERSION_LINE = re.compile(r"^sandboxd 0\.1\.0 \(wasmtime-go v[0-9.]+\)\n$")


def readme_block(marker: str) -> str:
    """The fenced block that follows ``<!-- marker ...-->`` in README.md."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- %s\b[^>]*-->\s*```[a-z]*\n(.*?)```" % re.escape(marker), text, re.S)
    if m is None:
        raise AssertionError("README.md has no fenced block after <!-- %s -->" % marker)
    return m.group(1)


def pip(python: str, *args: str) -> str:
    """``python -m pip ARGS``, offline (--no-index: the build backend needs
    nothing but the standard library); returns what pip printed, and fails
    on a non-zero exit."""
    proc = subprocess.run([python, "-m", "pip", *args, "--no-input", "--no-index", "--disable-pip-version-check"],
                          timeout=600, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise AssertionError("pip %s failed:\n%s" % (" ".join(args), proc.stdout))
    return proc.stdout


_wheel_dir = None


def wheel() -> str:
    """``pip wheel ./clients/python``, built once for these tests."""
    global _wheel_dir
    if _wheel_dir is None:
        _wheel_dir = tempfile.TemporaryDirectory(prefix="sandboxd-wheel-")
        pip(sys.executable, "wheel", "--no-deps", "--wheel-dir", _wheel_dir.name, str(CLIENT))
    (name,) = os.listdir(_wheel_dir.name)
    return os.path.join(_wheel_dir.name, name)


def tearDownModule() -> None:
    if _wheel_dir is not None:
        _wheel_dir.cleanup()


def user_env(pythonpath: str = "") -> dict:
    """This environment as a user's would be: the package only where pip put
    it, no $SANDBOXD_BIN, and no sandboxd on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOXD_BIN", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not os.path.exists(os.path.join(d, "sandboxd")))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


class PackagingTest(unittest.TestCase):
    def test_wheel_carries_the_binary_for_this_platform(self):
        path = wheel()
        platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
        self.assertEqual(os.path.basename(path), "sandboxd-0.1.0-py3-none-%s.whl" % platform)
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            self.assertIn("sandboxd/__init__.py", names)
            self.assertIn("sandboxd/__main__.py", names)
            self.assertIn("sandboxd/py.typed", names)
            self.assertFalse([n for n in names if "__pycache__" in n], names)
            binary = zf.getinfo("sandboxd/bin/sandboxd")
            mode = binary.external_attr >> 16
            self.assertTrue(stat.S_ISREG(mode) and mode & 0o111, oct(mode))  # what pip needs to keep it executable
            self.assertEqual(binary.file_size, os.path.getsize(REPO / "bin" / "sandboxd"))
            wheel_meta = zf.read("sandboxd-0.1.0.dist-info/WHEEL").decode()
            self.assertIn("Root-Is-Purelib: false\n", wheel_meta)
            self.assertIn("Tag: py3-none-%s\n" % platform, wheel_meta)
            meta = zf.read("sandboxd-0.1.0.dist-info/METADATA").decode()
            self.assertIn("Name: sandboxd\n", meta)
            self.assertIn("Requires-Python: >=3.9\n", meta)
            record = zf.read("sandboxd-0.1.0.dist-info/RECORD").decode()
            self.assertEqual(len(record.splitlines()), len(names))

    def test_readme_install_line_in_a_fresh_venv(self):
        # README: `pip install ./clients/python`, into a new venv, offline;
        # then a script in the user's own folder and `python -m sandboxd`.
        with tempfile.TemporaryDirectory(prefix="sandboxd-venv-") as home:
            venv = os.path.join(home, "venv")
            python = os.path.join(venv, "bin", "python")
            try:
                import ensurepip  # noqa: F401 (Debian ships it apart, in python3-venv)
            except ImportError:  # a venv without pip, filled by this pip
                subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=300)
                out = pip(sys.executable, "--python", python, "install", str(CLIENT))
            else:
                subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
                out = pip(python, "install", str(CLIENT))
            self.assertNotIn("warning", out.lower(), out)
            work = os.path.join(home, "project")
            os.mkdir(work)
            with open(os.path.join(work, "example.py"), "w") as f:
                f.write(readme_block("snippet: python")
                        + "\nimport sandboxd._process\nprint(sandboxd._process.find_binary(None))\n")
            proc = subprocess.run([python, "example.py"], env=user_env(), cwd=work, timeout=120,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            printed, used = proc.stdout.rsplit("\n", 2)[:2]
            self.assertEqual(printed + "\n", readme_block("output: python"))
            self.assertTrue(used.startswith(venv) and used.endswith("/sandboxd/bin/sandboxd"), used)
            version = subprocess.run([python, "-m", "sandboxd", "version"], env=user_env(), cwd=work, timeout=60,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual((version.returncode, version.stderr), (0, ""))
            self.assertRegex(version.stdout, VERSION_LINE)

    def test_python_m_sandboxd_passes_the_exit_status(self):
        with tempfile.TemporaryDirectory(prefix="sandboxd-pip-") as target:
            pip(sys.executable, "install", "--target", target, wheel())
            proc = subprocess.run([sys.executable, "-m", "sandboxd", "run", str(REPO / "testdata/wat/infinite_loop.wat"),
                                   "--fuel", "1000"], env=user_env(target), cwd=target, timeout=120,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(proc.returncode, 2, proc.stderr)  # fuel_exhausted
            self.assertIn("fuel_exhausted", proc.stderr)

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
        self.assertEqual(backend.checkout(), REPO)
        with tempfile.TemporaryDirectory() as d:
            editable = backend.build_editable(d)
            self.assertTrue(editable.endswith("-py3-none-any.whl"), editable)  # no binary: the checkout's is used
            with zipfile.ZipFile(os.path.join(d, editable)) as zf:
                self.assertEqual(zf.read("_sandboxd_editable.pth").decode().strip(), str(CLIENT / "src"))
            sdist = backend.build_sdist(d)
            self.assertTrue(sdist.endswith(".tar.gz"))


class ReadmeSnippetTest(IntegrationTest):
    def test_python_snippet_runs_as_printed_from_any_folder(self):
        self.check_snippet("python", None)

    def test_wasi_python_snippet_runs_as_printed(self):
        self.check_snippet("wasi-python", str(REPO))  # it names testdata/ relative to the checkout, as the README says

    def test_plugin_python_snippet_runs_as_printed(self):
        self.check_snippet("plugin-python", str(REPO))

    def test_host_python_snippet_runs_as_printed(self):
        self.check_snippet("host-python", str(REPO))

    def test_eval_python_snippet_runs_as_printed_from_any_folder(self):
        self.check_snippet("eval-python", None)  # the wheel carries bin/runtimes next to the binary

    def check_snippet(self, name, cwd):
        snippet = readme_block("snippet: " + name)
        expected = readme_block("output: " + name)
        with tempfile.TemporaryDirectory(prefix="sandboxd-readme-") as target:
            pip(sys.executable, "install", "--target", target, wheel())
            script = os.path.join(target, "example.py")
            with open(script, "w") as f:
                f.write(snippet)
            proc = subprocess.run([sys.executable, script], env=user_env(target), cwd=cwd or target,
                                  timeout=120, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, expected)


if __name__ == "__main__":
    unittest.main()
