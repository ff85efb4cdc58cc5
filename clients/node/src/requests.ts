/**
 * Building the params of `run`, `compile`, `instantiate` and `call` from the API's options, and
 * reading their results: everything about a call that the client can
 * check or convert by itself, before a byte is sent or after the answer.
 *
 * @module
 */
import { resolve as resolvePath } from "node:path";

import { decodeBytes, encodeBytes, type WireBytes } from "./bytes.js";
import { InvalidParams, SidecarError } from "./errors.js";
import { HostFunctionTable } from "./hostcalls.js";
import type { CallParams, CompileParams, InstantiateParams, ModuleParam, RunParams, WasiParam } from "./protocol.js";
import type { RunState } from "./session.js";
import type {
  CallLimits,
  CallOptions,
  CallResult,
  CallWireResult,
  Capabilities,
  CompileOptions,
  CompileWireResult,
  CompiledModule,
  InstantiateWireResult,
  InstantiationUsage,
  LogEntry,
  ModuleSource,
  PluginOptions,
  RunOptions,
  RunResult,
  RunWireResult,
  Wasi,
} from "./types.js";
import { decodeValue, encodeArg, unsafeIntegerProblem, type Value } from "./values.js";

/** The protocol's `module` object from exactly one source; a relative path is made absolute here. */
export function moduleParam(src: ModuleSource): ModuleParam {
  const given = (["wat", "wasm", "path", "module", "moduleId"] as const).filter((k) => src[k] !== undefined);
  if (given.length !== 1) {
    throw new InvalidParams(`give exactly one of wat, wasm, path, module, moduleId (got ${given.length === 0 ? "none" : given.join(", ")})`);
  }
  if (src.moduleId !== undefined) {
    if (typeof src.moduleId !== "string") throw new InvalidParams(`moduleId must be a string, got ${describe(src.moduleId)}`);
    return { id: src.moduleId };
  }
  if (src.wat !== undefined) return { wat: src.wat };
  if (src.wasm !== undefined) {
    if (!(src.wasm instanceof Uint8Array)) throw new InvalidParams("wasm must be a Uint8Array");
    return { wasm: Buffer.from(src.wasm.buffer, src.wasm.byteOffset, src.wasm.byteLength).toString("base64") };
  }
  if (src.path !== undefined) return { path: resolvePath(src.path) };
  const m = src.module!;
  return { id: typeof m === "string" ? m : m.id };
}

function bytesParam(value: unknown, where: string): WireBytes {
  if (typeof value === "string" || value instanceof Uint8Array) return encodeBytes(value);
  throw new InvalidParams(`${where} must be a string or a Uint8Array, got ${describe(value)}`);
}

export function describe(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof Uint8Array);
}

const WASI_KEYS = new Set(["args", "env", "stdin", "files", "dirs"]);
const DIR_KEYS = new Set(["host", "guest", "writable"]);

function checkKeys(value: Record<string, unknown>, known: Set<string>, where: string): void {
  const unknown = Object.keys(value).filter((k) => !known.has(k));
  if (unknown.length > 0) throw new InvalidParams(`${where}: unknown key(s) ${unknown.join(", ")} (known: ${[...known].join(", ")})`);
}

/** `capabilities.wasi` on the wire: strings as they are, bytes as base64, dirs with absolute hosts. */
export function wasiParam(wasi: Wasi | boolean): WasiParam | true {
  if (wasi === true) return true;
  const w = wasi as unknown;
  if (!isRecord(w)) throw new InvalidParams(`wasi must be an object or true, got ${describe(w)}`);
  checkKeys(w, WASI_KEYS, "wasi");
  const out: WasiParam = {};
  if (w["args"] !== undefined) {
    const args = w["args"];
    if (!Array.isArray(args)) throw new InvalidParams(`wasi.args must be an array of strings, got ${describe(args)}`);
    args.forEach((a, i) => {
      if (typeof a !== "string") throw new InvalidParams(`wasi.args[${i}] must be a string, got ${describe(a)}`);
    });
    if (args.length > 0) out.args = [...(args as string[])];
  }
  if (w["env"] !== undefined) {
    const env = w["env"];
    if (!isRecord(env)) throw new InvalidParams(`wasi.env must be an object of strings, got ${describe(env)}`);
    for (const [k, v] of Object.entries(env)) {
      if (typeof v !== "string") throw new InvalidParams(`wasi.env.${k} must be a string, got ${describe(v)}`);
    }
    if (Object.keys(env).length > 0) out.env = { ...(env as Record<string, string>) };
  }
  if (w["stdin"] !== undefined) out.stdin = bytesParam(w["stdin"], "wasi.stdin");
  if (w["files"] !== undefined) {
    const files = w["files"];
    if (!isRecord(files)) throw new InvalidParams(`wasi.files must be an object of guest path to bytes, got ${describe(files)}`);
    const entries = Object.entries(files);
    if (entries.length > 0) out.files = Object.fromEntries(entries.map(([k, v]) => [k, bytesParam(v, `wasi.files[${JSON.stringify(k)}]`)]));
  }
  if (w["dirs"] !== undefined) {
    const dirs = w["dirs"];
    if (!Array.isArray(dirs)) throw new InvalidParams(`wasi.dirs must be an array of {host, guest, writable}, got ${describe(dirs)}`);
    const list = dirs.map((d: unknown, i) => {
      const where = `wasi.dirs[${i}]`;
      if (!isRecord(d)) throw new InvalidParams(`${where} must be an object, got ${describe(d)}`);
      checkKeys(d, DIR_KEYS, where);
      const { host, guest, writable } = d;
      if (typeof host !== "string") throw new InvalidParams(`${where}.host must be a string, got ${describe(host)}`);
      if (guest !== undefined && typeof guest !== "string") throw new InvalidParams(`${where}.guest must be a string, got ${describe(guest)}`);
      if (writable !== undefined && typeof writable !== "boolean") {
        throw new InvalidParams(`${where}.writable must be a boolean, got ${describe(writable)}`);
      }
      const dir: { host: string; guest: string; writable?: boolean } = { host: resolvePath(host), guest: guest ?? host };
      if (writable) dir.writable = true;
      return dir;
    });
    if (list.length > 0) out.dirs = list;
  }
  return out;
}

function encodeCapabilities(c: Capabilities): Record<string, unknown> {
  const out: Record<string, unknown> = { ...c };
  if (c.wasi === false || c.wasi === undefined) delete out["wasi"];
  else out["wasi"] = wasiParam(c.wasi);
  if (c.random !== undefined) {
    const seed = c.random.seed;
    if (typeof seed === "number" && Number.isInteger(seed) && !Number.isSafeInteger(seed)) {
      throw new InvalidParams(`capabilities.random.seed: ${unsafeIntegerProblem(seed)}; pass a bigint instead`);
    }
    out["random"] = {
      ...c.random,
      seed: typeof seed === "bigint" ? (seed <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(seed) : seed.toString()) : seed,
    };
  }
  return out;
}

/** `capabilities` on the wire, with `wasi` given either way (not both). */
function capabilitiesParam(options: { capabilities?: Capabilities; wasi?: Wasi | boolean; onOutput?: unknown }): Record<string, unknown> | undefined {
  let caps = options.capabilities;
  if (options.wasi !== undefined && options.wasi !== false) {
    if (caps?.wasi !== undefined) throw new InvalidParams("give wasi or capabilities.wasi, not both");
    caps = { ...caps, wasi: options.wasi };
  }
  const encoded = caps === undefined ? undefined : encodeCapabilities(caps);
  if (options.onOutput !== undefined && encoded?.["wasi"] === undefined) {
    throw new InvalidParams("onOutput needs wasi (only a WASI guest has stdout and stderr)");
  }
  return encoded;
}

/** A plugin's `config`: string keys to string values, as the sidecar requires. */
function configParam(config: unknown): Record<string, string> {
  if (!isRecord(config)) throw new InvalidParams(`config must be an object of strings, got ${describe(config)}`);
  for (const [k, v] of Object.entries(config)) {
    if (typeof v !== "string") throw new InvalidParams(`config.${k}: must be a string, got ${describe(v)}`);
  }
  return { ...(config as Record<string, string>) };
}

/** The `run` params, declaring `hostFunctions`; throws {@link InvalidParams} before anything is sent. */
export function runParams(options: RunOptions, hostFunctions = HostFunctionTable.empty): RunParams {
  const params: RunParams = { module: moduleParam(options) };
  if (options.function !== undefined) params.function = options.function;
  if (options.args !== undefined) params.args = options.args.map((a, i) => encodeArg(a, i));
  if (options.limits !== undefined) params.limits = { ...options.limits } as Record<string, number>;
  const caps = capabilitiesParam(options);
  if (caps !== undefined) params.capabilities = caps;
  if (options.input !== undefined) params.input = bytesParam(options.input, "input");
  if (options.config !== undefined) params.config = configParam(options.config);
  if (hostFunctions.size > 0) params.hostFunctions = hostFunctions.declarations();
  return params;
}

/** The `instantiate` params, declaring `hostFunctions`; throws {@link InvalidParams} before anything is sent. */
export function instantiateParams(options: PluginOptions, hostFunctions = HostFunctionTable.empty): InstantiateParams {
  const params: InstantiateParams = { module: moduleParam(options) };
  const caps = capabilitiesParam(options);
  if (caps !== undefined) params.capabilities = caps;
  if (options.limits !== undefined) params.limits = { ...options.limits } as Record<string, number>;
  if (options.config !== undefined) params.config = configParam(options.config);
  if (hostFunctions.size > 0) params.hostFunctions = hostFunctions.declarations();
  return params;
}

const CALL_LIMITS = new Set<string>(["fuel", "timeoutMs", "logBytes", "outputBytes"]);

/**
 * The `call` params; throws {@link InvalidParams} before anything is sent.
 * `input` is for plugin functions, `options.args` for plain ones.
 */
export function callParams(instance: string, fn: string, input: unknown, options: CallOptions): CallParams {
  if (typeof fn !== "string" || fn === "") throw new InvalidParams(`function must be a non-empty string, got ${describe(fn)}`);
  const params: CallParams = { instance, function: fn };
  if (input !== undefined) params.input = bytesParam(input, "input");
  if (options.args !== undefined) {
    if (!Array.isArray(options.args)) throw new InvalidParams(`args must be an array, got ${describe(options.args)}`);
    params.args = options.args.map((a, i) => encodeArg(a, i));
  }
  if (options.limits !== undefined) params.limits = callLimitsParam(options.limits);
  return params;
}

/** The `limits` of a call (or of an evaluation in a session): only {@link CallLimits}, the rest are fixed at instantiate. */
export function callLimitsParam(limits: CallLimits): Record<string, number> {
  for (const k of Object.keys(limits)) {
    if (!CALL_LIMITS.has(k)) {
      throw new InvalidParams(`limits.${k}: fixed at instantiate (only fuel, timeoutMs, logBytes, outputBytes apply to a call)`);
    }
  }
  return { ...limits } as Record<string, number>;
}

/** The log lines of a request with their levels. */
export function logEntries(state: RunState): LogEntry[] {
  if (state.logs.length === 0) return [];
  const levels = state.levels;
  return state.logs.map((line, i) => ({ line, level: levels?.[i] }));
}

/** The `compile` params; throws {@link InvalidParams} before anything is sent. */
export function compileParams(options: CompileOptions): CompileParams {
  const params: CompileParams = { module: moduleParam(options) };
  if (options.limits !== undefined) params.limits = { ...options.limits } as Record<string, number>;
  const pre = options.preinitialize;
  if (pre !== undefined && typeof pre !== "boolean") {
    throw new InvalidParams(`preinitialize must be a boolean, got ${describe(pre)}`);
  }
  if (pre) params.preinitialize = true;
  return params;
}

/** A `run` result as a RunResult, checked against the log notifications that came before it. */
export function toRunResult(raw: RunWireResult, state: RunState, stderrTail: string): RunResult {
  const r = toCallResult(raw, state, stderrTail, "run") as RunResult;
  r.moduleId = raw.moduleId;
  return r;
}

/** A `run` or `call` result, checked against the log notifications that came before it. */
export function toCallResult(raw: CallWireResult, state: RunState, stderrTail: string, method = "call"): CallResult {
  const violation = (what: string) =>
    new SidecarError(`protocol violation in ${method} result: ${what}`, {
      reason: "protocol",
      data: raw,
      logs: state.logs,
      stderrTail,
    });
  if (state.seqProblem) throw violation(state.seqProblem);
  if (!raw || !Array.isArray(raw.values)) throw violation(`no values array in ${JSON.stringify(raw)}`);
  let values: Value[];
  try {
    values = raw.values.map(decodeValue);
  } catch (err) {
    throw violation((err as Error).message);
  }
  let stdout: Uint8Array = EMPTY;
  let stderr: Uint8Array = EMPTY;
  const wasi = raw.exitCode !== undefined;
  if (wasi) {
    if (!Number.isInteger(raw.exitCode)) throw violation(`exitCode is ${JSON.stringify(raw.exitCode)}`);
    const out = decodeBytes(raw.stdout);
    const err = decodeBytes(raw.stderr);
    if (out === undefined || err === undefined) throw violation(`stdout or stderr is not a bytes object`);
    stdout = out;
    stderr = err;
  }
  let output: Uint8Array = EMPTY;
  if (raw.output !== undefined) {
    const o = decodeBytes(raw.output);
    if (o === undefined) throw violation(`output is not a bytes object: ${JSON.stringify(raw.output)}`);
    output = o;
  }
  if (raw.logLines !== state.logs.length) {
    throw violation(`logLines is ${raw.logLines} but ${state.logs.length} log notifications arrived before the response`);
  }
  return {
    values,
    rawValues: raw.values,
    output,
    fuelConsumed: raw.fuelConsumed,
    peakMemoryBytes: raw.peakMemoryBytes,
    elapsedMs: raw.elapsedMicros / 1000,
    queuedMs: raw.queuedMicros / 1000,
    logs: state.logs,
    logEntries: logEntries(state),
    logTruncated: raw.logTruncated,
    logDropped: raw.logDropped ?? 0,
    exitCode: raw.exitCode,
    stdout,
    stderr,
    outputTruncated: raw.outputTruncated === true,
  };
}

/** The empty bytes of every result without output (shared: nothing can be written into zero bytes). */
const EMPTY = new Uint8Array(0);

/** An `instantiate` result, checked: the instance id and what instantiation cost. */
export function checkInstantiated(raw: InstantiateWireResult, state: RunState, stderrTail: string): InstantiationUsage {
  const violation = (what: string) =>
    new SidecarError(`protocol violation in instantiate result: ${what}`, { reason: "protocol", data: raw, logs: state.logs, stderrTail });
  if (state.seqProblem) throw violation(state.seqProblem);
  if (!raw || typeof raw.instance !== "string" || raw.instance === "") throw violation(`no instance id in ${JSON.stringify(raw)}`);
  if (!Array.isArray(raw.exports)) throw violation(`no exports array in ${JSON.stringify(raw)}`);
  if (raw.logLines !== undefined && raw.logLines !== state.logs.length) {
    throw violation(`logLines is ${raw.logLines} but ${state.logs.length} log notifications arrived before the response`);
  }
  return instantiationUsage(raw, state);
}

/** What an instantiation (a plugin's, or a session's interpreter start) cost, from its `instantiate` answer. */
export function instantiationUsage(
  raw: Pick<InstantiateWireResult, "fuelConsumed" | "peakMemoryBytes" | "elapsedMicros" | "queuedMicros"> & Partial<InstantiateWireResult>,
  state: RunState,
): InstantiationUsage {
  return {
    fuelConsumed: raw.fuelConsumed,
    peakMemoryBytes: raw.peakMemoryBytes,
    elapsedMs: raw.elapsedMicros / 1000,
    queuedMs: raw.queuedMicros / 1000,
    logs: state.logs,
    logEntries: logEntries(state),
    logTruncated: raw.logTruncated === true,
    logDropped: raw.logDropped ?? 0,
  };
}

/** A `compile` result as a CompiledModule. */
export function toCompiledModule(raw: CompileWireResult): CompiledModule {
  return {
    id: raw.moduleId,
    imports: raw.imports,
    exports: raw.exports,
    cached: raw.cached,
    compileMs: raw.compileMicros / 1000,
  };
}
