package sandbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/protocol"
)

// Kind says why a run stopped. The kinds and their table live in the
// protocol package (pure Go, shared with the sidecar and the Go client);
// these names keep sandbox.Kind* usable.
type Kind = protocol.Kind

// The stable error kinds; see protocol.Kind. Each also serves as a
// sentinel for errors.Is: errors.Is(err, sandbox.KindTimeout) is true for
// any *Error of that kind.
const (
	KindHost                 = protocol.KindHost
	KindFuelExhausted        = protocol.KindFuelExhausted
	KindTimeout              = protocol.KindTimeout
	KindMemoryLimitExceeded  = protocol.KindMemoryLimitExceeded
	KindDisallowedImport     = protocol.KindDisallowedImport
	KindInvalidModule        = protocol.KindInvalidModule
	KindExport               = protocol.KindExport
	KindTrap                 = protocol.KindTrap
	KindCancelled            = protocol.KindCancelled
	KindCompileLimitExceeded = protocol.KindCompileLimitExceeded
	KindPluginError          = protocol.KindPluginError
	KindHostFunctionError    = protocol.KindHostFunctionError
	KindScriptError          = protocol.KindScriptError
)

// KindInfo is one row of the table of kinds (protocol.Kinds).
type KindInfo = protocol.KindInfo

// Resource names what a memory_limit_exceeded error ran into.
type Resource = protocol.Resource

const (
	ResourceMemory   = protocol.ResourceMemory   // linear memory bytes
	ResourceTable    = protocol.ResourceTable    // table elements
	ResourceMemories = protocol.ResourceMemories // number of memories
	ResourceTables   = protocol.ResourceTables   // number of tables
	ResourceVars     = protocol.ResourceVars     // a plugin instance's var bytes

	// What a compile_limit_exceeded error ran into.
	ResourceCompileTime   = protocol.ResourceCompileTime   // the compile deadline (Limit in ms)
	ResourceCompileMemory = protocol.ResourceCompileMemory // the compile child's data size (Limit in bytes)
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

	Module, Name string       // disallowed_import: the import
	Budget       uint64       // fuel_exhausted: the fuel limit
	TimeoutMs    uint64       // timeout: the deadline in milliseconds
	Limit        uint64       // memory_limit_exceeded: the cap (bytes or elements); compile_limit_exceeded: the limit (ms or bytes)
	Requested    uint64       // memory_limit_exceeded: what the guest asked for, if known
	Resource     Resource     // memory_limit_exceeded, compile_limit_exceeded: which cap
	TrapCode     string       // trap: stable code, see TrapCode
	Frames       []Frame      // trap: wasm frames, innermost first, at most MaxFrames
	Function     string       // export, plugin_error: the function concerned
	ReturnCode   int32        // plugin_error: what the plugin function returned
	ExitCode     int          // trap with TrapCodeExit: the proc_exit status
	HostMessage  string       // host_function_error: the parent's own message, if it gave one
	Script       *ScriptError // script_error: where the snippet failed, in its language's words
	Output       *Output      // a WASI run's output until it stopped

	// Usage is set once the run had a store: fuel consumed and peak memory
	// accompany every failure after instantiation began.
	Usage *Usage

	err error // the underlying cause, if any (never shown verbatim)
}

// ScriptError is what a script_error adds: the snippet's language, the
// position of the error (1-based; 0 when the language gives none) and the
// language's own rendering of it (a stack trace, a traceback), at most a
// few KiB. Error.Message is the language's one line.
type ScriptError struct {
	Language     protocol.Language
	Line, Column int
	Text         string
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

// Outcome describes e in the protocol's terms: the kind, the message and
// the kind's details as the wire names them. It makes *Error a
// protocol.Outcome, which is how the sidecar and the CLI's --json report it.
func (e *Error) Outcome() *protocol.Error {
	d := protocol.ErrorData{Kind: string(e.Kind)}
	u64 := func(v uint64) *uint64 { return &v }
	str := func(s string) *string { return &s }
	switch e.Kind {
	case KindFuelExhausted:
		d.Budget = u64(e.Budget)
	case KindTimeout:
		d.TimeoutMs = u64(e.TimeoutMs)
	case KindMemoryLimitExceeded, KindCompileLimitExceeded:
		d.Limit = u64(e.Limit)
		d.Resource = string(e.Resource)
		if e.Requested > 0 {
			d.Requested = u64(e.Requested)
		}
	case KindDisallowedImport:
		d.Module, d.Name = str(e.Module), str(e.Name)
	case KindExport, KindPluginError:
		d.Function = str(e.Function)
	case KindHostFunctionError:
		d.Function = str(e.Function)
		if e.HostMessage != "" {
			d.Message = str(e.HostMessage)
		}
	case KindScriptError:
		if e.Script != nil {
			d.Language = string(e.Script.Language)
			d.Message = str(e.Message)
			line, column := e.Script.Line, e.Script.Column
			d.Line, d.Column, d.Text = &line, &column, str(e.Script.Text)
		}
	case KindTrap:
		d.TrapCode = e.TrapCode
		if e.TrapCode == TrapCodeExit {
			d.ExitCode = &e.ExitCode
		}
		for _, f := range e.Frames {
			d.Frames = append(d.Frames, protocol.FrameInfo{Func: f.Func, FuncIndex: f.FuncIndex, ModuleOffset: f.ModuleOffs})
		}
	}
	if e.Usage != nil {
		d.FuelConsumed = u64(e.Usage.FuelConsumed)
		d.PeakMemoryBytes = u64(e.Usage.PeakMemoryBytes)
	}
	if e.Output != nil {
		d.WASIOutput = &protocol.WASIOutput{Stdout: e.Output.Stdout, Stderr: e.Output.Stderr, OutputTruncated: e.Output.Truncated}
	}
	return &protocol.Error{Kind: e.Kind, Message: e.Message, Data: d, Err: e}
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

// trapCodes maps wasmtime's C trap codes (wasmtime/trap.h, by numeric
// value) to our stable strings. It is indexed by the raw code rather than
// by wasmtime-go's TrapCode constants because wasmtime-go v39 omits
// ALWAYS_TRAP_ADAPTER (11), so its OutOfFuel constant is 11 while wasmtime
// reports 12. capi_test.go checks this table against the pinned header.
var trapCodes = []string{
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

// TrapCodeHost is the one trap code that is not wasmtime's: a host
// function refused the guest's arguments (an Extism handle that is not a
// live kernel block, a var key past the limit), a host function's own
// trap without a wasmtime code, or a WASI proc_exit status outside
// 0..125. Together with TrapCodeExit and trapCodes it is every code a
// trap error has (docs/protocol.md, Trap codes).
const TrapCodeHost = "host"

// TrapCodeExit is sandboxd's other trap code: a WASI guest called
// proc_exit while it was being instantiated (its start function or
// _initialize), so no instance was made. Error.ExitCode is the status.
const TrapCodeExit = "exit"

// TrapCode returns the stable name of wasmtime's raw trap code raw, if it
// has one. (The table itself is unexported so no importer can change it.)
func TrapCode(raw int) (string, bool) {
	if raw < 0 || raw >= len(trapCodes) {
		return "", false
	}
	return trapCodes[raw], true
}

// Raw wasmtime trap codes the classifier treats as fences, not traps.
const (
	rawTrapInterrupt = 10
	rawTrapOutOfFuel = 12
)

// A WAT error quotes the offending line of the text, which can be the
// whole module: 20 MiB on one line made a reply too large for the compile
// child's frame (a host error), 2 MiB of NULs a 12 MiB message. Each line
// of the message is cut at maxQuotedLine bytes and the message at
// maxQuotedMessage, on UTF-8 boundaries.
const (
	maxQuotedLine    = 200
	maxQuotedMessage = 2048
)

// clipQuoted bounds a message that quotes the caller's input.
func clipQuoted(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = protocol.Cut(l, maxQuotedLine)
	}
	return protocol.Cut(strings.Join(lines, "\n"), maxQuotedMessage)
}

// engineMessage is a wasmtime error as a message: cleaned (cleanMessage)
// and bounded as a message that quotes the caller's input (clipQuoted).
// Wasmtime's validation, link, instantiation and trap errors quote the
// module's names (an export name of megabytes, twice in "duplicate export
// name"), so every wasmtime string that becomes an Error's Message passes
// here.
func engineMessage(s string) string {
	return clipQuoted(cleanMessage(s))
}

// cleanMessage removes what wasmtime appends for humans debugging wasmtime
// itself: Rust host backtraces (present when RUST_BACKTRACE is set) and the
// "Caused by" chain's stack dumps. Guests and parents must never see host
// addresses or Rust symbol names.
func cleanMessage(s string) string {
	// "error while executing at wasm backtrace:\n    0: 0x103 - …\n\nCaused
	// by:\n    <cause>": the frames are reported separately; keep the words.
	if b := strings.Index(s, " at wasm backtrace:"); b >= 0 {
		if c := strings.Index(s[b:], "\nCaused by:"); c >= 0 {
			s = s[:b] + ": " + strings.TrimSpace(s[b+c+len("\nCaused by:"):])
		}
	}
	for _, marker := range []string{"\nStack backtrace:", "\nstack backtrace:", "\n   0: "} {
		if i := strings.Index(s, marker); i >= 0 {
			s = s[:i]
		}
	}
	return strings.TrimSpace(s)
}
