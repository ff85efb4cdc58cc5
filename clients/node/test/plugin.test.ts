// Plugins and instances against the real sidecar: the Go PDK plugin
// (testdata/plugins/go), the WAT plugin (testdata/plugins/wat), a stateful
// plain module, fences that close an instance, concurrency, cancellation,
// release and the instance limit.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import {
  Cancelled,
  ExportError,
  InstanceClosed,
  InvalidParams,
  MemoryLimitExceeded,
  type Plugin,
  PluginError,
  type Sidecar,
  SidecarError,
  Timeout,
  TooManyInstances,
} from "sandboxd";

import { rejection, spawnSidecar, testdataDir, waitFor } from "./helpers.js";

const goPlugin = join(testdataDir, "plugins", "go", "plugin.wasm");
const watPlugin = join(testdataDir, "plugins", "wat", "plugin.wat");
const text = (b: Uint8Array) => new TextDecoder().decode(b);
/** The compile of the Go plugin (~2.5 MB) may take long on a loaded machine: a hang bound, not a test. */
const compileLimits = { compileTimeoutMs: 300_000 };
/** Calls that are not under test get a hang bound rather than the 1 s default deadline. */
const callLimits = { timeoutMs: 60_000 };

/** A plain module (no Extism ABI) with state: a global and a memory cell. */
const STATEFUL = `(module
  (memory (export "memory") 1)
  (global $total (mut i32) (i32.const 0))
  (func (export "add") (param $n i32) (result i32)
    (global.set $total (i32.add (global.get $total) (local.get $n)))
    (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
    (global.get $total))
  (func (export "calls") (result i32) (i32.load (i32.const 0)))
  (func (export "burn") (param $n i32) (result i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $n)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $l)))
    (i32.const 7)))`;

describe("the Go PDK plugin", () => {
  let sb: Sidecar;
  let moduleId: string;
  const open = (extra: Parameters<Sidecar["plugin"]>[0] = {}) =>
    sb.plugin({ moduleId, wasi: true, capabilities: { log: true }, ...extra, limits: { ...callLimits, ...extra.limits } });

  before(async () => {
    sb = await spawnSidecar();
    moduleId = (await sb.compile({ path: goPlugin, limits: compileLimits })).id;
  });
  after(() => sb.close());

  it("greets from its input, as a string or as bytes", async () => {
    await using p = await open();
    assert.equal(p.isPlugin, true);
    assert.equal(p.moduleId, moduleId);
    assert.ok(p.exports.some((e) => e.name === "greet" && e.params.length === 0 && e.results[0] === "i32"), JSON.stringify(p.exports));
    const r = await p.call("greet", "Ada");
    assert.ok(r.output instanceof Uint8Array);
    assert.equal(text(r.output), "Hello, Ada!");
    assert.ok(r.fuelConsumed > 0);
    assert.ok(r.peakMemoryBytes > 0);
    assert.equal(text((await p.call("greet", new TextEncoder().encode("Bob"))).output), "Hello, Bob!");
  });

  it("keeps its var counter for the instance's life, and a new instance starts again", async () => {
    await using p = await open();
    const counts = [];
    for (let i = 0; i < 3; i++) counts.push(text((await p.call("count")).output));
    assert.deepEqual(counts, ["1", "2", "3"]);
    await using q = await open();
    assert.equal(text((await q.call("count")).output), "1");
    assert.equal(text((await p.call("count")).output), "4");
  });

  it("reads its config, and without it reports a plugin error and stays usable", async () => {
    await using p = await open({ config: { greeting: "hi there" } });
    assert.equal(text((await p.call("config")).output), "hi there");
    await using bare = await open();
    const err = await rejection(bare.call("config"));
    assert.ok(err instanceof PluginError, String(err));
    assert.equal(err.pluginMessage, "no greeting in the config");
    assert.equal(bare.closed, false);
    assert.equal(text((await bare.call("greet", "again")).output), "Hello, again!");
  });

  it("logs lines with their levels", async () => {
    await using p = await open();
    const seen: [string, number, string | undefined][] = [];
    const r = await p.call("logs", undefined, { onLog: (line, seq, level) => seen.push([line, seq, level]) });
    const byLevel = Object.fromEntries(r.logEntries.map((e) => [e.level, e.line]));
    for (const [level, line] of [["info", "an info line"], ["warn", "a warn line"], ["error", "an error line"]]) {
      assert.equal(byLevel[level!], line, JSON.stringify(r.logEntries));
    }
    assert.deepEqual(seen.map(([line, , level]) => ({ line, level })), r.logEntries);
    assert.deepEqual(seen.map(([, seq]) => seq), r.logEntries.map((_, i) => i));
    assert.deepEqual(r.logs, r.logEntries.map((e) => e.line));
  });

  it("fails with the plugin's own message, and the instance keeps serving", async () => {
    await using p = await open();
    assert.equal(text((await p.call("count")).output), "1");
    const err = await rejection(p.call("fail", "oops"));
    assert.ok(err instanceof PluginError, String(err));
    assert.equal(err.kind, "plugin_error");
    assert.equal(err.code, 10);
    assert.equal(err.pluginMessage, "failed on purpose: oops");
    assert.equal(err.function, "fail");
    assert.equal(err.returnCode, 1);
    assert.equal(err.instanceClosed, false);
    assert.match(err.message, /failed on purpose: oops/);
    assert.equal(text((await p.call("count")).output), "2");
  });

  it("echoes every byte value unchanged", async () => {
    await using p = await open();
    const all = Uint8Array.from({ length: 512 }, (_, i) => (i * 7) % 256);
    const r = await p.call("echo", all);
    assert.deepEqual(r.output, all);
    assert.equal((await p.call("echo", new Uint8Array(0))).output.length, 0);
  });

  it("spin is stopped by its deadline, which closes the instance and says why", async () => {
    await using p = await open();
    const err = await rejection(p.call("spin", undefined, { limits: { timeoutMs: 100, fuel: 1e15 } }));
    assert.ok(err instanceof Timeout, String(err));
    assert.equal(err.instanceClosed, true);
    assert.equal(p.closed, true);
    const closed = await rejection(p.call("greet", "anyone"));
    assert.ok(closed instanceof InstanceClosed, String(closed));
    assert.equal(closed.instance, p.id);
    assert.match(closed.reason ?? "", /timeout/);
    assert.match(closed.reason ?? "", /spin/);
    assert.match(closed.message, new RegExp(p.id));
  });

  it("hog is stopped by the memory cap", async () => {
    await using p = await open({ limits: { memoryBytes: 64 << 20 } });
    const err = await rejection(p.call("hog"));
    assert.ok(err instanceof MemoryLimitExceeded, String(err));
    assert.equal(err.limit, 64 << 20);
    assert.ok((err.peakMemoryBytes ?? 0) <= 64 << 20, String(err.peakMemoryBytes));
    assert.equal(err.instanceClosed, true);
    const closed = await rejection(p.call("greet", "x"));
    assert.ok(closed instanceof InstanceClosed, String(closed));
    assert.match(closed.reason ?? "", /memory_limit_exceeded.*hog/);
  });

  it("a missing function is ExportError and the instance stays open", async () => {
    await using p = await open();
    const err = await rejection(p.call("nope"));
    assert.ok(err instanceof ExportError, String(err));
    assert.equal(text((await p.call("greet", "still")).output), "Hello, still!");
  });
});

describe("the WAT plugin", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar();
  });
  after(() => sb.close());
  const open = (extra: Parameters<Sidecar["plugin"]>[0] = {}) =>
    sb.plugin({ path: watPlugin, capabilities: { log: true }, ...extra, limits: { ...callLimits, ...extra.limits } });

  it("greets, echoes, counts, reads config and logs with levels", async () => {
    await using p = await open({ config: { greeting: "salut" } });
    assert.equal(text((await p.call("greet", "Ada")).output), "Hello, Ada");
    assert.deepEqual((await p.call("echo", new Uint8Array([0, 255, 10]))).output, new Uint8Array([0, 255, 10]));
    const c1 = (await p.call("count")).output;
    const c2 = (await p.call("count")).output;
    assert.equal(new DataView(c1.buffer, c1.byteOffset).getBigUint64(0, true), 1n);
    assert.equal(new DataView(c2.buffer, c2.byteOffset).getBigUint64(0, true), 2n);
    assert.equal(text((await p.call("config")).output), "salut");
    const logs = await p.call("logs");
    assert.deepEqual(logs.logEntries, [
      { line: "hello from info", level: "info" },
      { line: "careful: warn", level: "warn" },
    ]);
  });

  it("hog's kernel blocks count toward the memory cap", async () => {
    await using p = await open({ limits: { memoryBytes: 16 << 20 } });
    const err = await rejection(p.call("hog"));
    assert.ok(err instanceof MemoryLimitExceeded, String(err));
    assert.equal(err.instanceClosed, true);
    assert.equal(p.closed, true);
  });

  it("a plugin error with a message, and a bare non-zero return code", async () => {
    await using p = await open();
    const err = await rejection(p.call("fail"));
    assert.ok(err instanceof PluginError, String(err));
    assert.equal(err.pluginMessage, "it failed on purpose");
    const rc = await rejection(p.call("rc"));
    assert.ok(rc instanceof PluginError, String(rc));
    assert.equal(rc.returnCode, 3);
    assert.equal(rc.function, "rc");
    assert.equal(text((await p.call("greet", "ok")).output), "Hello, ok");
  });

  it("input on a function that is not a plugin function is refused naming it", async () => {
    await using p = await sb.plugin({ wat: STATEFUL, limits: callLimits });
    assert.equal(p.isPlugin, false);
    const err = await rejection(p.call("add", "bytes", { args: [1] }));
    assert.ok(err instanceof InvalidParams, String(err));
    assert.match(err.message, /input/);
  });

  it("sb.run with input is a one-shot plugin call", async () => {
    const caps = { log: true };
    const r = await sb.run({ path: watPlugin, function: "greet", input: "once", capabilities: caps, limits: callLimits });
    assert.equal(text(r.output), "Hello, once");
    assert.match(r.moduleId, /^sha256:/);
    const cfg = await sb.run({ path: watPlugin, function: "config", config: { greeting: "cfg" }, capabilities: caps, limits: callLimits });
    assert.equal(text(cfg.output), "cfg");
    const err = await rejection(sb.run({ path: watPlugin, function: "fail", capabilities: caps, limits: callLimits }));
    assert.ok(err instanceof PluginError, String(err));
    assert.equal(err.pluginMessage, "it failed on purpose");
  });
});

describe("instances of a plain module", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar({ maxConcurrency: 2 });
  });
  after(() => sb.close());

  it("a second call sees the first call's global and memory writes (sb.instantiate)", async () => {
    await using p = await sb.instantiate({ wat: STATEFUL, limits: callLimits });
    assert.deepEqual((await p.call("add", undefined, { args: [5] })).values, [5]);
    assert.deepEqual((await p.call("add", undefined, { args: [10] })).values, [15]);
    assert.deepEqual((await p.call("calls")).values, [2]);
    await using fresh = await sb.instantiate({ wat: STATEFUL, limits: callLimits });
    assert.deepEqual((await fresh.call("calls")).values, [0]);
  });

  it("calls to one instance run one at a time in order; many instances run side by side", async () => {
    const plugins = await Promise.all(Array.from({ length: 8 }, () => sb.plugin({ wat: STATEFUL, limits: callLimits })));
    try {
      const results = await Promise.all(
        plugins.map((p, k) => Promise.all(Array.from({ length: 10 }, (_, i) => p.call("add", undefined, { args: [k * 100 + i] })))),
      );
      results.forEach((rs, k) => {
        let total = 0;
        const want = rs.map((_, i) => (total += k * 100 + i));
        assert.deepEqual(rs.map((r) => r.values[0]), want, `instance ${k}`);
      });
      for (const p of plugins) assert.deepEqual((await p.call("calls")).values, [10]);
    } finally {
      await Promise.all(plugins.map((p) => p.release()));
    }
  });

  it("one instance's timeout leaves another's state alone", async () => {
    await using a = await sb.plugin({ wat: STATEFUL, limits: callLimits });
    await using b = await sb.plugin({ wat: STATEFUL, limits: callLimits });
    await a.call("add", undefined, { args: [1] });
    await b.call("add", undefined, { args: [2] });
    const err = await rejection(a.call("burn", undefined, { args: [-1], limits: { timeoutMs: 50, fuel: 1e15 } }));
    assert.ok(err instanceof Timeout, String(err));
    assert.deepEqual((await b.call("add", undefined, { args: [3] })).values, [5]);
    assert.ok((await rejection(a.call("calls"))) instanceof InstanceClosed);
  });
});

describe("cancelling, releasing, the instance limit, the sidecar's death", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar({ args: ["--max-instances", "3"] });
  });
  after(() => sb.close());
  const plain = () => sb.plugin({ wat: STATEFUL, limits: { ...callLimits, fuel: 1e15 } });

  /** Waits until `p`'s instance has a call running (the sidecar's stats say one is in flight). */
  const running = () => waitFor(async () => (await sb.stats()).inFlight >= 1, "a running call");

  it("aborting a running call cancels it and closes the instance", async () => {
    await using p = await plain();
    const abort = new AbortController();
    const pending = p.call("burn", undefined, { args: [-1], signal: abort.signal });
    await running();
    abort.abort("user");
    const err = await rejection(pending);
    assert.ok(err instanceof Cancelled, String(err));
    assert.equal(err.cause, "user");
    assert.equal(err.instanceClosed, true);
    assert.ok((await rejection(p.call("calls"))) instanceof InstanceClosed);
  });

  it("aborting a queued call drops it and the instance stays open", async () => {
    await using p = await plain();
    const abort = new AbortController();
    const slow = p.call("burn", undefined, { args: [-1], limits: { timeoutMs: 1000, fuel: 1e15 } });
    const queued = p.call("add", undefined, { args: [1], signal: abort.signal });
    await running();
    abort.abort();
    const err = await rejection(queued);
    assert.ok(err instanceof Cancelled, String(err));
    assert.equal(err.instanceClosed, false);
    // the slow call then times out and closes the instance; but it was the timeout, not the cancel
    const timedOut = await rejection(slow);
    assert.ok(timedOut instanceof Timeout, String(timedOut));
  });

  it("release ends queued calls with InstanceClosed (released) and is idempotent", async () => {
    const p = await plain();
    const slow = p.call("burn", undefined, { args: [-1] });
    const queued = p.call("calls");
    await running();
    await p.release();
    await p.release();
    const [s, q] = await Promise.all([rejection(slow), rejection(queued)]);
    assert.ok(s instanceof Cancelled, String(s));
    assert.ok(q instanceof InstanceClosed, String(q));
    assert.equal(q.reason, "released");
    const after = await rejection(p.call("calls"));
    assert.ok(after instanceof InstanceClosed && after.reason === "released", String(after));
  });

  it("past --max-instances sb.plugin rejects with TooManyInstances; releasing one makes room", async () => {
    const ps: Plugin[] = [];
    try {
      for (let i = 0; i < 3; i++) ps.push(await plain());
      const stats = await sb.stats();
      assert.equal(stats.instances?.live, 3);
      assert.equal(stats.instances?.max, 3);
      const err = await rejection(plain());
      assert.ok(err instanceof TooManyInstances, String(err));
      assert.equal(err.maxInstances, 3);
      assert.equal(err.instances, 3);
      await ps.pop()!.release();
      ps.push(await plain());
    } finally {
      await Promise.all(ps.map((p) => p.release()));
    }
  });

  it("an instance without a call for --instance-idle is evicted, and its next call says so", async () => {
    const own = await spawnSidecar({ args: ["--instance-idle", "200ms"] });
    try {
      assert.equal(own.info.instanceIdleMs, 200);
      assert.equal(typeof own.info.maxInstances, "number");
      const p = await own.plugin({ wat: STATEFUL, limits: callLimits });
      await waitFor(async () => ((await own.stats()).instances?.evicted ?? 0) >= 1, "the idle instance's eviction", 20_000);
      const err = await rejection(p.call("calls"));
      assert.ok(err instanceof InstanceClosed, String(err));
      assert.match(err.reason ?? "", /evicted/);
      assert.equal(p.closed, true);
      await p.release();
    } finally {
      await own.close();
    }
  });

  it("instances die with the sidecar", async () => {
    const own = await spawnSidecar();
    const p = await own.plugin({ wat: STATEFUL, limits: callLimits });
    await p.call("add", undefined, { args: [1] });
    own.kill();
    await own.close().catch(() => {});
    assert.equal(p.closed, true);
    assert.ok((await rejection(p.call("calls"))) instanceof SidecarError);
    await p.release();
    // a new sidecar does not know the old one's instances
    const fresh = await spawnSidecar();
    try {
      assert.ok(!(await fresh.stats()).instances?.live);
    } finally {
      await fresh.close();
    }
  });
});
