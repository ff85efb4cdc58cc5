/**
 * Node client of sandboxd: run untrusted WebAssembly in a `sandboxd serve`
 * sidecar under fuel, deadline and memory fences.
 *
 * ```ts
 * import { Sidecar } from "sandboxd";
 * const sb = await Sidecar.spawn();
 * const r = await sb.run({ wat: "(module (func (export \"add\") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))",
 *                          function: "add", args: [2, 40] });
 * console.log(r.values); // [42]
 * console.log((await sb.eval({ language: "js", code: "[1, 2, 3].map(x => x * 2)" })).value); // [2, 4, 6]
 * await sb.close();
 * ```
 *
 * @packageDocumentation
 */
export {
  Sidecar,
  Plugin,
  Session,
  type SpawnOptions,
  type RunOptions,
  type RunResult,
  type ModuleSource,
  type CompileOptions,
  type CompileLimits,
  type CompiledModule,
  type ImportInfo,
  type ExportInfo,
  type Limits,
  type CallLimits,
  type Capabilities,
  type Wasi,
  type WasiDir,
  type BytesInput,
  type OutputStream,
  type ServerInfo,
  type Stats,
  type PluginOptions,
  type CallOptions,
  type CallResult,
  type InstantiationUsage,
  type LogLevel,
  type LogEntry,
  type HostFunction,
  type HostValueType,
  type HostValue,
  type HostResult,
  type HostResultValue,
  type HostCallContext,
  type Language,
  type JsonValue,
  type SnippetOptions,
  type EvalOptions,
  type EvalResult,
  type SessionOptions,
  type SessionEvalOptions,
} from "./sidecar.js";

export {
  SandboxError,
  HostError,
  FuelExhausted,
  Timeout,
  MemoryLimitExceeded,
  DisallowedImport,
  InvalidModule,
  ExportError,
  Trap,
  Cancelled,
  CompileLimitExceeded,
  HostFunctionError,
  ScriptError,
  PluginError,
  InstanceClosed,
  TooManyInstances,
  INSTANCE_CLOSED_CODE,
  TOO_MANY_INSTANCES_CODE,
  InvalidParams,
  INVALID_PARAMS_CODE,
  SidecarError,
  ERROR_KINDS,
  CANCELLED_CODE,
  BUSY_CODE,
  errorFromResponse,
  isProtocolErrorCode,
  type TrapFrame,
  type SandboxErrorInit,
  type SandboxErrorClass,
  type SidecarErrorInit,
  type SidecarErrorReason,
} from "./errors.js";
export {
  i32,
  i64,
  f32,
  f64,
  f32Bits,
  f64Bits,
  encodeArg,
  encodeFloat,
  decodeValue,
  type ValueType,
  type WireValue,
  type Value,
  type ArgValue,
  type TypedValueArg,
  type TypedBitsArg,
} from "./values.js";
export { findBinary, findCheckout, checkoutRoots, searchPath, BUILD_HINT } from "./binary.js";
