/**
 * Host functions served by this process (docs/protocol.md, "Host functions
 * served by the parent"): the table a request's host calls are served from,
 * and the codec of a `host/call`'s arguments and answer. The session runs
 * the handlers; nothing here does I/O.
 *
 * A guest's call of a declared import reaches the parent as a `host/call`
 * request naming the parent's request (`params.id`); the handler registered
 * for that request — the run's, else the instance's, else the sidecar's —
 * gets the arguments as JS values, and what it returns (or resolves to)
 * goes back as the answer.
 *
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";

import { decodeBytes, encodeBytes } from "./bytes.js";
import { InvalidParams } from "./errors.js";
import type { HostFunction, HostValue, HostValueType } from "./types.js";
import { decodeValue, encodeFloat, type WireValue } from "./values.js";

/** The types a declaration may use: wasm's numbers, and `bytes`, an Extism memory handle whose bytes travel on the wire. */
export const HOST_VALUE_TYPES: readonly HostValueType[] = ["i32", "i64", "f32", "f64", "bytes"];

/**
 * JSON-RPC error codes of the answers this client sends. The sidecar ends
 * the run with `host_function_error` carrying the message whatever the
 * code; the code tells a log reader which side failed.
 */
export const HOST_CALL_CODES = {
  /** No such function served here (or no such request). */
  noHandler: -32601,
  /** The sidecar's arguments do not fit the declaration. */
  badArguments: -32602,
  /** The handler threw or rejected, or returned what cannot be sent. */
  handlerFailed: -32000,
} as const;

/** An error answer's message is cut to this many UTF-8 bytes (the sidecar keeps 16 KiB of it). */
export const MAX_HOST_MESSAGE_BYTES = 16 << 10;

/** A `hostFunctions` entry on the wire. */
export interface HostFunctionDeclaration {
  module: string;
  name: string;
  params: HostValueType[];
  results: HostValueType[];
}

/** A host call that cannot be served: answered with `code` and this message. */
export class HostCallProblem extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** A function's name as errors give it: `env::lookup`. */
function qualified(f: { module: string; name: string }): string {
  return `${f.module}::${f.name}`;
}

/** `(i64, bytes) -> (i32)`. */
function signature(f: HostFunction): string {
  return `(${(f.params ?? []).join(", ")}) -> (${(f.results ?? []).join(", ")})`;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (value instanceof Uint8Array) return "a Uint8Array";
  return typeof value;
}

function checkFunction(f: unknown, where: string): HostFunction {
  if (f === null || typeof f !== "object" || Array.isArray(f)) throw new InvalidParams(`${where} must be a host function object, got ${describe(f)}`);
  const fn = f as Partial<HostFunction>;
  for (const key of ["module", "name"] as const) {
    if (typeof fn[key] !== "string" || fn[key] === "") throw new InvalidParams(`${where}.${key} must be a non-empty string, got ${describe(fn[key])}`);
  }
  for (const key of ["params", "results"] as const) {
    const types = fn[key];
    if (types === undefined) continue;
    if (!Array.isArray(types)) throw new InvalidParams(`${where}.${key} must be an array of types, got ${describe(types)}`);
    types.forEach((t, i) => {
      if (!HOST_VALUE_TYPES.includes(t)) {
        throw new InvalidParams(`${where}.${key}[${i}]: unknown type ${JSON.stringify(t)} (${HOST_VALUE_TYPES.join(", ")})`);
      }
    });
  }
  if (typeof fn.handler !== "function") throw new InvalidParams(`${where}.handler must be a function, got ${describe(fn.handler)}`);
  return fn as HostFunction;
}

/**
 * The host functions one request declares and serves, by `module::name`.
 * Immutable: {@link HostFunctionTable.merged} makes a new one with a more
 * specific list over it (a run's over its sidecar's).
 */
export class HostFunctionTable {
  static readonly empty = new HostFunctionTable(new Map());
  private declared: HostFunctionDeclaration[] | undefined;

  private constructor(private readonly byName: ReadonlyMap<string, HostFunction>) {}

  /** This table with `functions` added, replacing those of the same name; throws {@link InvalidParams} naming a bad entry. */
  merged(functions: readonly HostFunction[] | undefined, where: string): HostFunctionTable {
    if (functions === undefined) return this;
    if (!Array.isArray(functions)) throw new InvalidParams(`${where} must be an array of host functions, got ${describe(functions)}`);
    if (functions.length === 0) return this;
    const mine = new Map<string, HostFunction>();
    functions.forEach((f, i) => {
      const fn = checkFunction(f, `${where}[${i}]`);
      const key = qualified(fn);
      if (mine.has(key)) throw new InvalidParams(`${where}[${i}]: ${key} is given twice`);
      mine.set(key, fn);
    });
    return new HostFunctionTable(new Map([...this.byName, ...mine]));
  }

  get(module: unknown, name: unknown): HostFunction | undefined {
    return typeof module === "string" && typeof name === "string" ? this.byName.get(`${module}::${name}`) : undefined;
  }

  get size(): number {
    return this.byName.size;
  }

  /** `hostFunctions` on the wire. */
  declarations(): HostFunctionDeclaration[] {
    this.declared ??= [...this.byName.values()].map((f) => ({
      module: f.module,
      name: f.name,
      params: [...(f.params ?? [])],
      results: [...(f.results ?? [])],
    }));
    return this.declared;
  }
}

/** A host call's `args` as JS values, checked against the declaration; throws {@link HostCallProblem}. */
export function decodeArgs(fn: HostFunction, raw: unknown): HostValue[] {
  const params = fn.params ?? [];
  if (!Array.isArray(raw) || raw.length !== params.length) {
    const count = Array.isArray(raw) ? raw.length : JSON.stringify(raw);
    throw new HostCallProblem(HOST_CALL_CODES.badArguments, `${qualified(fn)} takes ${signature(fn)}; the call has ${count} arguments`);
  }
  return params.map((t, i) => {
    const arg = raw[i] as { type?: unknown; value?: unknown } | null;
    if (arg === null || typeof arg !== "object" || arg.type !== t) {
      throw new HostCallProblem(HOST_CALL_CODES.badArguments, `args[${i}] is ${JSON.stringify(arg)}; ${qualified(fn)} takes ${signature(fn)}`);
    }
    if (t === "bytes") {
      const bytes = decodeBytes(arg.value);
      if (bytes === undefined) {
        throw new HostCallProblem(HOST_CALL_CODES.badArguments, `args[${i}]: not a {"text"} or {"base64"} object: ${JSON.stringify(arg.value)}`);
      }
      return bytes;
    }
    try {
      return decodeValue(arg as WireValue);
    } catch (err) {
      throw new HostCallProblem(HOST_CALL_CODES.badArguments, `args[${i}]: ${(err as Error).message}`);
    }
  });
}

const INT_RANGE = { i32: [-(2n ** 31n), 2n ** 32n - 1n], i64: [-(2n ** 63n), 2n ** 64n - 1n] } as const;

/**
 * A handler's result as the answer's `values`: nothing (`undefined`) for no
 * result, the value (or a one-element array) for one, an array for
 * several; throws {@link HostCallProblem} naming what does not fit.
 */
export function encodeResults(fn: HostFunction, returned: unknown): unknown[] {
  const results = fn.results ?? [];
  const shown = (v: unknown) => {
    const text = typeof v === "bigint" ? `${v}n` : v instanceof Uint8Array ? `a Uint8Array of ${v.byteLength} bytes` : safeString(v);
    return text.length <= 80 ? text : text.slice(0, 77) + "...";
  };
  if (results.length === 0) {
    if (returned === undefined || returned === null || (Array.isArray(returned) && returned.length === 0)) return [];
    throw new HostCallProblem(HOST_CALL_CODES.handlerFailed, `the handler of ${qualified(fn)} returned ${shown(returned)}; ${qualified(fn)} returns nothing`);
  }
  let values: unknown[];
  if (Array.isArray(returned) && returned.length === results.length) values = returned;
  else if (results.length === 1 && !Array.isArray(returned)) values = [returned];
  else {
    throw new HostCallProblem(
      HOST_CALL_CODES.handlerFailed,
      `the handler of ${qualified(fn)} returned ${shown(returned)}; ${qualified(fn)} returns ${results.length} values ${signature(fn)}`,
    );
  }
  return results.map((t, i) => {
    let v = values[i];
    const wrong = (why: string) =>
      new HostCallProblem(
        HOST_CALL_CODES.handlerFailed,
        `the handler of ${qualified(fn)} returned ${shown(v)} as its ${results.length === 1 ? "result" : `result ${i}`}: ${why}`,
      );
    if (t === "bytes") {
      if (typeof v === "string" || v instanceof Uint8Array) return { type: "bytes", value: encodeBytes(v) };
      throw wrong("a bytes result needs a Uint8Array or a string");
    }
    if (v !== null && typeof v === "object" && typeof (v as { type?: unknown }).type === "string") {
      // A typed value from i32(), f64Bits(), … or written by hand: its type
      // must be the declared one; a string (what i64() and f64() make) goes
      // as it is, a number or bigint as the plain value would (NaN and
      // ±Infinity as the protocol's strings), anything else is refused: it
      // could hold what JSON cannot carry (NaN would become null, a bigint
      // would throw).
      const typed = v as { type: string; value?: unknown; bits?: unknown };
      if (typed.type !== t) throw wrong(`an ${typed.type} where ${qualified(fn)} returns ${t}`);
      if (typed.bits !== undefined) {
        if (typeof typed.bits !== "string") throw wrong(`a typed value's bits must be a "0x…" string`);
        return { type: t, bits: typed.bits };
      }
      if (typeof typed.value === "string") return { type: t, value: typed.value };
      if (typeof typed.value !== "number" && typeof typed.value !== "bigint") {
        throw wrong("a typed value's value must be a number, a bigint or a string");
      }
      v = typed.value;
    }
    if (t === "f32" || t === "f64") {
      if (typeof v !== "number") throw wrong(`${t} needs a number`);
      return { type: t, value: encodeFloat(v) };
    }
    let n: bigint;
    if (typeof v === "bigint") n = v;
    else if (typeof v === "number" && Number.isSafeInteger(v)) n = BigInt(v);
    else throw wrong(`${t} needs ${t === "i64" ? "a bigint or a safe integer" : "an integer"}`);
    const [min, max] = INT_RANGE[t];
    if (n < min || n > max) throw wrong(`out of range for ${t}`);
    return { type: t, value: t === "i32" ? Number(n) : n.toString() };
  });
}

function safeString(v: unknown): string {
  try {
    return typeof v === "string" ? JSON.stringify(v) : String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}

/** What an error answer says of what a handler threw: `Error: no such key`, as Node prints it. */
export function describeFailure(err: unknown): string {
  return bounded(typeof err === "string" ? err : safeString(err));
}

/** `message` cut to {@link MAX_HOST_MESSAGE_BYTES} of UTF-8, on a character boundary. */
export function bounded(message: string): string {
  if (message.length <= MAX_HOST_MESSAGE_BYTES / 3) return message; // at most 3 bytes a UTF-16 unit
  const bytes = Buffer.from(message, "utf8");
  if (bytes.length <= MAX_HOST_MESSAGE_BYTES) return message;
  return new TextDecoder().decode(bytes.subarray(0, MAX_HOST_MESSAGE_BYTES - 3)).replace(/\uFFFD$/, "") + "...";
}

/** The host call whose handler is running, as requests sent from it see it. */
export interface ServingHostCall {
  /** The sidecar's id of the `host/call` request. */
  id: string | number;
  /** The session that received it: only its own requests may name it. */
  session: object;
}

let serving: AsyncLocalStorage<ServingHostCall> | undefined;

/**
 * Runs `handler` with `call` as the host call being served, for every
 * request it sends (across its awaits). The storage is made at the first
 * host call: a process that serves none never turns async context tracking on.
 */
export function runServing<R>(call: ServingHostCall, handler: () => R): R {
  serving ??= new AsyncLocalStorage<ServingHostCall>();
  return serving.run(call, handler);
}

/** The host call being served in this async context, if `session` received it. */
export function servingFor(session: object): ServingHostCall | undefined {
  const call = serving?.getStore();
  return call !== undefined && call.session === session ? call : undefined;
}
