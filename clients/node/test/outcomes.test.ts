// Every error class from a real guest, cancellation, and protocol errors,
// against the real sandboxd binary.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import {
  Cancelled,
  DisallowedImport,
  ExportError,
  FuelExhausted,
  InvalidModule,
  InvalidParams,
  MemoryLimitExceeded,
  SandboxError,
  Timeout,
  Trap,
  i32,
  type Sidecar,
} from "sandboxd";

import { rejection, sleep, spawnSidecar, waitFor, watPath } from "./helpers.js";

let sb: Sidecar;
before(async () => {
  sb = await spawnSidecar({ maxConcurrency: 2 });
});
after(async () => {
  await sb?.close();
});

describe("run outcomes map to error classes", () => {
  it("fuel_exhausted: infinite_loop.wat with fuel 1e6", async () => {
    const err = await rejection(sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1_000_000 } }));
    assert.ok(err instanceof FuelExhausted, String(err));
    assert.equal(err.kind, "fuel_exhausted");
    assert.equal(err.code, 2);
    assert.equal(err.budget, 1_000_000);
    assert.equal(err.fuelConsumed, 1_000_000);
    assert.equal(err.peakMemoryBytes, 0);
    assert.match(err.message, /fuel/);
  });

  it("timeout: infinite_loop.wat with fuel 1e12 and timeoutMs 50", async () => {
    const started = Date.now();
    const err = await rejection(
      sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1e12, timeoutMs: 50 } }),
    );
    const took = Date.now() - started;
    assert.ok(err instanceof Timeout, String(err));
    assert.equal(err.code, 3);
    assert.equal(err.timeoutMs, 50);
    // the protocol promises the figures on every run error that had a store
    assert.equal(typeof err.fuelConsumed, "number");
    assert.equal(typeof err.peakMemoryBytes, "number");
    console.log(`timeout after ${took} ms reported fuelConsumed=${err.fuelConsumed}`);
    // 1e12 fuel lasts minutes: a Timeout means the deadline fired; no wall-clock bound (shared machines)
    assert.ok(took >= 45, `timeout run took ${took} ms, less than its deadline`);
  });

  it("memory_limit_exceeded: memory_bomb.wat with memoryBytes 4 MiB", async () => {
    const err = await rejection(sb.run({ path: watPath("memory_bomb.wat"), limits: { memoryBytes: 4 << 20 } }));
    assert.ok(err instanceof MemoryLimitExceeded, String(err));
    assert.equal(err.code, 4);
    assert.equal(err.resource, "memory");
    assert.equal(err.limit, 4 << 20);
    assert.ok(err.peakMemoryBytes !== undefined && err.peakMemoryBytes <= 4 << 20 && err.peakMemoryBytes > 0);
    if (err.requested !== undefined) assert.ok(err.requested > 4 << 20);
  });

  it("memory_limit_exceeded (table): table_bomb.wat", async () => {
    const err = await rejection(sb.run({ path: watPath("table_bomb.wat") }));
    assert.ok(err instanceof MemoryLimitExceeded, String(err));
    assert.equal(err.resource, "table");
    assert.equal(err.limit, sb.info.limits.defaults.tableElements);
  });

  it("disallowed_import: disallowed_import.wat", async () => {
    const err = await rejection(sb.run({ path: watPath("disallowed_import.wat") }));
    assert.ok(err instanceof DisallowedImport, String(err));
    assert.equal(err.code, 5);
    assert.equal(err.module, "env");
    assert.equal(err.importName, "secret");
  });

  it("disallowed_import: host::log without the log capability", async () => {
    const err = await rejection(sb.run({ path: watPath("logger.wat") }));
    assert.ok(err instanceof DisallowedImport, String(err));
    assert.equal(err.module, "host");
    assert.equal(err.importName, "log");
  });

  it('invalid_module: wat "(module"', async () => {
    const err = await rejection(sb.run({ wat: "(module" }));
    assert.ok(err instanceof InvalidModule, String(err));
    assert.equal(err.code, 6);
    assert.equal(err.fuelConsumed, undefined); // never got a store
  });

  it("invalid_module: an id that was never compiled", async () => {
    const id = "sha256:" + "0".repeat(64);
    const err = await rejection(sb.run({ module: id }));
    assert.ok(err instanceof InvalidModule, String(err));
    assert.ok(err.message.includes(id), err.message);
  });

  it('export: function "nope"', async () => {
    const err = await rejection(sb.run({ path: watPath("well_behaved.wat"), function: "nope" }));
    assert.ok(err instanceof ExportError, String(err));
    assert.equal(err.code, 7);
    assert.equal(err.function, "nope");
  });

  it('trap: traps.wat "div_by_zero" is integer_divide_by_zero with frames', async () => {
    const err = await rejection(sb.run({ path: watPath("traps.wat"), function: "div_by_zero" }));
    assert.ok(err instanceof Trap, String(err));
    assert.equal(err.code, 8);
    assert.equal(err.trapCode, "integer_divide_by_zero");
    assert.ok(err.frames.length >= 1, JSON.stringify(err.data));
    assert.equal(typeof err.frames[0]!.funcIndex, "number");
    assert.equal(typeof err.frames[0]!.moduleOffset, "number");
  });

  it("trap codes of traps.wat", async () => {
    const want: Record<string, string> = {
      unreachable: "unreachable",
      int_overflow: "integer_overflow",
      bad_conversion: "invalid_conversion_to_integer", // protocol.md's name (traps.wat's header says bad_conversion_to_integer)
      oob: "memory_out_of_bounds",
      table_oob: "table_out_of_bounds",
      null_call: "indirect_call_to_null",
      bad_sig: "bad_signature",
      stack_overflow: "stack_overflow",
    };
    for (const [fn, code] of Object.entries(want)) {
      const err = await rejection(sb.run({ path: watPath("traps.wat"), function: fn }));
      assert.ok(err instanceof Trap, `${fn}: ${String(err)}`);
      assert.equal(err.trapCode, code, fn);
    }
  });

  it("a failed run carries the log lines emitted before it failed", async () => {
    const err = await rejection(
      sb.run({ path: watPath("log_flood.wat"), function: "flood", args: [100000], limits: { fuel: 500 }, capabilities: { log: true } }),
    );
    assert.ok(err instanceof FuelExhausted, String(err));
    assert.ok(err.logs.length > 0 && err.logs.length < 100000, `${err.logs.length} lines`);
  });
});

describe("cancellation", () => {
  it("abort of a running infinite loop settles promptly with Cancelled", async () => {
    const ac = new AbortController();
    const p = sb.run({
      path: watPath("infinite_loop.wat"),
      limits: { fuel: 1e15, timeoutMs: 20_000 },
      signal: ac.signal,
    });
    await waitFor(async () => (await sb.stats()).inFlight >= 1, "the run to start"); // running, not queued
    await sleep(20);
    const reason = new Error("user pressed stop");
    const started = performance.now();
    ac.abort(reason);
    const err = await rejection(p);
    const ms = performance.now() - started;
    console.log(`abort of a running infinite loop settled in ${ms.toFixed(1)} ms`);
    assert.ok(err instanceof Cancelled, String(err));
    assert.equal(err.code, -32800);
    assert.equal(err.kind, "cancelled");
    assert.equal(err.cause, reason);
    // Cancelled, not Timeout (the deadline is 20 s), is what shows the abort stopped it
  });

  it("abort of a queued run cancels it without disturbing the running ones", async () => {
    const acs = [new AbortController(), new AbortController(), new AbortController()];
    const runs = acs.map((ac) =>
      sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1e15, timeoutMs: 20_000 }, signal: ac.signal }),
    );
    // two run (maxConcurrency 2), the third waits
    await waitFor(async () => {
      const s = await sb.stats();
      return s.inFlight === 2 && s.queued === 1;
    }, "two running runs and one queued");
    acs[2]!.abort();
    const queuedErr = await rejection(runs[2]!);
    assert.ok(queuedErr instanceof Cancelled, String(queuedErr));

    acs[0]!.abort();
    acs[1]!.abort();
    for (const err of await Promise.all(runs.slice(0, 2).map(rejection))) assert.ok(err instanceof Cancelled, String(err));
    const ok = await sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 1] });
    assert.deepEqual(ok.values, [2]);
  });

  it("an already aborted signal rejects without sending the run", async () => {
    const before = await sb.stats();
    const err = await rejection(
      sb.run({ path: watPath("infinite_loop.wat"), signal: AbortSignal.abort(new Error("too late")) }),
    );
    assert.ok(err instanceof Cancelled);
    assert.equal((err as Cancelled).cause instanceof Error && ((err as Cancelled).cause as Error).message, "too late");
    const now = await sb.stats();
    assert.equal(now.inFlight + now.queued, 0, "the run was sent");
    assert.ok(now.requests - before.requests <= 1, `requests went ${before.requests} -> ${now.requests}`);
    assert.deepEqual(now.runs, before.runs);
  });

  it("an abort after the run finished changes nothing", async () => {
    const ac = new AbortController();
    const r = await sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [2, 2], signal: ac.signal });
    ac.abort();
    assert.deepEqual(r.values, [4]);
  });
});

describe("invalid params are InvalidParams, whoever notices them", () => {
  it("invalid params (-32602) name the field", async () => {
    const err = await rejection(sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 2], limits: { fuel: 0 } }));
    assert.ok(err instanceof InvalidParams, String(err));
    assert.ok(err instanceof SandboxError);
    assert.equal(err.kind, "invalid_params");
    assert.equal(err.code, -32602);
    assert.match(err.message, /limits\.fuel/);
  });

  it("a wrong argument type (-32602) names the argument", async () => {
    const wrongType = await rejection(
      sb.run({ path: watPath("well_behaved.wat"), function: "echo_i64", args: [i32(1)] }),
    );
    assert.ok(wrongType instanceof InvalidParams, String(wrongType));
    assert.equal(wrongType.code, -32602);
    assert.match(wrongType.message, /args\[0\]/);
    const notANumber = await rejection(
      sb.run({ path: watPath("well_behaved.wat"), function: "echo_i64", args: ["12abc"] }),
    );
    assert.ok(notANumber instanceof InvalidParams, String(notANumber));
    assert.equal(notANumber.code, -32602);
    assert.match(notANumber.message, /args\[0\]/);
  });

  it("a wrong argument count is an export error (protocol.md: error 7 with the signature)", async () => {
    const tooFew = await rejection(sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1] }));
    assert.ok(tooFew instanceof ExportError, `the sidecar answered ${String(tooFew)}`);
    assert.equal(tooFew.code, 7);
    assert.match(tooFew.message, /takes 2 argument/);
  });

  it("a value the client cannot encode is refused before sending", async () => {
    await assert.rejects(
      sb.run({ path: watPath("well_behaved.wat"), function: "echo_i64", args: [true as never] }),
      InvalidParams,
    );
  });

  it("an i64 from an unsafe-integer number is refused; from a bigint it is exact", async () => {
    const err = await rejection(sb.run({ path: watPath("well_behaved.wat"), function: "echo_i64", args: [2 ** 60 + 1] }));
    assert.ok(err instanceof InvalidParams, String(err));
    assert.match(err.message, /bigint/);
    const r = await sb.run({ path: watPath("well_behaved.wat"), function: "echo_i64", args: [2n ** 60n + 1n] });
    assert.deepEqual(r.values, [2n ** 60n + 1n]);
  });

  it("the sidecar survives protocol errors", async () => {
    const r = await sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [20, 22] });
    assert.deepEqual(r.values, [42]);
  });
});
