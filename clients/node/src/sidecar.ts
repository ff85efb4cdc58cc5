/**
 * The {@link Sidecar}: a `sandboxd serve` child process ({@link SidecarProcess})
 * and a protocol session with it ({@link Session}), with the lifecycle that
 * ties them together: spawn and `initialize`, calls, `close`, and telling
 * every pending call why the process went away.
 *
 * @module
 */
import type { RequestType, RequestType0 } from "vscode-jsonrpc/node";

import { findBinary } from "./binary.js";
import { Cancelled, InvalidParams, SidecarError } from "./errors.js";
import { HostFunctionTable } from "./hostcalls.js";
import { describeExit, lastLine, SidecarProcess } from "./process.js";
import { asyncDispose, Plugin, type PluginChannel } from "./plugin.js";
import {
  CompileRequest,
  ExitNotification,
  InitializeRequest,
  InstantiateRequest,
  ReleaseRequest,
  RunRequest,
  SessionRequest,
  ShutdownRequest,
  StatsRequest,
} from "./protocol.js";
import {
  checkInstantiated,
  compileParams,
  instantiateParams,
  runParams,
  toCompiledModule,
  toRunResult,
} from "./requests.js";
import { Session, type RunState, type Sent } from "./session.js";
import { checkSession, evalParams, evaluate, sessionParams, Session as SnippetSession } from "./snippets.js";
import type {
  CompiledModule,
  CompileOptions,
  EvalOptions,
  EvalResult,
  PluginOptions,
  RunOptions,
  RunResult,
  ServerInfo,
  SessionOptions,
  SpawnOptions,
  Stats,
} from "./types.js";

export type {
  SpawnOptions,
  RunOptions,
  RunResult,
  ModuleSource,
  CompileOptions,
  CompileLimits,
  CompiledModule,
  ImportInfo,
  ExportInfo,
  Limits,
  CallLimits,
  Capabilities,
  Wasi,
  WasiDir,
  BytesInput,
  OutputStream,
  ServerInfo,
  Stats,
  PluginOptions,
  CallOptions,
  CallResult,
  InstantiationUsage,
  LogLevel,
  LogEntry,
  HostFunction,
  HostValueType,
  HostValue,
  HostResult,
  HostResultValue,
  HostCallContext,
  Language,
  JsonValue,
  SnippetOptions,
  EvalOptions,
  EvalResult,
  SessionOptions,
  SessionEvalOptions,
} from "./types.js";
export { Plugin } from "./plugin.js";
export { Session } from "./snippets.js";

type State = "open" | "closing" | "dead";

/**
 * A running `sandboxd serve` child process and a JSON-RPC connection to it.
 * Many calls may be in flight at once; they are pipelined on the one
 * connection. Create with {@link Sidecar.spawn}; end with {@link Sidecar.close}
 * (or `await using`).
 */
export class Sidecar {
  /** The absolute path of the binary that was started. */
  readonly binary: string;
  /** The host functions of every run and instance (`SpawnOptions.hostFunctions`). */
  private hostFunctions = HostFunctionTable.empty;

  private serverInfo: ServerInfo | undefined;
  private readonly process: SidecarProcess;
  /** The protocol session: request ids, pending requests, routing of what the sidecar sends. */
  private readonly rpc: Session;
  private state: State = "open";
  /** Set when the sidecar's output cannot be trusted any more; becomes the death error. */
  private fatal: SidecarError | undefined;
  private deathError: SidecarError | undefined;
  private readonly tornDown: Promise<void>;
  private closePromise: Promise<void> | undefined;
  /** How this sidecar's {@link Plugin}s send their calls. */
  private readonly channel: PluginChannel = {
    send: (type, params, state, signal) => this.send(type as RequestType<unknown, never, unknown>, params, state, signal),
    stderrTail: () => this.stderrTail,
    gone: () => this.state !== "open",
  };

  private constructor(binary: string, process: SidecarProcess) {
    this.binary = binary;
    this.process = process;
    this.rpc = new Session(process.reader, process.writer, {
      stderrTail: () => process.stderrTail,
      // stdin is broken: the process is dying or must; its death tells the pending calls why
      onWriteError: () => process.kill(),
    });
    process.reader.onError((error) => {
      // A read error: the byte stream from the sidecar cannot be trusted any more.
      this.fatal ??= new SidecarError(`protocol violation from sandboxd: ${error.message}`, {
        reason: "protocol",
        cause: error,
      });
      process.kill();
    });
    this.tornDown = this.teardown();
  }

  /**
   * Starts `sandboxd serve` and sends `initialize`.
   *
   * @throws {SidecarError} reason `missing` if the binary cannot be found or
   *   started (the message says where it looked and how to build it), or
   *   `exited`/`protocol` if it does not answer `initialize`.
   * @throws {InvalidParams} for a bad option (`maxConcurrency`).
   */
  static async spawn(options: SpawnOptions = {}): Promise<Sidecar> {
    const hostFunctions = HostFunctionTable.empty.merged(options.hostFunctions, "hostFunctions");
    const binary = findBinary(options.binary);
    const args = ["serve"];
    if (options.maxConcurrency !== undefined) {
      if (!Number.isInteger(options.maxConcurrency) || options.maxConcurrency < 1) {
        throw new InvalidParams(`maxConcurrency must be a positive integer, got ${options.maxConcurrency}`);
      }
      args.push("--max-concurrency", String(options.maxConcurrency));
    }
    args.push(...(options.args ?? []));
    const process = await SidecarProcess.start(binary, args, options);
    const sidecar = new Sidecar(binary, process);
    sidecar.hostFunctions = hostFunctions;
    try {
      sidecar.serverInfo = await sidecar.call(InitializeRequest, {
        clientInfo: { name: "sandboxd-node", version: "0.1.0" },
      }).result;
    } catch (err) {
      sidecar.kill();
      await sidecar.tornDown;
      throw err;
    }
    return sidecar;
  }

  /** The sidecar's `initialize` result: versions, limits defaults and maximums, concurrency. */
  get info(): ServerInfo {
    return this.serverInfo!;
  }

  /** The sidecar's process id. */
  get pid(): number | undefined {
    return this.process.pid;
  }

  /** The last ~4 KiB the sidecar wrote to stderr. */
  get stderrTail(): string {
    return this.process.stderrTail;
  }

  /** True once the sidecar process is gone (closed, crashed or killed) or closing. */
  get closed(): boolean {
    return this.state !== "open";
  }

  /**
   * Runs one export of a module.
   *
   * @returns the decoded results and usage figures.
   * @throws a {@link SandboxError} subclass for the run's outcome kind
   *   ({@link FuelExhausted}, {@link Timeout}, {@link MemoryLimitExceeded},
   *   {@link DisallowedImport}, {@link InvalidModule}, {@link ExportError},
   *   {@link Trap}, {@link Cancelled}, {@link HostError}),
   *   {@link InvalidParams} for arguments refused by the client or the
   *   sidecar, or a {@link SidecarError} (busy, crashed sidecar).
   */
  async run(options: RunOptions): Promise<RunResult> {
    const hostFunctions = this.hostFunctions.merged(options.hostFunctions, "hostFunctions");
    const params = runParams(options, hostFunctions);
    const state: RunState = { logs: [], onLog: options.onLog, onOutput: options.onOutput, hostFunctions };
    const raw = await this.send(RunRequest, params, state, options.signal);
    if (state.callbackError) throw state.callbackError.error;
    return toRunResult(raw, state, this.stderrTail);
  }

  /**
   * Creates a live instance of a module: `instantiate`. Its memory cap
   * holds for its whole life, its memory, globals and (for an Extism
   * plugin) vars persist between calls. The instance lives in the sidecar
   * process and dies with it.
   *
   * Any module can be instantiated; {@link Sidecar.plugin} is the same
   * method by the name Extism users know.
   *
   * @throws {TooManyInstances} the sidecar has its maximum of live instances.
   * @throws every run outcome of instantiation ({@link DisallowedImport},
   *   {@link InvalidModule}, {@link Timeout} in `_initialize`, …),
   *   {@link Cancelled} when `signal` aborts, {@link InvalidParams},
   *   {@link SidecarError}.
   */
  async instantiate(options: PluginOptions): Promise<Plugin> {
    const hostFunctions = this.hostFunctions.merged(options.hostFunctions, "hostFunctions");
    const params = instantiateParams(options, hostFunctions);
    const state: RunState = { logs: [], onLog: options.onLog, onOutput: options.onOutput, hostFunctions };
    const raw = await this.send(InstantiateRequest, params, state, options.signal);
    const usage = await this.adopt(raw, options.signal, () => {
      const usage = checkInstantiated(raw, state, this.stderrTail);
      if (state.callbackError) throw state.callbackError.error;
      return usage;
    });
    return new Plugin(this.channel, {
      instance: raw.instance,
      moduleId: raw.moduleId,
      plugin: raw.plugin === true,
      exports: raw.exports,
      usage,
      hostFunctions,
    });
  }

  /** {@link Sidecar.instantiate}: an Extism plugin (or any module) kept live for many calls. */
  plugin(options: PluginOptions): Promise<Plugin> {
    return this.instantiate(options);
  }

  /**
   * The instance an `instantiate` answered with, checked by `check`: an
   * instance the caller will never see (the check failed, or `signal`
   * aborted while the answer was on its way) is released, not left behind.
   */
  private async adopt<T>(raw: { instance?: unknown } | undefined, signal: AbortSignal | undefined, check: () => T): Promise<T> {
    try {
      const made = check();
      if (signal?.aborted) throw new Cancelled("instantiate aborted; the instance it made anyway was released", { cause: signal.reason });
      return made;
    } catch (err) {
      if (typeof raw?.instance === "string" && raw.instance !== "") {
        await this.send(ReleaseRequest, { instance: raw.instance }, undefined).catch(() => {});
      }
      throw err;
    }
  }

  /**
   * Evaluates a snippet of JavaScript, Lua or Starlark in a fresh
   * interpreter (docs/snippets.md says what each language's value is).
   *
   * @returns the snippet's value (JSON, parsed), what it printed and what it cost.
   * @throws {ScriptError} the snippet failed in its own language (with its line and column).
   * @throws a fence ({@link Timeout}, {@link FuelExhausted},
   *   {@link MemoryLimitExceeded}), {@link Cancelled} when `signal`
   *   aborts, {@link InvalidParams} for options refused by the client
   *   (before anything is sent) or the sidecar, {@link HostError} when the
   *   sidecar has no runtime for the language, {@link SidecarError}.
   */
  async eval(options: EvalOptions): Promise<EvalResult> {
    return evaluate(this.channel, evalParams(options), options);
  }

  /**
   * Starts an interpreter that keeps its state (variables, functions)
   * between evaluations: `instantiate` with a language. A session is an
   * instance: it counts toward `--max-instances`, is evicted when idle,
   * and dies with the sidecar.
   *
   * @throws {TooManyInstances}, {@link Cancelled} when `signal` aborts (no
   *   session is left behind), {@link InvalidParams}, {@link SidecarError}.
   */
  async session(options: SessionOptions): Promise<SnippetSession> {
    const params = sessionParams(options);
    const raw = await this.send(SessionRequest, params, undefined, options.signal);
    const started = await this.adopt(raw, options.signal, () => checkSession(raw, this.stderrTail));
    return new SnippetSession(this.channel, raw, started);
  }

  /**
   * Compiles a module (and caches it in the sidecar) without running it,
   * under `limits.compileTimeoutMs`/`compileMemoryBytes` if given (else the
   * sidecar's defaults); past them it rejects with `CompileLimitExceeded`.
   * `preinitialize: true` compiles a reactor pre-initialised, under an id of
   * its own (see {@link CompileOptions.preinitialize}).
   */
  async compile(options: CompileOptions): Promise<CompiledModule> {
    const params = compileParams(options);
    return toCompiledModule(await this.call(CompileRequest, params).result);
  }

  /** The sidecar's counters: runs by outcome, in flight, queued, cache. */
  stats(): Promise<Stats> {
    return this.call(StatsRequest).result;
  }

  /**
   * Shuts the sidecar down: sends `shutdown` (the sidecar finishes in-flight
   * runs first), then the `exit` notification, closes its stdin and waits for
   * the process to exit. Idempotent; resolves at once if the sidecar already
   * died. If the process has not exited after `timeoutMs` (default 10 s) it
   * is killed and this rejects.
   *
   * @throws {SidecarError} if shutdown failed or the process did not exit with status 0.
   */
  close(options: { timeoutMs?: number } = {}): Promise<void> {
    this.closePromise ??= this.doClose(options.timeoutMs ?? 10_000);
    return this.closePromise;
  }

  /** `await using sb = await Sidecar.spawn()` support: calls {@link Sidecar.close}. */
  async [asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * Kills the sidecar process at once (default SIGKILL). Pending calls
   * reject with {@link SidecarError}.
   */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    this.process.kill(signal);
  }

  private async doClose(timeoutMs: number): Promise<void> {
    const proc = this.process;
    if (this.state === "dead" || proc.exitInfo !== undefined || proc.killed) {
      // already gone or going: nothing to shut down, but do not wait forever
      const timer = setTimeout(() => proc.kill(), timeoutMs);
      await this.tornDown;
      clearTimeout(timer);
      return;
    }
    this.state = "closing";
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      proc.kill();
    }, timeoutMs);
    let shutdownError: unknown;
    try {
      await this.rpc.request(ShutdownRequest).result;
    } catch (err) {
      shutdownError = err;
    }
    if (proc.exitInfo === undefined) {
      await this.rpc.notify(ExitNotification);
      proc.endInput();
    }
    const exit = await proc.exited;
    clearTimeout(timer);
    await this.tornDown;
    const details = { stderrTail: this.stderrTail, exitCode: exit.code, signal: exit.signal };
    if (timedOut) {
      throw new SidecarError(`sandboxd did not exit within ${timeoutMs} ms of close(); it was killed`, {
        reason: "closed",
        ...details,
      });
    }
    if (shutdownError !== undefined) throw shutdownError;
    if (exit.code !== 0) {
      throw new SidecarError(`sandboxd ${describeExit(exit)} after shutdown and exit (expected status 0)`, {
        reason: "exited",
        ...details,
      });
    }
  }

  /**
   * Sends a request whose notifications go to `state`; aborting `signal`
   * sends `$/cancelRequest` for it (an already aborted one rejects with
   * {@link Cancelled} without sending anything).
   */
  private send<P, R, E>(type: RequestType<P, R, E>, params: P, state: RunState | undefined, signal?: AbortSignal): Promise<R> {
    if (signal === undefined) return this.call(type, params, state).result;
    if (signal.aborted) return Promise.reject(new Cancelled(`${type.method} aborted before it was sent`, { cause: signal.reason }));
    const sent = this.call(type, params, state);
    const onAbort = () => {
      if (state) state.abortReason = signal.reason;
      this.rpc.cancel(sent.id);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    const off = () => signal.removeEventListener("abort", onAbort);
    sent.result.then(off, off);
    return sent.result;
  }

  /** Sends a request unless the Sidecar is closing or dead. */
  private call<R, E>(type: RequestType0<R, E>): Sent<R>;
  private call<P, R, E>(type: RequestType<P, R, E>, params: P, run?: RunState): Sent<R>;
  private call(type: { method: string }, params?: unknown, run?: RunState): Sent<unknown> {
    if (this.state === "dead") return { id: -1, result: Promise.reject(this.unavailable()) };
    if (this.state === "closing") {
      return {
        id: -1,
        result: Promise.reject(new SidecarError(`cannot send ${type.method}: the Sidecar is closing`, { reason: "closed" })),
      };
    }
    return this.rpc.request(type as RequestType<unknown, unknown, unknown>, params, run);
  }

  /** A fresh copy of the death error, for each call that meets it. */
  private unavailable(): SidecarError {
    const d = this.deathError;
    if (d === undefined) return new SidecarError("the sidecar is not running", { reason: "exited", stderrTail: this.stderrTail });
    return new SidecarError(d.message, {
      reason: d.reason,
      stderrTail: this.stderrTail,
      cause: d.cause,
      exitCode: d.exitCode,
      signal: d.signal,
      data: d.data,
    });
  }

  /** Once the process is gone: say why, and fail everything still pending with that. */
  private async teardown(): Promise<void> {
    await this.process.gone;
    const wasClosing = this.state === "closing";
    this.state = "dead";
    const exit = this.process.exitInfo;
    const how = exit ? describeExit(exit) : "closed its stdout";
    const stderrTail = this.stderrTail;
    const tail = lastLine(stderrTail);
    const processError = this.process.processError;
    const details = { stderrTail, exitCode: exit?.code, signal: exit?.signal };
    this.deathError =
      this.fatal ??
      (processError !== undefined && !wasClosing
        ? new SidecarError(`sandboxd process error: ${processError.message}`, { reason: "exited", cause: processError, ...details })
        : wasClosing
          ? new SidecarError(`the Sidecar was closed (sandboxd ${how})`, { reason: "closed", ...details })
          : new SidecarError(`sandboxd ${how} unexpectedly${tail ? `; last stderr line: ${tail}` : ""}`, {
              reason: "exited",
              ...details,
            }));
    this.rpc.close(() => this.unavailable());
  }
}
