/**
 * The types of the public API: options of spawn and run, results, the
 * `initialize` and `stats` results, and the wire shapes of run and compile
 * results.
 *
 * @module
 */
import type { ArgValue, Value, WireValue } from "./values.js";

/** Options of {@link Sidecar.spawn}. */
export interface SpawnOptions {
  /**
   * The sandboxd binary: a path, or a bare name searched on PATH. Default:
   * `$SANDBOXD_BIN`, else `sandboxd` on PATH.
   */
  binary?: string;
  /** Extra arguments after `serve`, e.g. `["--log-level", "debug"]`. */
  args?: string[];
  /** Runs executed at once (`--max-concurrency`; the sidecar's default is the number of CPUs). */
  maxConcurrency?: number;
  /** Environment variables for the sidecar, added to (and overriding) `process.env`. */
  env?: Record<string, string>;
  /** Working directory of the sidecar (default: this process's). */
  cwd?: string;
  /** Called with every chunk the sidecar writes to stderr (its slog output), e.g. to show it in an output channel. */
  onStderr?: (text: string) => void;
}

/** Resource limits of one run; omitted fields take the sidecar's defaults (see `Sidecar.info.limits`). */
export interface Limits {
  /** Fuel budget (≈ wasm instructions). */
  fuel?: number;
  /** Wall-clock deadline in milliseconds, covering instantiation and the call. */
  timeoutMs?: number;
  /** Cap on linear memory in bytes (all memories together). */
  memoryBytes?: number;
  /** Cap on table elements. */
  tableElements?: number;
  /** Cap on instances. */
  instances?: number;
  /** Cap on the number of memories. */
  memories?: number;
  /** Cap on log bytes kept for the run; lines beyond it are dropped. */
  logBytes?: number;
  /** Deadline in milliseconds for compiling a module the sidecar has not compiled before; past it, `CompileLimitExceeded` (`compile_time`). */
  compileTimeoutMs?: number;
  /** Memory cap in bytes of that compile (the compile process's data size); past it, `CompileLimitExceeded` (`compile_memory`). */
  compileMemoryBytes?: number;
}

/** The limits {@link Sidecar.compile} takes: only the compile fields (the sidecar refuses any other, naming it). */
export type CompileLimits = Pick<Limits, "compileTimeoutMs" | "compileMemoryBytes">;

/** Host functions granted to the guest; nothing is granted by default. */
export interface Capabilities {
  /** `host::log(ptr, len)`: lines arrive as `onLog` calls / `RunResult.logs`. */
  log?: boolean;
  /** `host::random() -> i64`, a splitmix64 generator seeded with `seed` (0..2^64−1). */
  random?: { seed: number | bigint | string };
  /** `host::now_ns() -> i64`, monotonic nanoseconds. */
  clock?: boolean;
}

/** What `compile` returns; pass it as `module` to later runs. */
export interface CompiledModule {
  /** `sha256:<hex>` of the module bytes. */
  id: string;
  imports: ImportInfo[];
  exports: ExportInfo[];
  /** The sidecar already had the module in its cache. */
  cached: boolean;
  /** Compilation time in milliseconds. */
  compileMs: number;
}

/** An import of a compiled module. */
export interface ImportInfo {
  module: string;
  name: string;
  kind: string;
  type: string;
}

/** An export of a compiled module. */
export interface ExportInfo {
  name: string;
  kind: string;
  params: string[];
  results: string[];
}

/** Where a module comes from: give exactly one field. */
export interface ModuleSource {
  /** WebAssembly text. */
  wat?: string;
  /** A binary module. */
  wasm?: Uint8Array;
  /** A `.wat` or `.wasm` file the sidecar reads (resolved against this process's cwd). */
  path?: string;
  /** A module compiled earlier on this sidecar, or its `sha256:` id. */
  module?: CompiledModule | string;
}

/** Options of {@link Sidecar.compile}. */
export interface CompileOptions extends ModuleSource {
  limits?: CompileLimits;
}

/** Options of {@link Sidecar.run}. */
export interface RunOptions extends ModuleSource {
  /** The export to call (default `"run"`). */
  function?: string;
  /** One entry per parameter, see {@link ArgValue}. */
  args?: ArgValue[];
  limits?: Limits;
  capabilities?: Capabilities;
  /**
   * Called for each guest log line, in order, before the run's promise
   * settles. If it throws, a successful run rejects with that error.
   */
  onLog?: (line: string, seq: number) => void;
  /** Aborting sends `$/cancelRequest`; the run then rejects with `Cancelled`. */
  signal?: AbortSignal;
}

/** The result of a successful run. */
export interface RunResult {
  /** Decoded results: i32/f32/f64 as number, i64 as bigint. */
  values: Value[];
  /** The results as sent on the wire (floats with exact `bits`, NaN payloads included). */
  rawValues: WireValue[];
  fuelConsumed: number;
  peakMemoryBytes: number;
  /** Instantiation + start function + call, in milliseconds (from `elapsedMicros`). */
  elapsedMs: number;
  /** Time spent waiting for a worker, in milliseconds (from `queuedMicros`). */
  queuedMs: number;
  /** `sha256:<hex>` of the module. */
  moduleId: string;
  /** Guest log lines, in order. */
  logs: string[];
  /** Lines were cut to 16 KiB or dropped by `logBytes`. */
  logTruncated: boolean;
}

/** The result of `initialize`, available as {@link Sidecar.info}. */
export interface ServerInfo {
  serverInfo: { name: string; version: string };
  engine: Record<string, string>;
  capabilities: { hostFunctions: string[]; valueTypes: string[]; framing: string };
  limits: { defaults: Required<Limits>; maximums: Required<Limits> };
  maxConcurrency: number;
  maxQueue: number;
  [key: string]: unknown;
}

/** The result of {@link Sidecar.stats}. */
export interface Stats {
  /** Finished runs by outcome kind (`ok` for success). */
  runs: Record<string, number>;
  inFlight: number;
  queued: number;
  queuedMicrosTotal: number;
  cache: { entries: number; bytes: number; hits: number; misses: number };
  uptimeMs: number;
  requests: number;
  [key: string]: unknown;
}

/** The `run` result as it is on the wire. */
export interface RunWireResult {
  values: WireValue[];
  fuelConsumed: number;
  peakMemoryBytes: number;
  elapsedMicros: number;
  queuedMicros: number;
  moduleId: string;
  logLines: number;
  logTruncated: boolean;
}

/** The `compile` result as it is on the wire. */
export interface CompileWireResult {
  moduleId: string;
  imports: ImportInfo[];
  exports: ExportInfo[];
  cached: boolean;
  compileMicros: number;
}
