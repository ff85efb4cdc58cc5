package sandbox

import (
	"errors"
	"fmt"
	"strings"
)

// Kind says why a run stopped. The strings are stable: the CLI, the sidecar
// and every client use them, and clients map each to an exception class.
type Kind string

// The stable error kinds. Each also serves as a sentinel for errors.Is:
// errors.Is(err, sandbox.KindTimeout) is true for any *Error of that kind.
const (
	KindHost                Kind = "host"
	KindFuelExhausted       Kind = "fuel_exhausted"
	KindTimeout             Kind = "timeout"
	KindMemoryLimitExceeded Kind = "memory_limit_exceeded"
	KindDisallowedImport    Kind = "disallowed_import"
	KindInvalidModule       Kind = "invalid_module"
	KindExport              Kind = "export"
	KindTrap                Kind = "trap"
	KindCancelled           Kind = "cancelled"
	// KindCompileLimitExceeded: compiling the module passed the compile
	// time or memory limit (data.resource says which, data.limit the value).
	KindCompileLimitExceeded Kind = "compile_limit_exceeded"
	// KindPluginError: an Extism plugin function reported an error (set
	// an error message, or returned non-zero); Message is the plugin's own.
	KindPluginError Kind = "plugin_error"
)

// Error makes a Kind usable as an errors.Is target.
func (k Kind) Error() string { return string(k) }

// KindInfo is one row of the table of kinds: the CLI exit code and the
// JSON-RPC error code of the kind.
type KindInfo struct {
	Kind     Kind
	ExitCode int // process exit code of `sandboxd run`
	RPCCode  int // JSON-RPC error code of the sidecar's response
	Summary  string
}

// Kinds is the one table of error kinds. The JSON-RPC code of a run outcome
// is its exit code, except cancellation, which uses the LSP code -32800.
// testdata/wire/error-kinds.json is generated from it and read by the
// Python and Node client tests, so all three agree.
var Kinds = []KindInfo{
	{KindHost, 1, 1, "the host failed (or a usage error, for the CLI)"},
	{KindFuelExhausted, 2, 2, "the fuel budget ran out"},
	{KindTimeout, 3, 3, "the wall-clock deadline passed"},
	{KindMemoryLimitExceeded, 4, 4, "a memory or table growth was denied by the cap"},
	{KindDisallowedImport, 5, 5, "the module imports something not granted"},
	{KindInvalidModule, 6, 6, "the bytes are not a valid module"},
	{KindExport, 7, 7, "the export is missing or its signature does not fit"},
	{KindTrap, 8, 8, "the guest trapped"},
	{KindCancelled, 9, -32800, "the caller cancelled the run"},
	{KindPluginError, 10, 10, "a plugin function reported an error"},
	{KindCompileLimitExceeded, 11, 11, "compiling the module passed the compile time or memory limit"},
}

// Info returns the table row of k; unknown kinds get the host row.
func (k Kind) Info() KindInfo {
	for _, info := range Kinds {
		if info.Kind == k {
			return info
		}
	}
	return Kinds[0]
}

// Resource names what a memory_limit_exceeded error ran into.
type Resource string

const (
	ResourceMemory   Resource = "memory"   // linear memory bytes
	ResourceTable    Resource = "table"    // table elements
	ResourceMemories Resource = "memories" // number of memories
	ResourceTables   Resource = "tables"   // number of tables
	ResourceVars     Resource = "vars"     // a plugin instance's var bytes

	// What a compile_limit_exceeded error ran into.
	ResourceCompileTime   Resource = "compile_time"   // the compile deadline (Limit in ms)
	ResourceCompileMemory Resource = "compile_memory" // the compile child's data size (Limit in bytes)
)

// Frame is one wasm stack frame of a trap.
type Frame struct {
	Func       string `json:"func,omitempty"` // name from the name section, if any
	FuncIndex  uint32 `json:"funcIndex"`
	ModuleOffs uint   `json:"moduleOffset"` // 0 when wasmtime does not know it
}

// Error is the error of a run that did not produce values. Fields beyond
// Kind and Message are set where the kind has them.
type Error struct {
	Kind    Kind
	Message string

	Module, Name string   // disallowed_import: the import
	Budget       uint64   // fuel_exhausted: the fuel limit
	TimeoutMs    uint64   // timeout: the deadline in milliseconds
	Limit        uint64   // memory_limit_exceeded: the cap (bytes or elements); compile_limit_exceeded: the limit (ms or bytes)
	Requested    uint64   // memory_limit_exceeded: what the guest asked for, if known
	Resource     Resource // memory_limit_exceeded, compile_limit_exceeded: which cap
	TrapCode     string   // trap: stable code, see TrapCodes
	Frames       []Frame  // trap: wasm frames, innermost first, at most MaxFrames
	Function     string   // export, plugin_error: the function concerned
	ReturnCode   int32    // plugin_error: what the plugin function returned
	Output       *Output  // a WASI run's output until it stopped

	// Usage is set once the run had a store: fuel consumed and peak memory
	// accompany every failure after instantiation began.
	Usage *Usage

	err error // the underlying cause, if any (never shown verbatim)
}

// Usage is what a run consumed.
type Usage struct {
	FuelConsumed    uint64
	PeakMemoryBytes uint64
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Message }

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.err }

// Is matches a Kind sentinel.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.Kind
}

// KindOf returns the kind of err: the Kind of a *Error, cancelled for
// context cancellation, host for anything else.
func KindOf(err error) Kind {
	var se *Error
	if errors.As(err, &se) {
		return se.Kind
	}
	if errors.Is(err, errCancelled) {
		return KindCancelled
	}
	return KindHost
}

var errCancelled = errors.New("cancelled")

func newError(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// TrapCodes maps wasmtime's C trap codes (wasmtime/trap.h, by numeric
// value) to our stable strings. It is indexed by the raw code rather than
// by wasmtime-go's TrapCode constants because wasmtime-go v39 omits
// ALWAYS_TRAP_ADAPTER (11), so its OutOfFuel constant is 11 while wasmtime
// reports 12. capi_test.go checks this table against the pinned header.
var TrapCodes = []string{
	"stack_overflow",                // 0
	"memory_out_of_bounds",          // 1
	"heap_misaligned",               // 2
	"table_out_of_bounds",           // 3
	"indirect_call_to_null",         // 4
	"bad_signature",                 // 5
	"integer_overflow",              // 6
	"integer_divide_by_zero",        // 7
	"invalid_conversion_to_integer", // 8
	"unreachable",                   // 9
	"interrupt",                     // 10
	"always_trap_adapter",           // 11
	"out_of_fuel",                   // 12
	"atomic_wait_non_shared_memory", // 13
	"null_reference",                // 14
	"array_out_of_bounds",           // 15
	"allocation_too_large",          // 16
	"cast_failure",                  // 17
	"cannot_enter_component",        // 18
	"no_async_result",               // 19
	"disabled_opcode",               // 20
}

// Raw wasmtime trap codes the classifier treats as fences, not traps.
const (
	rawTrapInterrupt = 10
	rawTrapOutOfFuel = 12
)

// cleanMessage removes what wasmtime appends for humans debugging wasmtime
// itself: Rust host backtraces (present when RUST_BACKTRACE is set) and the
// "Caused by" chain's stack dumps. Guests and parents must never see host
// addresses or Rust symbol names.
func cleanMessage(s string) string {
	for _, marker := range []string{"\nStack backtrace:", "\nstack backtrace:", "\n   0: "} {
		if i := strings.Index(s, marker); i >= 0 {
			s = s[:i]
		}
	}
	return strings.TrimSpace(s)
}
