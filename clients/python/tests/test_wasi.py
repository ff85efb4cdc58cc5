"""WASI preview1 runs (wasi=, on_output=) against the real sidecar and the
test guests of testdata/wasi (sources and modes in its README: argv[1]
picks echo, args, env, cat, write, exit, tick, sleep, hog)."""

import asyncio
import base64
import os
import shutil
import tempfile
import threading
import unittest

import sandboxd
from sandboxd._params import run_params

from _support import REPO, IntegrationTest, SharedSidecarTest

GUESTS = REPO / "testdata" / "wasi"
C_GUEST = str(GUESTS / "guest_c.wasm")
RUST_GUEST = str(GUESTS / "guest_rust.wasm")
GO_GUEST = str(GUESTS / "guest_go.wasm")


def params(**kw):
    return run_params(sandboxd.RunOptions.build(None, kw))


class WasiParamsTest(unittest.TestCase):
    """What the client sends (no sidecar needed)."""

    def test_function_default(self):
        # Without wasi= the client keeps sending "run"; with it, nothing,
        # so the sidecar calls _start.
        self.assertEqual(params(wat="(module)")["function"], "run")
        p = params(path="/g.wasm", wasi=True)
        self.assertNotIn("function", p)
        self.assertEqual(p["capabilities"], {"wasi": True})
        self.assertEqual(params(path="/g.wasm", wasi=True, function="main")["function"], "main")
        self.assertNotIn("wasi", params(path="/g.wasm", wasi=False).get("capabilities", {}))

    def test_bytes_on_the_wire(self):
        p = params(path="/g.wasm", wasi=sandboxd.Wasi(
            args=["a", "b c"], env={"K": "V"}, stdin=b"\x00\xff",
            files={"/in.txt": "héllo", "/in.bin": b"\x01"},
            dirs=[sandboxd.Dir(host="/tmp", guest="/t", writable=True), {"host": "/srv"}]))
        self.assertEqual(p["capabilities"]["wasi"], {
            "args": ["a", "b c"], "env": {"K": "V"},
            "stdin": {"base64": base64.b64encode(b"\x00\xff").decode()},
            "files": {"/in.txt": "héllo", "/in.bin": {"base64": "AQ=="}},
            "dirs": [{"host": "/tmp", "guest": "/t", "writable": True}, {"host": "/srv", "guest": "/srv"}],
        })
        # a dict is the same grant; a str stdin is a plain JSON string
        self.assertEqual(params(path="/g.wasm", wasi={"stdin": "x", "args": ("1",)})["capabilities"]["wasi"],
                         {"stdin": "x", "args": ["1"]})
        # a relative host dir is made absolute here, as path= is
        d = params(path="/g.wasm", wasi={"dirs": [{"host": "rel", "guest": "/r"}]})["capabilities"]["wasi"]["dirs"]
        self.assertEqual(d, [{"host": os.path.join(os.getcwd(), "rel"), "guest": "/r"}])

    def test_refused_before_sending(self):
        cases = [
            ({"wasi": {"argz": []}}, r"wasi: unknown key\(s\) argz"),
            ({"wasi": {"args": "echo"}}, r"wasi\.args needs a list of str"),
            ({"wasi": {"args": ["a", 1]}}, r"wasi\.args\[1\] must be a str"),
            ({"wasi": {"env": {"K": 1}}}, r"wasi\.env\['K'\]"),
            ({"wasi": {"stdin": 5}}, r"wasi\.stdin needs bytes or a str"),
            ({"wasi": {"files": {"/f": None}}}, r"wasi\.files\['/f'\] needs bytes or a str"),
            ({"wasi": {"dirs": [{"guest": "/x"}]}}, r"wasi\.dirs\[0\]\.host is required"),
            ({"wasi": {"dirs": [{"host": "/x", "writable": "yes"}]}}, r"wasi\.dirs\[0\]\.writable must be a bool"),
            ({"wasi": {"dirs": sandboxd.Dir(host="/x")}}, r"wasi\.dirs needs a list"),
            ({"on_output": print}, r"on_output= needs wasi="),
        ]
        for kw, pattern in cases:
            with self.subTest(kw=kw), self.assertRaisesRegex(sandboxd.InvalidParams, pattern):
                params(path="/g.wasm", **kw)


class WasiTest(SharedSidecarTest):
    @classmethod
    def sidecar_options(cls):
        return {"args": ["--allow-dir", cls.tmp]}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sandboxd-wasi-")
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.tmp, True)

    def run_c(self, *args, **kw):
        wasi = kw.pop("wasi", {})
        return self.sb.run(path=C_GUEST, wasi=dict(wasi, args=list(args)), **kw)

    def test_echo_stdin_bytes_and_str(self):
        seen = []
        r = self.sb.run(path=C_GUEST, wasi=sandboxd.Wasi(args=["echo"], stdin=b"hi\xff\x00"),
                        on_output=lambda stream, data: seen.append((stream, data)))
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.output_truncated), (0, b"hi\xff\x00", b"4 bytes\n", False))
        self.assertIsInstance(r.stdout, bytes)
        self.assertEqual(r.raw["stdout"], {"base64": base64.b64encode(b"hi\xff\x00").decode()})
        self.assertEqual(sorted(seen), [("stderr", b"4 bytes\n"), ("stdout", b"hi\xff\x00")])
        r = self.run_c("echo", wasi={"stdin": "héllo"})
        self.assertEqual((r.stdout, r.stderr), ("héllo".encode(), b"6 bytes\n"))
        r = self.run_c("echo")  # no stdin: end of file at once
        self.assertEqual((r.stdout, r.stderr), (b"", b"0 bytes\n"))

    def test_args_env(self):
        self.assertEqual(self.run_c("args", "one", "two words", "").stdout, b"one\ntwo words\n\n")
        r = self.run_c("env", wasi={"env": {"B": "2", "A": "x=y"}})
        self.assertEqual(r.stdout, b"A=x=y\nB=2\n")  # exactly the grant, nothing inherited
        self.assertEqual(self.run_c("env").stdout, b"")

    def test_files(self):
        r = self.run_c("cat", "/data/a.txt", "/data/b.bin",
                       wasi={"files": {"/data/a.txt": "text\n", "/data/b.bin": b"\x00\x01\xfe"}})
        self.assertEqual((r.exit_code, r.stdout), (0, b"text\n\x00\x01\xfe"))
        r = self.run_c("cat", "/data/missing")
        self.assertEqual(r.exit_code, 1)
        self.assertIn(b"/data/missing", r.stderr)

    def test_writable_dir(self):
        work = tempfile.mkdtemp(dir=self.tmp)
        r = self.sb.run(path=C_GUEST, wasi=sandboxd.Wasi(
            args=["write", "/work/out.txt", "written by the guest"],
            dirs=[sandboxd.Dir(host=work, guest="/work", writable=True)]))
        self.assertEqual((r.exit_code, r.stdout), (0, b"written by the guest"))
        with open(os.path.join(work, "out.txt")) as f:
            self.assertEqual(f.read(), "written by the guest")
        # read-only unless writable, and dicts work as Dir
        r = self.run_c("write", "/ro/out.txt", "no", wasi={"dirs": [{"host": work, "guest": "/ro"}]})
        self.assertEqual(r.exit_code, 1)
        self.assertIn(b"/ro/out.txt", r.stderr)
        with open(os.path.join(work, "out.txt")) as f:
            self.assertEqual(f.read(), "written by the guest")

    def test_dir_outside_the_allowed_ones(self):
        with self.assertRaisesRegex(sandboxd.InvalidParams, r"capabilities\.wasi\.dirs\[0\]\.host.*--allow-dir"):
            self.run_c("cat", "/etc/passwd", wasi={"dirs": [sandboxd.Dir(host="/etc", guest="/etc")]})

    def test_exit_codes(self):
        for code in (0, 1, 3, 42, 125):  # wasmtime allows 0..125
            with self.subTest(code=code):
                r = self.run_c("exit", str(code))
                self.assertEqual(r.exit_code, code)
        self.assertEqual(self.run_c().exit_code, 2)  # usage
        # a plain (non-WASI) run has no exit code or output
        r = self.sb.run(wat="(module (func (export \"run\")))")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.output_truncated), (None, b"", b"", False))

    def test_streaming_order(self):
        events = []
        r = self.run_c("tick", "3", "30", on_output=lambda stream, data: events.append((stream, data)))
        # every piece arrived, in order, before run() returned; the sidecar
        # sends what is pending before each sleep, so no piece spans two
        # ticks (a tick may come in pieces: the 5 ms timer can fire between
        # the guest's writes on a loaded machine)
        events_at_return = list(events)
        self.assertEqual({s for s, _ in events_at_return}, {"stdout"})
        self.assertEqual(b"".join(d for _, d in events_at_return), b"tick 1\ntick 2\ntick 3\n")
        self.assertEqual(r.stdout, b"tick 1\ntick 2\ntick 3\n")
        self.assertGreaterEqual(len(events_at_return), 3)
        for _, d in events_at_return:
            self.assertLessEqual(d.count(b"\n"), 1, events_at_return)
            self.assertTrue(b"\n" not in d or d.endswith(b"\n"), events_at_return)

    def test_on_output_raises(self):
        def boom(stream, data):
            raise RuntimeError("callback failed")
        with self.assertRaisesRegex(RuntimeError, "callback failed"):
            self.run_c("tick", "2", "1", on_output=boom)
        self.assertEqual(self.run_c("exit", "0").exit_code, 0)  # the sidecar is fine

    def test_timeout_keeps_the_output_so_far(self):
        seen = []
        with self.assertRaises(sandboxd.Timeout) as cm:
            self.run_c("tick", "100", "50", timeout=0.3, on_output=lambda s, d: seen.append(d))
        e = cm.exception
        self.assertTrue(e.stdout.startswith(b"tick 1\n"), e.stdout)
        self.assertEqual(b"".join(seen), e.stdout)
        self.assertEqual((e.stderr, e.output_truncated), (b"", False))
        with self.assertRaises(sandboxd.Timeout) as cm:
            self.run_c("sleep", "30000", timeout=0.2)
        self.assertEqual(cm.exception.stdout, b"")

    def test_cancel_while_sleeping(self):
        first = threading.Event()
        handle = self.sb.submit(path=C_GUEST, wasi={"args": ["tick", "2", "30000"]}, timeout=60,
                                on_output=lambda s, d: first.set())
        self.assertTrue(first.wait(30), "no output within 30 s")
        handle.cancel()
        with self.assertRaises(sandboxd.Cancelled) as cm:
            handle.result(30)
        self.assertEqual(cm.exception.stdout, b"tick 1\n")

    def test_memory_hog(self):
        with self.assertRaises(sandboxd.MemoryLimitExceeded) as cm:
            self.run_c("hog", memory_bytes=8 << 20)
        self.assertIn(b"malloc failed", cm.exception.stderr)

    def test_output_truncated(self):
        r = self.run_c("echo", wasi={"stdin": b"x" * 5000}, output_bytes=1000)
        self.assertEqual((r.stdout, r.output_truncated), (b"x" * 1000, True))
        # a RunOptions built once, the grant in Capabilities
        r = self.sb.run(sandboxd.RunOptions(path=C_GUEST, capabilities=sandboxd.Capabilities(
            wasi=sandboxd.Wasi(args=["echo"], stdin=b"x" * 5000))))
        self.assertEqual((r.stdout, r.output_truncated), (b"x" * 5000, False))

    def test_refused_without_the_grant(self):
        with self.assertRaises(sandboxd.DisallowedImport) as cm:
            self.sb.run(path=C_GUEST, function="_start")
        self.assertIn("wasi_snapshot_preview1", str(cm.exception))
        self.assertIn("fd_write", str(cm.exception))

    def test_rust_and_go_guests(self):
        for guest in (RUST_GUEST, GO_GUEST):
            with self.subTest(guest=os.path.basename(guest)):
                r = self.sb.run(path=guest, wasi={"args": ["echo"], "stdin": b"from stdin"}, timeout=60)
                self.assertEqual((r.exit_code, r.stdout), (0, b"from stdin"))
                self.assertEqual(self.sb.run(path=guest, wasi={"args": ["exit", "5"]}, timeout=60).exit_code, 5)


class AsyncWasiTest(IntegrationTest):
    def test_async(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN) as sb:
                seen = []
                r = await sb.run(path=C_GUEST, wasi=sandboxd.Wasi(args=["tick", "2", "10"]),
                                 on_output=lambda s, d: seen.append((s, d)))
                self.assertEqual(b"".join(d for _, d in seen), b"tick 1\ntick 2\n")
                self.assertEqual((r.exit_code, r.stdout), (0, b"tick 1\ntick 2\n"))
                r = await sb.run(path=C_GUEST, wasi={"args": ["echo"], "stdin": b"\xff"})
                self.assertEqual((r.stdout, r.stderr), (b"\xff", b"1 bytes\n"))
                with self.assertRaises(sandboxd.Timeout) as cm:
                    await sb.run(path=C_GUEST, wasi={"args": ["tick", "100", "50"]}, timeout=0.3)
                self.assertTrue(cm.exception.stdout.startswith(b"tick 1\n"))
                with self.assertRaises(sandboxd.DisallowedImport):
                    await sb.run(path=C_GUEST, function="_start")
        asyncio.run(asyncio.wait_for(main(), 60))


if __name__ == "__main__":
    unittest.main()
