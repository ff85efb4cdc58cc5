// eval and sessions against the real sidecar and its interpreter runtimes
// (bin/runtimes, which `make build` makes): values, input and output in each
// language, script errors with their positions, the fences, cancellation,
// and sessions keeping their state until a fence closes them. What the
// client puts on the wire is in eval-wire.test.ts.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import {
  Cancelled,
  FuelExhausted,
  InstanceClosed,
  InvalidParams,
  type JsonValue,
  type Language,
  MemoryLimitExceeded,
  ScriptError,
  type Sidecar,
  Timeout,
  TooManyInstances,
} from "sandboxd";

import { rejection, spawnSidecar, waitFor } from "./helpers.js";

const text = (b: Uint8Array) => new TextDecoder().decode(b);
/** Evaluations that are not under test get a hang bound rather than the 1 s default deadline. */
const WAIT = 60_000;

/** Waits (hang-bounded) until an evaluation is executing in the sidecar. */
const running = (sb: Sidecar) => waitFor(async () => (await sb.stats()).inFlight >= 1, "an evaluation executing", WAIT);

describe("eval", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar();
  });
  after(() => sb.close());

  it("gives the snippet's value in each language, with its input", async () => {
    assert.deepEqual(sb.info.capabilities.languages, ["js", "lua", "starlark"]); // the runtimes make build installed
    const cases: [Language, string, unknown, JsonValue][] = [
      ["js", "[1, 2, 3].map(x => x * input.k)", { k: 2 }, [2, 4, 6]],
      ["js", "({a: input.name.length, b: [null, true, 'é']})", { name: "Ada" }, { a: 3, b: [null, true, "é"] }],
      ["lua", "local t = {} for i = 1, input do t[i] = i * i end return t", 3, [1, 4, 9]],
      ["starlark", "sorted(input)", [3, 1, 2], [1, 2, 3]],
      ["js", "let x = 1", undefined, null],
    ];
    for (const [language, code, input, want] of cases) {
      const r = await sb.eval({ language, code, input });
      assert.deepEqual(r.value, want, code);
      assert.equal(r.language, language);
      assert.ok(r.fuelConsumed > 0 && r.peakMemoryBytes > 0, code);
      assert.deepEqual([r.stdout.length, r.stderr.length, r.outputTruncated], [0, 0, false]);
    }
  });

  it("streams what the snippet prints before the answer, and keeps it", async () => {
    for (const [language, code] of [
      ["js", 'console.log("hello", input); console.error("careful"); 7'],
      ["lua", 'print("hello", input) return 7'],
      ["starlark", 'print("hello", input)\n7'],
    ] as [Language, string][]) {
      const streamed = { stdout: "", stderr: "" };
      const r = await sb.eval({ language, code, input: "Ada", onOutput: (stream, data) => (streamed[stream] += text(data)) });
      assert.equal(r.value, 7);
      assert.equal(streamed.stdout, text(r.stdout));
      assert.equal(streamed.stderr, text(r.stderr));
      assert.match(streamed.stdout, /^hello\s+Ada\n$/);
    }
  });

  it("rejects a script error with its position, and keeps serving", async () => {
    const cases: [Language, string, number, number | undefined, RegExp][] = [
      ["js", "let a = 1;\nlet b = ;\n", 2, 9, /SyntaxError/],
      ["lua", 'error("no such user")', 1, undefined, /no such user/],
      ["starlark", "def f(n):\n    return f(n + 1)\n\nf(0)\n", 2, 12, /called recursively/],
    ];
    for (const [language, code, line, column, message] of cases) {
      const err = await rejection(sb.eval({ language, code }));
      assert.ok(err instanceof ScriptError, String(err));
      assert.deepEqual([err.kind, err.code, err.language, err.line], ["script_error", 13, language, line]);
      if (column !== undefined) assert.equal(err.column, column);
      assert.match(err.scriptMessage!, message);
      assert.match(err.text!, message);
    }
    assert.equal((await sb.eval({ language: "js", code: "1 + 1" })).value, 2);
  });

  it("rejects with the fence's kind", async () => {
    const timeout = await rejection(sb.eval({ language: "js", code: "while (true) {}", limits: { timeoutMs: 100 } }));
    assert.ok(timeout instanceof Timeout && timeout.timeoutMs === 100, String(timeout));
    const fuel = await rejection(sb.eval({ language: "lua", code: "while true do end", limits: { fuel: 10_000_000, timeoutMs: WAIT } }));
    assert.ok(fuel instanceof FuelExhausted && fuel.budget === 10_000_000, String(fuel));
    const memory = await rejection(sb.eval({ language: "lua", code: 'local s = "x" while true do s = s .. s end', limits: { timeoutMs: WAIT } }));
    assert.ok(memory instanceof MemoryLimitExceeded, String(memory));
    const refused = await rejection(sb.eval({ language: "js", code: "1", limits: { memoryBytes: 2 ** 62 } }));
    assert.ok(refused instanceof InvalidParams && /memoryBytes/.test(refused.message), String(refused));
  });

  it("aborting the signal stops a running snippet", async () => {
    const abort = new AbortController();
    const pending = sb.eval({ language: "js", code: "while (true) {}", limits: { timeoutMs: WAIT }, signal: abort.signal });
    await running(sb);
    abort.abort();
    assert.ok((await rejection(pending)) instanceof Cancelled);
    assert.equal((await sb.eval({ language: "js", code: "2 * 21" })).value, 42);
  });
});

describe("sessions", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar({ args: ["--max-instances", "2"] });
  });
  after(() => sb.close());

  it("keep their state in each language, and are released on close", async () => {
    const cases: [Language, string[]][] = [
      ["js", ["let n = 40", "function bump(k) { return n += k }", "bump(1)", "bump(input)"]],
      ["lua", ["n = 40", "function bump(k) n = n + k return n end", "bump(1)", "bump(input)"]],
      ["starlark", ["n = [40]", "def bump(k):\n    n[0] += k\n    return n[0]", "bump(1)", "bump(input)"]],
    ];
    for (const [language, steps] of cases) {
      const s = await sb.session({ language });
      assert.equal(s.language, language);
      assert.ok(s.started.peakMemoryBytes > 0); // pre-initialised runtimes: a start runs no guest code
      for (const code of steps.slice(0, -2)) await s.eval({ code });
      assert.equal((await s.eval({ code: steps.at(-2)! })).value, 41);
      assert.equal((await s.eval({ code: steps.at(-1)!, input: 1 })).value, 42);
      await s.close();
      assert.equal((await sb.stats()).instances?.live, 0);
    }
  });

  it("a script error keeps the session, a fence closes it", async () => {
    const s = await sb.session({ language: "js" });
    await s.eval({ code: "let kept = 'yes'" });
    assert.ok((await rejection(s.eval({ code: "throw new Error('mine')" }))) instanceof ScriptError);
    assert.equal((await s.eval({ code: "kept" })).value, "yes");
    const fence = await rejection(s.eval({ code: "while (true) {}", limits: { timeoutMs: 100 } }));
    assert.ok(fence instanceof Timeout && fence.instanceClosed, String(fence));
    assert.equal(s.closed, true);
    const closed = await rejection(s.eval({ code: "kept" }));
    assert.ok(closed instanceof InstanceClosed && closed.instance === s.id && /timeout/.test(closed.reason!), String(closed));
    await s.close();
  });

  it("aborting a running evaluation closes the session; evaluations run in the order sent", async () => {
    const s = await sb.session({ language: "lua", limits: { timeoutMs: WAIT } });
    await s.eval({ code: "log = {}" });
    const order = await Promise.all([1, 2, 3, 4].map((i) => s.eval({ code: "log[#log + 1] = input return #log", input: i })));
    assert.deepEqual(order.map((r) => r.value), [1, 2, 3, 4]);
    assert.deepEqual((await s.eval({ code: "log" })).value, [1, 2, 3, 4]);
    const abort = new AbortController();
    const pending = s.eval({ code: "while true do end", signal: abort.signal });
    await running(sb);
    abort.abort();
    const err = await rejection(pending);
    assert.ok(err instanceof Cancelled && err.instanceClosed, String(err));
    assert.ok((await rejection(s.eval({ code: "return 1" }))) instanceof InstanceClosed);
    await s.close();
  });

  it("count toward --max-instances", async () => {
    const [a, b] = [await sb.session({ language: "lua" }), await sb.session({ language: "starlark" })];
    assert.ok((await rejection(sb.session({ language: "js" }))) instanceof TooManyInstances);
    await a.close();
    await using c = await sb.session({ language: "lua" });
    assert.equal((await c.eval({ code: "1 + 1" })).value, 2);
    await b.close();
  });
});
