/**
 * {@link Plugin}: a live instance in the sidecar (`instantiate`, `call`,
 * `release`). Any module can be one; a module that imports
 * `extism:host/env` is an Extism plugin, whose functions take bytes in and
 * give bytes out. The instance keeps its memory, globals and plugin vars
 * between calls, lives in the sidecar process and dies with it.
 *
 * @module
 */
import { InstanceClosed, SandboxError, SidecarError } from "./errors.js";
import type { HostFunctionTable } from "./hostcalls.js";
import { CallRequest, EvalRequest, ReleaseRequest } from "./protocol.js";
import { callParams, toCallResult } from "./requests.js";
import type { RunState } from "./session.js";
import type { BytesInput, CallOptions, CallResult, CallWireResult, ExportInfo, InstantiationUsage } from "./types.js";

/**
 * `Symbol.asyncDispose`, or the symbol Node's own disposables use where the
 * runtime does not define it (early Node 20 releases).
 */
export const asyncDispose: typeof Symbol.asyncDispose =
  (Symbol.asyncDispose as typeof Symbol.asyncDispose | undefined) ?? (Symbol.for("nodejs.asyncDispose") as typeof Symbol.asyncDispose);

/** What a Plugin needs of its Sidecar: send a request and learn whether the sidecar is still there. */
export interface PluginChannel {
  /** Sends `type` with `params`, collecting notifications into `state`; aborting `signal` cancels it. */
  send<R>(method: typeof CallRequest | typeof EvalRequest | typeof ReleaseRequest, params: unknown, state: RunState | undefined, signal?: AbortSignal): Promise<R>;
  /** The sidecar's recent stderr. */
  stderrTail(): string;
  /** The sidecar is closing or gone (its instances with it). */
  gone(): boolean;
}

/** What `instantiate` answered, as the Plugin keeps it. */
export interface Instantiated {
  instance: string;
  moduleId: string;
  plugin: boolean;
  exports: ExportInfo[];
  usage: InstantiationUsage;
  /** What serves the host calls of its calls. */
  hostFunctions: HostFunctionTable;
}

/**
 * A live instance of a module in the sidecar, from {@link Sidecar.instantiate} (or its other name, {@link Sidecar.plugin}).
 * Calls run one at a time in the order they were made (the sidecar queues
 * them per instance); calls to different instances run concurrently.
 * Release it with {@link Plugin.release} or `await using`. It dies with
 * its sidecar.
 */
export class Plugin {
  /** The instance id the sidecar gave it (opaque, never reused). */
  readonly id: string;
  /** `sha256:<hex>` of the module. */
  readonly moduleId: string;
  /** The module imports `extism:host/env`: its functions with no parameters and an i32 result or none (a WASI command's `_start`, run once per instance) are plugin functions. */
  readonly isPlugin: boolean;
  /** The module's exports, as `compile` lists them. */
  readonly exports: readonly ExportInfo[];
  /** What instantiation (start function, `_initialize`) cost. */
  readonly instantiation: InstantiationUsage;

  private readonly channel: PluginChannel;
  private readonly hostFunctions: HostFunctionTable;
  private releasing: Promise<void> | undefined;
  private closedBy: string | undefined;

  /** @internal Made by {@link Sidecar.instantiate}. */
  constructor(channel: PluginChannel, made: Instantiated) {
    this.channel = channel;
    this.id = made.instance;
    this.moduleId = made.moduleId;
    this.isPlugin = made.plugin;
    this.exports = made.exports;
    this.instantiation = made.usage;
    this.hostFunctions = made.hostFunctions;
  }

  /**
   * True once the instance is known to be closed: released, closed by a
   * fence or trap in one of its calls, or its sidecar is gone. (An instance
   * evicted for idleness is learnt of at its next call.)
   */
  get closed(): boolean {
    return this.closedBy !== undefined || this.channel.gone();
  }

  /**
   * Calls `fn`. For a plugin function `input` (a string, sent as its
   * UTF-8 bytes, or bytes) is what the plugin reads and `output` of the
   * result is what it set; a plain function takes `options.args` and gives
   * `values`.
   *
   * @throws {PluginError} the plugin reported an error; the instance stays usable.
   * @throws a fence or trap ({@link Timeout}, {@link FuelExhausted},
   *   {@link MemoryLimitExceeded}, {@link Trap}, {@link Cancelled} of a
   *   running call): the instance is closed (`err.instanceClosed`).
   * @throws {InstanceClosed} the instance was closed before (its `reason` says why).
   * @throws {ExportError} no such export (the instance stays usable),
   *   {@link InvalidParams}, {@link SidecarError}.
   */
  async call(fn: string, input?: BytesInput, options: CallOptions = {}): Promise<CallResult> {
    const params = callParams(this.id, fn, input, options);
    const state: RunState = { logs: [], onLog: options.onLog, onOutput: options.onOutput, hostFunctions: this.hostFunctions };
    let raw: CallWireResult;
    try {
      raw = await this.channel.send<CallWireResult>(CallRequest, params, state, options.signal);
    } catch (err) {
      this.closedBy ??= closedReason(err, `a call of ${JSON.stringify(fn)}`);
      throw err;
    }
    // what onLog or onOutput threw, once every notification was delivered
    if (state.callbackError) throw state.callbackError.error;
    return toCallResult(raw, state, this.channel.stderrTail());
  }

  /**
   * Releases the instance (its memory, vars and its slot of
   * `--max-instances`). Idempotent; resolves at once when the sidecar is
   * already gone (the instance died with it). A call still queued on the
   * instance rejects with {@link InstanceClosed}, a running one with
   * {@link Cancelled}.
   */
  release(): Promise<void> {
    this.releasing ??= this.doRelease();
    return this.releasing;
  }

  /** `await using p = await sb.plugin(...)`: calls {@link Plugin.release}. */
  async [asyncDispose](): Promise<void> {
    await this.release();
  }

  private async doRelease(): Promise<void> {
    this.closedBy ??= "released";
    await releaseInstance(this.channel, this.id);
  }
}

/**
 * Why a failed request on an instance closed it (`what` failed): its
 * reason for {@link InstanceClosed}, a fence's or trap's kind when the
 * error says it closed the instance; `undefined` when it stays open.
 */
export function closedReason(err: unknown, what: string): string | undefined {
  if (err instanceof InstanceClosed) return err.reason ?? "closed";
  if (err instanceof SandboxError && err.instanceClosed) return `closed after ${err.kind} in ${what}`;
  return undefined;
}

/** Sends `release` for `instance`; nothing to do once the sidecar is gone (the instance died with it). */
export async function releaseInstance(channel: PluginChannel, instance: string): Promise<void> {
  if (channel.gone()) return;
  try {
    await channel.send(ReleaseRequest, { instance }, undefined);
  } catch (err) {
    // the sidecar went away meanwhile, and its instances with it
    if (err instanceof SidecarError && (err.reason === "exited" || err.reason === "closed")) return;
    throw err;
  }
}
