// Unit tests of the value encoding against testdata/wire/values.json.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { InvalidParams, SandboxError, SidecarError, decodeValue, encodeArg, f32, f32Bits, f64, f64Bits, i32, i64, type WireValue } from "sandboxd";

import { wireFixture } from "./helpers.js";

interface GoldenCase {
  name: string;
  wire: WireValue;
  bits: string;
}
const golden = wireFixture<{ cases: GoldenCase[] }>("values.json").cases;

/** The value of `bits` (hex of the type's width) as the JS value the client must produce. */
function fromBits(type: string, bits: string): number | bigint {
  const view = new DataView(new ArrayBuffer(8));
  const v = BigInt(bits);
  switch (type) {
    case "i32":
      view.setUint32(0, Number(v));
      return view.getInt32(0);
    case "i64":
      view.setBigUint64(0, v);
      return view.getBigInt64(0);
    case "f32":
      view.setUint32(0, Number(v));
      return view.getFloat32(0);
    case "f64":
      view.setBigUint64(0, v);
      return view.getFloat64(0);
  }
  throw new Error(type);
}

/** The bits of a decoded float, as the golden file writes them. */
function bitsOf(type: "f32" | "f64", x: number): string {
  const view = new DataView(new ArrayBuffer(8));
  if (type === "f32") {
    view.setFloat32(0, x);
    return "0x" + view.getUint32(0).toString(16).padStart(8, "0");
  }
  view.setFloat64(0, x);
  return "0x" + view.getBigUint64(0).toString(16).padStart(16, "0");
}

describe("golden values.json", () => {
  it("has cases of every type (the fixture is not empty)", () => {
    const types = new Set(golden.map((c) => c.wire.type));
    assert.deepEqual([...types].sort(), ["f32", "f64", "i32", "i64"]);
    assert.ok(golden.length >= 20, `only ${golden.length} cases`);
  });

  for (const c of golden) {
    it(`decodes ${c.name}`, () => {
      const got = decodeValue(c.wire);
      const want = fromBits(c.wire.type, c.bits);
      if (c.wire.type === "i32") {
        assert.equal(typeof got, "number");
        assert.equal(got, want);
      } else if (c.wire.type === "i64") {
        assert.equal(typeof got, "bigint");
        assert.equal(got, want);
      } else {
        assert.equal(typeof got, "number");
        // Object.is: -0 is not 0, NaN is NaN.
        assert.ok(Object.is(got, want), `${String(got)} vs ${String(want)}`);
        if (!Number.isNaN(got)) {
          assert.equal(bitsOf(c.wire.type, got as number), c.bits);
          // the JSON value, where it is a number, agrees with the bits
          if (typeof c.wire.value === "number") assert.ok(Object.is(c.wire.value, got));
        } else {
          assert.equal(c.wire.value, "NaN");
        }
      }
    });

    it(`encodes ${c.name} with the helpers`, () => {
      const t = c.wire.type;
      if (t === "i32") {
        assert.deepEqual(encodeArg(i32(c.wire.value as number)), c.wire);
      } else if (t === "i64") {
        const v = BigInt(c.wire.value as string);
        // bigint, decimal string and (when exact) number give the same wire form
        assert.deepEqual(encodeArg(i64(v)), c.wire);
        assert.deepEqual(encodeArg(i64(c.wire.value as string)), c.wire);
        if (Number.isSafeInteger(Number(v))) assert.deepEqual(encodeArg(i64(Number(v))), c.wire);
        assert.equal(encodeArg(v), c.wire.value);
      } else {
        const bitsForm = t === "f32" ? f32Bits(c.bits) : f64Bits(BigInt(c.bits));
        assert.deepEqual(bitsForm, { type: t, bits: c.bits });
        const x = decodeValue(c.wire) as number;
        const valueForm = encodeArg(t === "f32" ? f32(x) : f64(x)) as { type: string; value: unknown };
        assert.equal(valueForm.type, t);
        // -0 must travel as the string "-0" (JSON.stringify(-0) is "0")
        const expected = Object.is(x, -0) ? "-0" : c.wire.value;
        assert.ok(Object.is(valueForm.value, expected), `${String(valueForm.value)} vs ${String(expected)}`);
        assert.equal(JSON.parse(JSON.stringify(valueForm)).value, Object.is(x, -0) ? "-0" : c.wire.value);
      }
    });
  }
});

describe("argument encoding", () => {
  it("sends JSON-unrepresentable floats as strings", () => {
    assert.equal(encodeArg(NaN), "NaN");
    assert.equal(encodeArg(Infinity), "Infinity");
    assert.equal(encodeArg(-Infinity), "-Infinity");
    assert.equal(encodeArg(-0), "-0");
    assert.equal(encodeArg(1.5), 1.5);
    assert.equal(encodeArg(42), 42);
  });

  it("sends bigints and i64 helpers as decimal strings", () => {
    assert.equal(encodeArg(2n ** 63n - 1n), "9223372036854775807");
    assert.equal(encodeArg(-(2n ** 63n)), "-9223372036854775808");
    assert.deepEqual(i64(2n ** 64n - 1n), { type: "i64", value: "18446744073709551615" });
    assert.deepEqual(i64(-5), { type: "i64", value: "-5" });
    assert.deepEqual(encodeArg({ type: "i64", value: 7n }), { type: "i64", value: "7" });
  });

  it("builds bit patterns of the right width", () => {
    assert.deepEqual(f64Bits(0x7ff8000000000123n), { type: "f64", bits: "0x7ff8000000000123" });
    assert.deepEqual(f64Bits(1), { type: "f64", bits: "0x0000000000000001" });
    assert.deepEqual(f32Bits(0x7fc00001), { type: "f32", bits: "0x7fc00001" });
    assert.deepEqual(f32Bits("0X7F800000"), { type: "f32", bits: "0x7f800000" });
  });

  it("refuses values that cannot be encoded exactly", () => {
    assert.throws(() => i32(1.5), InvalidParams);
    assert.throws(() => i32(2 ** 32), InvalidParams);
    assert.throws(() => i64(1.5), InvalidParams);
    assert.throws(() => i64(2n ** 64n), InvalidParams);
    assert.throws(() => i64("12abc"), InvalidParams);
    assert.throws(() => f32Bits(2n ** 32n), InvalidParams);
    assert.throws(() => f64Bits("nan"), InvalidParams);
    assert.throws(() => encodeArg(true as unknown as number), InvalidParams);
  });

  it("refuses unsafe-integer numbers for integers, pointing at bigint", () => {
    // 2**60 + 1 === 2**60: the number no longer holds the integer that was written
    for (const [fn, pattern] of [
      [() => i64(2 ** 60 + 1), /i64: 1152921504606847000 is not a safe integer.*exactly 1152921504606846976.*bigint/],
      [() => encodeArg(2 ** 60 + 1, 3), /args\[3\]: 1152921504606847000 is not a safe integer.*bigint.*f64\(x\)/],
      [() => encodeArg({ type: "i64", value: 2 ** 63 }), /args\[0\] \(i64\): 9223372036854776000 is not a safe integer/],
      [() => f64Bits(0x7ff8000000000123), /f64Bits: .* is not a safe integer/],
    ] as const) {
      const err = (() => {
        try {
          fn();
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      assert.ok(err instanceof InvalidParams && err instanceof SandboxError, String(err));
      assert.equal(err.kind, "invalid_params");
      assert.equal(err.code, -32602);
      assert.match(err.message, pattern);
    }
    // safe integers, bigints and floats still go through
    assert.equal(encodeArg(2 ** 53 - 1), 2 ** 53 - 1);
    assert.equal(encodeArg(2n ** 60n + 1n), "1152921504606846977");
    assert.deepEqual(i64(2n ** 60n + 1n), { type: "i64", value: "1152921504606846977" });
    assert.deepEqual(encodeArg(f64(2 ** 60)), { type: "f64", value: 2 ** 60 });
    assert.equal(encodeArg(1.5e300), 1.5e300); // beyond 2^64: no integer parameter could take it
    assert.throws(() => encodeArg(2 ** 64), InvalidParams);
    assert.throws(() => encodeArg(2n ** 64n), /args\[0\]: 18446744073709551616 is out of range for every integer type/);
    assert.throws(() => encodeArg(-(2n ** 63n) - 1n), InvalidParams);
    assert.equal(encodeArg(2n ** 64n - 1n), "18446744073709551615");
    assert.equal(encodeArg(2 ** 64 * 2), 2 ** 65);
  });
});

describe("result decoding is strict", () => {
  it("rejects floats without bits and i64 numbers", () => {
    assert.throws(() => decodeValue({ type: "f64", value: 1.5 }), SidecarError);
    assert.throws(() => decodeValue({ type: "f32", value: 1.5, bits: "0x3fc0000" }), SidecarError);
    assert.throws(() => decodeValue({ type: "i64", value: 5 as unknown as string }), SidecarError);
    assert.throws(() => decodeValue({ type: "i32", value: "5" }), SidecarError);
    assert.throws(() => decodeValue({ type: "v128" as "i32", value: 0 }), SidecarError);
  });
});
