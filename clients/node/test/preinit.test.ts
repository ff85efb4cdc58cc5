// compile({ preinitialize: true }) (docs/preinit.md): the params it sends,
// its type check, and against the real sidecar: the Go PDK plugin
// pre-initialised has an id of its own, no _initialize, and greets as the
// plain plugin does, by run and by instance; a module that cannot be
// pre-initialised rejects with InvalidModule.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { InvalidModule, InvalidParams, type Sidecar } from "sandboxd";
import { compileParams } from "../dist/requests.js";

import { rejection, spawnSidecar, testdataDir } from "./helpers.js";

const goPlugin = join(testdataDir, "plugins", "go", "plugin.wasm");
const text = (b: Uint8Array) => new TextDecoder().decode(b);
/** Pre-initialising compiles the Go plugin twice: a hang bound, not a test. */
const compileLimits = { compileTimeoutMs: 300_000 };
const callLimits = { timeoutMs: 60_000 };
const caps = { log: true };
/** A valid module with no initialiser: nothing to pre-initialise. */
const noInitialiser = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);

describe("preinitialize params", () => {
  it("is sent only when true", () => {
    const module = { wasm: "AGFzbQEAAAA=" };
    assert.deepEqual(compileParams({ wasm: noInitialiser }), { module });
    assert.deepEqual(compileParams({ wasm: noInitialiser, preinitialize: false }), { module });
    assert.deepEqual(compileParams({ wasm: noInitialiser, preinitialize: true }), { module, preinitialize: true });
  });

  it("is refused, naming it, when not a boolean", () => {
    for (const bad of [1, "yes", null]) {
      assert.throws(
        () => compileParams({ wasm: noInitialiser, preinitialize: bad as unknown as boolean }),
        (err: unknown) => err instanceof InvalidParams && /^preinitialize must be a boolean, got /.test(err.message),
      );
    }
  });
});

describe("compile with preinitialize", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar();
  });
  after(() => sb?.close());

  it("gives the Go plugin an id of its own that greets as the plain one", async () => {
    const plain = await sb.compile({ path: goPlugin, limits: compileLimits });
    const pre = await sb.compile({ path: goPlugin, limits: compileLimits, preinitialize: true });
    assert.notEqual(pre.id, plain.id);
    assert.match(pre.id, /^sha256:[0-9a-f]{64}$/);
    assert.ok(plain.exports.some((e) => e.name === "_initialize"));
    assert.ok(!pre.exports.some((e) => e.name === "_initialize"));
    for (const moduleId of [plain.id, pre.id]) {
      const r = await sb.run({ moduleId, function: "greet", input: "Ada", wasi: true, capabilities: caps, limits: callLimits });
      assert.equal(text(r.output), "Hello, Ada!");
      assert.equal(r.moduleId, moduleId);
    }
    const p = await sb.plugin({ moduleId: pre.id, wasi: true, capabilities: caps, limits: callLimits });
    try {
      assert.equal(text((await p.call("greet", "Lin")).output), "Hello, Lin!");
    } finally {
      await p.release();
    }
  });

  it("rejects a module that cannot be pre-initialised with InvalidModule", async () => {
    let err = await rejection(sb.compile({ wasm: noInitialiser, preinitialize: true }));
    assert.ok(err instanceof InvalidModule, String(err));
    assert.match(err.message, /initialiser/);
    err = await rejection(sb.compile({ wat: "(module)", preinitialize: true }));
    assert.ok(err instanceof InvalidModule, String(err));
    assert.match(err.message, /binary/);
    const bad = await rejection(sb.compile({ path: goPlugin, preinitialize: "yes" as unknown as boolean }));
    assert.ok(bad instanceof InvalidParams, String(bad));
    // the sidecar keeps serving
    const mod = await sb.compile({ wat: '(module (func (export "run")))' });
    assert.equal(mod.exports[0]?.name, "run");
  });
});
