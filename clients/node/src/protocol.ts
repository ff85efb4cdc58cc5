/**
 * The sandboxd protocol as typed vscode-jsonrpc declarations
 * (docs/protocol.md): one `RequestType`/`NotificationType` per method, with
 * the shapes of their params and results as they are on the wire. The
 * session core ({@link Session}) sends and receives exactly these; a new
 * method or notification is one declaration here and one handler there.
 *
 * @module
 */
import { NotificationType, NotificationType0, RequestType, RequestType0 } from "vscode-jsonrpc/node";

import type { WireBytes } from "./bytes.js";
import type { HostFunctionDeclaration } from "./hostcalls.js";
import type {
  CallWireResult,
  CompileWireResult,
  EvalWireResult,
  InstantiateWireResult,
  Language,
  LogLevel,
  RunWireResult,
  ServerInfo,
  SessionWireResult,
  Stats,
} from "./types.js";

export type { WireBytes } from "./bytes.js";

/** A request id. This client sends integers; the protocol allows strings. */
export type RequestId = number | string;

/** The `data` of an error response (run outcomes carry `kind` and figures). */
export type ErrorData = Record<string, unknown> | undefined;

/** The protocol's `module` object: exactly one field. */
export interface ModuleParam {
  wat?: string;
  /** Base64 of the binary module. */
  wasm?: string;
  path?: string;
  id?: string;
}

/** Params of `initialize`. */
export interface InitializeParams {
  clientInfo?: { name: string; version: string };
}

/** Params of `run`. */
export interface RunParams {
  module: ModuleParam;
  function?: string;
  args?: unknown[];
  limits?: Record<string, number>;
  capabilities?: Record<string, unknown>;
  /** A plugin run's input (the module imports `extism:host/env`). */
  input?: WireBytes;
  /** A plugin run's config (what `config_get` reads). */
  config?: Record<string, string>;
  /** Host functions the parent serves. */
  hostFunctions?: HostFunctionDeclaration[];
  /** Sent from a host call's handler: that host call (the client adds it). */
  hostCall?: RequestId;
}

/** Params of `instantiate`. */
export interface InstantiateParams {
  module: ModuleParam;
  capabilities?: Record<string, unknown>;
  limits?: Record<string, number>;
  config?: Record<string, string>;
  hostFunctions?: HostFunctionDeclaration[];
  hostCall?: RequestId;
}

/** Params of `call`. */
export interface CallParams {
  instance: string;
  function: string;
  input?: WireBytes;
  args?: unknown[];
  limits?: Record<string, number>;
  hostCall?: RequestId;
}

/** Params of `eval`: `language` for a fresh interpreter, or `instance` for a session. */
export interface EvalParams {
  language?: Language;
  instance?: string;
  code: string;
  /** Any JSON value, the snippet's global `input`. */
  input?: unknown;
  limits?: Record<string, number>;
}

/** Params of `instantiate` for a session: a language instead of a module. */
export interface SessionParams {
  language: Language;
  limits?: Record<string, number>;
}

/** Params of `release`. */
export interface ReleaseParams {
  instance: string;
}

/** `capabilities.wasi` as an object (`true` grants it with every field empty). */
export interface WasiParam {
  args?: string[];
  env?: Record<string, string>;
  stdin?: WireBytes;
  files?: Record<string, WireBytes>;
  dirs?: { host: string; guest: string; writable?: boolean }[];
}

/** Params of `compile`. */
export interface CompileParams {
  module: ModuleParam;
  limits?: Record<string, number>;
  preinitialize?: boolean;
}

/** Params of the `log` notification (server to client). */
export interface LogParams {
  /** The id of the run request that logged. */
  id: RequestId;
  /** 0, 1, 2, … per run. */
  seq: number;
  line: string;
  /** The level of an Extism `log_*` line; absent for `host::log`. */
  level?: LogLevel;
}

/** Params of the `output` notification (server to client): a piece of a WASI guest's stdout or stderr. */
export interface OutputParams {
  /** The id of the run request. */
  id: RequestId;
  /** 0, 1, 2, … per run, across both streams. */
  seq: number;
  stream: "stdout" | "stderr";
  /** `{"text"}` when the piece is valid UTF-8, else `{"base64"}`. */
  data: { text: string } | { base64: string };
}

/** Params of the `host/call` request (server to client): a guest called a host function the parent serves. */
export interface HostCallParams {
  /** The id of the run, call or instantiate request whose guest made the call. */
  id: RequestId;
  /** The instance, for a call (or instantiation) of one. */
  instance?: string;
  module: string;
  name: string;
  /** Values as results are written; a bytes value is `{type: "bytes", value: {text} | {base64}}`. */
  args: unknown[];
}

/** The answer to `host/call`: values as `run`'s args are written, a bytes value as `input` is. */
export interface HostCallResult {
  values: unknown[];
}

/** Params of `$/cancelRequest`. */
export interface CancelParams {
  id: RequestId;
}

export const InitializeRequest = new RequestType<InitializeParams, ServerInfo, ErrorData>("initialize");
export const RunRequest = new RequestType<RunParams, RunWireResult, ErrorData>("run");
export const CompileRequest = new RequestType<CompileParams, CompileWireResult, ErrorData>("compile");
export const InstantiateRequest = new RequestType<InstantiateParams, InstantiateWireResult, ErrorData>("instantiate");
export const CallRequest = new RequestType<CallParams, CallWireResult, ErrorData>("call");
export const EvalRequest = new RequestType<EvalParams, EvalWireResult, ErrorData>("eval");
export const SessionRequest = new RequestType<SessionParams, SessionWireResult, ErrorData>("instantiate");
export const ReleaseRequest = new RequestType<ReleaseParams, null, ErrorData>("release");
export const StatsRequest = new RequestType0<Stats, ErrorData>("stats");
export const ShutdownRequest = new RequestType0<null, ErrorData>("shutdown");
export const ExitNotification = new NotificationType0("exit");
export const HostCallRequest = new RequestType<HostCallParams, HostCallResult, ErrorData>("host/call");
export const CancelNotification = new NotificationType<CancelParams>("$/cancelRequest");
export const LogNotification = new NotificationType<LogParams>("log");
export const OutputNotification = new NotificationType<OutputParams>("output");
