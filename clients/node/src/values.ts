/**
 * WebAssembly value encoding on the sandboxd wire (docs/protocol.md, "Values").
 *
 * Results always come as `{type, value}` objects, floats also with `bits`:
 * - `i32` → JS `number`;
 * - `i64` → JS `bigint` (the wire value is a decimal string);
 * - `f32`/`f64` → JS `number`, decoded from `bits` so -0, ±Infinity and NaN
 *   are exact (a NaN's payload survives only in `RunResult.rawValues`).
 *
 * Arguments this module cannot encode exactly are refused with
 * {@link InvalidParams}, never rounded: in particular an integer `number`
 * beyond ±(2^53−1) (`Number.isSafeInteger` false), which has already lost
 * precision (2**60+1 === 2**60 in JavaScript) — pass a `bigint` for an i64,
 * or wrap a float in {@link f64}/{@link f32}.
 *
 * @module
 */
import { InvalidParams, SidecarError } from "./errors.js";

/** A WebAssembly number type. */
export type ValueType = "i32" | "i64" | "f32" | "f64";

/** A value as the sidecar writes it in run results. */
export interface WireValue {
  type: ValueType;
  /** i32: number; i64: decimal string; floats: number or "NaN" / "Infinity" / "-Infinity". */
  value?: number | string;
  /** Floats (always in results): "0x" + lowercase hex of the IEEE bits. */
  bits?: string;
}

/** A decoded result value: `number` for i32/f32/f64, `bigint` for i64. */
export type Value = number | bigint;

/** An explicitly typed argument, `{type, value}` (see {@link i32}, {@link i64}, {@link f32}, {@link f64}). */
export interface TypedValueArg {
  type: ValueType;
  value: number | bigint | string;
}

/** An argument given as raw bits, `{type, bits}` (see {@link f32Bits}, {@link f64Bits}). */
export interface TypedBitsArg {
  type: ValueType;
  bits: string;
}

/**
 * An argument of `run`. Plain values are decoded by the sidecar against the
 * export's parameter types:
 * - `number`: integers for i32/i64 (safe integers only: a plain number between
 *   2^53 and 2^64 in magnitude is refused, use a bigint, or f64(x) for a
 *   float), any number for floats (NaN, ±Infinity and -0 are sent as the
 *   strings "NaN", "Infinity", "-Infinity", "-0");
 * - `bigint`: sent as a decimal string (i64 full range, also unsigned; i32);
 * - `string`: decimal text, or "NaN" / "Infinity" / "-Infinity" / "-0" for floats;
 * - typed objects from the helpers, for exactness or to pin the type.
 */
export type ArgValue = number | bigint | string | TypedValueArg | TypedBitsArg;

/**
 * Encodes a JS number for a float slot: finite numbers stay numbers, and the
 * values JSON cannot carry become strings ("NaN", "Infinity", "-Infinity", "-0").
 */
export function encodeFloat(x: number): number | string {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "Infinity";
  if (x === -Infinity) return "-Infinity";
  if (Object.is(x, -0)) return "-0";
  return x;
}

/** Why an integral `number` beyond ±(2^53−1) is refused: it is not the integer that was written. */
export function unsafeIntegerProblem(x: number): string {
  return (
    `${x} is not a safe integer: beyond ±(2^53−1) a number has already lost precision ` +
    `(this one is exactly ${BigInt(x)})`
  );
}

function unsafeInteger(what: string, x: number): InvalidParams {
  return new InvalidParams(`${what}: ${unsafeIntegerProblem(x)}; pass a bigint instead (a literal with an n suffix)`);
}

function toBigInt(x: bigint | number | string, what: string): bigint {
  if (typeof x === "bigint") return x;
  if (typeof x === "number") {
    if (!Number.isInteger(x)) throw new InvalidParams(`${what}: ${x} is not an integer`);
    if (!Number.isSafeInteger(x)) throw unsafeInteger(what, x);
    return BigInt(x);
  }
  if (typeof x === "string" && /^[+-]?\d+$/.test(x.trim())) return BigInt(x.trim());
  throw new InvalidParams(`${what}: expected an integer, got ${JSON.stringify(String(x))}`);
}

/** An i32 argument `{type: "i32", value}`; `x` must be an integer in −2^31..2^32−1. */
export function i32(x: number): TypedValueArg {
  if (!Number.isInteger(x) || x < -(2 ** 31) || x > 2 ** 32 - 1) {
    throw new InvalidParams(`i32: ${x} is not an integer in -2^31..2^32-1`);
  }
  return { type: "i32", value: x };
}

/**
 * An i64 argument `{type: "i64", value: "<decimal>"}`. Accepts a bigint, a
 * safe-integer number or a decimal string in −2^63..2^64−1 (values ≥ 2^63
 * wrap as unsigned on the sidecar). An unsafe-integer number is refused
 * ({@link InvalidParams}): it is no longer the integer that was written.
 */
export function i64(x: bigint | number | string): TypedValueArg {
  const v = toBigInt(x, "i64");
  if (v < -(2n ** 63n) || v > 2n ** 64n - 1n) throw new InvalidParams(`i64: ${v} is out of range -2^63..2^64-1`);
  return { type: "i64", value: v.toString() };
}

/** An f32 argument `{type: "f32", value}` (the sidecar rounds to the nearest f32). */
export function f32(x: number): TypedValueArg {
  return { type: "f32", value: encodeFloat(x) };
}

/** An f64 argument `{type: "f64", value}`. */
export function f64(x: number): TypedValueArg {
  return { type: "f64", value: encodeFloat(x) };
}

function bitsHex(bits: bigint | number | string, width: 32 | 64, what: string): string {
  let v: bigint;
  if (typeof bits === "string") {
    const s = bits.trim().toLowerCase();
    if (!/^0x[0-9a-f]+$/.test(s)) throw new InvalidParams(`${what}: expected "0x…" hex bits, got ${JSON.stringify(bits)}`);
    v = BigInt(s);
  } else {
    v = toBigInt(bits, what);
  }
  if (v < 0n || v >= 1n << BigInt(width)) throw new InvalidParams(`${what}: 0x${v.toString(16)} does not fit in ${width} bits`);
  return "0x" + v.toString(16).padStart(width / 4, "0");
}

/** An f32 argument given by its raw IEEE bits, e.g. `f32Bits(0x7fc00001)`. */
export function f32Bits(bits: number | bigint | string): TypedBitsArg {
  return { type: "f32", bits: bitsHex(bits, 32, "f32Bits") };
}

/** An f64 argument given by its raw IEEE bits, e.g. `f64Bits(0x7ff8000000000123n)`. */
export function f64Bits(bits: bigint | number | string): TypedBitsArg {
  return { type: "f64", bits: bitsHex(bits, 64, "f64Bits") };
}

/**
 * Encodes one `run` argument for the wire (see {@link ArgValue}). Throws
 * {@link InvalidParams} for what cannot be sent exactly: a typed i32/i64
 * `number` that is not a safe integer, or a plain one between 2^53 and 2^64
 * in magnitude — where it could be meant for an i64 — (use a bigint, or
 * {@link f64} for a float); or a value that is no wasm value at all.
 */
export function encodeArg(arg: ArgValue, index = 0): unknown {
  const what = `args[${index}]`;
  switch (typeof arg) {
    case "number":
      // Beyond 2^64 no integer parameter could take it: a float, sent as is.
      if (Number.isInteger(arg) && !Number.isSafeInteger(arg) && Math.abs(arg) <= 2 ** 64) {
        throw new InvalidParams(
          `${what}: ${unsafeIntegerProblem(arg)}; pass a bigint for an i64 (a literal with an n suffix), or f64(x) for a float`,
        );
      }
      return encodeFloat(arg);
    case "bigint":
      // no integer parameter takes it; refused here so the problem is named as a range
      if (arg < -(2n ** 63n) || arg > 2n ** 64n - 1n) {
        throw new InvalidParams(`${what}: ${arg} is out of range for every integer type (-2^63..2^64-1)`);
      }
      return arg.toString();
    case "string":
      return arg;
    case "object":
      if (arg !== null && typeof arg.type === "string") {
        if ("bits" in arg && arg.bits !== undefined) return { type: arg.type, bits: arg.bits };
        if ("value" in arg) {
          const v = arg.value;
          if (typeof v === "number" && (arg.type === "i64" || arg.type === "i32")) {
            if (Number.isInteger(v) && !Number.isSafeInteger(v)) throw unsafeInteger(`${what} (${arg.type})`, v);
          }
          return {
            type: arg.type,
            value: typeof v === "bigint" ? v.toString() : typeof v === "number" ? encodeFloat(v) : v,
          };
        }
      }
  }
  throw new InvalidParams(`${what}: cannot encode ${String(arg)} as a wasm value`);
}

const F32_BITS = /^0x[0-9a-f]{8}$/;
const F64_BITS = /^0x[0-9a-f]{16}$/;

function violation(message: string): SidecarError {
  return new SidecarError(message, { reason: "protocol" });
}

/**
 * Decodes one result value. Throws a {@link SidecarError} (reason
 * `protocol`) if the value does not follow the protocol (e.g. an f64
 * without `bits`, an i64 that is not a decimal string).
 */
export function decodeValue(w: WireValue): Value {
  const view = new DataView(new ArrayBuffer(8));
  switch (w.type) {
    case "i32":
      if (typeof w.value !== "number" || !Number.isInteger(w.value)) {
        throw violation(`i32 result must be a JSON integer, got ${JSON.stringify(w.value)}`);
      }
      return w.value;
    case "i64":
      if (typeof w.value !== "string" || !/^-?\d+$/.test(w.value)) {
        throw violation(`i64 result must be a decimal string, got ${JSON.stringify(w.value)}`);
      }
      return BigInt(w.value);
    case "f32":
      if (typeof w.bits !== "string" || !F32_BITS.test(w.bits)) {
        throw violation(`f32 result must carry bits "0x" + 8 lowercase hex digits, got ${JSON.stringify(w.bits)}`);
      }
      view.setUint32(0, Number.parseInt(w.bits.slice(2), 16));
      return view.getFloat32(0);
    case "f64":
      if (typeof w.bits !== "string" || !F64_BITS.test(w.bits)) {
        throw violation(`f64 result must carry bits "0x" + 16 lowercase hex digits, got ${JSON.stringify(w.bits)}`);
      }
      view.setBigUint64(0, BigInt(w.bits));
      return view.getFloat64(0);
    default:
      throw violation(`unknown value type ${JSON.stringify((w as { type: unknown }).type)}`);
  }
}
