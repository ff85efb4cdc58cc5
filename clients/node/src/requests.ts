/**
 * Building the params of `run` and `compile` from the API's options, and
 * reading their results: everything about a call that the client can
 * check or convert by itself, before a byte is sent or after the answer.
 *
 * @module
 */
import { resolve as resolvePath } from "node:path";

import { InvalidParams, SidecarError } from "./errors.js";
import type { CompileParams, ModuleParam, RunParams } from "./protocol.js";
import type { RunState } from "./session.js";
import type {
  Capabilities,
  CompileOptions,
  CompileWireResult,
  CompiledModule,
  ModuleSource,
  RunOptions,
  RunResult,
  RunWireResult,
} from "./types.js";
import { decodeValue, encodeArg, unsafeIntegerProblem, type Value } from "./values.js";

/** The protocol's `module` object from exactly one source; a relative path is made absolute here. */
export function moduleParam(src: ModuleSource): ModuleParam {
  const given = (["wat", "wasm", "path", "module"] as const).filter((k) => src[k] !== undefined);
  if (given.length !== 1) {
    throw new InvalidParams(`give exactly one of wat, wasm, path, module (got ${given.length === 0 ? "none" : given.join(", ")})`);
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

function encodeCapabilities(c: Capabilities): Record<string, unknown> {
  const out: Record<string, unknown> = { ...c };
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

/** The `run` params; throws {@link InvalidParams} before anything is sent. */
export function runParams(options: RunOptions): RunParams {
  const params: RunParams = { module: moduleParam(options) };
  if (options.function !== undefined) params.function = options.function;
  if (options.args !== undefined) params.args = options.args.map((a, i) => encodeArg(a, i));
  if (options.limits !== undefined) params.limits = { ...options.limits } as Record<string, number>;
  if (options.capabilities !== undefined) params.capabilities = encodeCapabilities(options.capabilities);
  return params;
}

/** The `compile` params; throws {@link InvalidParams} before anything is sent. */
export function compileParams(options: CompileOptions): CompileParams {
  const params: CompileParams = { module: moduleParam(options) };
  if (options.limits !== undefined) params.limits = { ...options.limits } as Record<string, number>;
  return params;
}

/** A `run` result as a RunResult, checked against the log notifications that came before it. */
export function toRunResult(raw: RunWireResult, state: RunState, stderrTail: string): RunResult {
  const violation = (what: string) =>
    new SidecarError(`protocol violation in run result: ${what}`, {
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
  if (raw.logLines !== state.logs.length) {
    throw violation(`logLines is ${raw.logLines} but ${state.logs.length} log notifications arrived before the response`);
  }
  return {
    values,
    rawValues: raw.values,
    fuelConsumed: raw.fuelConsumed,
    peakMemoryBytes: raw.peakMemoryBytes,
    elapsedMs: raw.elapsedMicros / 1000,
    queuedMs: raw.queuedMicros / 1000,
    moduleId: raw.moduleId,
    logs: state.logs,
    logTruncated: raw.logTruncated,
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
