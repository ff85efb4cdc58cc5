// Host functions served by the client, against the scripted fake sidecar
// (test/fixtures/fake-sidecar.mjs, function "host": each argument is a
// host/call it sends, in turn; the output is {answers, params}): what goes
// on the wire both ways, which handler serves a call, and cancellation.
// The real sidecar is in host-calls.test.ts.
import assert from "node:assert/strict";
import { chmodSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { f64Bits, HostError, i32, InvalidParams, Sidecar, Timeout, type HostFunction, type SpawnOptions } from "sandboxd";

import { packageDir, rejection } from "./helpers.js";

const fake = join(packageDir, "test", "fixtures", "fake-sidecar.mjs");
chmodSync(fake, 0o755);

async function withFake<T>(fn: (sb: Sidecar) => Promise<T>, options: SpawnOptions = {}): Promise<T> {
  const sb = await Sidecar.spawn({ binary: fake, ...options });
  try {
    return await fn(sb);
  } finally {
    sb.kill();
    await sb.close().catch(() => {});
  }
}

/** One host call for the fake to make. */
function step(name: string, args: unknown[] = [], extra: Record<string, unknown> = {}) {
  return { type: "step", value: { module: "env", name, args, ...extra } }; // a typed value passes through as it is
}

interface Answer {
  id: string;
  result?: { values: unknown[] };
  error?: { code: number; message: string };
}

/** Runs the fake's "host" function with `steps`; its answers and the params it got. */
async function hostRun(sb: Sidecar, steps: unknown[], hostFunctions?: HostFunction[]) {
  const r = await sb.run({ wat: "(module)", function: "host", args: steps as never[], hostFunctions });
  return JSON.parse(new TextDecoder().decode(r.output)) as { answers: Answer[]; params: Record<string, unknown> };
}

const fn = (name: string, params: HostFunction["params"], results: HostFunction["results"], handler: HostFunction["handler"]): HostFunction => ({
  module: "env",
  name,
  params,
  results,
  handler,
});

describe("host calls on the wire", () => {
  it("decodes the arguments, encodes the results, declares the functions", () =>
    withFake(async (sb) => {
      const seen: unknown[] = [];
      const mix = fn("mix", ["i32", "i64", "f32", "f64", "bytes"], ["i32", "i64", "f32", "f64", "bytes", "bytes"], (args) => {
        seen.push(...args);
        const [a, b, c, , data] = args as [number, bigint, number, number, Uint8Array];
        return [a + 1, b * 2n, c, NaN, new Uint8Array([...data, 33]), "h\u00e9"];
      });
      const { answers, params } = await hostRun(
        sb,
        [
          step("mix", [
            { type: "i32", value: -5 },
            { type: "i64", value: "4611686018427387905" },
            { type: "f32", value: 1.5, bits: "0x3fc00000" },
            { type: "f64", value: -0, bits: "0x8000000000000000" },
            { type: "bytes", value: { base64: "AP8=" } },
          ]),
        ],
        [mix],
      );
      assert.deepEqual(seen, [-5, 4611686018427387905n, 1.5, -0, new Uint8Array([0, 255])]);
      assert.ok(Object.is(seen[3], -0));
      assert.deepEqual(params["hostFunctions"], [
        { module: "env", name: "mix", params: ["i32", "i64", "f32", "f64", "bytes"], results: ["i32", "i64", "f32", "f64", "bytes", "bytes"] },
      ]);
      assert.deepEqual(answers[0]!.result, {
        values: [
          { type: "i32", value: -4 },
          { type: "i64", value: "9223372036854775810" }, // unsigned: it wraps, as run's arguments do
          { type: "f32", value: 1.5 },
          { type: "f64", value: "NaN" },
          { type: "bytes", value: { base64: "AP8h" } },
          { type: "bytes", value: "h\u00e9" },
        ],
      });
    }));

  it("takes every shape of result", () =>
    withFake(async (sb) => {
      const functions = [
        fn("none", [], [], () => undefined),
        fn("one", [], ["i32"], () => 7),
        fn("wrapped", [], ["i32"], () => [7]),
        fn("async", [], ["i64"], async () => 2n ** 63n - 1n),
        fn("bits", [], ["f64"], () => f64Bits(0x7ff8000000000123n)),
        fn("typed", [], ["i32"], () => i32(-1)),
      ];
      const { answers } = await hostRun(sb, functions.map((f) => step(f.name)), functions);
      assert.deepEqual(
        answers.map((a) => a.result?.values),
        [
          [],
          [{ type: "i32", value: 7 }],
          [{ type: "i32", value: 7 }],
          [{ type: "i64", value: "9223372036854775807" }],
          [{ type: "f64", bits: "0x7ff8000000000123" }],
          [{ type: "i32", value: -1 }],
        ],
      );
    }));

  it("answers a throw, a rejection and a wrong shape with an error naming it", () =>
    withFake(async (sb) => {
      const functions = [
        fn("throws", ["i32"], [], (args) => {
          throw new RangeError(`no such key: ${args[0]}`);
        }),
        fn("rejects", [], [], async () => Promise.reject("plain string")),
        fn("huge", [], [], () => {
          throw new Error("x".repeat(1 << 20));
        }),
        fn("count", [], ["i32", "i32"], () => 1),
        fn("type", [], ["i32"], () => "one"),
        fn("unsafe", [], ["i64"], () => 2 ** 60),
        fn("range", [], ["i32"], () => 2 ** 40),
        fn("nothing", [], [], () => 5),
        fn("wrapper", [], ["i64"], () => i32(1)),
      ];
      const { answers } = await hostRun(
        sb,
        functions.map((f) => step(f.name, f.name === "throws" ? [{ type: "i32", value: 7 }] : [])),
        functions,
      );
      const [throws, rejects, huge, ...shapes] = answers.map((a) => a.error!);
      assert.deepEqual(throws, { code: -32000, message: "RangeError: no such key: 7" });
      assert.deepEqual(rejects, { code: -32000, message: "plain string" });
      assert.ok(Buffer.byteLength(huge!.message) <= 16 << 10 && huge!.message.startsWith("Error: xxx"), huge!.message.slice(0, 40));
      assert.deepEqual(
        shapes.map((e) => e.code),
        shapes.map(() => -32000),
      );
      const messages = shapes.map((e) => e.message);
      assert.match(messages[0]!, /the handler of env::count returned 1; env::count returns 2 values \(\) -> \(i32, i32\)/);
      assert.match(messages[1]!, /returned "one" as its result: i32 needs an integer/);
      assert.match(messages[2]!, /i64 needs a bigint or a safe integer/);
      assert.match(messages[3]!, /out of range for i32/);
      assert.match(messages[4]!, /env::nothing returns nothing/);
      assert.match(messages[5]!, /an i32 where env::wrapper returns i64/);
    }));

  it("encodes typed results as run arguments are encoded, refuses what JSON cannot carry, and serves on", () =>
    withFake(async (sb) => {
      // Typed objects are the caller's: their value went out as it was, so
      // JSON.stringify wrote NaN as null and threw on a bigint (an
      // unhandled rejection: the process died, the call unanswered).
      const functions = [
        fn("nan", [], ["f64"], () => ({ type: "f64", value: NaN })),
        fn("inf", [], ["f32"], () => ({ type: "f32", value: -Infinity })),
        fn("plain", [], ["f64", "f32"], () => [NaN, Infinity]),
        fn("big", [], ["i64"], () => ({ type: "i64", value: 2n ** 64n - 1n })),
        fn("intnan", [], ["i32"], () => ({ type: "i32", value: NaN })),
        fn("nested", [], ["f64"], () => ({ type: "f64", value: { x: NaN } }) as never),
        fn("bits", [], ["f64"], () => ({ type: "f64", bits: 1n }) as never),
        fn("after", [], ["i32"], () => 1),
      ];
      const { answers } = await hostRun(sb, functions.map((f) => step(f.name)), functions);
      const [nan, inf, plain, big, intnan, nested, bits, after] = answers;
      assert.deepEqual(nan!.result?.values, [{ type: "f64", value: "NaN" }]);
      assert.deepEqual(inf!.result?.values, [{ type: "f32", value: "-Infinity" }]);
      assert.deepEqual(plain!.result?.values, [{ type: "f64", value: "NaN" }, { type: "f32", value: "Infinity" }]);
      assert.deepEqual(big!.result?.values, [{ type: "i64", value: "18446744073709551615" }]);
      assert.equal(intnan!.error?.code, -32000);
      assert.match(intnan!.error!.message, /the handler of env::intnan returned .* as its result: i32 needs an integer/);
      assert.equal(nested!.error?.code, -32000);
      assert.match(nested!.error!.message, /the handler of env::nested returned .*: a typed value's value must be a number, a bigint or a string/);
      assert.equal(bits!.error?.code, -32000);
      assert.match(bits!.error!.message, /the handler of env::bits returned .*: a typed value's bits must be a "0x…" string/);
      assert.deepEqual(after!.result?.values, [{ type: "i32", value: 1 }]);
      const again = await hostRun(sb, [step("after")], functions);
      assert.deepEqual(again.answers[0]!.result?.values, [{ type: "i32", value: 1 }]);
    }));

  it("answers at once what it cannot serve", () =>
    withFake(async (sb) => {
      const f = fn("f", ["i32"], [], () => undefined);
      const { answers } = await hostRun(
        sb,
        [step("missing"), step("f", [{ type: "i64", value: "1" }]), step("f"), step("f", [{ type: "i32", value: 1 }], { module: "other" })],
        [f],
      );
      assert.deepEqual(
        answers.map((a) => a.error?.code),
        [-32601, -32602, -32602, -32601],
      );
      assert.match(answers[0]!.error!.message, /no handler for host function env::missing in request \d+ \(run\)/);
      assert.match(answers[1]!.error!.message, /env::f takes \(i32\) -> \(\)/);
      assert.match(answers[2]!.error!.message, /the call has 0 arguments/);
    }));

  it("tells the handler what it serves, and requests sent from it name the host call", () =>
    withFake(async (sb) => {
      const contexts: unknown[] = [];
      const nested = fn("nested", [], ["bytes"], async (_args, call) => {
        contexts.push({ id: call.id, module: call.module, name: call.name, instance: call.instance, aborted: call.signal.aborted });
        await new Promise((r) => setTimeout(r, 1)); // across an await
        const err = await rejection(sb.run({ wat: "(module)", function: "echo" }));
        assert.ok(err instanceof HostError);
        const request = (err.data as { request: { params: Record<string, unknown> } }).request;
        return String(request.params["hostCall"]);
      });
      const { answers } = await hostRun(sb, [step("nested", [], { id: "sbx-nested" })], [nested]);
      assert.deepEqual(answers[0]!.result?.values, [{ type: "bytes", value: "sbx-nested" }]);
      assert.deepEqual(contexts, [{ id: "sbx-nested", module: "env", name: "nested", instance: undefined, aborted: false }]);
      const outside = await rejection(sb.run({ wat: "(module)", function: "echo" }));
      assert.equal(((outside as HostError).data as { request: { params: Record<string, unknown> } }).request.params["hostCall"], undefined);
    }));

  it("aborts the handler's signal when the sidecar cancels the call, and sends no answer", () =>
    withFake(async (sb) => {
      // The fake sends the run's timeout before the stats answer that wakes
      // the handler, so the run can end before the handler looks at its
      // signal: wait for the handler itself, not for the run.
      let handled!: (reasons: unknown[]) => void;
      const reasons = new Promise<unknown[]>((resolve) => (handled = resolve));
      const wait = fn("wait", [], ["i32"], async (_args, { signal }) => {
        await sb.stats(); // the fake cancels the call and times the run out
        handled([signal.aborted, signal.reason instanceof Error && signal.reason.message]);
        return 1;
      });
      const err = await rejection(hostRun(sb, [step("wait", [], { id: "sbx-cancelled", cancel: "on_stats" })], [wait]));
      assert.ok(err instanceof Timeout, String(err));
      assert.deepEqual(await reasons, [true, 'host call "sbx-cancelled" was cancelled: the sidecar cancelled it (its run\'s deadline passed, or the run was cancelled)']);
      const stats = (await sb.stats()) as unknown as { hostAnswers: Record<string, unknown> };
      assert.equal(stats.hostAnswers["sbx-cancelled"], undefined);
    }));

  it("lets the most specific registration win", () => {
    const named = (who: string) => fn("who", [], ["bytes"], () => who);
    return withFake(
      async (sb) => {
        const who = async (run: Promise<{ output: Uint8Array }>) => {
          const { answers } = JSON.parse(new TextDecoder().decode((await run).output)) as { answers: Answer[] };
          return (answers[0]!.result!.values[0] as { value: string }).value;
        };
        assert.equal(await who(sb.run({ wat: "(module)", function: "host", args: [step("who")] as never[] })), "sidecar");
        assert.equal(
          await who(sb.run({ wat: "(module)", function: "host", args: [step("who")] as never[], hostFunctions: [named("run")] })),
          "run",
        );
        const p = await sb.plugin({ wat: "(module)", hostFunctions: [named("instance")] });
        assert.equal(await who(p.call("host", undefined, { args: [step("who")] as never[] })), "instance");
        const q = await sb.plugin({ wat: "(module)" });
        assert.equal(await who(q.call("host", undefined, { args: [step("who")] as never[] })), "sidecar");
      },
      { hostFunctions: [named("sidecar")] },
    );
  });

  it("checks registrations before anything is sent", () =>
    withFake(async (sb) => {
      const f = fn("f", [], [], () => undefined);
      const cases: [unknown, RegExp][] = [
        [[{ module: "env", name: "f", handler: 1 }], /hostFunctions\[0\]\.handler must be a function/],
        [[f, f], /hostFunctions\[1\]: env::f is given twice/],
        [[{ ...f, params: ["i128"] }], /hostFunctions\[0\]\.params\[0\]: unknown type "i128"/],
        [[{ ...f, module: "" }], /hostFunctions\[0\]\.module must be a non-empty string/],
        [f, /hostFunctions must be an array/],
      ];
      for (const [hostFunctions, message] of cases) {
        const err = await rejection(sb.run({ wat: "(module)", hostFunctions: hostFunctions as HostFunction[] }));
        assert.ok(err instanceof InvalidParams, String(err));
        assert.match(err.message, message);
      }
      await assert.rejects(Sidecar.spawn({ binary: fake, hostFunctions: [f, f] }), InvalidParams);
    }));
});
