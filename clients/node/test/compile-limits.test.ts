// The compile limits (compileTimeoutMs, compileMemoryBytes) on run() and
// compile(), against the real sandboxd binary with a compile bomb built here.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { CompileLimitExceeded, InvalidParams, type Sidecar } from "sandboxd";
import { compileParams } from "../dist/requests.js";

import { rejection, spawnSidecar } from "./helpers.js";

function uleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n === 0) return [...out, b];
    out.push(b | 0x80);
  }
}

function section(id: number, body: number[]): number[] {
  return [id, ...uleb(body.length), ...body];
}

/**
 * A module whose run() is n nested empty loops: 3 bytes each to send, very
 * expensive for Cranelift (the bomb of cmd/sandboxd's compile fence tests).
 * salt makes the bytes, and so the module id, differ.
 */
function nestedLoops(n: number, salt: number): Uint8Array {
  const code = new Uint8Array(1 + 3 * n + 4);
  code[0] = 0; // no locals
  for (let i = 0; i < n; i++) code.set([0x03, 0x40], 1 + 2 * i);
  code.fill(0x0b, 1 + 2 * n, 1 + 3 * n);
  code.set([0x41, salt & 0x3f, 0x1a, 0x0b], 1 + 3 * n);
  const head = [
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, [0x01, 0x60, 0x00, 0x00]),
    ...section(3, [0x01, 0x00]),
    ...section(7, [0x01, 0x03, 0x72, 0x75, 0x6e, 0x00, 0x00]),
    10,
    ...uleb(1 + uleb(code.length).length + code.length),
    0x01,
    ...uleb(code.length),
  ];
  const out = new Uint8Array(head.length + code.length);
  out.set(head);
  out.set(code, head.length);
  return out;
}

let sb: Sidecar;
before(async () => {
  sb = await spawnSidecar();
});
after(async () => {
  await sb?.close();
});

describe("compile limits", () => {
  it("are sent under their wire names", () => {
    assert.deepEqual(compileParams({ wat: "(module)" }), { module: { wat: "(module)" } });
    assert.deepEqual(compileParams({ wat: "(module)", limits: { compileTimeoutMs: 5, compileMemoryBytes: 1 << 28 } }), {
      module: { wat: "(module)" },
      limits: { compileTimeoutMs: 5, compileMemoryBytes: 1 << 28 },
    });
  });

  it("a bomb run under compileTimeoutMs 500 is CompileLimitExceeded (compile_time)", async () => {
    const err = await rejection(sb.run({ wasm: nestedLoops(100_000, 51), limits: { compileTimeoutMs: 500 } }));
    assert.ok(err instanceof CompileLimitExceeded, String(err));
    assert.equal(err.code, 11);
    assert.equal(err.resource, "compile_time");
    assert.equal(err.limit, 500);
  });

  it("a bomb compiled under compileTimeoutMs 400 is CompileLimitExceeded (compile_time)", async () => {
    const err = await rejection(sb.compile({ wasm: nestedLoops(100_000, 52), limits: { compileTimeoutMs: 400 } }));
    assert.ok(err instanceof CompileLimitExceeded, String(err));
    assert.equal(err.resource, "compile_time");
    assert.equal(err.limit, 400);
  });

  it("compile refuses a run limit, naming it, and honours the compile ones", async () => {
    // A JavaScript caller is not stopped by the CompileLimits type; the sidecar names the field.
    const limits = { fuel: 5, compileTimeoutMs: 1000 } as unknown as { compileTimeoutMs: number };
    const err = await rejection(sb.compile({ wat: "(module)", limits }));
    assert.ok(err instanceof InvalidParams, String(err));
    assert.match(err.message, /^limits\.fuel: does not apply to compile/);
    const mod = await sb.compile({
      wat: '(module (func (export "run")))',
      limits: { compileTimeoutMs: 60_000, compileMemoryBytes: 2 ** 30 },
    });
    assert.equal(mod.exports[0]?.kind, "func");
  });
});
