package protocol

import (
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/limits"
)

// This file holds the shapes the sidecar speaks to its engine in (see
// rpc.Engine): what to compile, what to run and what came back. They are
// plain data, so the protocol layer needs no cgo.

// Source names a module: exactly one field is set.
type Source struct {
	WAT  string // WebAssembly text
	Wasm []byte // binary (text is also accepted here and converted)
	Path string // a .wasm or .wat file on the sidecar's machine
	ID   string // "sha256:<hex>" of a module compiled earlier

	// CompileTimeout and CompileMemoryBytes fence the compile, if the
	// module must be compiled; zero takes the engine's default.
	CompileTimeout     time.Duration
	CompileMemoryBytes uint64

	// Preinitialize asks for the module pre-initialised: its initialiser
	// (start function, _initialize) run once when it is compiled, and the
	// state it left the module's initial state (sandbox.Engine.Preinitialize;
	// docs/preinit.md).
	Preinitialize bool

	// Encoded, if set, is how the parent sent WAT or Wasm on the wire.
	// The engine also knows a module by it, so a module sent again the
	// same way is found (Lookup) before its text is unescaped or its
	// base64 decoded. It is not a source of its own: Compile needs WAT or
	// Wasm, decoded from it, and remembers it beside them.
	Encoded *Encoded
}

// Encoded is a module's field as it came on the wire.
type Encoded struct {
	Field   string // "wat" or "wasm"
	Literal []byte // the JSON string, quotes and escapes included
}

// IDPrefix starts every module id.
const IDPrefix = "sha256:"

// MaxModulePathBytes bounds a module path (Source.Path): PATH_MAX, the
// longest path the kernel opens.
const MaxModulePathBytes = 4096

// IsModuleID reports whether s has the shape of a module id: IDPrefix and
// the 64 lowercase hex digits of a SHA-256.
func IsModuleID(s string) bool {
	hex, ok := strings.CutPrefix(s, IDPrefix)
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Import describes one import of a module.
type Import struct {
	Module string `json:"module"`
	Name   string `json:"name"`
	Kind   string `json:"kind"` // func, memory, table, global, tag
	Type   string `json:"type"` // e.g. "(i32, i32) -> ()"
}

// Export describes one export. Params and Results are set for functions.
type Export struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`
	Params  []string `json:"params"`
	Results []string `json:"results"`
}

// ModuleInfo describes a compiled module.
type ModuleInfo struct {
	ID      string
	Imports []Import
	Exports []Export
}

// Export returns the export named name, if any.
func (m *ModuleInfo) Export(name string) (Export, bool) {
	for _, e := range m.Exports {
		if e.Name == name {
			return e, true
		}
	}
	return Export{}, false
}

// CompileInfo says how a module was obtained.
type CompileInfo struct {
	Cached  bool          // found in the engine's cache
	Elapsed time.Duration // time spent converting, validating and compiling
}

// CacheStats is a snapshot of the engine's compile cache.
type CacheStats struct {
	Entries int
	Bytes   int64
	Hits    uint64
	Misses  uint64
}

// Capabilities are the host functions a run grants. Nothing is importable
// unless granted.
type Capabilities struct {
	Log    bool   // host::log(ptr i32, len i32)
	Random bool   // host::random() -> i64, splitmix64 seeded with Seed
	Seed   uint64 // seed of host::random
	Clock  bool   // host::now_ns() -> i64, monotonic ns since the run began
	WASI   *WASI  // WASI preview1 (wasi.go); nil: not granted
}

// HostFunctions returns the capability names, as initialize lists them.
func HostFunctions() []string { return []string{"log", "random", "clock"} }

// Run is one call of an export of a compiled module.
type Run struct {
	Function     string
	Args         []Value
	Limits       limits.Limits
	Capabilities Capabilities
	// Log receives each accepted guest log line, in order, before the run
	// returns. It must not block.
	Log func(line string)
	// Output receives a WASI guest's stdout and stderr in pieces as it
	// writes them, before the run returns. Calls never overlap and must not
	// block.
	Output func(stream string, data []byte)
	// HostFunctions are the imports the parent serves; Host asks it.
	HostFunctions []HostFunction
	Host          HostCaller
}

// Usage is what a run consumed.
type Usage struct {
	FuelConsumed    uint64
	PeakMemoryBytes uint64
}

// RunOutcome is what a successful run returns.
type RunOutcome struct {
	Values []Value
	Usage
	Elapsed      time.Duration // instantiation + start + call
	LogLines     int           // lines delivered to Run.Log
	LogTruncated bool          // some lines were cut or dropped by the log caps
	LogDropped   int           // a plugin's log lines dropped for want of the log capability
	ExitCode     int           // a WASI guest's proc_exit status (0 when it returned)
	Output       *Output       // a WASI run's stdout and stderr; nil otherwise
}
