"""The compile limits (compile_timeout, compile_memory_bytes) on run() and
compile(), against the real sidecar with a compile bomb built here."""

import unittest

import sandboxd
from sandboxd._params import compile_params, limits_object

from _support import IntegrationTest, SharedSidecarTest


def _uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n == 0:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _section(ident: int, body: bytes) -> bytes:
    return bytes([ident]) + _uleb(len(body)) + body


def nested_loops(n: int, salt: int) -> bytes:
    """A module whose run() is n nested empty loops: 3 bytes each to send,
    very expensive for Cranelift (the bomb of cmd/sandboxd's compile fence
    tests). salt makes the bytes, and so the module id, differ."""
    code = b"\x00" + b"\x03\x40" * n + b"\x0b" * n + bytes([0x41, salt & 0x3F, 0x1A, 0x0B])
    return (b"\x00asm\x01\x00\x00\x00"
            + _section(1, b"\x01\x60\x00\x00")
            + _section(3, b"\x01\x00")
            + _section(7, b"\x01\x03run\x00\x00")
            + _section(10, b"\x01" + _uleb(len(code)) + code))


class CompileLimitsParamsTest(unittest.TestCase):
    def test_wire_names(self):
        lim = sandboxd.Limits(compile_timeout=1.5, compile_memory_bytes=256 << 20)
        self.assertEqual(limits_object(lim, {}), {"compileTimeoutMs": 1500, "compileMemoryBytes": 256 << 20})
        self.assertEqual(limits_object(None, {"compile_timeout": 0.0001}), {"compileTimeoutMs": 1})

    def test_compile_params(self):
        self.assertEqual(compile_params("(module)", None, None, None, None), {"module": {"wat": "(module)"}})
        self.assertEqual(compile_params("(module)", None, None, None, sandboxd.Limits(compile_timeout=2)),
                         {"module": {"wat": "(module)"}, "limits": {"compileTimeoutMs": 2000}})
        with self.assertRaisesRegex(sandboxd.InvalidParams, "compile_timeout must be a number of seconds"):
            compile_params("(module)", None, None, None, sandboxd.Limits(compile_timeout="1"))


class CompileLimitsTest(SharedSidecarTest):
    def check_compile_time(self, cm, limit_ms):
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.resource, e.limit), ("compile_limit_exceeded", 11, "compile_time", limit_ms))

    def test_run_bomb_under_compile_timeout(self):
        with self.assertRaises(sandboxd.CompileLimitExceeded) as cm:
            self.sb.run(wasm=nested_loops(100_000, 41), compile_timeout=0.5)
        self.check_compile_time(cm, 500)

    def test_compile_bomb_under_compile_timeout(self):
        with self.assertRaises(sandboxd.CompileLimitExceeded) as cm:
            self.sb.compile(wasm=nested_loops(100_000, 42), limits=sandboxd.Limits(compile_timeout=0.4))
        self.check_compile_time(cm, 400)

    def test_compile_refuses_run_limits(self):
        with self.assertRaisesRegex(sandboxd.InvalidParams, r"^limits\.fuel: does not apply to compile") as cm:
            self.sb.compile(wat="(module)", limits=sandboxd.Limits(fuel=5, compile_timeout=1))
        self.assertEqual(cm.exception.code, -32602)
        mod = self.sb.compile(wat='(module (func (export "run")))',
                              limits=sandboxd.Limits(compile_timeout=60, compile_memory_bytes=1 << 30))
        self.assertEqual(mod.export("run")["kind"], "func")


class AsyncCompileLimitsTest(IntegrationTest):
    def test_compile_bomb_under_compile_timeout(self):
        import asyncio

        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN) as sb:
                with self.assertRaises(sandboxd.CompileLimitExceeded) as cm:
                    await sb.compile(wasm=nested_loops(100_000, 43), limits=sandboxd.Limits(compile_timeout=0.3))
                return cm.exception

        e = asyncio.run(main())
        self.assertEqual((e.resource, e.limit), ("compile_time", 300))


if __name__ == "__main__":
    unittest.main()
