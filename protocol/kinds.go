package protocol

import (
	"errors"
	"sort"
)

// Kind says why a run stopped. The strings are stable: the CLI, the sidecar
// and every client use them, and clients map each to an exception class.
type Kind string

// The stable error kinds. Each also serves as a sentinel for errors.Is:
// errors.Is(err, protocol.KindTimeout) is true for any error of that kind.
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
	// KindHostFunctionError: a host function served by the parent failed:
	// the parent answered its host/call with an error, or with values that
	// do not fit the declaration.
	KindHostFunctionError Kind = "host_function_error"
	// KindScriptError: a snippet run by an interpreter runtime failed in
	// its own language: a syntax error, an exception it did not catch, a
	// value JSON cannot carry (docs/snippets.md). Message is the
	// language's one line; the data adds line, column and its own text.
	KindScriptError Kind = "script_error"
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

// kinds is the one table of error kinds. The JSON-RPC code of a run outcome
// is its exit code, except cancellation, which uses the LSP code -32800.
// testdata/wire/error-kinds.json is generated from it and read by the
// Python and Node client tests, so all three agree.
var kinds = []KindInfo{
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
	{KindHostFunctionError, 12, 12, "a host function served by the parent failed"},
	{KindScriptError, 13, 13, "the snippet failed in its own language (a syntax error, an uncaught exception)"},
}

// Kinds returns the table of error kinds, in exit-code order. The slice
// is a copy: no importer can change the table.
func Kinds() []KindInfo { return append([]KindInfo(nil), kinds...) }

// Info returns the table row of k; unknown kinds get the host row.
func (k Kind) Info() KindInfo {
	for _, info := range kinds {
		if info.Kind == k {
			return info
		}
	}
	return kinds[0]
}

// OutcomeKeys returns every outcome key of `stats`: "ok" and each kind,
// sorted.
func OutcomeKeys() []string {
	keys := []string{"ok"}
	for _, k := range kinds {
		keys = append(keys, string(k.Kind))
	}
	sort.Strings(keys)
	return keys
}

// Resource names what a memory_limit_exceeded (or compile_limit_exceeded)
// error ran into.
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

// Error is a run or compile outcome that is not a result, as the engine
// reports it to the sidecar: the kind, a message for people and the
// kind's details in their wire form (Data.Kind is filled in when sent).
type Error struct {
	Kind    Kind
	Message string    // without the "kind: " prefix
	Data    ErrorData // the details of the kind; usage where the run had a store
	Err     error     // the underlying cause, if any (never shown verbatim)
}

func (e *Error) Error() string { return string(e.Kind) + ": " + e.Message }

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches a Kind sentinel.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.Kind
}

// Outcome is implemented by an engine's own error type to describe itself
// as a protocol Error (sandbox.Error does).
type Outcome interface {
	error
	Outcome() *Error
}

// AsError returns err as a protocol Error: itself, or what the first
// Outcome in its chain says. ok is false for any other error.
func AsError(err error) (e *Error, ok bool) {
	if errors.As(err, &e) {
		return e, true
	}
	var o Outcome
	if errors.As(err, &o) {
		return o.Outcome(), true
	}
	return nil, false
}

// KindOf returns the kind of err, or host for an error that has none.
func KindOf(err error) Kind {
	if e, ok := AsError(err); ok {
		return e.Kind
	}
	return KindHost
}
