// Integration tests against the real sandboxd binary: runs, module forms,
// logs, capabilities, values and pipelining.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { InvalidParams, f32Bits, f64, f64Bits, i32, i64, type Sidecar, type WireValue } from "sandboxd";

import { spawnSidecar, watPath, watText, wireFixture } from "./helpers.js";

/** (module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add)) */
const ADD_WASM = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
  0x01, 0x07, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f, // type: (i32 i32) -> i32
  0x03, 0x02, 0x01, 0x00, // func 0: type 0
  0x07, 0x07, 0x01, 0x03, 0x61, 0x64, 0x64, 0x00, 0x00, // export "add" = func 0
  0x0a, 0x09, 0x01, 0x07, 0x00, 0x20, 0x00, 0x20, 0x01, 0x6a, 0x0b, // code
]);

const ADD_WAT = `(module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))`;

let sb: Sidecar;
before(async () => {
  sb = await spawnSidecar({ maxConcurrency: 2 });
});
after(async () => {
  await sb?.close();
});

describe("initialize", () => {
  it("reports the server, value types and limits", () => {
    assert.equal(sb.info.serverInfo.name, "sandboxd");
    assert.deepEqual([...sb.info.capabilities.valueTypes].sort(), ["f32", "f64", "i32", "i64"]);
    assert.equal(sb.info.maxConcurrency, 2);
    assert.ok(sb.info.limits.defaults.fuel > 0);
    assert.ok(typeof sb.pid === "number" && sb.pid > 0);
  });
});

describe("run", () => {
  it("runs the README example: add(2, 40) = 42 with limits and capabilities", async () => {
    const lines: string[] = [];
    const r = await sb.run({
      wat: ADD_WAT,
      function: "add",
      args: [2, 40],
      limits: { fuel: 1_000_000, timeoutMs: 100, memoryBytes: 4 << 20 },
      capabilities: { log: true, random: { seed: 42 }, clock: true },
      onLog: (line) => lines.push(line),
      signal: new AbortController().signal,
    });
    assert.deepEqual(r.values, [42]);
    assert.deepEqual(r.rawValues, [{ type: "i32", value: 42 }]);
    assert.equal(r.fuelConsumed, 4);
    assert.equal(r.peakMemoryBytes, 0);
    assert.deepEqual(r.logs, []);
    assert.deepEqual(lines, []);
    assert.equal(typeof r.elapsedMs, "number");
    assert.ok(r.elapsedMs >= 0 && r.elapsedMs < 60_000, `elapsedMs ${r.elapsedMs}`); // a unit check, not a timing one
    assert.match(r.moduleId, /^sha256:[0-9a-f]{64}$/);
    assert.equal(r.logTruncated, false);
  });

  it("has the exact fuel figures of well_behaved.wat", async () => {
    for (const [n, want, fuel] of [
      [10, 55, 182],
      [20, 6765, 352],
      [30, 832040, 522],
    ] as const) {
      const r = await sb.run({ path: watPath("well_behaved.wat"), function: "fib", args: [n] });
      assert.deepEqual(r.values, [want]);
      assert.equal(r.fuelConsumed, fuel, `fib(${n})`);
    }
  });

  it("accepts every module form: wat, wasm, path, compiled module and module id", async () => {
    const fromWasm = await sb.run({ wasm: ADD_WASM, function: "add", args: [1, 2] });
    assert.deepEqual(fromWasm.values, [3]);
    const fromPath = await sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [3, 4] });
    assert.deepEqual(fromPath.values, [7]);

    const mod = await sb.compile({ wasm: ADD_WASM });
    assert.match(mod.id, /^sha256:[0-9a-f]{64}$/);
    assert.equal(mod.id, fromWasm.moduleId);
    assert.deepEqual(mod.imports, []);
    assert.deepEqual(mod.exports, [{ name: "add", kind: "func", params: ["i32", "i32"], results: ["i32"] }]);
    assert.equal(typeof mod.cached, "boolean");
    assert.ok(mod.compileMs >= 0);
    const again = await sb.compile({ wasm: ADD_WASM });
    assert.equal(again.id, mod.id);
    assert.equal(again.cached, true);

    const byModule = await sb.run({ module: mod, function: "add", args: [5, 6] });
    assert.deepEqual(byModule.values, [11]);
    const byId = await sb.run({ module: mod.id, function: "add", args: [7, 8] });
    assert.deepEqual(byId.values, [15]);
  });

  it("describes imports and exports on compile", async () => {
    const mod = await sb.compile({ wat: watText("logger.wat") });
    assert.deepEqual(mod.imports, [{ module: "host", name: "log", kind: "func", type: "(i32, i32) -> ()" }]);
    const names = mod.exports.map((e) => `${e.kind}:${e.name}`).sort();
    assert.deepEqual(names, ["func:run", "memory:memory"]);
  });

  it("refuses a run without exactly one module source before sending it", async () => {
    await assert.rejects(sb.run({ function: "add" }), InvalidParams);
    await assert.rejects(sb.run({ wat: ADD_WAT, path: "x.wat" }), /exactly one/);
  });
});

describe("logs", () => {
  it("delivers log lines through onLog, in order, before the promise resolves", async () => {
    const events: string[] = [];
    const p = sb.run({
      path: watPath("logger.wat"),
      capabilities: { log: true },
      onLog: (line, seq) => events.push(`log ${seq} ${line}`),
    });
    p.then(() => events.push("resolved"));
    const r = await p;
    await Promise.resolve();
    assert.deepEqual(events, ["log 0 hello from the guest", "resolved"]);
    assert.deepEqual(r.logs, ["hello from the guest"]);
  });

  it("keeps many lines in seq order", async () => {
    const seqs: number[] = [];
    const r = await sb.run({
      path: watPath("log_flood.wat"),
      function: "flood",
      args: [200],
      capabilities: { log: true },
      onLog: (_line, seq) => seqs.push(seq),
    });
    assert.equal(r.logs.length, 200);
    assert.deepEqual(seqs, Array.from({ length: 200 }, (_, i) => i));
    assert.ok(r.logs.every((l) => l === "x".repeat(1000)));
    assert.equal(r.logTruncated, false);
  });

  it("drops lines beyond logBytes and says so", async () => {
    const r = await sb.run({
      path: watPath("log_flood.wat"),
      function: "flood",
      args: [50],
      limits: { logBytes: 10_000 },
      capabilities: { log: true },
    });
    assert.ok(r.logs.length >= 1 && r.logs.length <= 10, `kept ${r.logs.length} lines`);
    assert.equal(r.logTruncated, true);
  });

  it("replaces invalid UTF-8 in a line", async () => {
    const r = await sb.run({ path: watPath("log_invalid_utf8.wat"), capabilities: { log: true } });
    assert.deepEqual(r.logs, ["ok \uFFFD\uFFFD bad"]);
  });

  it("rejects a successful run whose onLog threw, after all lines", async () => {
    const boom = new Error("observer failed");
    let calls = 0;
    const err = await sb
      .run({
        path: watPath("log_flood.wat"),
        function: "flood",
        args: [3],
        capabilities: { log: true },
        onLog: () => {
          calls++;
          throw boom;
        },
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.equal(err, boom);
    assert.equal(calls, 3);
  });
});

describe("capabilities", () => {
  it("seeds host::random", async () => {
    const r = await sb.run({ path: watPath("random_roller.wat"), function: "roll", capabilities: { random: { seed: 42 } } });
    assert.deepEqual(r.values, [803958421]);
    const big = await sb.run({
      path: watPath("random_roller.wat"),
      function: "roll",
      capabilities: { random: { seed: 2n ** 64n - 1n } },
    });
    assert.equal(typeof big.values[0], "number");
  });

  it("grants host::now_ns", async () => {
    const r = await sb.run({ path: watPath("clock.wat"), capabilities: { clock: true } });
    assert.equal(typeof r.values[0], "bigint");
    assert.ok((r.values[0] as bigint) >= 0n);
  });

  it("reports peak memory", async () => {
    const r = await sb.run({ path: watPath("grow_within_cap.wat"), limits: { memoryBytes: 4 << 20 } });
    assert.deepEqual(r.values, [32]);
    assert.equal(r.peakMemoryBytes, 2097152);
  });
});

interface GoldenCase {
  name: string;
  wire: WireValue;
  bits: string;
}

describe("values through echo_* of well_behaved.wat", () => {
  const golden = wireFixture<{ cases: GoldenCase[] }>("values.json").cases;
  const path = watPath("well_behaved.wat");

  for (const c of golden) {
    it(`echoes ${c.name} exactly (wire form and bits form)`, async () => {
      const fn = `echo_${c.wire.type}`;
      const byWire = await sb.run({ path, function: fn, args: [c.wire as never] });
      assert.deepEqual(byWire.rawValues, [c.wire]);
      const byBits = await sb.run({ path, function: fn, args: [{ type: c.wire.type, bits: c.bits }] });
      assert.deepEqual(byBits.rawValues, [c.wire]);
      const v = byWire.values[0];
      if (c.wire.type === "i64") assert.equal(v, BigInt(c.wire.value as string));
      else if (c.wire.type === "i32") assert.equal(v, c.wire.value);
      else if (c.wire.value === "NaN") assert.ok(Number.isNaN(v));
      else if (c.wire.value === "Infinity") assert.equal(v, Infinity);
      else if (c.wire.value === "-Infinity") assert.equal(v, -Infinity);
      else assert.ok(Object.is(v, c.wire.value), `${String(v)} vs ${String(c.wire.value)}`);
    });
  }

  it("takes plain JS values: bigint, number, decimal string, NaN, ±Infinity, -0", async () => {
    const echo = async (fn: string, arg: unknown) =>
      (await sb.run({ path, function: fn, args: [arg as never] })).values[0];
    assert.equal(await echo("echo_i64", 2n ** 63n - 1n), 2n ** 63n - 1n);
    assert.equal(await echo("echo_i64", -(2n ** 63n)), -(2n ** 63n));
    assert.equal(await echo("echo_i64", 2n ** 64n - 1n), -1n); // unsigned wraps
    assert.equal(await echo("echo_i64", 9007199254740993n), 9007199254740993n); // beyond 2^53
    assert.equal(await echo("echo_i64", "-42"), -42n);
    assert.equal(await echo("echo_i64", 42), 42n);
    assert.equal(await echo("echo_i64", i64(-(2n ** 63n))), -(2n ** 63n));
    assert.equal(await echo("echo_i32", 2 ** 32 - 1), -1);
    assert.equal(await echo("echo_i32", i32(-2147483648)), -2147483648);
    assert.ok(Number.isNaN(await echo("echo_f64", NaN)));
    assert.equal(await echo("echo_f64", Infinity), Infinity);
    assert.equal(await echo("echo_f64", -Infinity), -Infinity);
    assert.ok(Object.is(await echo("echo_f64", -0), -0));
    assert.ok(Object.is(await echo("echo_f64", f64(-0)), -0));
    assert.ok(Object.is(await echo("echo_f32", -0), -0));
    assert.equal(await echo("echo_f64", 0.1), 0.1);
    assert.equal(await echo("echo_f32", 0.1), Math.fround(0.1));
    assert.equal(await echo("echo_f64", 5e-324), 5e-324);
  });

  it("keeps NaN payloads in rawValues", async () => {
    const r64 = await sb.run({ path, function: "echo_f64", args: [f64Bits(0x7ff8000000000123n)] });
    assert.deepEqual(r64.rawValues, [{ type: "f64", value: "NaN", bits: "0x7ff8000000000123" }]);
    assert.ok(Number.isNaN(r64.values[0]));
    const r32 = await sb.run({ path, function: "echo_f32", args: [f32Bits(0x7fc00001)] });
    assert.deepEqual(r32.rawValues, [{ type: "f32", value: "NaN", bits: "0x7fc00001" }]);
  });

  it("returns multiple values with their types: multi(i32, i64, f32, f64) = (d, c, b, a)", async () => {
    const r = await sb.run({ path, function: "multi", args: [-7, 2n ** 62n, 1.5, -0] });
    assert.equal(r.values.length, 4);
    assert.ok(Object.is(r.values[0], -0));
    assert.equal(r.values[1], 1.5);
    assert.equal(r.values[2], 2n ** 62n);
    assert.equal(r.values[3], -7);
    assert.deepEqual(
      r.rawValues.map((v) => v.type),
      ["f64", "f32", "i64", "i32"],
    );
  });
});

describe("pipelining", () => {
  it("runs 100 concurrent calls on one sidecar, each answered correctly", async () => {
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => sb.run({ wasm: ADD_WASM, function: "add", args: [i, 1000] })),
    );
    results.forEach((r, i) => assert.deepEqual(r.values, [i + 1000]));
    console.log(`100 concurrent runs took ${Date.now() - started} ms`);
  });

  it("routes interleaved log notifications to the right run", async () => {
    const counts = Array.from({ length: 40 }, (_, i) => (i * 7) % 23);
    const seen = counts.map(() => 0);
    const results = await Promise.all(
      counts.map((n, i) =>
        sb.run({
          path: watPath("log_flood.wat"),
          function: "flood",
          args: [n],
          capabilities: { log: true },
          onLog: () => seen[i]!++,
        }),
      ),
    );
    results.forEach((r, i) => assert.equal(r.logs.length, counts[i]));
    assert.deepEqual(seen, counts);
  });
});
