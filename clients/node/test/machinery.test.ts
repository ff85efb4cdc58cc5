// Client machinery against a scripted fake sidecar (test/fixtures/fake-sidecar.mjs):
// what goes on the wire, protocol violations, dying and hanging sidecars.
import assert from "node:assert/strict";
import { chmodSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";

import { Cancelled, HostError, Sidecar, SidecarError, f32Bits, f64, i64 } from "sandboxd";

import { packageDir, rejection } from "./helpers.js";

const fake = join(packageDir, "test", "fixtures", "fake-sidecar.mjs");
chmodSync(fake, 0o755);

async function withFake<T>(fn: (sb: Sidecar) => Promise<T>, args: string[] = []): Promise<T> {
  const sb = await Sidecar.spawn({ binary: fake, args });
  try {
    return await fn(sb);
  } finally {
    sb.kill();
    await sb.close().catch(() => {});
  }
}

/** The request the fake received, from its "echo" answer. */
async function echoed(sb: Sidecar, options: Parameters<Sidecar["run"]>[0]): Promise<Record<string, unknown>> {
  const err = await rejection(sb.run({ ...options, function: "echo" }));
  assert.ok(err instanceof HostError, String(err));
  return (err.data as { request: Record<string, unknown> }).request;
}

describe("spawn", () => {
  it("runs `<binary> serve [--max-concurrency N] [args…]` and keeps initialize's result", async () => {
    const sb = await Sidecar.spawn({ binary: fake, maxConcurrency: 3, args: ["--log-level", "debug"], env: { X: "1" } });
    try {
      assert.equal(sb.info.serverInfo.name, "fake-sidecar");
      assert.deepEqual(sb.info["argv"], ["serve", "--max-concurrency", "3", "--log-level", "debug"]);
      assert.equal(sb.binary, fake);
    } finally {
      await sb.close();
    }
  });
});

describe("the wire form of run", () => {
  it("sends JSON-RPC 2.0 requests with integer ids and the documented params", () =>
    withFake(async (sb) => {
      const req = await echoed(sb, {
        path: "relative/guest.wat",
        args: [1, -0, NaN, Infinity, -Infinity, 2n ** 64n - 1n, "7", i64(-3), f64(-0), f32Bits(0x7fc00001)],
        limits: { fuel: 1000, timeoutMs: 5, memoryBytes: 65536, logBytes: 10 },
        capabilities: { log: true, random: { seed: 2n ** 64n - 1n }, clock: true },
      });
      assert.equal(req["jsonrpc"], "2.0");
      assert.equal(req["method"], "run");
      assert.ok(Number.isInteger(req["id"]) && (req["id"] as number) >= 0);
      assert.deepEqual(req["params"], {
        module: { path: resolve("relative/guest.wat") },
        function: "echo",
        args: [1, "-0", "NaN", "Infinity", "-Infinity", "18446744073709551615", "7", { type: "i64", value: "-3" }, { type: "f64", value: "-0" }, { type: "f32", bits: "0x7fc00001" }],
        limits: { fuel: 1000, timeoutMs: 5, memoryBytes: 65536, logBytes: 10 },
        capabilities: { log: true, random: { seed: "18446744073709551615" }, clock: true },
      });
    }));

  it("sends wasm as base64 and compiled modules by id; small seeds as numbers", () =>
    withFake(async (sb) => {
      const wasm = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0]);
      const a = await echoed(sb, { wasm, capabilities: { random: { seed: 42n } } });
      assert.deepEqual(a["params"], {
        module: { wasm: "AGFzbQEAAAA=" },
        function: "echo",
        capabilities: { random: { seed: 42 } },
      });
      const b = await echoed(sb, { module: "sha256:" + "b".repeat(64) });
      assert.deepEqual((b["params"] as { module: unknown }).module, { id: "sha256:" + "b".repeat(64) });
      const c = await echoed(sb, { wat: "(module)" });
      assert.deepEqual((c["params"] as { module: unknown }).module, { wat: "(module)" });
    }));

  it("abort sends $/cancelRequest with the run's id", () =>
    withFake(async (sb) => {
      const ac = new AbortController();
      const p = sb.run({ wat: "(module)", function: "wait_cancel", signal: ac.signal });
      setTimeout(() => ac.abort(), 20);
      const err = await rejection(p);
      assert.ok(err instanceof Cancelled, String(err));
      const cancelParams = (err.data as { cancelParams: { id: unknown } }).cancelParams;
      assert.ok(Number.isInteger(cancelParams.id));
    }));
});

describe("logs are routed by request id", () => {
  it("collects lines of concurrent runs separately", () =>
    withFake(async (sb) => {
      const got: string[][] = [[], [], []];
      const rs = await Promise.all(
        got.map((lines) => sb.run({ wat: "(module)", function: "logs", onLog: (l) => lines.push(l) })),
      );
      for (const [i, r] of rs.entries()) {
        assert.deepEqual(r.logs, ["line 0", "line 1", "line 2"]);
        assert.deepEqual(got[i], r.logs);
      }
    }));
});

describe("protocol violations are reported, not papered over", () => {
  for (const [fn, pattern] of [
    ["log_after_response", /logLines is 1 but 0 log notifications arrived/],
    ["bad_seq", /seq 5 where 0 was expected/],
    ["f64_without_bits", /f64 result must carry bits/],
  ] as const) {
    it(fn, () =>
      withFake(async (sb) => {
        const err = await rejection(sb.run({ wat: "(module)", function: fn }));
        assert.ok(err instanceof SidecarError, String(err));
        assert.equal(err.reason, "protocol");
        assert.match(err.message, pattern);
        // the connection stays usable
        assert.deepEqual((await sb.run({ wat: "(module)" })).values, []);
      }),
    );
  }

  it("an unparsable header kills the sidecar and rejects with SidecarError", () =>
    withFake(async (sb) => {
      const other = sb.run({ wat: "(module)", function: "hang" });
      const err = await rejection(sb.run({ wat: "(module)", function: "garbage" }));
      assert.ok(err instanceof SidecarError, String(err));
      assert.equal(err.reason, "protocol");
      assert.match(err.message, /Content-Length/);
      const otherErr = await rejection(other);
      assert.ok(otherErr instanceof SidecarError && otherErr.reason === "protocol");
      assert.equal(sb.closed, true);
    }));
});

describe("a dying sidecar", () => {
  it("answers written before the exit are still delivered", () =>
    withFake(async (sb) => {
      const r = await sb.run({ wat: "(module)", function: "answer_then_die" });
      assert.deepEqual(r.values, [7]);
      const later = await rejection(sb.run({ wat: "(module)" }));
      assert.ok(later instanceof SidecarError && later.reason === "exited", String(later));
    }));

  it("a crash rejects every pending call with its exit status and stderr tail", () =>
    withFake(async (sb) => {
      const pending = [sb.run({ wat: "(module)", function: "hang" }), sb.run({ wat: "(module)", function: "hang" })];
      const crash = sb.run({ wat: "(module)", function: "die" });
      const errors = await Promise.all([...pending, crash].map(rejection));
      for (const err of errors) {
        assert.ok(err instanceof SidecarError, String(err));
        assert.equal(err.reason, "exited");
        assert.equal(err.exitCode, 3);
        assert.match(err.message, /exited with status 3 unexpectedly; last stderr line: panic: boom/);
        assert.match(err.stderrTail, /fake sidecar started[\s\S]*panic: boom\n$/);
      }
    }));

  it("close() of a sidecar that does not shut down kills it after timeoutMs", async () => {
    const sb = await Sidecar.spawn({ binary: fake });
    const stuck = sb.run({ wat: "(module)", function: "hang" });
    const started = Date.now();
    const err = await rejection(sb.close({ timeoutMs: 200 }));
    assert.ok(err instanceof SidecarError, String(err));
    assert.match(err.message, /did not exit within 200 ms/);
    assert.ok(Date.now() - started < 15_000, "hang bound: close must kill it instead of waiting forever");
    const stuckErr = await rejection(stuck);
    assert.ok(stuckErr instanceof SidecarError && stuckErr.reason === "closed", String(stuckErr));
  });
});
