package sandbox

// What a caller gives an instance and gets from it: the request that makes
// one, a call's request, limits and result, and the errors of a closed
// instance.

import (
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Documented defaults of the instance settings of Config.
const (
	// DefaultMaxInstances bounds the live instances of an engine.
	DefaultMaxInstances = 64
	// DefaultInstanceIdle is how long an instance may go without a call
	// before it is evicted.
	DefaultInstanceIdle = 10 * time.Minute
	// DefaultVarBytes bounds a plugin instance's vars (keys and values).
	DefaultVarBytes = 1 << 20
	// MaxVarBytes is the largest VarBytes an instance may ask for.
	MaxVarBytes = 64 << 20
)

// InitializeExport is the export a reactor module (a WASI reactor, a Go
// c-shared module, a plugin built as a library) needs called once before
// anything else. Instantiate calls it, fenced like a call.
const InitializeExport = "_initialize"

// StartExport is a WASI command's entry point (its main). Instantiation
// never runs it: a plugin's _start runs when it is called, once.
const StartExport = "_start"

// InstanceRequest describes a long-lived instance.
type InstanceRequest struct {
	Module       *Module
	Capabilities Capabilities
	// Limits: MemoryBytes, TableElements, Instances and Memories hold for
	// the instance's whole life. Fuel, Timeout, LogBytes and OutputBytes
	// fence instantiation (the start function and _initialize) and are the
	// defaults of every call.
	Limits limits.Limits
	// Start, where set, fences instantiation instead of Limits' fuel,
	// timeout, log and output budgets, which stay every call's defaults:
	// for a guest whose start is the host's business, not its caller's
	// (an interpreter's _initialize). A zero field takes Limits'.
	Start CallLimits
	// Config is what a plugin's config_get reads. Ignored for modules that
	// are not plugins.
	Config map[string]string
	// VarBytes bounds a plugin's vars: the sum of the lengths of every key
	// and value. Zero: DefaultVarBytes; at most MaxVarBytes.
	VarBytes uint64
	// Log and Output receive what the guest logs and writes during
	// instantiation, as CallRequest's do during a call.
	Log    func(level LogLevel, line string)
	Output func(stream string, data []byte)
	// HostFunctions are imports the caller serves, for the instance's
	// life; Host answers them during instantiation (the start function
	// and _initialize), each CallRequest's Host afterwards.
	HostFunctions []HostFunction
	Host          HostCaller
}

// LogLevel is the level of a plugin's log line (log_trace … log_error);
// lines from host::log have no level ("").
type LogLevel string

// The levels of the Extism log functions.
const (
	LogTrace LogLevel = "trace"
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// CallLimits are the per-call fences. A zero field takes the instance's
// default (InstanceRequest.Limits).
type CallLimits struct {
	Fuel        uint64
	Timeout     time.Duration
	LogBytes    uint64
	OutputBytes uint64
	// PluginOutputBytes bounds a plugin function's output when it must
	// differ from OutputBytes (zero: OutputBytes). The snippet runtimes
	// wrap a snippet's value in an answer whose envelope is sandboxd's,
	// not the snippet's: the value alone is held to OutputBytes.
	PluginOutputBytes uint64
}

// CallRequest is one call on an instance.
type CallRequest struct {
	Function string
	Args     []Value
	// Input is what a plugin function reads (Extism's input). Only for
	// plugin functions; nil is empty input.
	Input  []byte
	Limits CallLimits
	// Log receives each accepted log line, on the guest's thread, before
	// Call returns; it must not block. Output likewise for WASI writes.
	Log    func(level LogLevel, line string)
	Output func(stream string, data []byte)
	// Host answers the instance's HostFunctions during this call.
	Host HostCaller
}

// CallResult is what a call that returned produces.
type CallResult struct {
	Result
	// PluginOutput is the bytes a plugin function set as its output (nil
	// for other functions), at most the call's outputBytes.
	PluginOutput []byte
	// PluginOutputTruncated says the plugin set more than outputBytes and
	// only that prefix is in PluginOutput.
	PluginOutputTruncated bool
	// Queued is how long the call waited for the calls before it.
	Queued time.Duration
}

// ErrInstanceClosed matches every *InstanceClosedError with errors.Is.
var ErrInstanceClosed = errors.New("instance closed")

// InstanceClosedError is the error of a call on an instance that was
// released, evicted or closed by a failed call.
type InstanceClosedError struct {
	Instance string
	Reason   string // e.g. "released", "closed after timeout in a call of \"spin\""
}

func (e *InstanceClosedError) Error() string {
	return fmt.Sprintf("instance %s is closed: %s", protocol.Escape(e.Instance), e.Reason)
}

// Is makes errors.Is(err, ErrInstanceClosed) true.
func (e *InstanceClosedError) Is(target error) bool { return target == ErrInstanceClosed }

// ErrTooManyInstances is wrapped by the error Instantiate returns when the
// engine already holds Config.MaxInstances live instances.
var ErrTooManyInstances = errors.New("too many instances")
