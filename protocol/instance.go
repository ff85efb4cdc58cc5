package protocol

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/limits"
)

// Long-lived instances and Extism plugins on the wire (docs/protocol.md,
// "Instances and plugins"), and the plain-data shapes the sidecar speaks
// to its engine in about them.

// Methods of instances.
const (
	MethodInstantiate = "instantiate"
	MethodCall        = "call"
	MethodRelease     = "release"
)

// Protocol error codes of instances.
const (
	// CodeInstanceClosed: the call named an instance that is closed
	// (released, evicted, closed by a failed call) or never existed.
	CodeInstanceClosed = -32001
	// CodeTooManyInstances: instantiate found --max-instances live.
	CodeTooManyInstances = -32002
)

// MaxInstanceIDBytes is the length of the longest id instantiate can
// return: "inst-", 12 hex digits (48 random bits), "-" and a counter of
// at most 20 digits (sandbox's Instance.ID). A longer `instance` cannot
// name one and is refused as a parameter, not echoed back as unknown.
const MaxInstanceIDBytes = len("inst-") + 12 + len("-") + 20

// The bound on a plugin instance's vars (limits.varBytes: keys and values
// together).
const (
	DefaultVarBytes = 1 << 20
	MaxVarBytes     = 64 << 20
)

// ExtismEnvModule is the import module of the Extism plugin ABI: a
// module importing from it is a plugin.
const ExtismEnvModule = "extism:host/env"

// IsPlugin says whether the module imports the Extism ABI (its env
// functions, or the user functions sandboxd refuses).
func (m *ModuleInfo) IsPlugin() bool {
	for _, imp := range m.Imports {
		if imp.Module == ExtismEnvModule || imp.Module == "extism:host/user" {
			return true
		}
	}
	return false
}

// IsPluginFunction says whether the export name of m is a plugin function
// (see Export.PluginFunction), on a plugin.
func (m *ModuleInfo) IsPluginFunction(name string) bool {
	e, ok := m.Export(name)
	return ok && m.IsPlugin() && e.PluginFunction()
}

// PluginFunctionShape says what a plugin function is, for error messages.
const PluginFunctionShape = "plugin functions take no parameters and return an i32 or nothing"

// PluginFunction says whether e, an export of a plugin, has the shape of a
// plugin function: no parameters, and one i32 result (the return code) or
// none. Extism's SDKs call both; a function without a result succeeds
// (return code 0) unless it sets an error. That is how a WASI command's
// _start is a plugin function: the standard Go compiler can export
// nothing else, so the Go PDK's std-Go plugins run their behaviour in main.
func (e Export) PluginFunction() bool {
	return e.Kind == "func" && len(e.Params) == 0 && (len(e.Results) == 0 || len(e.Results) == 1 && e.Results[0] == "i32")
}

// InstantiateParams are the params of `instantiate`, as clients build them.
type InstantiateParams struct {
	Module       ModuleSpec        `json:"module"`
	Capabilities *CapabilitySpec   `json:"capabilities,omitempty"`
	Limits       map[string]uint64 `json:"limits,omitempty"` // the run limits and varBytes
	Config       map[string]string `json:"config,omitempty"`
	// As RunParams': the instance's for its life.
	HostFunctions []HostFunction `json:"hostFunctions,omitempty"`
	HostCall      string         `json:"hostCall,omitempty"`
}

// InstantiateResult is the result of `instantiate`.
type InstantiateResult struct {
	Instance        string       `json:"instance"`
	ModuleID        string       `json:"moduleId"`
	Plugin          bool         `json:"plugin"`
	Exports         []ExportInfo `json:"exports"`
	FuelConsumed    uint64       `json:"fuelConsumed"`
	PeakMemoryBytes uint64       `json:"peakMemoryBytes"`
	ElapsedMicros   int64        `json:"elapsedMicros"`
	QueuedMicros    int64        `json:"queuedMicros"`
	LogLines        int          `json:"logLines"`
	LogTruncated    bool         `json:"logTruncated"`
}

// CallParams are the params of `call`, as clients build them. Input is a
// string, {"text"} or {"base64"} (Bytes writes the latter two).
type CallParams struct {
	Instance string            `json:"instance"`
	Function string            `json:"function"`
	Input    *Bytes            `json:"input,omitempty"`
	Args     []json.RawMessage `json:"args,omitempty"`
	Limits   map[string]uint64 `json:"limits,omitempty"` // fuel, timeoutMs, logBytes, outputBytes
	HostCall string            `json:"hostCall,omitempty"` // as RunParams'
}

// CallResult is the result of `call` (and of a plugin `run`'s output
// fields): a run result plus the plugin's output.
type CallResult struct {
	Values          []WireValue `json:"values"`
	FuelConsumed    uint64      `json:"fuelConsumed"`
	PeakMemoryBytes uint64      `json:"peakMemoryBytes"`
	ElapsedMicros   int64       `json:"elapsedMicros"`
	QueuedMicros    int64       `json:"queuedMicros"`
	LogLines        int         `json:"logLines"`
	LogTruncated    bool        `json:"logTruncated"`
	Output          *Bytes      `json:"output,omitempty"` // plugin functions only
	// OutputTruncated: the plugin's output or a WASI stream was cut by
	// outputBytes. Present for plugin functions and WASI instances.
	OutputTruncated *bool  `json:"outputTruncated,omitempty"`
	ExitCode        *int   `json:"exitCode,omitempty"` // WASI instances
	Stdout          *Bytes `json:"stdout,omitempty"`
	Stderr          *Bytes `json:"stderr,omitempty"`
}

// ReleaseParams are the params of `release`.
type ReleaseParams struct {
	Instance string `json:"instance"`
}

// InstancesInfo is the instance counters of `stats`.
type InstancesInfo struct {
	Live    int    `json:"live"`
	Max     int    `json:"max"`
	Created uint64 `json:"created"`
	Evicted uint64 `json:"evicted"`
}

// InstanceClosedData is the data of a -32001 error.
type InstanceClosedData struct {
	Instance string `json:"instance"`
	Reason   string `json:"reason"`
}

// TooManyInstancesData is the data of a -32002 error.
type TooManyInstancesData struct {
	Instances    int `json:"instances"`
	MaxInstances int `json:"maxInstances"`
}

// InstanceClosedError is the engine's answer to a call on an instance
// that is closed or unknown; the sidecar sends it as -32001.
type InstanceClosedError struct {
	Instance string
	Reason   string // "released", "evicted after 10m0s without a call", "closed after timeout in a call of \"spin\"", …
}

func (e *InstanceClosedError) Error() string {
	return fmt.Sprintf("instance %s is closed: %s", Escape(e.Instance), e.Reason)
}

// RPCError is the -32001 error object.
func (e *InstanceClosedError) RPCError() *jsonrpc2.Error {
	out := &jsonrpc2.Error{Code: CodeInstanceClosed, Message: e.Error()}
	out.SetError(InstanceClosedData{Instance: e.Instance, Reason: e.Reason})
	return out
}

// TooManyInstancesError is the engine's refusal of an instantiate when
// Max instances are live, or when the instances' share of its pool has no
// room for this one (Reason says so); the sidecar sends it as -32002.
type TooManyInstancesError struct {
	Live, Max int
	Reason    string // the engine's message, if it refused below Max
}

func (e *TooManyInstancesError) Error() string {
	if e.Reason != "" {
		return e.Reason
	}
	return fmt.Sprintf("too many instances: %d are live (the maximum is %d); release one", e.Live, e.Max)
}

// RPCError is the -32002 error object.
func (e *TooManyInstancesError) RPCError() *jsonrpc2.Error {
	out := &jsonrpc2.Error{Code: CodeTooManyInstances, Message: e.Error()}
	out.SetError(TooManyInstancesData{Instances: e.Live, MaxInstances: e.Max})
	return out
}

// InstanceRequest is what the sidecar asks its engine to instantiate.
type InstanceRequest struct {
	Capabilities Capabilities
	// Limits: the store-shaped ones hold for the instance's life; fuel,
	// timeout, logBytes and outputBytes fence instantiation and are every
	// call's defaults.
	Limits   limits.Limits
	Config   map[string]string // what config_get reads
	VarBytes uint64            // bound on the plugin's vars; 0: the engine's default
	// Log receives every accepted log line during instantiation, with its
	// Extism level ("" for host::log). It must not block. Output as in Run.
	Log    func(level, line string)
	Output func(stream string, data []byte)
	// HostFunctions are the imports the parent serves, for the
	// instance's life; Host asks it during instantiation (the start
	// function and _initialize), each Call's Host afterwards.
	HostFunctions []HostFunction
	Host          HostCaller
}

// CallLimits are the per-call fences; a zero field takes the instance's.
type CallLimits struct {
	Fuel        uint64
	Timeout     time.Duration
	LogBytes    uint64
	OutputBytes uint64
}

// Call is one call on an instance.
type Call struct {
	Function string
	Args     []Value
	Input    []byte // a plugin function's input; nil: none given
	Limits   CallLimits
	Log      func(level, line string)
	Output   func(stream string, data []byte)
	Host     HostCaller // asks the parent for the instance's HostFunctions
}

// CallOutcome is what a call that returned produces.
type CallOutcome struct {
	RunOutcome
	Plugin                bool   // a plugin function was called: PluginOutput is its output
	PluginOutput          []byte // what the plugin set, at most outputBytes
	PluginOutputTruncated bool
	Queued                time.Duration // waited for the instance's earlier calls
}

// InstanceInfo describes a new instance.
type InstanceInfo struct {
	ID     string
	Plugin bool
	Usage
	Elapsed      time.Duration
	LogLines     int
	LogTruncated bool
}
