package sandbox

// Checks made before any store exists: the export's signature against the
// arguments, and the module's declared memories and tables against the
// caps. (Imports are checked in host.go.)

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// checkSignature resolves the export and checks arity and types before
// any store exists. It runs before every run and call, so the success path
// allocates nothing: the name is quoted only for a message.
func checkSignature(m *Module, name string, args []Value) *Error {
	exportErr := func(format string, a ...any) *Error {
		return &Error{Kind: KindExport, Function: name, Message: fmt.Sprintf(format, a...)}
	}
	// The name is quoted cut and escaped (protocol.Quote): it is the
	// caller's string, or the module's.
	q := func() string { return protocol.Quote(name) }
	exp, ok := m.Export(name)
	if !ok {
		// Not one of the module's names: the caller's own string, which
		// data gets cut too (it may be megabytes).
		e := exportErr("export %s not found; the module exports %s", q(), funcNames(m))
		e.Function = protocol.Bounded(name)
		return e
	}
	if exp.Kind != "func" {
		return exportErr("export %s is a %s, not a function", q(), exp.Kind)
	}
	// A host function the module imports and exports again is the host's,
	// not the module's: called from outside, it would run with no guest
	// as its caller, past everything that expects one (its memory, its
	// fences).
	if slices.Contains(m.info.ReexportedImports, name) {
		return exportErr("export %s is an imported function passed through; only the module's own functions can be called", q())
	}
	for _, types := range [2][]string{exp.Params, exp.Results} {
		for _, t := range types {
			if !supported(t) {
				return exportErr("export %s uses unsupported value type %s (supported: i32, i64, f32, f64)", q(), t)
			}
		}
	}
	if len(args) != len(exp.Params) {
		return exportErr("export %s takes %d argument(s) %v, got %d", q(), len(exp.Params), exp.Params, len(args))
	}
	for i, a := range args {
		if string(a.Type) != exp.Params[i] {
			return exportErr("argument %d of %s must be %s, got %s", i, q(), exp.Params[i], a.Type)
		}
	}
	return nil
}

// maxListedExports bounds the export names an export error lists, and
// maxQuotedName each name it quotes: the names are the module's, and a
// module of 9 MB exporting 80,000 functions made every such error 9 MB.
const (
	maxListedExports = 16
	maxQuotedName    = 128
)

func funcNames(m *Module) string {
	var names []string
	n := 0
	for _, e := range m.Exports {
		if e.Kind == "func" {
			n++
			if len(names) < maxListedExports {
				names = append(names, fmt.Sprintf("%q", boundedName(e.Name)))
			}
		}
	}
	if n == 0 {
		return "no functions"
	}
	list := strings.Join(names, ", ")
	if n > len(names) {
		list += fmt.Sprintf(" and %d more", n-len(names))
	}
	return list
}

// boundedName is a module's name for a message: cut to maxQuotedName
// bytes on a rune boundary, with "…" where it was cut.
func boundedName(s string) string {
	return protocol.Cut(s, maxQuotedName)
}

func supported(t string) bool {
	for _, v := range valueTypes {
		if string(v) == t {
			return true
		}
	}
	return false
}

// checkStaticCaps refuses, before instantiation, a module whose declared
// initial memories or tables already exceed the caps, with the plugin
// kernel's initial memory (kernel bytes; 0 for other modules) counted in
// the same cap: that is a memory breach, not a host error from the
// instantiation.
func checkStaticCaps(info *wasmbin.Info, l limits.Limits, kernel uint64) *Error {
	if kernel > l.MemoryBytes {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes, Requested: kernel,
			Message: fmt.Sprintf("the plugin kernel's initial memory of %d bytes exceeds the cap of %d bytes", kernel, l.MemoryBytes)}
	}
	if err := checkModuleCaps(info, l, l.MemoryBytes-kernel); err != nil {
		if err.Resource == ResourceMemory && kernel > 0 {
			err.Limit = l.MemoryBytes
			err.Requested += kernel
			err.Message += fmt.Sprintf(" (with the plugin kernel's %d bytes)", kernel)
		}
		return err
	}
	return nil
}

// checkGrantBytes refuses a WASI grant that would keep more on the host
// than the store's memory cap allows it (protocol.WASI.HostBytes: stdin,
// arguments, environment, files), before anything of it is laid out.
func checkGrantBytes(w *WASI, l limits.Limits) *Error {
	if n := w.HostBytes(); n > l.MemoryBytes {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes, Requested: n,
			Message: fmt.Sprintf("the WASI grant keeps %d bytes on the host (its stdin, arguments, environment and files); a grant may keep at most the memory cap, %d bytes", n, l.MemoryBytes)}
	}
	return nil
}

// checkModuleCaps is checkStaticCaps for the module alone, its memories
// and tables within capBytes.
func checkModuleCaps(info *wasmbin.Info, l limits.Limits, capBytes uint64) *Error {
	if n := uint64(len(info.Memories)); n > l.Memories {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemories, Limit: l.Memories, Requested: n,
			Message: fmt.Sprintf("module defines %d memories; the limit is %d (raise limits.memories)", n, l.Memories)}
	}
	// Memories and tables share the cap, initial sizes included, so 100
	// tables of 10M funcref elements (8 GB in wasmtime) are refused here.
	// Table minimums are u32 (table64 is off) and there are fewer tables
	// than module bytes, so the sum cannot overflow.
	var memBytes, tableBytes uint64
	for _, mem := range info.Memories {
		memBytes += mem.MinPages * limits.WasmPageSize
	}
	for _, t := range info.Tables {
		tableBytes += t.Min * t.ElemBytes()
	}
	if total := memBytes + tableBytes; total > capBytes {
		what := "initial memory"
		if tableBytes > 0 {
			what = fmt.Sprintf("initial memory and tables (%d bytes of table storage)", tableBytes)
		}
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: capBytes, Requested: total,
			Message: fmt.Sprintf("%s of %d bytes exceeds the cap of %d bytes", what, total, capBytes)}
	}
	for i, t := range info.Tables {
		if t.Min > l.TableElements {
			return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceTable, Limit: l.TableElements, Requested: t.Min,
				Message: fmt.Sprintf("table %d starts with %d elements; the cap is %d", i, t.Min, l.TableElements)}
		}
	}
	return nil
}

// tableElemBytes is the per-element storage of table i (imported tables
// first, as in the index space).
func (m *Module) tableElemBytes(i int) uint64 {
	if i < m.info.ImportedTables {
		return 8 // the larger element size: imports are never granted
	}
	return m.info.Tables[i-m.info.ImportedTables].ElemBytes()
}
