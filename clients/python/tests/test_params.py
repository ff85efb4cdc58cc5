"""Request building: module sources, limits, capabilities, binary lookup."""

import base64
import datetime
import os
import tempfile
import unittest
from unittest import mock

import sandboxd
from sandboxd import _params, _process
from sandboxd._params import limits_object, module_source, run_params, timeout_ms


def params(**kw):
    """The run params of run(**kw): keywords through RunOptions, as run() does."""
    return run_params(sandboxd.RunOptions.build(None, kw))


class ModuleSourceTest(unittest.TestCase):
    def test_each_source(self):
        self.assertEqual(module_source(wat="(module)"), {"wat": "(module)"})
        self.assertEqual(module_source(wasm=b"\0asm\1\0\0\0"),
                         {"wasm": base64.b64encode(b"\0asm\1\0\0\0").decode()})
        self.assertEqual(module_source(wasm=bytearray(b"\0asm")), {"wasm": "AGFzbQ=="})
        self.assertEqual(module_source(path="/abs/g.wasm"), {"path": "/abs/g.wasm"})
        self.assertEqual(module_source(path="rel/g.wasm"), {"path": os.path.join(os.getcwd(), "rel/g.wasm")})
        mod = sandboxd.Module("sha256:00", [], [])
        self.assertEqual(module_source(module=mod), {"id": "sha256:00"})
        self.assertEqual(module_source(module="sha256:11"), {"id": "sha256:11"})

    def test_exactly_one(self):
        with self.assertRaisesRegex(ValueError, r"exactly one .*\(got none\)"):
            module_source()
        with self.assertRaisesRegex(ValueError, r"\(got wat=, path=\)"):
            module_source(wat="(module)", path="x.wasm")
        # an empty string is a source (the server will call it invalid), not "none"
        self.assertEqual(module_source(wat=""), {"wat": ""})

    def test_wrong_types(self):
        with self.assertRaisesRegex(TypeError, "wat="):
            module_source(wasm="(module)")
        with self.assertRaises(TypeError):
            module_source(module=42)


class LimitsTest(unittest.TestCase):
    def test_all_fields(self):
        lim = sandboxd.Limits(fuel=1, timeout=0.25, memory_bytes=2, table_elements=3, instances=4,
                              memories=5, log_bytes=6)
        self.assertEqual(limits_object(lim, {}), {
            "fuel": 1, "timeoutMs": 250, "memoryBytes": 2, "tableElements": 3, "instances": 4,
            "memories": 5, "logBytes": 6})

    def test_keywords_override(self):
        lim = sandboxd.Limits(fuel=10, memory_bytes=4 << 20)
        self.assertEqual(limits_object(lim, {"fuel": 99, "timeout": None, "log_bytes": 7}),
                         {"fuel": 99, "memoryBytes": 4 << 20, "logBytes": 7})
        self.assertEqual(limits_object(None, {}), {})
        self.assertEqual(lim.fuel, 10)  # not mutated

    def test_timeout_ms(self):
        self.assertEqual(timeout_ms(0.05), 50)     # 50.000000000000007, not 51
        self.assertEqual(timeout_ms(1), 1000)
        self.assertEqual(timeout_ms(0.0001), 1)    # never rounds a real timeout to 0
        for bad in (0, -1, -0.5, float("nan"), float("inf"), datetime.timedelta(seconds=-2)):
            with self.assertRaises(sandboxd.InvalidParams) as cm:  # named as the caller wrote it
                timeout_ms(bad)
            self.assertTrue(str(cm.exception).startswith("timeout must be a positive, finite number of seconds"),
                            str(cm.exception))
        with self.assertRaises(sandboxd.InvalidParams) as cm:
            timeout_ms(0, "compile_timeout")
        self.assertIn("compile_timeout must be", str(cm.exception))
        self.assertEqual(timeout_ms(datetime.timedelta(milliseconds=1500)), 1500)
        with self.assertRaises(TypeError):
            timeout_ms("1s")

    def test_integers(self):
        self.assertEqual(limits_object(None, {"fuel": 1e6}), {"fuel": 1000000})
        with self.assertRaises(TypeError):
            limits_object(None, {"fuel": 1.5})
        with self.assertRaises(TypeError):
            limits_object(None, {"memory_bytes": True})
        with self.assertRaises(TypeError):
            limits_object({"fuel": 1}, {})


class RunParamsTest(unittest.TestCase):
    def test_minimal(self):
        self.assertEqual(params(wat="(module)"), {"module": {"wat": "(module)"}, "function": "run", "args": []})

    def test_full(self):
        p = params(path="/g.wasm", function="f", args=[1, 2.5, 2 ** 60], fuel=5,
                   log=True, random_seed=2 ** 64 - 1, clock=True, on_log=print)
        self.assertEqual(p, {
            "module": {"path": "/g.wasm"}, "function": "f", "args": [1, 2.5, str(2 ** 60)],
            "limits": {"fuel": 5},
            "capabilities": {"log": True, "random": {"seed": "18446744073709551615"}, "clock": True}})
        self.assertEqual(params(wat="", random_seed=42)["capabilities"], {"random": {"seed": 42}})

    def test_options_object_and_keywords(self):
        base = sandboxd.RunOptions(path="/g.wasm", function="f", args=[1],
                                   limits=sandboxd.Limits(fuel=10, memory_bytes=1 << 20),
                                   capabilities=sandboxd.Capabilities(log=True))
        self.assertEqual(run_params(base), {
            "module": {"path": "/g.wasm"}, "function": "f", "args": [1],
            "limits": {"fuel": 10, "memoryBytes": 1 << 20}, "capabilities": {"log": True}})
        # keywords override the options' fields and the fields of its limits and capabilities
        over = sandboxd.RunOptions.build(base, {"args": [2], "fuel": 99, "timeout": 0.5, "clock": True})
        self.assertEqual(run_params(over), {
            "module": {"path": "/g.wasm"}, "function": "f", "args": [2],
            "limits": {"fuel": 99, "timeoutMs": 500, "memoryBytes": 1 << 20},
            "capabilities": {"log": True, "clock": True}})
        self.assertEqual(base.limits.fuel, 10)  # not mutated
        # a None shortcut changes nothing (run()'s old keyword defaults)
        self.assertEqual(sandboxd.RunOptions.build(base, {"fuel": None}), base)
        with self.assertRaisesRegex(sandboxd.InvalidParams, "unexpected keyword argument.*: fule"):
            sandboxd.RunOptions.build(base, {"fule": 1})
        with self.assertRaisesRegex(TypeError, "RunOptions"):
            sandboxd.RunOptions.build({"wat": ""}, {})  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, "capabilities= needs a sandboxd.Capabilities"):
            run_params(sandboxd.RunOptions(wat="", capabilities={"log": True}))  # type: ignore[arg-type]

    def test_plain_runs_agree_with_run_params(self):
        # The hot-loop path (module source, function, args only) builds the
        # same params as the general one, and refuses the same mistakes.
        mod = sandboxd.Module(id="sha256:" + "ab" * 32)
        for keywords in (dict(module=mod, function="add", args=[1, 2]), dict(wat="(module)"),
                         dict(wasm=b"\0asm", function=None, args=(sandboxd.I64(2 ** 60),)),
                         dict(path="g.wasm", args=[float("nan"), -0.0]), dict(module="sha256:x", function="f")):
            with self.subTest(keywords=keywords):
                self.assertEqual(_params.plain_run_params(keywords),
                                 _params.run_params(sandboxd.RunOptions.build(None, keywords)))
        self.assertIsNone(_params.plain_run_params(dict(module=mod, fuel=5)))
        self.assertIsNone(_params.plain_run_params(dict(module=mod, on_log=print)))
        for keywords, message in ((dict(wat="(module)", wasm=b""), "exactly one module source"),
                                  (dict(module=mod, function=3), "function must be a str"),
                                  (dict(module=mod, args=[True]), "bool is not a wasm value")):
            with self.subTest(keywords=keywords):
                with self.assertRaisesRegex(sandboxd.InvalidParams, message):
                    _params.plain_run_params(keywords)

    def test_on_log_needs_log(self):
        with self.assertRaisesRegex(ValueError, "log=True"):
            params(wat="(module)", on_log=print)


class BinaryLookupTest(unittest.TestCase):
    HINT = ("build it with `make build` in the sandboxd repository (needs Go and gcc), "
            "then pass binary=..., set SANDBOXD_BIN, or put it on PATH (`make install`); "
            "`pip install <checkout>/clients/python` installs a package that carries it")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="sandboxd-lookup-")
        self.addCleanup(self.tmp.cleanup)
        self.env = {k: v for k, v in os.environ.items() if k != "SANDBOXD_BIN"}

    def checkout(self, name, module="github.com/sandboxd/sandboxd", binary=True):
        """A fake checkout: go.mod of ``module``, and bin/sandboxd if ``binary``."""
        root = os.path.join(self.tmp.name, name)
        os.makedirs(os.path.join(root, "bin"))
        os.makedirs(os.path.join(root, "clients", "python", "src"))
        with open(os.path.join(root, "go.mod"), "w") as f:
            f.write("// comment\nmodule %s\n\ngo 1.26\n" % module)
        if binary:
            path = os.path.join(root, "bin", "sandboxd")
            with open(path, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(path, 0o755)
        return root

    def lookup(self, roots, which=None):
        with mock.patch.dict(os.environ, self.env, clear=True), \
                mock.patch("shutil.which", return_value=which), \
                mock.patch.object(_process, "checkout_roots", return_value=roots):
            return _process.find_binary(None)

    def test_missing_binary_has_build_hint(self):
        for cls in (sandboxd.Sidecar, sandboxd.AsyncSidecar):
            with self.assertRaises(sandboxd.SidecarError) as cm:
                cls(binary="/nonexistent")
            self.assertIn(self.HINT, str(cm.exception))
            self.assertIn("/nonexistent", str(cm.exception))
            self.assertEqual(cm.exception.kind, "sidecar")

    def test_env_then_path_then_checkout(self):
        with mock.patch.dict(os.environ, {"SANDBOXD_BIN": "/nowhere/sandboxd"}):
            with self.assertRaisesRegex(sandboxd.SidecarError, r"\$SANDBOXD_BIN='/nowhere/sandboxd'"):
                _process.find_binary(None)
        repo = self.checkout("repo")
        # PATH wins over the checkout
        self.assertEqual(self.lookup([os.path.join(repo, "clients", "python", "src")], "/usr/bin/sandboxd"),
                         "/usr/bin/sandboxd")
        # no PATH entry: the checkout above the package, then above the cwd
        self.assertEqual(self.lookup([os.path.join(repo, "clients", "python", "src"), "/"]),
                         os.path.join(repo, "bin", "sandboxd"))
        self.assertEqual(self.lookup(["/", os.path.join(repo, "clients")]), os.path.join(repo, "bin", "sandboxd"))

    def test_bundled_binary_comes_before_path_and_checkout(self):
        # what an installed wheel has: sandboxd/bin/sandboxd next to the package
        bundle = os.path.join(self.checkout("wheel"), "bin")
        repo = self.checkout("repo")
        with mock.patch.object(_process, "BUNDLE_DIR", bundle):
            self.assertEqual(self.lookup([repo], "/usr/bin/sandboxd"), os.path.join(bundle, "sandboxd"))
            with mock.patch.dict(os.environ, {"SANDBOXD_BIN": "/usr/bin/true"}):
                self.assertEqual(_process.find_binary(None), "/usr/bin/true")
        with mock.patch.object(_process, "BUNDLE_DIR", os.path.join(self.tmp.name, "none")):
            self.assertEqual(self.lookup([repo], "/usr/bin/sandboxd"), "/usr/bin/sandboxd")

    def test_not_found_names_every_place(self):
        with self.assertRaises(sandboxd.SidecarError) as cm:
            self.lookup([self.tmp.name, "/"])
        message = str(cm.exception)
        for part in ("$SANDBOXD_BIN is not set", "this package carries none", "no sandboxd on PATH",
                     "inside a sandboxd checkout", self.tmp.name, self.HINT):
            self.assertIn(part, message)

    def test_checkout_without_binary_says_so(self):
        repo = self.checkout("unbuilt", binary=False)
        with self.assertRaises(sandboxd.SidecarError) as cm:
            self.lookup([os.path.join(repo, "clients")])
        self.assertIn("the sandboxd checkout at %s has no bin/sandboxd" % repo, str(cm.exception))

    def test_other_go_modules_are_not_checkouts(self):
        other = self.checkout("other", module="example.com/sandboxd")
        self.assertIsNone(_process.find_checkout(os.path.join(other, "clients")))
        with self.assertRaises(sandboxd.SidecarError):
            self.lookup([os.path.join(other, "clients")])
        repo = self.checkout("repo")
        self.assertEqual(_process.find_checkout(os.path.join(repo, "clients", "python")), repo)

    def test_argv(self):
        self.assertEqual(_process.sidecar_argv("/b", ["--log-level", "debug"], 3),
                         ["/b", "serve", "--max-concurrency", "3", "--log-level", "debug"])
        with self.assertRaises(ValueError):
            _process.sidecar_argv("/b", (), 0)
        with self.assertRaises(TypeError):
            _process.sidecar_argv("/b", "--flag", None)


if __name__ == "__main__":
    unittest.main()
