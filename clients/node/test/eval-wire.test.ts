// eval and sessions against the scripted fake sidecar (test/fixtures/fake-eval.mjs):
// what the client puts on the wire, how it reads the answers, output
// streamed before them, errors and cancellation, and what it refuses before
// sending anything. The real interpreters are in eval.test.ts.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  Cancelled,
  FuelExhausted,
  HostError,
  InstanceClosed,
  InvalidParams,
  MemoryLimitExceeded,
  ScriptError,
  Session,
  Sidecar,
  SidecarError,
  Timeout,
  type EvalOptions,
  type OutputStream,
} from "sandboxd";

import { fakeSidecar, rejection, withFake } from "./helpers.js";

const utf8 = new TextDecoder();

/** The codes of the evals the fake received before this question. */
async function seen(sb: Sidecar): Promise<unknown> {
  return (await sb.eval({ language: "js", code: "seen" })).value;
}

describe("eval on the wire", () => {
  it("sends the language, code, input and limits, and reads the result", () =>
    withFake(async (sb) => {
      const r = await sb.eval({
        language: "lua",
        code: "echo",
        input: { a: [1, 2.5, null, true], s: "é", when: new Date(0), skipped: undefined },
        limits: { fuel: 6, timeoutMs: 250, memoryBytes: 1 << 20 },
      });
      assert.deepEqual(r.value, {
        language: "lua",
        code: "echo",
        input: { a: [1, 2.5, null, true], s: "é", when: "1970-01-01T00:00:00.000Z" },
        limits: { fuel: 6, timeoutMs: 250, memoryBytes: 1 << 20 },
      });
      assert.equal(r.language, "lua");
      assert.equal(r.fuelConsumed, 1200);
      assert.equal(r.peakMemoryBytes, 5369832);
      assert.equal(r.elapsedMs, 1.972);
      assert.equal(r.queuedMs, 0.004);
      assert.deepEqual([r.stdout.length, r.stderr.length, r.outputTruncated], [0, 0, false]);
      // nothing but the language and the code when nothing else is given
      assert.deepEqual((await sb.eval({ language: "starlark", code: "echo" })).value, { language: "starlark", code: "echo" });
    }));

  it("streams the output to onOutput before the answer, and keeps it in the result", () =>
    withFake(async (sb) => {
      const pieces: [OutputStream, string, number][] = [];
      let answered = false;
      const pending = sb.eval({
        language: "js",
        code: "print",
        onOutput: (stream, data, seq) => {
          assert.equal(answered, false, "an output piece arrived after the answer");
          pieces.push([stream, Buffer.from(data).toString("latin1"), seq]);
        },
      });
      const r = await pending.finally(() => (answered = true));
      assert.deepEqual(pieces, [["stdout", "hello\n", 0], ["stderr", "careful\n", 1], ["stdout", "\xff", 2]]);
      assert.equal(Buffer.from(r.stdout).toString("latin1"), "hello\n\xff");
      assert.equal(utf8.decode(r.stderr), "careful\n");
      assert.equal(r.outputTruncated, true);
    }));

  it("rejects with what onOutput threw, and keeps serving", () =>
    withFake(async (sb) => {
      const boom = new Error("boom in onOutput");
      const err = await rejection(sb.eval({ language: "js", code: "print", onOutput: () => { throw boom; } }));
      assert.equal(err, boom);
      assert.equal(((await sb.eval({ language: "js", code: "echo" })).value as { code: string }).code, "echo");
    }));

  it("maps a script error with its position, and the fences by kind", () =>
    withFake(async (sb) => {
      const err = await rejection(sb.eval({ language: "js", code: "error:script_error" }));
      assert.ok(err instanceof ScriptError, String(err));
      assert.deepEqual([err.kind, err.code, err.language, err.scriptMessage, err.line, err.column],
        ["script_error", 13, "js", "ReferenceError: x is not defined", 2, 5]);
      assert.match(err.text!, /snippet:2:5/);
      assert.deepEqual([err.fuelConsumed, err.peakMemoryBytes, utf8.decode(err.stdout)], [12, 4096, "so far"]);
      for (const [kind, cls] of [["timeout", Timeout], ["fuel_exhausted", FuelExhausted], ["memory_limit_exceeded", MemoryLimitExceeded], ["host", HostError]] as const) {
        const e = await rejection(sb.eval({ language: "lua", code: `error:${kind}` }));
        assert.ok(e instanceof cls, `${kind}: ${e}`);
        assert.equal(e.instanceClosed, false);
      }
    }));

  it("a result without a value is a protocol violation", () =>
    withFake(async (sb) => {
      const err = await rejection(sb.eval({ language: "js", code: "no_value" }));
      assert.ok(err instanceof SidecarError && err.reason === "protocol" && /no value/.test(err.message), String(err));
    }));

  it("aborting the signal sends $/cancelRequest and rejects with Cancelled", () =>
    withFake(async (sb) => {
      const abort = new AbortController();
      const err = await rejection(sb.eval({ language: "js", code: "hang", signal: abort.signal, onOutput: () => abort.abort("enough") }));
      assert.ok(err instanceof Cancelled, String(err));
      assert.equal(err.cause, "enough");
      const already = await rejection(sb.eval({ language: "js", code: "echo", signal: abort.signal }));
      assert.ok(already instanceof Cancelled && /before it was sent/.test(already.message), String(already));
      assert.deepEqual(await seen(sb), ["hang"]);
    }));

  it("refuses bad options before sending anything, naming the field", () =>
    withFake(async (sb) => {
      const cycle: Record<string, unknown> = {};
      cycle["self"] = cycle;
      let deep: unknown[] = [];
      for (let i = 0; i < 1001; i++) deep = [deep];
      const cases: [unknown, RegExp][] = [
        [{ language: "python", code: "1" }, /^language: unknown language "python": give one of js, lua, starlark \(Python is not available; Starlark, a dialect of Python, is "starlark"\)$/],
        [{ language: "ruby", code: "1" }, /^language: unknown language "ruby": give one of js, lua, starlark$/],
        [{ code: "1" }, /^language must be a string/],
        [{ language: "js" }, /^code must be a string/],
        [{ language: "js", code: "'\ud800'" }, /^code: not valid UTF-8: a lone surrogate at index 1$/],
        [{ language: "js", code: "1", input: { a: [1, NaN] } }, /^input\.a\[1\]: NaN is not JSON/],
        [{ language: "js", code: "1", input: 10n }, /^input: a bigint is not JSON/],
        [{ language: "js", code: "1", input: [undefined] }, /^input\[0\]: undefined is not JSON/],
        [{ language: "js", code: "1", input: { f: () => 1 } }, /^input\.f: a function is not JSON/],
        [{ language: "js", code: "1", input: new Map() }, /^input: a Map is not JSON/],
        [{ language: "js", code: "1", input: cycle }, /^input\.self: a cycle/],
        [{ language: "js", code: "1", input: deep }, /nested deeper than 1000 levels/],
        [{ language: "js", code: "1", onOutput: "print" }, /^onOutput must be a function/],
        [undefined, /^eval takes an options object/],
      ];
      for (const [options, message] of cases) {
        const err = await rejection(sb.eval(options as EvalOptions));
        assert.ok(err instanceof InvalidParams && message.test(err.message), `${message}: ${err}`);
      }
      const err = await rejection(sb.session({ language: "py" as "js" }));
      assert.ok(err instanceof InvalidParams && /^language: unknown language "py"/.test(err.message), String(err));
      assert.deepEqual(await seen(sb), []);
    }));
});

describe("sessions on the wire", () => {
  it("instantiate with a language, eval with the instance, release on close", () =>
    withFake(async (sb) => {
      const s = await sb.session({ language: "js", limits: { memoryBytes: 32 << 20, timeoutMs: 500 } });
      assert.ok(s instanceof Session);
      assert.match(s.id, /^inst-fake-session-\d+$/);
      assert.equal(s.language, "js");
      assert.equal(s.started.fuelConsumed, 12000000);
      assert.equal(s.started.elapsedMs, 0.9);
      const r = await s.eval({ code: "echo", input: [1, "two"], limits: { fuel: 10, outputBytes: 64 } });
      assert.deepEqual(r.value, { instance: s.id, code: "echo", input: [1, "two"], limits: { fuel: 10, outputBytes: 64 } });
      const pieces: OutputStream[] = [];
      await s.eval({ code: "print", onOutput: (stream) => pieces.push(stream) });
      assert.deepEqual(pieces, ["stdout", "stderr", "stdout"]);
      assert.equal(s.closed, false);
      await s.close();
      await s.close(); // idempotent
      assert.equal(s.closed, true);
      const err = await rejection(s.eval({ code: "echo" }));
      assert.ok(err instanceof InstanceClosed && err.reason === "released", String(err));
    }));

  it("a script error keeps the session, a fence closes it", () =>
    withFake(async (sb) => {
      const s = await sb.session({ language: "starlark" });
      const script = await rejection(s.eval({ code: "error:script_error" }));
      assert.ok(script instanceof ScriptError && script.language === "starlark", String(script));
      assert.equal(s.closed, false);
      assert.equal(((await s.eval({ code: "echo" })).value as { instance: string }).instance, s.id);
      const fence = await rejection(s.eval({ code: "error:timeout" }));
      assert.ok(fence instanceof Timeout && fence.instanceClosed, String(fence));
      assert.equal(s.closed, true);
      const closed = await rejection(s.eval({ code: "echo" }));
      assert.ok(closed instanceof InstanceClosed && closed.code === -32001 && closed.instance === s.id, String(closed));
    }));

  it("only an evaluation's limits, checked before sending", () =>
    withFake(async (sb) => {
      const s = await sb.session({ language: "lua" });
      const err = await rejection(s.eval({ code: "echo", limits: { memoryBytes: 1 << 20 } as unknown as { fuel: number } }));
      assert.ok(err instanceof InvalidParams && /^limits\.memoryBytes: fixed at instantiate/.test(err.message), String(err));
      const bad = await rejection(s.eval({ code: "echo", input: Infinity }));
      assert.ok(bad instanceof InvalidParams && /^input: Infinity is not JSON/.test(bad.message), String(bad));
      assert.deepEqual(await seen(sb), []);
      await s.close();
    }));

  it("aborting a running evaluation cancels it, which closes the session", () =>
    withFake(async (sb) => {
      const s = await sb.session({ language: "js" });
      const abort = new AbortController();
      const err = await rejection(s.eval({ code: "hang", signal: abort.signal, onOutput: () => abort.abort() }));
      assert.ok(err instanceof Cancelled && err.instanceClosed, String(err));
      assert.equal(s.closed, true);
      assert.ok((await rejection(s.eval({ code: "echo" }))) instanceof InstanceClosed);
    }));

  it("a session dies with its sidecar", async () => {
    const sb = await Sidecar.spawn({ binary: fakeSidecar });
    const s = await sb.session({ language: "js" });
    await sb.close();
    assert.equal(s.closed, true);
    await s.close(); // nothing to release: it died with the sidecar
    const err = await rejection(s.eval({ code: "echo" }));
    assert.ok(err instanceof SidecarError && err.reason === "closed", String(err));
  });
});
