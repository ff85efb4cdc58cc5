"""compile(preinitialize=True) (docs/preinit.md): the params it sends, its
type check before anything is sent, and against the real sidecar: the Go
PDK plugin pre-initialised has an id of its own, no _initialize, and
answers greet as the plain plugin does; a module that cannot be
pre-initialised raises InvalidModule; the async client too."""

import asyncio
import unittest

import sandboxd
from sandboxd._params import compile_params

from _support import REPO, IntegrationTest, SharedSidecarTest

GO_PLUGIN = REPO / "testdata" / "plugins" / "go" / "plugin.wasm"

# Hang bounds, not timing assertions: pre-initialising compiles the Go
# plugin twice, seconds each on a loaded machine.
COMPILE = sandboxd.Limits(compile_timeout=300)

#: A module with no initialiser: valid, but nothing to pre-initialise.
NO_INITIALISER = b"\x00asm\x01\x00\x00\x00"


class PreinitParamsTest(unittest.TestCase):
    def test_sent_only_when_true(self):
        self.assertEqual(compile_params(None, b"\x00asm", None, None, None), {"module": {"wasm": "AGFzbQ=="}})
        self.assertEqual(compile_params(None, b"\x00asm", None, None, None, False), {"module": {"wasm": "AGFzbQ=="}})
        self.assertEqual(compile_params(None, b"\x00asm", None, None, None, True),
                         {"module": {"wasm": "AGFzbQ=="}, "preinitialize": True})

    def test_not_a_bool(self):
        for bad in (1, 0, "yes", None):
            with self.assertRaisesRegex(sandboxd.InvalidParams, r"^preinitialize must be True or False, got "):
                compile_params(None, b"\x00asm", None, None, None, bad)

    def test_checked_before_anything_is_sent(self):
        # The sidecar is spawned at the first request; /bin/false as the
        # binary would fail that with SidecarError, so InvalidParams means
        # nothing was sent.
        sb = sandboxd.Sidecar(binary="/bin/false")
        try:
            with self.assertRaisesRegex(sandboxd.InvalidParams, "preinitialize"):
                sb.compile(wasm=NO_INITIALISER, preinitialize="yes")
        finally:
            sb.close()


class PreinitTest(SharedSidecarTest):
    def test_go_plugin_preinitialized(self):
        plain = self.sb.compile(path=GO_PLUGIN, limits=COMPILE)
        pre = self.sb.compile(path=GO_PLUGIN, limits=COMPILE, preinitialize=True)
        self.assertNotEqual(pre.id, plain.id)
        self.assertTrue(pre.id.startswith("sha256:"), pre.id)
        self.assertIsNotNone(plain.export("_initialize"))
        self.assertIsNone(pre.export("_initialize"))
        self.assertIsNotNone(pre.export("greet"))
        for m in (plain, pre):
            r = self.sb.run(module=m, function="greet", input="Ada", wasi=True, log=True)
            self.assertEqual((r.output, r.module_id), (b"Hello, Ada!", m.id))
        # by its id alone, as another process holding the id would
        r = self.sb.run(module=pre.id, function="greet", input="Grace", wasi=True, log=True)
        self.assertEqual(r.output, b"Hello, Grace!")
        with self.sb.plugin(module=pre, wasi=True, log=True) as p:
            self.assertEqual(p.call("greet", "Lin").output, b"Hello, Lin!")

    def test_refused(self):
        with self.assertRaisesRegex(sandboxd.InvalidModule, "initialiser") as cm:
            self.sb.compile(wasm=NO_INITIALISER, preinitialize=True)
        self.assertEqual(cm.exception.kind, "invalid_module")
        with self.assertRaisesRegex(sandboxd.InvalidModule, "binary"):
            self.sb.compile(wat="(module)", preinitialize=True)
        # the sidecar keeps serving
        self.assertEqual(self.sb.run(wat="(module (func (export \"f\") (result i32) i32.const 7))", function="f").values, [7])


class AsyncPreinitTest(IntegrationTest):
    def test_async(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN) as sb:
                with self.assertRaisesRegex(sandboxd.InvalidParams, "preinitialize"):
                    await sb.compile(path=GO_PLUGIN, preinitialize=1)
                pre = await sb.compile(path=GO_PLUGIN, limits=COMPILE, preinitialize=True)
                self.assertIsNone(pre.export("_initialize"))
                r = await sb.run(module=pre.id, function="greet", input="async", wasi=True, log=True)
                self.assertEqual(r.output, b"Hello, async!")
                with self.assertRaises(sandboxd.InvalidModule):
                    await sb.compile(wasm=NO_INITIALISER, preinitialize=True)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
