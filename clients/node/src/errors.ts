/**
 * Error classes of the sandboxd client.
 *
 * A run that does not produce values rejects with a {@link SandboxError}
 * subclass chosen from the `data.kind` of the sidecar's JSON-RPC error (see
 * docs/protocol.md, "Errors"). Failures of the sidecar itself (missing
 * binary, crash, protocol errors, busy) reject with {@link SidecarError};
 * arguments refused by the client or the sidecar with {@link InvalidParams}.
 *
 * @module
 */

import { decodeBytes } from "./bytes.js";

/** One wasm stack frame of a trap, innermost first. */
export interface TrapFrame {
  /** Function name from the module's name section, when it has one. */
  func?: string;
  funcIndex: number;
  moduleOffset: number;
}

/** Options shared by the error constructors. */
export interface SandboxErrorInit {
  /** The JSON-RPC error code (for run outcomes: the CLI exit code of the kind; -32800 for cancelled). */
  code?: number;
  /** The raw `error.data` object of the response. */
  data?: unknown;
  /** Log lines the run emitted before it failed. */
  logs?: string[];
  /** The underlying cause (e.g. an AbortSignal's reason). */
  cause?: unknown;
}

type Data = Record<string, unknown>;

function asData(data: unknown): Data {
  return data !== null && typeof data === "object" && !Array.isArray(data) ? (data as Data) : {};
}

function num(d: Data, key: string): number | undefined {
  const v = d[key];
  return typeof v === "number" ? v : undefined;
}

function str(d: Data, key: string): string | undefined {
  const v = d[key];
  return typeof v === "string" ? v : undefined;
}

/**
 * Base class of every error this package throws. `kind` is the stable error
 * kind string of the sidecar (`fuel_exhausted`, `trap`, …) or `"sidecar"` for
 * {@link SidecarError}.
 */
export class SandboxError extends Error {
  /** Stable kind string, as in `data.kind` of the wire error. */
  readonly kind: string;
  /** JSON-RPC error code of the response, if the error came from one. */
  readonly code: number | undefined;
  /** Fuel the run consumed before it stopped (absent if it never got a store). */
  readonly fuelConsumed: number | undefined;
  /** Peak linear memory of the run in bytes (absent if it never got a store). */
  readonly peakMemoryBytes: number | undefined;
  /** The raw `error.data` of the response (or `undefined`). */
  readonly data: unknown;
  /** Log lines the run emitted before it failed (empty when none or not a run). */
  readonly logs: string[];
  /** A WASI run's stdout until it stopped (`undefined` when the data carries none). */
  readonly stdout: Uint8Array | undefined;
  /** A WASI run's stderr until it stopped (`undefined` when the data carries none). */
  readonly stderr: Uint8Array | undefined;
  /** Output past `limits.outputBytes` was dropped. */
  readonly outputTruncated: boolean;
  /**
   * The call that failed closed its instance (`data.instanceClosed`: every
   * fence and trap does, a plugin error does not); later calls on it reject
   * with {@link InstanceClosed}.
   */
  readonly instanceClosed: boolean;

  constructor(kind: string, message: string, init: SandboxErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.kind = kind;
    this.code = init.code;
    this.data = init.data;
    this.logs = init.logs ?? [];
    const d = asData(init.data);
    this.fuelConsumed = num(d, "fuelConsumed");
    this.peakMemoryBytes = num(d, "peakMemoryBytes");
    this.stdout = decodeBytes(d["stdout"]);
    this.stderr = decodeBytes(d["stderr"]);
    this.outputTruncated = d["outputTruncated"] === true;
    this.instanceClosed = d["instanceClosed"] === true;
  }
}

/** Kind `host`: the host failed while running the guest. */
export class HostError extends SandboxError {
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("host", message, init);
  }
}

/** Kind `fuel_exhausted`: the fuel budget ran out. */
export class FuelExhausted extends SandboxError {
  /** The fuel limit of the run. */
  readonly budget: number | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("fuel_exhausted", message, init);
    this.budget = num(asData(init.data), "budget");
  }
}

/** Kind `timeout`: the wall-clock deadline passed. */
export class Timeout extends SandboxError {
  /** The deadline of the run in milliseconds. */
  readonly timeoutMs: number | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("timeout", message, init);
    this.timeoutMs = num(asData(init.data), "timeoutMs");
  }
}

/** Kind `memory_limit_exceeded`: a memory or table growth was denied by a cap. */
export class MemoryLimitExceeded extends SandboxError {
  /** The cap that was hit (bytes, or elements for tables, or a count). */
  readonly limit: number | undefined;
  /** What the guest asked for, when known. */
  readonly requested: number | undefined;
  /** Which cap: `memory`, `table`, `memories` or `tables`. */
  readonly resource: string | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("memory_limit_exceeded", message, init);
    const d = asData(init.data);
    this.limit = num(d, "limit");
    this.requested = num(d, "requested");
    this.resource = str(d, "resource");
  }
}

/** Kind `disallowed_import`: the module imports something that was not granted. */
export class DisallowedImport extends SandboxError {
  /** Import module name, e.g. `env`. */
  readonly module: string | undefined;
  /**
   * Import field name, e.g. `secret` (wire: `data.name`). Not called `name`
   * because `Error#name` is the class name (`"DisallowedImport"`).
   */
  readonly importName: string | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("disallowed_import", message, init);
    const d = asData(init.data);
    this.module = str(d, "module");
    this.importName = str(d, "name");
  }
}

/** Kind `invalid_module`: the bytes/text are not a valid module (or an unknown module id). */
export class InvalidModule extends SandboxError {
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("invalid_module", message, init);
  }
}

/** Kind `export`: the export is missing or its signature does not fit the arguments. */
export class ExportError extends SandboxError {
  /** The export concerned. */
  readonly function: string | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("export", message, init);
    this.function = str(asData(init.data), "function");
  }
}

/** Kind `trap`: the guest trapped. */
export class Trap extends SandboxError {
  /** Stable trap code, e.g. `integer_divide_by_zero`, `unreachable`, `stack_overflow`. */
  readonly trapCode: string | undefined;
  /** Wasm frames, innermost first. */
  readonly frames: TrapFrame[];
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("trap", message, init);
    const d = asData(init.data);
    this.trapCode = str(d, "trapCode");
    this.frames = Array.isArray(d["frames"]) ? (d["frames"] as TrapFrame[]) : [];
  }
}

/** Kind `cancelled`: the run was cancelled (AbortSignal, or the sidecar shutting down its input). */
export class Cancelled extends SandboxError {
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("cancelled", message, init);
  }
}

/** Kind `plugin_error`: an Extism plugin function set an error or returned non-zero; the instance stays usable. */
export class PluginError extends SandboxError {
  /** The plugin's own message (`data.message`). */
  readonly pluginMessage: string | undefined;
  /** The plugin function that failed. */
  readonly function: string | undefined;
  /** What the plugin function returned. */
  readonly returnCode: number | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("plugin_error", message, init);
    const d = asData(init.data);
    this.pluginMessage = str(d, "message");
    this.function = str(d, "function");
    this.returnCode = num(d, "returnCode");
  }
}

/** Kind `compile_limit_exceeded`: compiling the module passed the compile time or memory limit. */
export class CompileLimitExceeded extends SandboxError {
  /** Which limit: `compile_time` or `compile_memory`. */
  readonly resource: string | undefined;
  /** The limit that was passed (milliseconds or bytes). */
  readonly limit: number | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("compile_limit_exceeded", message, init);
    const d = asData(init.data);
    this.resource = str(d, "resource");
    this.limit = num(d, "limit");
  }
}

/**
 * Kind `host_function_error`: a host function served by the parent failed:
 * the parent answered its `host/call` with an error, or with values that do
 * not fit its declaration.
 */
export class HostFunctionError extends SandboxError {
  /** The host function, e.g. `env::lookup`. */
  readonly function: string | undefined;
  /** The parent's own message, when it answered with one (`data.message`). */
  readonly hostMessage: string | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("host_function_error", message, init);
    const d = asData(init.data);
    this.function = str(d, "function");
    this.hostMessage = str(d, "message");
  }
}

/**
 * Kind `script_error`: a snippet failed in its own language: a syntax
 * error, an exception it did not catch, a value JSON cannot carry
 * (docs/snippets.md). A session stays usable after one.
 */
export class ScriptError extends SandboxError {
  /** The snippet's language: `js`, `lua` or `starlark`. */
  readonly language: string | undefined;
  /** The language's one line, e.g. `ReferenceError: x is not defined` (`data.message`). */
  readonly scriptMessage: string | undefined;
  /** Where it failed, 1-based; 0 when the language gives none. */
  readonly line: number | undefined;
  readonly column: number | undefined;
  /** The language's own rendering of the error, with its stack trace or traceback. */
  readonly text: string | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("script_error", message, init);
    const d = asData(init.data);
    this.language = str(d, "language");
    this.scriptMessage = str(d, "message");
    this.line = num(d, "line");
    this.column = num(d, "column");
    this.text = str(d, "text");
  }
}

/** JSON-RPC code of a call or release on an instance that is closed or unknown. */
export const INSTANCE_CLOSED_CODE = -32001;
/** JSON-RPC code of an `instantiate` refused because the sidecar has its maximum of live instances. */
export const TOO_MANY_INSTANCES_CODE = -32002;

/**
 * Kind `instance_closed` (code -32001): the instance a call names is closed
 * (released, evicted after its idle time, closed after a fence or trap in
 * an earlier call) or was never created on this sidecar. Instances die
 * with the sidecar: a new sidecar knows none of the old one's.
 */
export class InstanceClosed extends SandboxError {
  /** The instance id (`data.instance`). */
  readonly instance: string | undefined;
  /**
   * Why it is closed (`data.reason`): `released`, `evicted after 10m0s
   * without a call`, `closed after timeout in a call of "spin"`, `no such
   * instance (never created, or already closed)`.
   */
  readonly reason: string | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("instance_closed", message, { code: INSTANCE_CLOSED_CODE, ...init });
    const d = asData(init.data);
    this.instance = str(d, "instance");
    this.reason = str(d, "reason");
  }
}

/**
 * Kind `too_many_instances` (code -32002): the sidecar already has its
 * maximum of live instances (`serve --max-instances`); release one.
 */
export class TooManyInstances extends SandboxError {
  /** Live instances when it was refused (`data.instances`). */
  readonly instances: number | undefined;
  /** The maximum (`data.maxInstances`). */
  readonly maxInstances: number | undefined;
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("too_many_instances", message, { code: TOO_MANY_INSTANCES_CODE, ...init });
    const d = asData(init.data);
    this.instances = num(d, "instances");
    this.maxInstances = num(d, "maxInstances");
  }
}

/** JSON-RPC code of invalid params (-32602), the code of {@link InvalidParams}. */
export const INVALID_PARAMS_CODE = -32602;

/**
 * Kind `invalid_params`: a call's arguments or options were refused, by this
 * client before anything was sent (two module sources, a value that cannot
 * be encoded exactly, e.g. an i64 given as an unsafe-integer `number`) or
 * by the sidecar (its -32602 answer, naming the field: a limit out of range,
 * an argument of the wrong type). The message names the field.
 */
export class InvalidParams extends SandboxError {
  constructor(message: string, init: SandboxErrorInit = {}) {
    super("invalid_params", message, { code: INVALID_PARAMS_CODE, ...init });
  }
}

/** Why a {@link SidecarError} happened. */
export type SidecarErrorReason =
  /** The binary was not found or could not be started. */
  | "missing"
  /** The sidecar process exited or was killed while the call was pending, or before it was made. */
  | "exited"
  /** The sidecar answered with a JSON-RPC protocol error (-32700…-32603), or broke the protocol. */
  | "protocol"
  /** The sidecar's queue was full (-32000). */
  | "busy"
  /** The Sidecar was closed by this client. */
  | "closed";

/** Options of {@link SidecarError}. */
export interface SidecarErrorInit extends SandboxErrorInit {
  reason: SidecarErrorReason;
  stderrTail?: string;
  exitCode?: number | null;
  signal?: NodeJS.Signals | null;
}

/**
 * The sidecar itself failed: the binary is missing, the process exited or
 * crashed, it answered a protocol error (-32700, -32600, -32601, -32602,
 * -32603) or `busy` (-32000), or it broke the wire protocol.
 * Its `kind` is `"sidecar"`.
 */
export class SidecarError extends SandboxError {
  /** What went wrong, see {@link SidecarErrorReason}. */
  readonly reason: SidecarErrorReason;
  /** The last ~4 KiB of the sidecar's stderr (empty if none). */
  readonly stderrTail: string;
  /** Exit status of the sidecar process, if it exited. */
  readonly exitCode: number | null | undefined;
  /** Signal that ended the sidecar process, if any. */
  readonly signal: NodeJS.Signals | null | undefined;
  constructor(message: string, init: SidecarErrorInit) {
    super("sidecar", message, init);
    this.reason = init.reason;
    this.stderrTail = init.stderrTail ?? "";
    this.exitCode = init.exitCode;
    this.signal = init.signal;
  }
}

/** A concrete error class for a run-outcome kind. */
export type SandboxErrorClass = new (message: string, init?: SandboxErrorInit) => SandboxError;

/**
 * The client's table of run-outcome kinds: the class each kind maps to and
 * the JSON-RPC error code the sidecar uses for it. Kept in step with the Go
 * table (`testdata/wire/error-kinds.json`, checked by the tests).
 */
export const ERROR_KINDS: Readonly<Record<string, { readonly errorClass: SandboxErrorClass; readonly rpcCode: number }>> =
  Object.freeze({
    host: { errorClass: HostError, rpcCode: 1 },
    fuel_exhausted: { errorClass: FuelExhausted, rpcCode: 2 },
    timeout: { errorClass: Timeout, rpcCode: 3 },
    memory_limit_exceeded: { errorClass: MemoryLimitExceeded, rpcCode: 4 },
    disallowed_import: { errorClass: DisallowedImport, rpcCode: 5 },
    invalid_module: { errorClass: InvalidModule, rpcCode: 6 },
    export: { errorClass: ExportError, rpcCode: 7 },
    trap: { errorClass: Trap, rpcCode: 8 },
    cancelled: { errorClass: Cancelled, rpcCode: -32800 },
    plugin_error: { errorClass: PluginError, rpcCode: 10 },
    compile_limit_exceeded: { errorClass: CompileLimitExceeded, rpcCode: 11 },
    host_function_error: { errorClass: HostFunctionError, rpcCode: 12 },
    script_error: { errorClass: ScriptError, rpcCode: 13 },
  });

/** JSON-RPC code of a cancelled request (LSP's RequestCancelled). */
export const CANCELLED_CODE = -32800;
/** JSON-RPC code of the sidecar's `busy` refusal. */
export const BUSY_CODE = -32000;

/**
 * True for the codes the protocol reserves for protocol errors: -32700 (parse
 * error), -32600..-32603 (invalid request, unknown method, invalid params,
 * internal error) and the implementation-defined server errors
 * -32099..-32000 (sandboxd uses -32000 for `busy`).
 */
export function isProtocolErrorCode(code: number): boolean {
  return code === -32700 || (code <= -32600 && code >= -32603) || (code <= -32000 && code >= -32099);
}

/**
 * Turns a JSON-RPC error response into the matching error object. The code
 * decides first, then `data.kind`:
 *
 * - -32602 (invalid params) → {@link InvalidParams};
 * - -32001 → {@link InstanceClosed}, -32002 → {@link TooManyInstances};
 * - another protocol error code (see {@link isProtocolErrorCode}) →
 *   {@link SidecarError} with reason `busy` for -32000, else `protocol`;
 * - `data.kind` names a known run-outcome kind → that kind's class;
 * - `data.kind` this client does not know → a plain {@link SandboxError} of that kind;
 * - code -32800 without a kind → {@link Cancelled};
 * - anything else → a plain {@link SandboxError} of kind `"unknown"`.
 */
export function errorFromResponse(
  code: number,
  message: string,
  data: unknown,
  extra: { logs?: string[]; stderrTail?: string; cause?: unknown } = {},
): SandboxError {
  const init: SandboxErrorInit = { code, data, logs: extra.logs, cause: extra.cause };
  if (code === INVALID_PARAMS_CODE) return new InvalidParams(message, init);
  if (code === INSTANCE_CLOSED_CODE) return new InstanceClosed(message, init);
  if (code === TOO_MANY_INSTANCES_CODE) return new TooManyInstances(message, init);
  if (isProtocolErrorCode(code)) {
    return new SidecarError(message, {
      ...init,
      reason: code === BUSY_CODE ? "busy" : "protocol",
      stderrTail: extra.stderrTail,
    });
  }
  const kind = str(asData(data), "kind");
  if (kind !== undefined) {
    const entry = Object.prototype.hasOwnProperty.call(ERROR_KINDS, kind) ? ERROR_KINDS[kind] : undefined;
    if (entry) return new entry.errorClass(message, init);
    return new SandboxError(kind, message, init);
  }
  if (code === CANCELLED_CODE) return new Cancelled(message, init);
  return new SandboxError("unknown", message, init);
}
