// Host functions served by the client, against the real sidecar: a guest
// calling a declared import answered by a Node handler. Guests:
// testdata/wat/host_calls.wat (env::lookup (i64) -> (i32), env::wait) and
// testdata/plugins/wat/host_user.wat (an Extism plugin calling
// extism:host/user::transform, bytes both ways). The wire shapes are in
// host-calls-wire.test.ts.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { DisallowedImport, HostFunctionError, SandboxError, Timeout, type HostFunction, type Sidecar } from "sandboxd";

import { rejection, spawnSidecar, testdataDir, waitFor, watText } from "./helpers.js";

const guest = watText("host_calls.wat");
const hostUser = readFileSync(join(testdataDir, "plugins", "wat", "host_user.wat"), "utf8");

const lookup = (handler: HostFunction["handler"]): HostFunction => ({ module: "env", name: "lookup", params: ["i64"], results: ["i32"], handler });
const wait = (handler: HostFunction["handler"]): HostFunction => ({ module: "env", name: "wait", handler });
const transform = (handler: HostFunction["handler"]): HostFunction => ({
  module: "extism:host/user",
  name: "transform",
  params: ["bytes"],
  results: ["bytes"],
  handler,
});
/** Answers lookup(k) with k + 100 after a while, so that runs wait on the parent at once. */
const plus = lookup(async ([k]) => {
  await new Promise((r) => setTimeout(r, 10));
  return Number(k) + 100;
});

/** Runs fn with a sidecar of its own. */
async function withSidecar(maxConcurrency: number, fn: (sb: Sidecar) => Promise<void>): Promise<void> {
  const sb = await spawnSidecar({ maxConcurrency });
  try {
    await fn(sb);
  } finally {
    await sb.close();
  }
}

const neverCalled = wait(() => {
  throw new Error("env::wait is not called by this export");
});

describe("host calls against the real sidecar", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar({ maxConcurrency: 2 });
  });
  after(async () => {
    await sb.close();
  });

  it("serves a guest's import with a sync or an async handler", async () => {
    const table = new Map([
      [7n, 700],
      [8n, 80],
    ]);
    const sync = await sb.run({ wat: guest, function: "lookup_sum", args: [7n], hostFunctions: [lookup(([k]) => table.get(k as bigint)), neverCalled] });
    assert.deepEqual(sync.values, [780]);
    const later = lookup(async ([k]) => {
      await new Promise((r) => setTimeout(r, 5));
      return Number(k) * 2;
    });
    assert.deepEqual((await sb.run({ wat: guest, function: "lookup_sum", args: [20n], hostFunctions: [later, neverCalled] })).values, [82]);
  });

  it("refuses the import when it is not declared", async () => {
    const err = await rejection(sb.run({ wat: guest, function: "lookup", args: [1n] }));
    assert.ok(err instanceof DisallowedImport, String(err));
    assert.match((err as Error).message, /env::lookup/);
  });

  it("passes bytes both ways through an Extism plugin, 1 byte to MiBs", async () => {
    const big = new Uint8Array(3 << 20).map((_, i) => (i * 31) & 255);
    const reverse = transform(([data]) => (data as Uint8Array).slice().reverse());
    for (const data of [new Uint8Array([120]), new TextEncoder().encode("h\u00e9llo"), new Uint8Array([0, 255, 0, 1]), big]) {
      const r = await sb.run({
        wat: hostUser,
        function: "run",
        input: data,
        limits: { memoryBytes: 64 << 20, outputBytes: 16 << 20, timeoutMs: 60_000 }, // a hang bound: MiBs on a loaded machine
        hostFunctions: [reverse],
      });
      assert.deepEqual(r.output, data.slice().reverse(), `${data.length} bytes`);
      assert.deepEqual([r.logDropped, r.logs], [1, []], "its log_info line, without the log grant, is dropped and counted");
    }
    const upper = transform(([data]) => Buffer.from(data as Uint8Array).toString("utf8").toUpperCase()); // a string is sent as its UTF-8
    assert.equal(Buffer.from((await sb.run({ wat: hostUser, function: "run", input: "abc", hostFunctions: [upper] })).output).toString(), "ABC");
  });

  it("ends the run with HostFunctionError when a handler throws or rejects, and keeps serving", async () => {
    const throws = lookup(([k]) => {
      throw new RangeError(`no key ${k}`);
    });
    const rejects = lookup(async () => Promise.reject(new Error("store is down")));
    for (const [fn, message] of [
      [throws, "RangeError: no key 5"],
      [rejects, "Error: store is down"],
    ] as const) {
      const err = await rejection(sb.run({ wat: guest, function: "lookup", args: [5n], hostFunctions: [fn, neverCalled] }));
      assert.ok(err instanceof HostFunctionError, String(err));
      assert.ok((err as Error).message.includes("env::lookup") && (err as Error).message.includes(message), (err as Error).message);
    }
    assert.deepEqual((await sb.run({ wat: guest, function: "lookup", args: [5n], hostFunctions: [lookup(([k]) => Number(k)), neverCalled] })).values, [5]);
  });

  it("ends a handler that never answers at the run's deadline: the run times out, the handler's signal aborts", async () => {
    let aborted = false;
    const hold = wait((_args, { signal }) => new Promise<void>((resolve) => signal.addEventListener("abort", () => ((aborted = true), resolve()))));
    const err = await rejection(sb.run({ wat: guest, function: "wait", limits: { timeoutMs: 300 }, hostFunctions: [lookup(() => 0), hold] }));
    assert.ok(err instanceof Timeout, String(err));
    // The run's answer and the call's cancel are separate frames: wait for
    // the abort rather than depend on their order.
    await waitFor(() => aborted, "the handler's signal to abort");
  });

  it("lets a handler run another module", async () => {
    const nested = lookup(async ([k]) => (await sb.run({ wat: watText("well_behaved.wat"), function: "add", args: [Number(k), 1] })).values[0] as number);
    assert.deepEqual((await sb.run({ wat: guest, function: "lookup_sum", args: [10n], hostFunctions: [nested, neverCalled] })).values, [23]);
  });

  it("lets a handler evaluate snippets, one-shot and in a session (both name its host call)", async () => {
    const counter = await sb.session({ language: "lua" });
    try {
      const get = lookup(async ([k]) => {
        await counter.eval({ code: "n = (n or 0) + input", input: Number(k) });
        const doubled = (await sb.eval({ language: "js", code: "input * 2", input: Number(k) })).value as number;
        return doubled + ((await counter.eval({ code: "n" })).value as number);
      });
      assert.deepEqual((await sb.run({ wat: guest, function: "lookup_sum", args: [10n], hostFunctions: [get, neverCalled] })).values, [20 + 10 + (22 + 21)]);
    } finally {
      await counter.close();
    }
  });

  it("answers a handler calling its own instance with an error, not a hang", async () => {
    const errors: unknown[] = [];
    const p = await sb.plugin({
      wat: guest,
      hostFunctions: [
        lookup(async ([k]) => {
          errors.push(await rejection(p.call("lookup", undefined, { args: [k as bigint] })));
          return 1;
        }),
        neverCalled,
      ],
    });
    try {
      assert.deepEqual((await p.call("lookup", undefined, { args: [3n] })).values, [1]);
    } finally {
      await p.release();
    }
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof SandboxError, String(errors[0]));
    assert.match((errors[0] as Error).message, /waiting/);
  });

  it("serves runs waiting on the parent at once", async () => {
    const runs = [0, 1].map((k) => sb.run({ wat: guest, function: "lookup", args: [BigInt(k)], hostFunctions: [plus, neverCalled] }));
    assert.deepEqual((await Promise.all(runs)).map((r) => r.values[0]), [100, 101]);
  });
});

describe("host calls and the run slots", () => {
  // Issue 20 item 4: a run gives its slot back while it waits for the parent
  // and holds a store from the pool's instances' share, so a nested run, or a
  // run that took a slot given back, gets a slot and a store, and the waiting
  // runs come back to a slot ahead of queued ones.
  it("lets a handler run another module with --max-concurrency 1", () =>
    withSidecar(1, async (sb) => {
      const nested = lookup(async ([k]) => (await sb.run({ wat: watText("well_behaved.wat"), function: "add", args: [Number(k), 1] })).values[0] as number);
      const r = await sb.run({ wat: guest, function: "lookup", args: [10n], limits: { timeoutMs: 500 }, hostFunctions: [nested, neverCalled] });
      assert.deepEqual(r.values, [11]);
    }),
  );

  it("serves more runs waiting on the parent than there are slots", () =>
    withSidecar(2, async (sb) => {
      const runs = [0, 1, 2, 3, 4, 5].map((k) =>
        sb.run({ wat: guest, function: "lookup", args: [BigInt(k)], limits: { timeoutMs: 500 }, hostFunctions: [plus, neverCalled] }),
      );
      assert.deepEqual((await Promise.all(runs)).map((r) => r.values[0]), [100, 101, 102, 103, 104, 105]);
    }),
  );
});
