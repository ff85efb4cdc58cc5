/**
 * The types of the public API: options of spawn and run, results, the
 * `initialize` and `stats` results, and the wire shapes of run and compile
 * results.
 *
 * @module
 */
import type { ArgValue, TypedBitsArg, TypedValueArg, Value, ValueType, WireValue } from "./values.js";

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
  /**
   * Host functions declared to every run and instance of this sidecar,
   * serving their guests' calls unless a run or an instance registers its
   * own of the same `module` and `name`.
   */
  hostFunctions?: HostFunction[];
}

/** A host function's parameter or result type: wasm's numbers, or `bytes` (an Extism memory handle, for plugins). */
export type HostValueType = ValueType | "bytes";

/** A host function's argument: `number` for i32, f32, f64; `bigint` for i64; bytes as a `Uint8Array`. */
export type HostValue = number | bigint | Uint8Array;

/**
 * What a host function's handler returns (or resolves to): nothing for no
 * result, the value (or a one-element array) for one, an array for several.
 * Each value as a `run` argument is given: a `number` for i32/f32/f64, a
 * `bigint` or safe-integer `number` for i64, a typed value from `i32()`,
 * `f64Bits()`, …, and for `bytes` a `Uint8Array` or a string (its UTF-8).
 */
export type HostResult = HostResultValue | HostResultValue[] | undefined | void;
/** One value of a {@link HostResult}. */
export type HostResultValue = number | bigint | string | Uint8Array | TypedValueArg | TypedBitsArg;

/** What a handler is told of the call it serves. */
export interface HostCallContext {
  /**
   * Aborted when the sidecar cancels the call (the run's deadline passed,
   * or the run was cancelled): whatever the handler returns then is dropped.
   */
  signal: AbortSignal;
  /** The sidecar's id of the `host/call` request (`"sbx-1"`). */
  id: string | number;
  /** The id of this client's `run`, `call` or `instantiate` whose guest made the call. */
  requestId: string | number;
  /** The instance whose call (or instantiation) made it; `undefined` for a run. */
  instance: string | undefined;
  module: string;
  name: string;
}

/**
 * A function of this process that guests may import as `module::name`
 * (docs/protocol.md, "Host functions served by the parent").
 */
export interface HostFunction {
  module: string;
  name: string;
  /** Parameter types (default none). */
  params?: HostValueType[];
  /** Result types (default none). */
  results?: HostValueType[];
  /**
   * Called with the arguments and the call's context; what it returns or
   * resolves to is the answer, what it throws or rejects with an error
   * answer carrying its message (the run then fails with `HostFunctionError`).
   */
  // Each argument is a HostValue of the type `params` gives it: known when
  // the program runs, not when it compiles, so typed any (a handler takes
  // `([key])` as the bigint it is, without a cast).
  handler: (args: any[], call: HostCallContext) => HostResult | Promise<HostResult>;
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
  /** Cap on a WASI guest's stdout and on its stderr (bytes kept, each), and on a plugin's output; the rest is dropped. */
  outputBytes?: number;
  /** Cap on a plugin instance's vars (keys and values) in bytes, for its whole life (instantiate only). */
  varBytes?: number;
}

/** The limits a {@link Plugin.call} may set: the rest are fixed when the instance is created. */
export type CallLimits = Pick<Limits, "fuel" | "timeoutMs" | "logBytes" | "outputBytes">;

/** The level of an Extism plugin's `log_*` line. */
export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";

/** One guest log line and its level (`undefined` for `host::log` lines, which have none). */
export interface LogEntry {
  line: string;
  level: LogLevel | undefined;
}

/** The limits {@link Sidecar.compile} takes: only the compile fields (the sidecar refuses any other, naming it). */
export type CompileLimits = Pick<Limits, "compileTimeoutMs" | "compileMemoryBytes">;

/** A WASI input: a string (sent as its UTF-8 bytes) or bytes. */
export type BytesInput = string | Uint8Array;

/** A host directory preopened for a WASI guest. */
export interface WasiDir {
  /**
   * The host directory (made absolute against this process's cwd). It must
   * be at or under a directory the sidecar allows: spawn it with
   * `args: ["--allow-dir", PATH]`.
   */
  host: string;
  /** Where the guest sees it (default: `host` as written). */
  guest?: string;
  /** Default false: read-only. */
  writable?: boolean;
}

/** The WASI preview1 grant; every field is optional and the guest sees exactly what is given. */
export interface Wasi {
  /** argv after argv[0]. */
  args?: string[];
  /** The whole environment (nothing is inherited from the sidecar). */
  env?: Record<string, string>;
  /** What fd 0 reads, then end of file. */
  stdin?: BytesInput;
  /** Read-only files at absolute guest paths. */
  files?: Record<string, BytesInput>;
  /** Host directories to preopen. */
  dirs?: WasiDir[];
}

/** Which output stream a piece of WASI output belongs to. */
export type OutputStream = "stdout" | "stderr";

/** Host functions granted to the guest; nothing is granted by default. */
export interface Capabilities {
  /** `host::log(ptr, len)`: lines arrive as `onLog` calls / `RunResult.logs`. */
  log?: boolean;
  /** `host::random() -> i64`, a splitmix64 generator seeded with `seed` (0..2^64−1). */
  random?: { seed: number | bigint | string };
  /** `host::now_ns() -> i64`, monotonic nanoseconds. */
  clock?: boolean;
  /** WASI preview1 (`true`: with every field empty); the same as {@link RunOptions.wasi}. */
  wasi?: Wasi | boolean;
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
  /** A module compiled earlier on this sidecar, by its `sha256:` id (the same as `module: id`). */
  moduleId?: string;
}

/** Options of {@link Sidecar.compile}. */
export interface CompileOptions extends ModuleSource {
  limits?: CompileLimits;
  /**
   * Compiles a reactor (a Go PDK plugin, any module exporting
   * `_initialize`) pre-initialised: its initialiser runs once, in this
   * compile, and every later instance starts from the state it left
   * (docs/preinit.md). The module has an id of its own and no
   * `_initialize` export; run and instantiate it by that id. It takes the
   * module's bytes (`wasm` or `path`): a module that cannot be
   * pre-initialised (text, no initialiser, an initialiser that traps)
   * rejects with `InvalidModule`. Default false.
   */
  preinitialize?: boolean;
}

/** Options of {@link Sidecar.run}. */
export interface RunOptions extends ModuleSource {
  /**
   * A plugin run's input (the module imports `extism:host/env`; `function`
   * is a plugin function): a string (its UTF-8 bytes) or bytes. The result's
   * `output` is what the plugin set. Refused (`InvalidParams`) for a module
   * that is not a plugin.
   */
  input?: BytesInput;
  /** A plugin run's config: string keys to string values, what the plugin's `config_get` reads. */
  config?: Record<string, string>;
  /** The export to call (default `_start` when the module exports it, else `"run"`). */
  function?: string;
  /** One entry per parameter, see {@link ArgValue}. */
  args?: ArgValue[];
  limits?: Limits;
  capabilities?: Capabilities;
  /**
   * Called for each guest log line, in order, before the run's promise
   * settles; `level` is that of an Extism `log_*` line (`undefined` for
   * `host::log`). If it throws, a successful run rejects with that error.
   */
  onLog?: (line: string, seq: number, level: LogLevel | undefined) => void;
  /**
   * Runs a WASI preview1 program (`capabilities.wasi`; give one or the
   * other): the result then has `exitCode`, `stdout` and `stderr`.
   */
  wasi?: Wasi | boolean;
  /**
   * Called for each piece of a WASI guest's stdout or stderr, in the order
   * written, before the run's promise settles (`seq` counts pieces across
   * both streams). If it throws, a successful run rejects with that error.
   */
  onOutput?: (stream: OutputStream, data: Uint8Array, seq: number) => void;
  /** Aborting sends `$/cancelRequest`; the run then rejects with `Cancelled`. */
  signal?: AbortSignal;
  /** Host functions declared to this run's guest and serving its calls, over the sidecar's of the same name. */
  hostFunctions?: HostFunction[];
}

/** The result of a successful {@link Plugin.call} (and the base of {@link RunResult}). */
export interface CallResult {
  /** Decoded results: i32/f32/f64 as number, i64 as bigint. */
  values: Value[];
  /** The results as sent on the wire (floats with exact `bits`, NaN payloads included). */
  rawValues: WireValue[];
  /** The bytes a plugin function set as its output (empty for other functions). */
  output: Uint8Array;
  fuelConsumed: number;
  peakMemoryBytes: number;
  /** The guest's time in milliseconds (from `elapsedMicros`): a run's instantiation, start function and call; a call's call. */
  elapsedMs: number;
  /** Time spent waiting for a worker (a call: also for the instance's earlier calls), in milliseconds (from `queuedMicros`). */
  queuedMs: number;
  /** Guest log lines, in order. */
  logs: string[];
  /** The same lines with their level (Extism `log_*`; `undefined` for `host::log`). */
  logEntries: LogEntry[];
  /** Lines were cut to 16 KiB or dropped by `logBytes`. */
  logTruncated: boolean;
  /** A plugin's log lines dropped for want of the `log` capability (from `logDropped`; 0 when absent). */
  logDropped: number;
  /** A WASI run's `proc_exit` status (0 when `_start` returned); `undefined` for other runs. */
  exitCode: number | undefined;
  /** A WASI run's stdout (at most `limits.outputBytes`); empty for other runs. */
  stdout: Uint8Array;
  /** A WASI run's stderr (at most `limits.outputBytes`); empty for other runs. */
  stderr: Uint8Array;
  /** Output (a plugin's, or a WASI stream) past `limits.outputBytes` was dropped. */
  outputTruncated: boolean;
}

/** The result of a successful run. */
export interface RunResult extends CallResult {
  /** `sha256:<hex>` of the module. */
  moduleId: string;
}

/** Options of {@link Sidecar.instantiate} (and {@link Sidecar.plugin}): a module and what its instance is given for its life. */
export interface PluginOptions extends ModuleSource {
  /**
   * The instance's limits. `memoryBytes`, `tableElements`, `instances`,
   * `memories` and `varBytes` hold for its whole life; `fuel`, `timeoutMs`,
   * `logBytes` and `outputBytes` fence instantiation (start function,
   * `_initialize`) and are each call's defaults; the compile limits fence
   * the compile.
   */
  limits?: Limits;
  /** Host functions granted; an Extism plugin's `log_*` needs `log`. */
  capabilities?: Capabilities;
  /** WASI preview1 for the instance (the same as `capabilities.wasi`); the Go PDK's plugins need it. */
  wasi?: Wasi | boolean;
  /** String keys to string values: what the plugin's `config_get` reads. */
  config?: Record<string, string>;
  /** Log lines of instantiation (start function, `_initialize`). */
  onLog?: (line: string, seq: number, level: LogLevel | undefined) => void;
  /** WASI output of instantiation. */
  onOutput?: (stream: OutputStream, data: Uint8Array, seq: number) => void;
  /** Aborting cancels the instantiation (no instance is left behind); it rejects with `Cancelled`. */
  signal?: AbortSignal;
  /**
   * Host functions declared to the instance for its life, serving the host
   * calls of its instantiation and of every call, over the sidecar's of the
   * same name.
   */
  hostFunctions?: HostFunction[];
}

/** Options of {@link Plugin.call}. */
export interface CallOptions {
  /** Arguments of a plain (non-plugin) function, see {@link ArgValue}. */
  args?: ArgValue[];
  /** This call's fences; omitted ones are the instance's (from {@link PluginOptions.limits}). */
  limits?: CallLimits;
  /** Called for each log line of the call, in order, before its promise settles. */
  onLog?: (line: string, seq: number, level: LogLevel | undefined) => void;
  /** Called for each piece of a WASI instance's stdout or stderr during the call. */
  onOutput?: (stream: OutputStream, data: Uint8Array, seq: number) => void;
  /**
   * Aborting sends `$/cancelRequest`: a call still waiting for its turn is
   * dropped (the instance stays open); a running one is stopped, which
   * closes the instance. Either way it rejects with `Cancelled`.
   */
  signal?: AbortSignal;
}

/** A snippet's language: JavaScript (goja), Lua 5.1 (gopher-lua) or Starlark, the Python dialect. */
export type Language = "js" | "lua" | "starlark";

/** A JSON value: what a snippet's value is. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** What every evaluation takes, one-shot or in a {@link Session}. */
export interface SnippetOptions {
  /** The snippet's source. */
  code: string;
  /**
   * The snippet's global `input`: any value `JSON.stringify` writes as it
   * is (a `NaN`, a `bigint`, a function, a `Map` or a cycle is refused with
   * {@link InvalidParams} naming where it is). Default `null`.
   */
  input?: unknown;
  /**
   * Called for each piece of the snippet's stdout or stderr (`console.log`,
   * `print`), in the order printed, before the promise settles. If it
   * throws, a successful evaluation rejects with that error.
   */
  onOutput?: (stream: OutputStream, data: Uint8Array, seq: number) => void;
  /** Aborting sends `$/cancelRequest`; the evaluation rejects with `Cancelled`. */
  signal?: AbortSignal;
}

/** Options of {@link Sidecar.eval}: a snippet in a fresh interpreter. */
export interface EvalOptions extends SnippetOptions {
  language: Language;
  /** Its limits; omitted fields take the language's defaults (a memory cap that fits its interpreter) and the sidecar's. */
  limits?: Limits;
}

/** Options of {@link Sidecar.session}. */
export interface SessionOptions {
  language: Language;
  /**
   * The session's limits: `memoryBytes` (default: the language's) holds for
   * its whole life; `fuel`, `timeoutMs`, `logBytes` and `outputBytes` are
   * each evaluation's defaults.
   */
  limits?: Limits;
  /** Aborting cancels the start (no session is left behind); it rejects with `Cancelled`. */
  signal?: AbortSignal;
}

/** Options of {@link Session.eval}. */
export interface SessionEvalOptions extends SnippetOptions {
  /** This evaluation's fences; omitted ones are the session's. */
  limits?: CallLimits;
}

/** The result of a snippet that ended with a value. */
export interface EvalResult {
  language: Language;
  /**
   * The snippet's value, as `JSON.parse` reads it (docs/snippets.md says
   * what each language's value is; an integer past 2^53, which Starlark
   * has, loses precision as it does in any JSON.parse).
   */
  value: JsonValue;
  /** What the evaluation alone consumed (never the interpreter's start). */
  fuelConsumed: number;
  peakMemoryBytes: number;
  elapsedMs: number;
  /** Waiting for a worker (in a session: also for its earlier evaluations), in milliseconds. */
  queuedMs: number;
  /** What it printed to stdout (at most `limits.outputBytes`), also streamed to `onOutput`. */
  stdout: Uint8Array;
  stderr: Uint8Array;
  /** Output past `limits.outputBytes` was dropped. */
  outputTruncated: boolean;
}

/** The `eval` result as it is on the wire. */
export interface EvalWireResult {
  language: Language;
  value: JsonValue;
  fuelConsumed: number;
  peakMemoryBytes: number;
  elapsedMicros: number;
  queuedMicros: number;
  stdout: { text: string } | { base64: string };
  stderr: { text: string } | { base64: string };
  outputTruncated: boolean;
}

/** The `instantiate` result of a session, as it is on the wire. */
export interface SessionWireResult {
  instance: string;
  language: Language;
  fuelConsumed: number;
  peakMemoryBytes: number;
  elapsedMicros: number;
  queuedMicros: number;
}

/** What instantiation cost: its start function and `_initialize`. */
export interface InstantiationUsage {
  fuelConsumed: number;
  peakMemoryBytes: number;
  elapsedMs: number;
  queuedMs: number;
  logs: string[];
  logEntries: LogEntry[];
  logTruncated: boolean;
  logDropped: number;
}

/** The result of `initialize`, available as {@link Sidecar.info}. */
export interface ServerInfo {
  serverInfo: { name: string; version: string };
  engine: Record<string, string>;
  capabilities: {
    hostFunctions: string[];
    valueTypes: string[];
    framing: string;
    /** The snippet languages whose runtime this sidecar has installed ({@link Sidecar.eval}). */
    languages?: Language[];
  };
  limits: { defaults: Required<Limits>; maximums: Required<Limits> };
  maxConcurrency: number;
  maxQueue: number;
  /** Live instances allowed at once (`serve --max-instances`). */
  maxInstances?: number;
  /** An instance without a call for this long is evicted (`serve --instance-idle`). */
  instanceIdleMs?: number;
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
  /** Instances: live now, the maximum, created and evicted since start. */
  instances?: { live: number; max: number; created: number; evicted: number };
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
  logDropped?: number;
  /** The WASI fields (present when the run granted `wasi`). */
  exitCode?: number;
  stdout?: { text: string } | { base64: string };
  stderr?: { text: string } | { base64: string };
  outputTruncated?: boolean;
  /** A plugin function's output. */
  output?: { text: string } | { base64: string };
}

/** The `call` result as it is on the wire: a run result without `moduleId`. */
export type CallWireResult = Omit<RunWireResult, "moduleId">;

/** The `instantiate` result as it is on the wire. */
export interface InstantiateWireResult {
  instance: string;
  moduleId: string;
  plugin: boolean;
  exports: ExportInfo[];
  fuelConsumed: number;
  peakMemoryBytes: number;
  elapsedMicros: number;
  queuedMicros: number;
  logLines: number;
  logTruncated: boolean;
  logDropped?: number;
}

/** The `compile` result as it is on the wire. */
export interface CompileWireResult {
  moduleId: string;
  imports: ImportInfo[];
  exports: ExportInfo[];
  cached: boolean;
  compileMicros: number;
}
