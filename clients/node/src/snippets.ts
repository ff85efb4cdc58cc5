/**
 * Snippets: `eval` of JavaScript, Lua or Starlark in a fresh interpreter,
 * and {@link Session}s, interpreters that keep their state between
 * evaluations (docs/snippets.md; docs/protocol.md, `eval`).
 *
 * A session is an instance (`instantiate` with `language`): it counts
 * toward the sidecar's maximum of instances, is evicted when idle, released
 * like a plugin, and its evaluations run one at a time in the order sent.
 * A script error leaves it usable; a fence or a cancelled running
 * evaluation closes it (`err.instanceClosed`), and later evaluations
 * reject with {@link InstanceClosed}.
 *
 * @module
 */
import { decodeBytes } from "./bytes.js";
import { InvalidParams, SidecarError } from "./errors.js";
import { asyncDispose, closedReason, releaseInstance, type PluginChannel } from "./plugin.js";
import { EvalRequest, type EvalParams, type SessionParams } from "./protocol.js";
import { callLimitsParam, describe, instantiationUsage, isRecord } from "./requests.js";
import type { RunState } from "./session.js";
import type {
  EvalOptions,
  EvalResult,
  EvalWireResult,
  InstantiationUsage,
  Language,
  SessionEvalOptions,
  SessionOptions,
  SessionWireResult,
  SnippetOptions,
} from "./types.js";

/** The languages of the sidecar's interpreter runtimes. */
export const LANGUAGES: readonly Language[] = ["js", "lua", "starlark"];

/** The deepest nesting of `input` the sidecar takes. */
const MAX_INPUT_DEPTH = 1000;

function languageParam(language: unknown): Language {
  if (typeof language !== "string") {
    throw new InvalidParams(`language must be a string (one of ${LANGUAGES.join(", ")}), got ${describe(language)}`);
  }
  if (!(LANGUAGES as readonly string[]).includes(language)) {
    const hint = /^py(thon)?$/i.test(language) ? ' (Python is not available; Starlark, a dialect of Python, is "starlark")' : "";
    throw new InvalidParams(`language: unknown language ${JSON.stringify(language)}: give one of ${LANGUAGES.join(", ")}${hint}`);
  }
  return language as Language;
}

/** A lone UTF-16 surrogate: JSON would carry it as an escape the sidecar reads as U+FFFD. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function codeParam(code: unknown): string {
  if (typeof code !== "string") throw new InvalidParams(`code must be a string (the snippet's source), got ${describe(code)}`);
  const lone = LONE_SURROGATE.exec(code);
  if (lone !== null) throw new InvalidParams(`code: not valid UTF-8: a lone surrogate at index ${lone.index}`);
  return code;
}

/**
 * Checks that `value` is JSON as `JSON.stringify` writes it, without a
 * value it would silently turn into `null` or `{}` or fail on; throws
 * {@link InvalidParams} naming where (`input.a[2]`).
 */
function checkJson(value: unknown, where: string, depth: number, open: Set<object>): void {
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON(): unknown }).toJSON(); // a Date, as JSON.stringify writes it
  }
  switch (typeof value) {
    case "string":
    case "boolean":
      return;
    case "number":
      if (!Number.isFinite(value)) throw new InvalidParams(`${where}: ${value} is not JSON (JSON.stringify would write null)`);
      return;
    case "object":
      break;
    default:
      throw new InvalidParams(`${where}: a ${typeof value} is not JSON`);
  }
  if (value === null) return;
  if (value instanceof Map || value instanceof Set || ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
    throw new InvalidParams(`${where}: a ${value.constructor.name} is not JSON (JSON.stringify would write {})`);
  }
  if (depth >= MAX_INPUT_DEPTH) throw new InvalidParams(`${where}: input is nested deeper than ${MAX_INPUT_DEPTH} levels`);
  if (open.has(value)) throw new InvalidParams(`${where}: a cycle (input refers to itself)`);
  open.add(value);
  if (Array.isArray(value)) {
    value.forEach((v, i) => {
      if (v === undefined) throw new InvalidParams(`${where}[${i}]: undefined is not JSON (JSON.stringify would write null)`);
      checkJson(v, `${where}[${i}]`, depth + 1, open);
    });
  } else {
    for (const [k, v] of Object.entries(value)) {
      if (v !== undefined) checkJson(v, `${where}.${k}`, depth + 1, open); // undefined: left out, as JSON.stringify does
    }
  }
  open.delete(value);
}

function snippetParams(params: EvalParams, options: SnippetOptions): EvalParams {
  params.code = codeParam(options.code);
  if (options.input !== undefined) {
    checkJson(options.input, "input", 0, new Set());
    params.input = options.input;
  }
  if (options.onOutput !== undefined && typeof options.onOutput !== "function") {
    throw new InvalidParams(`onOutput must be a function (stream, data, seq), got ${describe(options.onOutput)}`);
  }
  return params;
}

function checkOptions(options: unknown, method: string): void {
  if (!isRecord(options)) throw new InvalidParams(`${method} takes an options object, got ${describe(options)}`);
}

/** The `eval` params of a one-shot evaluation; throws {@link InvalidParams} before anything is sent. */
export function evalParams(options: EvalOptions): EvalParams {
  checkOptions(options, "eval");
  const params = snippetParams({ language: languageParam(options.language), code: "" }, options);
  if (options.limits !== undefined) params.limits = { ...options.limits } as Record<string, number>;
  return params;
}

/** The `instantiate` params of a session. */
export function sessionParams(options: SessionOptions): SessionParams {
  checkOptions(options, "session");
  const params: SessionParams = { language: languageParam(options.language) };
  if (options.limits !== undefined) params.limits = { ...options.limits } as Record<string, number>;
  return params;
}

/** The `eval` params of an evaluation in a session: only a call's limits apply. */
function sessionEvalParams(instance: string, options: SessionEvalOptions): EvalParams {
  checkOptions(options, "session.eval");
  const params = snippetParams({ instance, code: "" }, options);
  if (options.limits !== undefined) params.limits = callLimitsParam(options.limits);
  return params;
}

/** Sends an evaluation and reads its answer, with the output notifications that came before it. */
export async function evaluate(channel: PluginChannel, params: EvalParams, options: SnippetOptions): Promise<EvalResult> {
  const state: RunState = { logs: [], onOutput: options.onOutput };
  const raw = await channel.send<EvalWireResult>(EvalRequest, params, state, options.signal);
  if (state.callbackError) throw state.callbackError.error;
  const violation = (what: string) =>
    new SidecarError(`protocol violation in eval result: ${what}`, { reason: "protocol", data: raw, stderrTail: channel.stderrTail() });
  if (state.seqProblem) throw violation(state.seqProblem);
  if (!isRecord(raw) || !("value" in raw)) throw violation(`no value in ${JSON.stringify(raw)}`);
  const stdout = decodeBytes(raw.stdout);
  const stderr = decodeBytes(raw.stderr);
  if (stdout === undefined || stderr === undefined) throw violation("stdout or stderr is not a bytes object");
  return {
    language: raw.language,
    value: raw.value,
    fuelConsumed: raw.fuelConsumed,
    peakMemoryBytes: raw.peakMemoryBytes,
    elapsedMs: raw.elapsedMicros / 1000,
    queuedMs: (raw.queuedMicros ?? 0) / 1000,
    stdout,
    stderr,
    outputTruncated: raw.outputTruncated === true,
  };
}

/** A session's `instantiate` answer, checked: what starting the interpreter cost. */
export function checkSession(raw: SessionWireResult, stderrTail: string): InstantiationUsage {
  if (!isRecord(raw) || typeof raw.instance !== "string" || raw.instance === "" || typeof raw.language !== "string") {
    throw new SidecarError(`protocol violation in instantiate result: no instance id or language in ${JSON.stringify(raw)}`, {
      reason: "protocol",
      data: raw,
      stderrTail,
    });
  }
  return instantiationUsage(raw, { logs: [] });
}

/**
 * An interpreter in the sidecar that keeps its state (variables,
 * functions) from one evaluation to the next, from {@link Sidecar.session}.
 * Evaluations run one at a time in the order they were made. Close it with
 * {@link Session.close} or `await using`; it dies with its sidecar.
 */
export class Session {
  /** The session's instance id (opaque, never reused). */
  readonly id: string;
  readonly language: Language;
  /** What starting the interpreter cost. */
  readonly started: InstantiationUsage;

  private readonly channel: PluginChannel;
  private closing: Promise<void> | undefined;
  private closedBy: string | undefined;

  /** @internal Made by {@link Sidecar.session}. */
  constructor(channel: PluginChannel, raw: SessionWireResult, started: InstantiationUsage) {
    this.channel = channel;
    this.id = raw.instance;
    this.language = raw.language;
    this.started = started;
  }

  /**
   * True once the session is known to be closed: closed here, by a fence
   * in one of its evaluations, or its sidecar is gone. (A session evicted
   * for idleness is learnt of at its next evaluation.)
   */
  get closed(): boolean {
    return this.closedBy !== undefined || this.channel.gone();
  }

  /**
   * Evaluates `code` in the session.
   *
   * @throws {ScriptError} the snippet failed in its language; the session stays usable.
   * @throws a fence ({@link Timeout}, {@link FuelExhausted},
   *   {@link MemoryLimitExceeded}, {@link Cancelled} of a running
   *   evaluation): the session is closed (`err.instanceClosed`).
   * @throws {InstanceClosed} the session was closed before (its `reason` says why).
   * @throws {InvalidParams}, {@link SidecarError}.
   */
  async eval(options: SessionEvalOptions): Promise<EvalResult> {
    const params = sessionEvalParams(this.id, options);
    try {
      return await evaluate(this.channel, params, options);
    } catch (err) {
      this.closedBy ??= closedReason(err, "an evaluation");
      throw err;
    }
  }

  /**
   * Closes the session (`release`): the sidecar frees the interpreter, an
   * evaluation still queued rejects with {@link InstanceClosed}, a running
   * one with {@link Cancelled}. Idempotent; resolves at once when the
   * sidecar is already gone.
   */
  close(): Promise<void> {
    this.closedBy ??= "released";
    this.closing ??= releaseInstance(this.channel, this.id);
    return this.closing;
  }

  /** `await using s = await sb.session(...)`: calls {@link Session.close}. */
  async [asyncDispose](): Promise<void> {
    await this.close();
  }
}
