/**
 * The {@link Sidecar}: spawns `sandboxd serve` and talks JSON-RPC 2.0 to it
 * over stdin/stdout with LSP (`Content-Length`) framing via vscode-jsonrpc.
 *
 * @module
 */
import { spawn, type ChildProcess } from "node:child_process";
import { resolve as resolvePath } from "node:path";

import {
  CancellationReceiverStrategy,
  CancellationTokenSource,
  ErrorCodes,
  NullLogger,
  ResponseError,
  StreamMessageReader,
  StreamMessageWriter,
  createMessageConnection,
  type CancellationStrategy,
  type CancellationToken,
  type DataCallback,
  type Disposable,
  type Message,
  type MessageConnection,
  type MessageReader,
  type RequestMessage,
} from "vscode-jsonrpc/node";

import { BUILD_HINT, findBinary } from "./binary.js";
import { Cancelled, InvalidParams, SandboxError, SidecarError, errorFromResponse } from "./errors.js";
import { decodeValue, encodeArg, unsafeIntegerProblem, type ArgValue, type Value, type WireValue } from "./values.js";

/** How much of the sidecar's stderr is kept for error messages. */
const STDERR_TAIL_BYTES = 4096;

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
}

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
  /** Aborting sends `$/cancelRequest`; the run then rejects with {@link Cancelled}. */
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

interface RunWireResult {
  values: WireValue[];
  fuelConsumed: number;
  peakMemoryBytes: number;
  elapsedMicros: number;
  queuedMicros: number;
  moduleId: string;
  logLines: number;
  logTruncated: boolean;
}

interface CompileWireResult {
  moduleId: string;
  imports: ImportInfo[];
  exports: ExportInfo[];
  cached: boolean;
  compileMicros: number;
}

interface RunState {
  logs: string[];
  onLog?: (line: string, seq: number) => void;
  logError?: { error: unknown };
  seqProblem?: string;
  abortReason?: unknown;
}

interface Pending {
  id: number | string;
  method: string;
  reject: (e: Error) => void;
  run?: RunState;
}

type State = "open" | "closing" | "dead";

/** A MessageReader that counts decoded messages, so teardown can wait until all of them were dispatched. */
class CountingReader implements MessageReader {
  received = 0;
  constructor(private readonly inner: MessageReader) {}
  get onError() {
    return this.inner.onError;
  }
  get onClose() {
    return this.inner.onClose;
  }
  get onPartialMessage() {
    return this.inner.onPartialMessage;
  }
  listen(callback: DataCallback): Disposable {
    return this.inner.listen((message: Message) => {
      this.received++;
      callback(message);
    });
  }
  dispose(): void {
    this.inner.dispose();
  }
}

function moduleParam(src: ModuleSource): Record<string, string> {
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

function lastLine(text: string): string {
  const lines = text.split("\n").filter((l) => l.trim() !== "");
  const l = lines[lines.length - 1] ?? "";
  return l.length > 300 ? l.slice(0, 300) + "…" : l;
}

function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `was killed by ${signal}` : `exited with status ${code}`;
}

/**
 * A running `sandboxd serve` child process and a JSON-RPC connection to it.
 * Many calls may be in flight at once; they are pipelined on the one
 * connection. Create with {@link Sidecar.spawn}; end with {@link Sidecar.close}
 * (or `await using`).
 */
export class Sidecar {
  private serverInfo: ServerInfo | undefined;
  /** The absolute path of the binary that was started. */
  readonly binary: string;

  private readonly child: ChildProcess;
  private readonly conn: MessageConnection;
  private readonly reader: CountingReader;
  private dispatched = 0;
  private readonly pending = new Map<number | string, Pending>();
  private lastRequestId: number | string | undefined;
  private state: State = "open";
  private stderrTailBuf: Buffer = Buffer.alloc(0);
  private stderrClosed!: Promise<void>;
  private exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private stdoutClosed = false;
  private fatal: SidecarError | undefined;
  private deathError: SidecarError | undefined;
  private deathTimer: NodeJS.Timeout | undefined;
  private teardownStarted = false;
  private readonly tornDown: Promise<void>;
  private resolveTornDown!: () => void;
  private closePromise: Promise<void> | undefined;
  private killed = false;

  private constructor(binary: string, child: ChildProcess, onStderr?: (text: string) => void) {
    this.binary = binary;
    this.child = child;
    this.tornDown = new Promise((r) => (this.resolveTornDown = r));
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
        this.onGone();
      });
    });
    child.on("error", (err) => {
      // Spawn failures are handled in spawn(); later ones (e.g. kill failing) only matter if the process is gone.
      this.fatal ??= new SidecarError(`sandboxd process error: ${err.message}`, { reason: "exited", cause: err });
    });
    // 'exit' can fire before the last stderr bytes are read: teardown waits
    // for the stream to close (briefly) so the error carries them.
    this.stderrClosed = new Promise((resolve) => child.stderr!.once("close", () => resolve()));
    child.stderr!.on("data", (chunk: Buffer) => {
      const merged = Buffer.concat([this.stderrTailBuf, chunk]);
      this.stderrTailBuf = merged.length > STDERR_TAIL_BYTES ? merged.subarray(merged.length - STDERR_TAIL_BYTES) : merged;
      if (onStderr) {
        try {
          onStderr(chunk.toString("utf8"));
        } catch {
          // a failing observer must not break the sidecar
        }
      }
    });
    child.stdin!.on("error", () => {
      // EPIPE after the child died: handled by the exit path.
    });

    this.reader = new CountingReader(new StreamMessageReader(child.stdout!));
    const writer = new StreamMessageWriter(child.stdin!);
    // vscode-jsonrpc numbers requests itself and does not return the id from
    // sendRequest. Its CancellationSenderStrategy.enableCancellation hook is
    // called synchronously with every outgoing request message (before it is
    // written), so we learn each id before any response or `log`
    // notification for it can be read. Cancellation is sent as the
    // protocol's `$/cancelRequest {id}` notification.
    const cancellationStrategy: CancellationStrategy = {
      receiver: CancellationReceiverStrategy.Message,
      sender: {
        enableCancellation: (request: RequestMessage) => {
          this.lastRequestId = request.id ?? undefined;
        },
        sendCancellation: (conn, id) => conn.sendNotification("$/cancelRequest", { id }),
        cleanup: () => {},
      },
    };
    this.conn = createMessageConnection(this.reader, writer, NullLogger, {
      cancellationStrategy,
      messageStrategy: {
        handleMessage: (message, next) => {
          this.dispatched++;
          return next(message);
        },
      },
    });
    this.conn.onNotification("log", (params: unknown) => this.onLogNotification(params));
    // The reader's close is stdout's close. (The connection's onClose also
    // fires when stdin closes, which close() does on purpose.)
    this.reader.onClose(() => {
      this.stdoutClosed = true;
      this.onGone();
    });
    this.conn.onError(([error, message]) => {
      if (message !== undefined) return; // a write error: the child is gone, the exit path reports it
      // A read error: the byte stream from the sidecar cannot be trusted any more.
      this.fatal ??= new SidecarError(`protocol violation from sandboxd: ${error.message}`, {
        reason: "protocol",
        cause: error,
      });
      this.child.kill("SIGKILL");
    });
    this.conn.listen();
  }

  /**
   * Starts `sandboxd serve` and sends `initialize`.
   *
   * @throws {SidecarError} reason `missing` if the binary cannot be found or
   *   started (the message says how to build it), or `exited`/`protocol` if
   *   it does not answer `initialize`.
   */
  static async spawn(options: SpawnOptions = {}): Promise<Sidecar> {
    const binary = findBinary(options.binary);
    const args = ["serve"];
    if (options.maxConcurrency !== undefined) {
      if (!Number.isInteger(options.maxConcurrency) || options.maxConcurrency < 1) {
        throw new InvalidParams(`maxConcurrency must be a positive integer, got ${options.maxConcurrency}`);
      }
      args.push("--max-concurrency", String(options.maxConcurrency));
    }
    args.push(...(options.args ?? []));
    const child = spawn(binary, args, {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...options.env },
      cwd: options.cwd,
      windowsHide: true,
    });
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        child.off("spawn", onSpawn);
        reject(new SidecarError(`could not start ${binary}: ${err.message}; ${BUILD_HINT}`, { reason: "missing", cause: err }));
      };
      const onSpawn = () => {
        child.off("error", onError);
        resolve();
      };
      child.once("error", onError);
      child.once("spawn", onSpawn);
    });
    const sidecar = new Sidecar(binary, child, options.onStderr);
    try {
      sidecar.serverInfo = await sidecar.request<ServerInfo>("initialize", {
        clientInfo: { name: "sandboxd-node", version: "0.1.0" },
      });
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
    return this.child.pid;
  }

  /** The last ~4 KiB the sidecar wrote to stderr. */
  get stderrTail(): string {
    return this.stderrTailBuf.toString("utf8");
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
   *   {@link Trap}, {@link Cancelled}, {@link HostError}), or a
   *   {@link SidecarError} (invalid params, busy, crashed sidecar).
   */
  async run(options: RunOptions): Promise<RunResult> {
    const params: Record<string, unknown> = { module: moduleParam(options) };
    if (options.function !== undefined) params["function"] = options.function;
    if (options.args !== undefined) params["args"] = options.args.map((a, i) => encodeArg(a, i));
    if (options.limits !== undefined) params["limits"] = { ...options.limits };
    if (options.capabilities !== undefined) params["capabilities"] = encodeCapabilities(options.capabilities);

    const signal = options.signal;
    if (signal?.aborted) {
      throw new Cancelled("run aborted before it was sent", { cause: signal.reason });
    }
    const state: RunState = { logs: [], onLog: options.onLog };
    let cts: CancellationTokenSource | undefined;
    let onAbort: (() => void) | undefined;
    if (signal) {
      const source = (cts = new CancellationTokenSource());
      onAbort = () => {
        state.abortReason = signal.reason;
        source.cancel();
      };
      signal.addEventListener("abort", onAbort, { once: true });
    }
    try {
      const raw = await this.request<RunWireResult>("run", params, state, cts?.token);
      if (state.logError) throw state.logError.error;
      return this.toRunResult(raw, state);
    } finally {
      if (signal && onAbort) signal.removeEventListener("abort", onAbort);
      cts?.dispose();
    }
  }

  /** Compiles a module (and caches it in the sidecar) without running it. */
  async compile(source: ModuleSource): Promise<CompiledModule> {
    const raw = await this.request<CompileWireResult>("compile", { module: moduleParam(source) });
    return {
      id: raw.moduleId,
      imports: raw.imports,
      exports: raw.exports,
      cached: raw.cached,
      compileMs: raw.compileMicros / 1000,
    };
  }

  /** The sidecar's counters: runs by outcome, in flight, queued, cache. */
  stats(): Promise<Stats> {
    return this.request<Stats>("stats", undefined);
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
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * Kills the sidecar process at once (default SIGKILL). Pending calls
   * reject with {@link SidecarError}.
   */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (this.exitInfo !== undefined) return;
    this.killed = true;
    this.child.kill(signal);
  }

  private async doClose(timeoutMs: number): Promise<void> {
    if (this.state === "dead" || this.exitInfo !== undefined || this.killed) {
      // already gone or going: nothing to shut down, but do not wait forever
      const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
      await this.tornDown;
      clearTimeout(timer);
      return;
    }
    this.state = "closing";
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      this.child.kill("SIGKILL");
    }, timeoutMs);
    let shutdownError: unknown;
    try {
      await this.request("shutdown", undefined);
    } catch (err) {
      shutdownError = err;
    }
    if (this.exitInfo === undefined) {
      try {
        await this.conn.sendNotification("exit");
      } catch {
        // the exit status below tells what happened
      }
      this.child.stdin!.end();
    }
    const { code, signal } = await this.exited;
    clearTimeout(timer);
    await this.tornDown;
    if (timedOut) {
      throw new SidecarError(`sandboxd did not exit within ${timeoutMs} ms of close(); it was killed`, {
        reason: "closed",
        stderrTail: this.stderrTail,
        exitCode: code,
        signal,
      });
    }
    if (shutdownError !== undefined) throw shutdownError;
    if (code !== 0) {
      throw new SidecarError(`sandboxd ${describeExit(code, signal)} after shutdown and exit (expected status 0)`, {
        reason: "exited",
        stderrTail: this.stderrTail,
        exitCode: code,
        signal,
      });
    }
  }

  /** Sends a request and tracks it so that a dying sidecar rejects it. */
  private request<R>(method: string, params: unknown, run?: RunState, token?: CancellationToken): Promise<R> {
    if (this.state === "dead") return Promise.reject(this.unavailable());
    if (this.state === "closing" && method !== "shutdown") {
      return Promise.reject(new SidecarError(`cannot send ${method}: the Sidecar is closing`, { reason: "closed" }));
    }
    return new Promise<R>((resolve, reject) => {
      this.lastRequestId = undefined;
      let sent: Promise<unknown>;
      try {
        const rest: unknown[] = params === undefined ? [] : [params];
        if (token) rest.push(token);
        sent = this.conn.sendRequest(method, ...rest);
      } catch (err) {
        reject(
          new SidecarError(`cannot send ${method}: ${(err as Error).message}`, {
            reason: "exited",
            stderrTail: this.stderrTail,
            cause: err,
          }),
        );
        return;
      }
      const id = this.lastRequestId;
      if (id === undefined) {
        reject(new SidecarError("internal error: vscode-jsonrpc did not report the request id", { reason: "protocol" }));
        return;
      }
      const entry: Pending = { id, method, reject, run };
      this.pending.set(id, entry);
      sent.then(
        (result) => {
          if (this.pending.get(id) !== entry) return;
          this.pending.delete(id);
          resolve(result as R);
        },
        (err: unknown) => {
          if (this.pending.get(id) !== entry) return;
          this.pending.delete(id);
          reject(this.toError(err, method, run));
        },
      );
    });
  }

  private toError(err: unknown, method: string, run?: RunState): Error {
    if (err instanceof ResponseError) {
      if (
        err.code === ErrorCodes.MessageWriteError ||
        err.code === ErrorCodes.PendingResponseRejected ||
        err.code === ErrorCodes.ConnectionInactive
      ) {
        // Raised by vscode-jsonrpc itself, not by the sidecar.
        return this.deathError ?? new SidecarError(`${method}: ${err.message}`, { reason: "exited", stderrTail: this.stderrTail, cause: err });
      }
      return errorFromResponse(err.code, err.message, err.data, {
        logs: run?.logs,
        stderrTail: this.stderrTail,
        cause: run?.abortReason,
      });
    }
    if (err instanceof SandboxError) return err;
    const e = err instanceof Error ? err : new Error(String(err));
    return new SidecarError(`${method}: ${e.message}`, { reason: "protocol", stderrTail: this.stderrTail, cause: e });
  }

  private toRunResult(raw: RunWireResult, state: RunState): RunResult {
    const violation = (what: string) =>
      new SidecarError(`protocol violation in run result: ${what}`, {
        reason: "protocol",
        data: raw,
        logs: state.logs,
        stderrTail: this.stderrTail,
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

  private onLogNotification(params: unknown): void {
    const p = (params ?? {}) as { id?: unknown; seq?: unknown; line?: unknown };
    if (typeof p.id !== "number" && typeof p.id !== "string") return;
    const run = this.pending.get(p.id)?.run;
    if (!run) return; // a run that already settled (e.g. aborted) or not a run
    const expected = run.logs.length;
    if (p.seq !== expected && run.seqProblem === undefined) {
      run.seqProblem = `log notification seq ${JSON.stringify(p.seq)} where ${expected} was expected`;
    }
    const line = typeof p.line === "string" ? p.line : String(p.line);
    run.logs.push(line);
    if (run.onLog) {
      try {
        run.onLog(line, expected);
      } catch (error) {
        run.logError ??= { error };
      }
    }
  }

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

  /**
   * Called on process exit and on stdout close; tears down once both
   * happened, or when the other one is late (250 ms after an exit: a
   * grandchild may hold stdout; 1 s after stdout closed: the process may
   * still be exiting).
   */
  private onGone(): void {
    if (this.teardownStarted) return;
    if (this.exitInfo !== undefined && this.stdoutClosed) {
      if (this.deathTimer !== undefined) clearTimeout(this.deathTimer);
      void this.teardown();
    } else if (this.deathTimer === undefined) {
      this.deathTimer = setTimeout(() => void this.teardown(), this.exitInfo !== undefined ? 250 : 1000);
    }
  }

  private async teardown(): Promise<void> {
    if (this.teardownStarted) return;
    this.teardownStarted = true;
    if (this.deathTimer !== undefined) clearTimeout(this.deathTimer);
    // Let responses that were already read be delivered before failing the rest.
    const deadline = Date.now() + 200;
    let stable = 0;
    while (Date.now() < deadline && stable < 2) {
      await new Promise<void>((r) => setImmediate(r));
      stable = this.reader.received === this.dispatched ? stable + 1 : 0;
    }
    await Promise.race([this.stderrClosed, new Promise<void>((r) => setTimeout(r, 200).unref())]);
    const wasClosing = this.state === "closing";
    this.state = "dead";
    // stdout is gone but the process lingers: it can never answer, end it
    if (this.exitInfo === undefined) this.child.kill("SIGKILL");
    const exit = this.exitInfo;
    const how = exit ? describeExit(exit.code, exit.signal) : "closed its stdout";
    const stderrTail = this.stderrTail;
    const tail = lastLine(stderrTail);
    this.deathError =
      this.fatal ??
      (wasClosing
        ? new SidecarError(`the Sidecar was closed (sandboxd ${how})`, {
            reason: "closed",
            stderrTail,
            exitCode: exit?.code,
            signal: exit?.signal,
          })
        : new SidecarError(`sandboxd ${how} unexpectedly${tail ? `; last stderr line: ${tail}` : ""}`, {
            reason: "exited",
            stderrTail,
            exitCode: exit?.code,
            signal: exit?.signal,
          }));
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) p.reject(this.unavailable());
    this.conn.dispose();
    this.resolveTornDown();
  }
}
