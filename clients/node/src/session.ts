/**
 * The session core: request ids, the table of pending requests, routing of
 * incoming messages, and turning responses into results or errors. It
 * speaks the declarations of ./protocol.ts over any vscode-jsonrpc
 * MessageReader/MessageWriter pair and knows nothing about processes (the
 * Node twin of the Python client's I/O-free `Session`).
 *
 * The session assigns the ids itself, so each request is registered under
 * its id before it is written, and a run's `log` notifications, which carry
 * that id and arrive before its response, always find their run. Messages
 * are handled in the order the reader delivers them.
 *
 * The sidecar's own requests are `host/call`s: a guest called a host
 * function this process serves. The session runs the handler registered
 * for the request the call names (its {@link RunState.hostFunctions}),
 * answers what cannot be served at once, and aborts the handler's signal
 * when the sidecar cancels the call (no answer follows then).
 *
 * @module
 */
import {
  Message,
  type MessageReader,
  type MessageWriter,
  type NotificationMessage,
  type NotificationType,
  type NotificationType0,
  type RequestMessage,
  type RequestType,
  type RequestType0,
  type ResponseMessage,
} from "vscode-jsonrpc/node";

import { Cancelled, SidecarError, errorFromResponse } from "./errors.js";
import { decodeBytes } from "./bytes.js";
import {
  HOST_CALL_CODES,
  HostCallProblem,
  bounded,
  decodeArgs,
  describeFailure,
  encodeResults,
  runServing,
  servingFor,
  type HostFunctionTable,
  type ServingHostCall,
} from "./hostcalls.js";
import {
  CancelNotification,
  HostCallRequest,
  LogNotification,
  OutputNotification,
  type CancelParams,
  type HostCallParams,
  type LogParams,
  type OutputParams,
  type RequestId,
} from "./protocol.js";
import type { HostCallContext, HostFunction, HostValue, LogLevel, OutputStream } from "./types.js";

/** What a run collects while it is pending: its log lines, output count and problems with them. */
export interface RunState {
  logs: string[];
  /** The level of each line of `logs` (Extism `log_*`), `undefined` for `host::log`; created at the first level. */
  levels?: (LogLevel | undefined)[];
  onLog?: (line: string, seq: number, level: LogLevel | undefined) => void;
  /** `output` notifications seen so far (the next seq). */
  outputs?: number;
  onOutput?: (stream: OutputStream, data: Uint8Array, seq: number) => void;
  /** What onLog or onOutput threw first; a successful run rejects with it. */
  callbackError?: { error: unknown };
  /** A protocol violation of the log or output notifications (seq out of order, bad data). */
  seqProblem?: string;
  /** The abort reason, the `cause` of the Cancelled error. */
  abortReason?: unknown;
  /** What serves the host calls its guest makes. */
  hostFunctions?: HostFunctionTable;
}

/** A request sent: its id (for `$/cancelRequest`) and its outcome. */
export interface Sent<R> {
  id: RequestId;
  result: Promise<R>;
}

/** Hooks of a {@link Session} into its owner. */
export interface SessionHooks {
  /** The sidecar's recent stderr, carried by the errors. */
  stderrTail(): string;
  /** Writing a request failed (the connection is unusable); the request stays pending. */
  onWriteError?(error: Error): void;
}

/**
 * Handles one kind of notification; `run` is the state of the pending run
 * whose id the params carry (`params.id`), if there is one.
 */
export type NotificationHandler<P> = (params: P, run: RunState | undefined) => void;

interface Pending {
  method: string;
  resolve: (result: unknown) => void;
  reject: (error: Error) => void;
  run?: RunState;
  /** Its guest's host calls being served. */
  hostCalls?: Set<HostCallEntry>;
}

/** A host call being served. */
interface HostCallEntry extends ServingHostCall {
  controller: AbortController;
  /** The request whose guest made it. */
  pending: Pending;
}

/** The methods whose guests may call host functions; sent from a handler, they name its host call (`hostCall`). */
const RUNS_GUESTS = new Set(["run", "call", "instantiate", "eval"]);

export class Session {
  private nextId = 0;
  private readonly pending = new Map<RequestId, Pending>();
  private closedWith: (() => SidecarError) | undefined;
  private readonly handlers = new Map<string, NotificationHandler<unknown>>();
  /** The sidecar's host/call requests being served, by their ids. */
  private readonly hostCalls = new Map<RequestId, HostCallEntry>();

  constructor(
    private readonly reader: MessageReader,
    private readonly writer: MessageWriter,
    private readonly hooks: SessionHooks,
  ) {
    this.onNotification(LogNotification, (params, run) => this.log(params, run));
    this.onNotification(OutputNotification, (params, run) => this.output(params, run));
    this.onNotification(CancelNotification, (params) => this.cancelHostCall(params));
    reader.listen((message) => this.receive(message));
  }

  /**
   * Handles the notifications of `type` with `handler` (replacing an earlier
   * one). Run-scoped notifications carry the run's request id as `params.id`;
   * the handler gets that run's state. Notifications without a handler are
   * ignored.
   */
  onNotification<P>(type: NotificationType<P>, handler: NotificationHandler<P>): void {
    this.handlers.set(type.method, handler as NotificationHandler<unknown>);
  }

  /** Number of requests awaiting their response. */
  get size(): number {
    return this.pending.size;
  }

  /**
   * Sends a request; `run` collects the run's log notifications. Rejects at
   * once if the session is closed.
   */
  request<R, E>(type: RequestType0<R, E>, params?: undefined, run?: RunState): Sent<R>;
  request<P, R, E>(type: RequestType<P, R, E>, params: P, run?: RunState): Sent<R>;
  request<R>(type: { method: string }, params?: unknown, run?: RunState): Sent<R> {
    const id = this.nextId++;
    if (this.closedWith !== undefined) return { id, result: Promise.reject(this.closedWith()) };
    const message: RequestMessage = { jsonrpc: "2.0", id, method: type.method };
    if (params !== undefined) {
      // Sent from a handler: name its host call, so that the sidecar refuses
      // at once a call to the instance waiting for that handler.
      const serving = RUNS_GUESTS.has(type.method) ? servingFor(this) : undefined;
      message.params = serving === undefined ? (params as object) : { ...(params as object), hostCall: serving.id };
    }
    const result = new Promise<R>((resolve, reject) => {
      this.pending.set(id, { method: type.method, resolve: resolve as (r: unknown) => void, reject, run });
    });
    this.writer.write(message).catch((err: unknown) => {
      if (this.pending.has(id)) this.hooks.onWriteError?.(err instanceof Error ? err : new Error(String(err)));
    });
    return { id, result };
  }

  /** Sends a notification; a failed write is ignored (the owner sees the connection die). */
  notify<P>(type: NotificationType<P> | NotificationType0, params?: P): Promise<void> {
    const message: NotificationMessage = { jsonrpc: "2.0", method: type.method };
    if (params !== undefined) message.params = params as object;
    return this.writer.write(message).catch(() => {});
  }

  /** Asks the sidecar to stop request `id`; its answer settles the request. */
  cancel(id: RequestId): void {
    if (this.pending.has(id)) void this.notify(CancelNotification, { id });
  }

  /**
   * Fails every pending request with a fresh error from `error`, and every
   * later one the same way. Idempotent (the first `error` stays).
   */
  close(error: () => SidecarError): void {
    this.closedWith ??= error;
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const entry of [...this.hostCalls.values()]) this.abortHostCall(entry, "the sidecar is gone"); // nobody can take their answers
    for (const p of pending) p.reject(this.closedWith());
    this.reader.dispose();
  }

  private receive(message: Message): void {
    if (Message.isResponse(message)) {
      this.settle(message);
    } else if (Message.isNotification(message)) {
      const handler = this.handlers.get(message.method);
      if (handler === undefined) return;
      const id = (message.params as { id?: unknown } | undefined)?.id;
      const run = typeof id === "number" || typeof id === "string" ? this.pending.get(id)?.run : undefined;
      handler(message.params, run);
    } else if (Message.isRequest(message)) {
      this.serveHostCall(message);
    }
  }

  /**
   * A request from the sidecar: a `host/call` runs the handler registered
   * for the request it names; what cannot be served is answered at once
   * with an error (never left unanswered: the guest waits for it).
   */
  private serveHostCall(message: RequestMessage): void {
    const { id, method } = message;
    if (id === null) return; // not a request vscode-jsonrpc would deliver: nothing to answer
    const fail = (code: number, text: string) => {
      const answer: ResponseMessage = { jsonrpc: "2.0", id, error: { code, message: bounded(text) } };
      void this.writer.write(answer).catch(() => {});
    };
    if (method !== HostCallRequest.method) {
      return fail(HOST_CALL_CODES.noHandler, `method not found: this client serves host/call only, not ${JSON.stringify(method)}`);
    }
    const params = (message.params ?? {}) as Partial<HostCallParams>;
    const { module, name } = params;
    const requestId = params.id;
    const pending = typeof requestId === "number" || typeof requestId === "string" ? this.pending.get(requestId) : undefined;
    if (pending === undefined) {
      return fail(
        HOST_CALL_CODES.noHandler,
        `no request ${JSON.stringify(requestId)} of this client is waiting for ${module}::${name} (it ended, or was never sent)`,
      );
    }
    const fn = pending.run?.hostFunctions?.get(module, name);
    if (fn === undefined) {
      return fail(HOST_CALL_CODES.noHandler, `no handler for host function ${module}::${name} in request ${requestId} (${pending.method})`);
    }
    if (this.hostCalls.has(id)) return fail(HOST_CALL_CODES.badArguments, `host/call id ${JSON.stringify(id)} is already outstanding`);
    let args: HostValue[];
    try {
      args = decodeArgs(fn, params.args);
    } catch (err) {
      const problem = err as HostCallProblem;
      return fail(problem.code, problem.message);
    }
    const entry: HostCallEntry = { id, session: this, controller: new AbortController(), pending };
    this.hostCalls.set(id, entry);
    (pending.hostCalls ??= new Set()).add(entry);
    const context: HostCallContext = {
      signal: entry.controller.signal,
      id,
      requestId: requestId!,
      instance: typeof params.instance === "string" ? params.instance : undefined,
      module: fn.module,
      name: fn.name,
    };
    void this.answerHostCall(entry, fn, args, context);
  }

  private async answerHostCall(entry: HostCallEntry, fn: HostFunction, args: HostValue[], context: HostCallContext): Promise<void> {
    let answer: ResponseMessage;
    try {
      const returned = await runServing(entry, () => fn.handler(args, context));
      answer = { jsonrpc: "2.0", id: entry.id, result: { values: encodeResults(fn, returned) } };
    } catch (err) {
      const [code, text] = err instanceof HostCallProblem ? [err.code, err.message] : [HOST_CALL_CODES.handlerFailed, describeFailure(err)];
      answer = { jsonrpc: "2.0", id: entry.id, error: { code, message: bounded(text) } };
    }
    if (this.hostCalls.get(entry.id) !== entry) return; // cancelled meanwhile: no answer
    this.forgetHostCall(entry);
    void this.writer.write(answer).catch(() => {});
  }

  /** `$/cancelRequest` from the sidecar: the run's deadline passed or it was cancelled. */
  private cancelHostCall(params: Partial<CancelParams> | undefined): void {
    const id = params?.id;
    const entry = typeof id === "number" || typeof id === "string" ? this.hostCalls.get(id) : undefined;
    if (entry !== undefined) this.abortHostCall(entry, "the sidecar cancelled it (its run's deadline passed, or the run was cancelled)");
  }

  private abortHostCall(entry: HostCallEntry, why: string): void {
    this.forgetHostCall(entry);
    entry.controller.abort(new Cancelled(`host call ${JSON.stringify(entry.id)} was cancelled: ${why}`));
  }

  private forgetHostCall(entry: HostCallEntry): void {
    this.hostCalls.delete(entry.id);
    entry.pending.hostCalls?.delete(entry);
  }

  private settle(message: ResponseMessage): void {
    const id = message.id;
    if (id === null) return; // an error the sidecar could not attribute: nobody to tell
    const p = this.pending.get(id);
    if (!p) return; // not pending (already failed by close)
    this.pending.delete(id);
    if (p.hostCalls?.size) {
      // the request ended (its deadline, say) while its host calls were served
      for (const entry of [...p.hostCalls]) this.abortHostCall(entry, `${p.method} ${JSON.stringify(id)} ended`);
    }
    if (message.error !== undefined) {
      const { code, message: text, data } = message.error;
      p.reject(
        errorFromResponse(code, text, data, {
          logs: p.run?.logs,
          stderrTail: this.hooks.stderrTail(),
          cause: p.run?.abortReason,
        }),
      );
    } else if ("result" in message) {
      p.resolve(message.result);
    } else {
      p.reject(
        new SidecarError(`response to ${p.method} has neither result nor error`, {
          reason: "protocol",
          stderrTail: this.hooks.stderrTail(),
        }),
      );
    }
  }

  private log(params: Partial<LogParams> | undefined, run: RunState | undefined): void {
    if (!run) return; // a run that already settled, or not a run
    const p = params ?? {};
    const expected = run.logs.length;
    if (p.seq !== expected && run.seqProblem === undefined) {
      run.seqProblem = `log notification seq ${JSON.stringify(p.seq)} where ${expected} was expected`;
    }
    const line = typeof p.line === "string" ? p.line : String(p.line);
    const level = typeof p.level === "string" ? p.level : undefined;
    run.logs.push(line);
    if (level !== undefined || run.levels !== undefined) {
      run.levels ??= new Array<LogLevel | undefined>(expected).fill(undefined);
      run.levels.push(level);
    }
    if (run.onLog) {
      try {
        run.onLog(line, expected, level);
      } catch (error) {
        run.callbackError ??= { error };
      }
    }
  }

  private output(params: Partial<OutputParams> | undefined, run: RunState | undefined): void {
    if (!run) return;
    const p = params ?? {};
    const expected = run.outputs ?? 0;
    run.outputs = expected + 1;
    const data = decodeBytes(p.data);
    if (run.seqProblem === undefined) {
      if (p.seq !== expected) {
        run.seqProblem = `output notification seq ${JSON.stringify(p.seq)} where ${expected} was expected`;
      } else if ((p.stream !== "stdout" && p.stream !== "stderr") || data === undefined) {
        run.seqProblem = `malformed output notification ${JSON.stringify(p)}`;
      }
    }
    if (run.onOutput && run.seqProblem === undefined) {
      try {
        run.onOutput(p.stream as OutputStream, data!, expected);
      } catch (error) {
        run.callbackError ??= { error };
      }
    }
  }
}
