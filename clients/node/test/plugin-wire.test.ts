// The plugin API against the scripted fake sidecar (test/fixtures/fake-sidecar.mjs):
// what instantiate, call and release put on the wire, and how their answers
// and errors are read. The real sidecar is in plugin.test.ts.
import assert from "node:assert/strict";
import { resolve } from "node:path";
import { describe, it } from "node:test";

import {
  Cancelled,
  HostError,
  InstanceClosed,
  InvalidParams,
  Plugin,
  PluginError,
  Sidecar,
  SidecarError,
  Timeout,
  TooManyInstances,
  errorFromResponse,
  i64,
} from "sandboxd";

import { fakeSidecar, rejection, withFake } from "./helpers.js";

/** The request the fake received, from its "echo" answer (a host error quoting it). */
async function echoed(p: Promise<unknown>): Promise<Record<string, unknown>> {
  const err = await rejection(p);
  assert.ok(err instanceof HostError, String(err));
  return (err.data as { request: Record<string, unknown> }).request;
}

describe("instantiate on the wire", () => {
  it("sends the module, capabilities, limits and config as the contract has them", () =>
    withFake(async (sb) => {
      const req = await echoed(
        sb.plugin({
          path: "relative/plugin.wasm",
          wasi: { args: ["a"] },
          capabilities: { log: true },
          limits: { memoryBytes: 1 << 20, varBytes: 4096, fuel: 1000, timeoutMs: 50 },
          config: { fake: "echo", greeting: "hi" },
        }),
      );
      assert.equal(req["method"], "instantiate");
      assert.deepEqual(req["params"], {
        module: { path: resolve("relative/plugin.wasm") },
        capabilities: { log: true, wasi: { args: ["a"] } },
        limits: { memoryBytes: 1 << 20, varBytes: 4096, fuel: 1000, timeoutMs: 50 },
        config: { fake: "echo", greeting: "hi" },
      });
    }));

  it("takes moduleId and wasm bytes as module sources", () =>
    withFake(async (sb) => {
      const byId = await echoed(sb.plugin({ moduleId: "sha256:" + "c".repeat(64), config: { fake: "echo" } }));
      assert.deepEqual((byId["params"] as { module: unknown }).module, { id: "sha256:" + "c".repeat(64) });
      const bytes = await echoed(sb.plugin({ wasm: new Uint8Array([0, 97, 115, 109]), config: { fake: "echo" } }));
      assert.deepEqual((bytes["params"] as { module: unknown }).module, { wasm: "AGFzbQ==" });
    }));

  it("refuses bad options before sending: two sources, a config value that is not a string, wasi twice", () =>
    withFake(async (sb) => {
      let err = await rejection(sb.plugin({ wat: "(module)", moduleId: "sha256:x" }));
      assert.ok(err instanceof InvalidParams && /exactly one of .*got wat, moduleId/.test(err.message), String(err));
      err = await rejection(sb.plugin({ wat: "(module)", config: { n: 1 as unknown as string } }));
      assert.ok(err instanceof InvalidParams && err.message.startsWith("config.n: must be a string"), String(err));
      err = await rejection(sb.plugin({ wat: "(module)", wasi: true, capabilities: { wasi: true } }));
      assert.ok(err instanceof InvalidParams, String(err));
    }));

  it("gives a Plugin with the id, module id, exports and what instantiation cost", () =>
    withFake(async (sb) => {
      const lines: [string, number, string | undefined][] = [];
      const p = await sb.plugin({ wat: "(module)", config: { fake: "logs" }, onLog: (l, s, lv) => lines.push([l, s, lv]) });
      assert.ok(p instanceof Plugin);
      assert.match(p.id, /^inst-fake-\d+$/);
      assert.equal(p.moduleId, "sha256:" + "b".repeat(64));
      assert.equal(p.isPlugin, true);
      assert.deepEqual(p.exports, [{ name: "greet", kind: "func", params: [], results: ["i32"] }]);
      assert.equal(p.instantiation.fuelConsumed, 5);
      assert.equal(p.instantiation.elapsedMs, 0.3);
      assert.deepEqual(p.instantiation.logEntries, [{ line: "init", level: "info" }]);
      assert.deepEqual(lines, [["init", 0, "info"]]);
      assert.equal(p.closed, false);
    }));

  it("maps -32002 to TooManyInstances with the counts", () =>
    withFake(async (sb) => {
      const err = await rejection(sb.plugin({ wat: "(module)", config: { fake: "too_many" } }));
      assert.ok(err instanceof TooManyInstances, String(err));
      assert.equal(err.kind, "too_many_instances");
      assert.equal(err.code, -32002);
      assert.equal(err.instances, 2);
      assert.equal(err.maxInstances, 2);
    }));

  it("a result without an instance id is a protocol violation", () =>
    withFake(async (sb) => {
      const err = await rejection(sb.plugin({ wat: "(module)", config: { fake: "no_instance" } }));
      assert.ok(err instanceof SidecarError && err.reason === "protocol" && /no instance id/.test(err.message), String(err));
    }));

  it("an aborted instantiate whose instance is made anyway, however late, releases it", () =>
    withFake(async (sb) => {
      const abort = new AbortController();
      const pending = sb.plugin({ wat: "(module)", config: { fake: "late" }, signal: abort.signal });
      setTimeout(() => abort.abort("gave up"), 20);
      const err = await rejection(pending);
      assert.ok(err instanceof Cancelled && err.cause === "gave up", String(err));
      const probe = await sb.plugin({ wat: "(module)" });
      const released = JSON.parse(new TextDecoder().decode((await probe.call("releases")).output)) as string[];
      assert.deepEqual(released, ["inst-fake-1"]);
    }));

  it("an already aborted signal rejects without sending", () =>
    withFake(async (sb) => {
      const err = await rejection(sb.plugin({ wat: "(module)", signal: AbortSignal.abort("no") }));
      assert.ok(err instanceof Cancelled && err.cause === "no", String(err));
    }));
});

describe("call on the wire", () => {
  it("sends the instance, function, input as a string or base64, args and call limits", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      let req = await echoed(p.call("echo", "héllo"));
      assert.equal(req["method"], "call");
      assert.deepEqual(req["params"], { instance: p.id, function: "echo", input: "héllo" });
      req = await echoed(p.call("echo", new Uint8Array([0, 1, 255]), { limits: { fuel: 10, timeoutMs: 5, logBytes: 1, outputBytes: 2 } }));
      assert.deepEqual(req["params"], {
        instance: p.id,
        function: "echo",
        input: { base64: "AAH/" },
        limits: { fuel: 10, timeoutMs: 5, logBytes: 1, outputBytes: 2 },
      });
      req = await echoed(p.call("echo", undefined, { args: [1, i64(-2)] }));
      assert.deepEqual(req["params"], { instance: p.id, function: "echo", args: [1, { type: "i64", value: "-2" }] });
    }));

  it("refuses instance-wide limits, a bad input and a missing function name before sending", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      let err = await rejection(p.call("greet", "", { limits: { memoryBytes: 1 } as never }));
      assert.ok(err instanceof InvalidParams && err.message.startsWith("limits.memoryBytes: fixed at instantiate"), String(err));
      err = await rejection(p.call("greet", 5 as unknown as string));
      assert.ok(err instanceof InvalidParams && /input must be a string or a Uint8Array/.test(err.message), String(err));
      err = await rejection(p.call(undefined as unknown as string));
      assert.ok(err instanceof InvalidParams, String(err));
    }));

  it("reads output as bytes (text or base64), values, figures and log levels", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      let r = await p.call("greet", "x");
      assert.deepEqual(r.output, new TextEncoder().encode("called greet"));
      assert.equal(r.fuelConsumed, 7);
      assert.equal(r.peakMemoryBytes, 131072);
      assert.equal(r.elapsedMs, 0.04);
      assert.equal(r.queuedMs, 0.003);
      r = await p.call("binary");
      assert.ok(r.output instanceof Uint8Array);
      assert.deepEqual([...r.output], [0, 255, 1]);
      r = await p.call("add", undefined, { args: [1, 2] });
      assert.deepEqual(r.values, [3]);
      assert.equal(r.output.length, 0);
      const seen: unknown[] = [];
      r = await p.call("logs", "", { onLog: (line, seq, level) => seen.push([line, seq, level]) });
      assert.deepEqual(seen, [["plain", 0, undefined], ["warned", 1, "warn"]]);
      assert.deepEqual(r.logs, ["plain", "warned"]);
      assert.deepEqual(r.logEntries, [{ line: "plain", level: undefined }, { line: "warned", level: "warn" }]);
    }));

  it("what onLog throws rejects a call that succeeded, after every line", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      const seen: string[] = [];
      const boom = new Error("observer failed");
      const err = await rejection(
        p.call("logs", "", {
          onLog: (line) => {
            seen.push(line);
            throw boom;
          },
        }),
      );
      assert.equal(err, boom);
      assert.deepEqual(seen, ["plain", "warned"]);
      assert.equal(p.closed, false);
    }));

  it("a malformed output is a protocol violation", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      const err = await rejection(p.call("bad_output"));
      assert.ok(err instanceof SidecarError && err.reason === "protocol" && /output is not a bytes object/.test(err.message), String(err));
    }));

  it("maps plugin_error to PluginError (instance kept), a fence to its class (instance closed), -32001 to InstanceClosed", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      const failed = await rejection(p.call("fail"));
      assert.ok(failed instanceof PluginError, String(failed));
      assert.equal(failed.pluginMessage, "nope");
      assert.equal(failed.function, "fail");
      assert.equal(failed.returnCode, 1);
      assert.equal(failed.code, 10);
      assert.equal(failed.instanceClosed, false);
      assert.equal(p.closed, false);

      const timedOut = await rejection(p.call("spin"));
      assert.ok(timedOut instanceof Timeout, String(timedOut));
      assert.equal(timedOut.instanceClosed, true);
      assert.equal(p.closed, true);

      const q = await sb.plugin({ wat: "(module)" });
      const closed = await rejection(q.call("closed"));
      assert.ok(closed instanceof InstanceClosed, String(closed));
      assert.equal(closed.code, -32001);
      assert.equal(closed.kind, "instance_closed");
      assert.equal(closed.instance, q.id);
      assert.equal(closed.reason, "released");
      assert.equal(q.closed, true);
    }));

  it("aborting a call sends $/cancelRequest with its id and rejects with Cancelled", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      const abort = new AbortController();
      const pending = p.call("wait_cancel", "", { signal: abort.signal });
      setTimeout(() => abort.abort("enough"), 20);
      const err = await rejection(pending);
      assert.ok(err instanceof Cancelled && err.cause === "enough", String(err));
    }));
});

describe("release on the wire", () => {
  it("sends release once however often it is called, and await using releases", () =>
    withFake(async (sb) => {
      const p = await sb.plugin({ wat: "(module)" });
      await Promise.all([p.release(), p.release()]);
      await p.release();
      assert.equal(p.closed, true);
      {
        await using q = await sb.plugin({ wat: "(module)" });
        assert.equal(q.closed, false);
      }
      const probe = await sb.plugin({ wat: "(module)" });
      const released = JSON.parse(new TextDecoder().decode((await probe.call("releases")).output)) as string[];
      assert.equal(released.length, 2);
      assert.equal(released[0], p.id);
    }));

  it("resolves without sending once the sidecar is gone", async () => {
    const sb = await Sidecar.spawn({ binary: fakeSidecar });
    const p = await sb.plugin({ wat: "(module)" });
    sb.kill();
    await sb.close().catch(() => {});
    assert.equal(p.closed, true);
    await p.release();
    const err = await rejection(p.call("greet"));
    assert.ok(err instanceof SidecarError, String(err));
  });
});

describe("run with input", () => {
  it("sends input and config with run", () =>
    withFake(async (sb) => {
      const err = await rejection(sb.run({ wat: "(module)", function: "echo", input: new Uint8Array([1]), config: { k: "v" } }));
      assert.ok(err instanceof HostError);
      const req = (err.data as { request: { params: unknown } }).request;
      assert.deepEqual(req.params, { module: { wat: "(module)" }, function: "echo", input: { base64: "AQ==" }, config: { k: "v" } });
    }));
});

describe("errorFromResponse", () => {
  it("maps -32001 and -32002 to their classes, not to SidecarError", () => {
    const closed = errorFromResponse(-32001, "instance i is closed: released", { instance: "i", reason: "released" });
    assert.ok(closed instanceof InstanceClosed);
    assert.equal(closed.reason, "released");
    const many = errorFromResponse(-32002, "too many instances", { instances: 64, maxInstances: 64 });
    assert.ok(many instanceof TooManyInstances);
    assert.equal(many.maxInstances, 64);
    assert.ok(errorFromResponse(-32003, "x", undefined) instanceof SidecarError);
  });
});
