// Package protocol is what the sandboxd sidecar and its clients agree on,
// in pure Go (no cgo, no wasmtime): the wire types of docs/protocol.md,
// typed wasm values and their JSON encoding, the one table of error kinds,
// and the plain-data shapes the sidecar speaks to its engine in.
//
// This file holds the wire types: every object that crosses the pipe, with
// the JSON names the protocol document uses.
package protocol

import (
	"encoding/json"

	"github.com/sourcegraph/jsonrpc2"
)

// Method names.
const (
	MethodInitialize = "initialize"
	MethodRun        = "run"
	MethodCompile    = "compile"
	MethodStats      = "stats"
	MethodShutdown   = "shutdown"
	MethodExit       = "exit"
	MethodCancel     = "$/cancelRequest"
	NotifyLog        = "log"
)

// ModuleSpec names a module: exactly one field is set.
type ModuleSpec struct {
	WAT  *string `json:"wat,omitempty"`
	Wasm *string `json:"wasm,omitempty"` // base64 (standard alphabet, padded)
	ID   *string `json:"id,omitempty"`   // "sha256:<hex>" from an earlier compile or run
	Path *string `json:"path,omitempty"` // a file on the sidecar's machine
}

// RunParams are the params of `run`. Args stay raw until the export's
// parameter types are known.
type RunParams struct {
	Module       ModuleSpec        `json:"module"`
	Function     string            `json:"function,omitempty"` // default "run"
	Args         []json.RawMessage `json:"args,omitempty"`
	Limits       map[string]uint64 `json:"limits,omitempty"` // wire names of limits.Fields()
	Capabilities *CapabilitySpec   `json:"capabilities,omitempty"`
	// A plugin run's (instance.go): its input and config.
	Input  *Bytes            `json:"input,omitempty"`
	Config map[string]string `json:"config,omitempty"`
	// The imports the parent serves (host.go), and the host call whose
	// handler sends the run, if one does.
	HostFunctions []HostFunction `json:"hostFunctions,omitempty"`
	HostCall      string         `json:"hostCall,omitempty"`
}

// CapabilitySpec grants host functions. Absent means not granted.
type CapabilitySpec struct {
	Log    bool        `json:"log,omitempty"`
	Random *RandomSpec `json:"random,omitempty"`
	Clock  bool        `json:"clock,omitempty"`
	WASI   *WASISpec   `json:"wasi,omitempty"` // {} grants WASI with nothing in it
}

// RandomSpec seeds host::random. Seed is a JSON integer or decimal string.
type RandomSpec struct {
	Seed json.RawMessage `json:"seed"`
}

// WireValue is one typed value. Value is a number (i32, finite floats), a
// decimal string (i64) or "NaN"/"Infinity"/"-Infinity"; Bits is the raw
// IEEE bits of a float as "0x" + hex and is always set for floats.
type WireValue struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
	Bits  string          `json:"bits,omitempty"`
}

// RunResult is the result of `run`.
type RunResult struct {
	Values          []WireValue `json:"values"`
	FuelConsumed    uint64      `json:"fuelConsumed"`
	PeakMemoryBytes uint64      `json:"peakMemoryBytes"`
	ElapsedMicros   int64       `json:"elapsedMicros"`
	QueuedMicros    int64       `json:"queuedMicros"`
	ModuleID        string      `json:"moduleId"`
	LogLines        int         `json:"logLines"`
	LogTruncated    bool        `json:"logTruncated"`
	// LogDropped counts a plugin's log lines dropped because the run has
	// no log grant (Extism drops them when no logger is set).
	LogDropped  int    `json:"logDropped,omitempty"`
	Output      *Bytes `json:"output,omitempty"` // a plugin function's output (a plugin run)
	*WASIResult        // WASI runs only: exitCode, stdout, stderr, outputTruncated
}

// CompileParams are the params of `compile`.
type CompileParams struct {
	Module ModuleSpec        `json:"module"`
	Limits map[string]uint64 `json:"limits,omitempty"` // compileTimeoutMs, compileMemoryBytes; others are refused
	// Preinitialize asks for the module pre-initialised (docs/preinit.md).
	Preinitialize bool `json:"preinitialize,omitempty"`
}

// ImportInfo describes one import of a compiled module.
type ImportInfo struct {
	Module string `json:"module"`
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Type   string `json:"type"`
}

// ExportInfo describes one export of a compiled module.
type ExportInfo struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`
	Params  []string `json:"params"`
	Results []string `json:"results"`
}

// CompileResult is the result of `compile`.
type CompileResult struct {
	ModuleID      string       `json:"moduleId"`
	Imports       []ImportInfo `json:"imports"`
	Exports       []ExportInfo `json:"exports"`
	Cached        bool         `json:"cached"`
	CompileMicros int64        `json:"compileMicros"`
}

// InitializeResult is the result of `initialize`.
type InitializeResult struct {
	ServerInfo     ServerInfo `json:"serverInfo"`
	Engine         EngineInfo `json:"engine"`
	Capabilities   ServerCaps `json:"capabilities"`
	Limits         LimitsInfo `json:"limits"`
	MaxConcurrency int        `json:"maxConcurrency"`
	MaxQueue       int        `json:"maxQueue"`
	MaxQueueBytes  int64      `json:"maxQueueBytes"`
	MaxInstances   int        `json:"maxInstances,omitempty"`   // live instances at most (instance.go)
	InstanceIdleMs int64      `json:"instanceIdleMs,omitempty"` // an instance without a call is evicted after this
}

// ServerInfo names the server.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// EngineInfo names the engine.
type EngineInfo struct {
	Wasmtime string `json:"wasmtime"`
}

// ServerCaps lists what the server offers.
type ServerCaps struct {
	HostFunctions []string `json:"hostFunctions"`
	ValueTypes    []string `json:"valueTypes"`
	Framing       string   `json:"framing"`
	WASI          []string `json:"wasi"`             // the preview1 functions capabilities.wasi grants
	Extism        []string `json:"extism,omitempty"` // the extism:host/env functions plugins may import
	// Languages are the snippet languages whose runtime is installed
	// (eval; docs/snippets.md).
	Languages []Language `json:"languages,omitempty"`
}

// LimitsInfo gives the defaults a run gets and the most it may ask for,
// keyed by the wire names of the limits.
type LimitsInfo struct {
	Defaults map[string]uint64 `json:"defaults"`
	Maximums map[string]uint64 `json:"maximums"`
}

// StatsResult is the result of `stats`.
type StatsResult struct {
	Runs              map[string]uint64 `json:"runs"` // by outcome kind; "ok" for success
	InFlight          int               `json:"inFlight"`
	Queued            int               `json:"queued"`
	QueuedMicrosTotal int64             `json:"queuedMicrosTotal"`
	Cache             CacheInfo         `json:"cache"`
	UptimeMs          int64             `json:"uptimeMs"`
	Requests          uint64            `json:"requests"`
	Instances         *InstancesInfo    `json:"instances,omitempty"`
	HostCalls         HostCallStats     `json:"hostCalls"`
}

// CacheInfo is the compile cache's counters.
type CacheInfo struct {
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
	Hits    uint64 `json:"hits"`
	Misses  uint64 `json:"misses"`
}

// CancelParams are the params of `$/cancelRequest`.
type CancelParams struct {
	ID jsonrpc2.ID `json:"id"`
}

// LogParams are the params of the `log` notification.
type LogParams struct {
	ID    jsonrpc2.ID `json:"id"`
	Seq   int         `json:"seq"`
	Line  string      `json:"line"`
	Level string      `json:"level,omitempty"` // an Extism log_* line's: trace, debug, info, warn, error
}

// ErrorData is the data of a run-outcome error. Queued and MaxQueue (and
// QueuedBytes, MaxQueueBytes) are the data of a busy error.
type ErrorData struct {
	Kind            string      `json:"kind"`
	Budget          *uint64     `json:"budget,omitempty"`
	TimeoutMs       *uint64     `json:"timeoutMs,omitempty"`
	Limit           *uint64     `json:"limit,omitempty"`
	Resource        string      `json:"resource,omitempty"`
	Requested       *uint64     `json:"requested,omitempty"`
	Module          *string     `json:"module,omitempty"`
	Name            *string     `json:"name,omitempty"`
	Function        *string     `json:"function,omitempty"`
	TrapCode        string      `json:"trapCode,omitempty"`
	Frames          []FrameInfo `json:"frames,omitempty"`
	FuelConsumed    *uint64     `json:"fuelConsumed,omitempty"`
	PeakMemoryBytes *uint64     `json:"peakMemoryBytes,omitempty"`
	Queued          *int        `json:"queued,omitempty"`
	MaxQueue        *int        `json:"maxQueue,omitempty"`
	QueuedBytes     *int64      `json:"queuedBytes,omitempty"`
	MaxQueueBytes   *int64      `json:"maxQueueBytes,omitempty"`
	// A plugin_error's: the plugin's own message and its return code.
	Message    *string `json:"message,omitempty"`
	ReturnCode *int32  `json:"returnCode,omitempty"`
	// A trap "exit" (a guest that exited while being instantiated): the
	// status it exited with.
	ExitCode *int `json:"exitCode,omitempty"`
	// A script_error's: the language (js, lua, starlark), the position
	// (1-based; 0 when the language gives none) and the language's own
	// rendering of the error (its stack trace or traceback); Message
	// above is its one line.
	Language string  `json:"language,omitempty"`
	Line     *int    `json:"line,omitempty"`
	Column   *int    `json:"column,omitempty"`
	Text     *string `json:"text,omitempty"`
	// InstanceClosed: the failed call closed its instance.
	InstanceClosed bool `json:"instanceClosed,omitempty"`
	*WASIOutput         // a failed WASI run's output until it stopped
}

// FrameInfo is one wasm frame of a trap, innermost first.
type FrameInfo struct {
	Func         string `json:"func,omitempty"`
	FuncIndex    uint32 `json:"funcIndex"`
	ModuleOffset uint   `json:"moduleOffset"`
}

// Protocol error codes (JSON-RPC 2.0 and LSP).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	CodeBusy           = -32000
	CodeCancelled      = -32800
)

// Message is any message as it appears on the wire, decoded only at the
// top level: what a client reading the sidecar's output receives (a
// response has an id and a result or an error; a notification has a
// method and params).
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *WireError      `json:"error,omitempty"`
}

// WireError is the error object of a response.
type WireError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// ErrorResponse is the whole error response as the CLI's --json prints it.
type ErrorResponse struct {
	Error *jsonrpc2.Error `json:"error"`
}
