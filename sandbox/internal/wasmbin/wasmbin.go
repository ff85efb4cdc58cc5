// Package wasmbin rewrites untrusted wasm modules before sandboxd compiles
// them.
//
// wasmtime-go offers no resource-limiter callback, so the host cannot learn
// that wasmtime refused a memory.grow or table.grow. Instead, Instrument
// replaces every memory.grow and table.grow in the module with a call to an
// injected helper function that enforces a host-settable cap and records the
// size that was refused in an exported global. It replaces every bulk
// memory and table operation with a call of a helper that does the work in
// chunks inside a loop (bulk.go), so fuel and the deadline apply to it. It
// refuses any index past the module's own counts (space.go), so nothing it
// injects is reachable from guest code, and records an offset map back to
// the original bytes (offsets.go). It also removes the start section (so
// instantiation never runs guest code) and exports every memory and table
// so that the host can read their sizes even when the module hides them.
//
// Only the standard library is used, and every input is treated as hostile:
// malformed bytes produce an error, never a panic.
package wasmbin

import (
	"fmt"
	"strconv"
	"strings"
)

// Names of the exports Instrument adds.
const (
	// ExportStart is the original start function, exported so the host can
	// run it after instantiation under its own fences. Present only if the
	// module had a start section.
	ExportStart = "__sandboxd_start"
	// ExportMemoryPrefix followed by a decimal memory index names the export
	// of every memory, imported or defined.
	ExportMemoryPrefix = "__sandboxd_memory_"
	// ExportMemCapBytes is a mutable i64 global: the cap on the bytes of
	// all memories and tables together (tables at ElemBytes per element).
	// Its initial value 2^62 means "no cap".
	ExportMemCapBytes = "__sandboxd_mem_cap_bytes"
	// ExportMemDeniedBytes is a mutable i64 global, initially 0: the
	// largest byte total a memory.grow or table.grow asked for and was
	// refused because of the byte cap.
	ExportMemDeniedBytes = "__sandboxd_mem_denied_bytes"
	// ExportTablePrefix followed by a decimal table index names the export
	// of every table, imported or defined, so the host can read its size.
	ExportTablePrefix = "__sandboxd_table_"
	// ExportTableCap is a mutable i64 global: the cap on the elements of
	// each table. Initially 0xFFFFFFFF.
	ExportTableCap = "__sandboxd_table_cap"
	// ExportTableDenied is a mutable i64 global, initially 0: the largest
	// element count a table.grow asked for and was refused.
	ExportTableDenied = "__sandboxd_table_denied"

	// ReservedPrefix is the prefix of every injected export. Modules that
	// already export a name with this prefix are rejected, so a guest can
	// never shadow or impersonate the host's view of its state.
	ReservedPrefix = "__sandboxd_"
)

// noCap and noByteCap are the initial values of the cap globals.
const (
	noCap     = 0xFFFFFFFF
	noByteCap = 1 << 62
)

// Info describes the parts of a module the sandbox needs before
// instantiation.
type Info struct {
	ImportedFuncs, ImportedTables, ImportedMemories, ImportedGlobals int

	Memories []MemoryInfo // defined (non-imported) memories, in index order after imports
	Tables   []TableInfo  // defined tables

	HasStart bool
	Start    uint32 // function index of the start function, if HasStart

	// ReexportedImports are the names of the exports that are imported
	// functions passed through: calling one calls the host, not the
	// module.
	ReexportedImports []string

	// GrowsMemory and GrowsTable say whether any memory.grow or table.grow
	// was rewritten: when false, the host need not set that cap at all.
	// Set by Instrument only.
	GrowsMemory, GrowsTable bool

	// FirstInjectedFunc is the index of the first function Instrument
	// added (every function at or past it is the rewriter's), and Offsets
	// maps code offsets of the rewritten module back to the original.
	// Set by Instrument only.
	FirstInjectedFunc uint32
	Offsets           *OffsetMap
}

// MemoryInfo is the declared type of a memory, in 64 KiB pages.
type MemoryInfo struct {
	MinPages uint64
	MaxPages uint64
	HasMax   bool
	Memory64 bool
	Shared   bool
}

// TableInfo is the declared type of a table.
type TableInfo struct {
	Min      uint64
	Max      uint64
	HasMax   bool
	ElemType byte // 0x70 funcref, 0x6F externref
	Table64  bool // table64 (memory64 proposal): sizes are i64
}

// ElemBytes is what one element of the table costs in wasmtime's own
// storage, the figure the byte cap charges: wasmtime keeps a table as a
// flat array whose element size is TableElementType::element_size
// (crates/wasmtime/src/runtime/vm/table.rs): a funcref element is a
// (possibly tagged) pointer, size_of::<FuncTableElem>() = 8 bytes on a
// 64-bit host; an externref or exnref element is Option<VMGcRef>, a
// non-zero u32, 4 bytes.
func (t TableInfo) ElemBytes() uint64 {
	if t.ElemType == valFuncref {
		return 8
	}
	return 4
}

// TableExportName returns the name under which Instrument exports table
// index i.
func TableExportName(i int) string {
	return ExportTablePrefix + strconv.Itoa(i)
}

// MemoryExportName returns the name under which Instrument exports memory
// index i.
func MemoryExportName(i int) string {
	return ExportMemoryPrefix + strconv.Itoa(i)
}

// Parse decodes the module's header, imports, tables, memories and start
// function without rewriting anything. It does not decode function bodies;
// Instrument does, and may therefore reject modules that Parse accepts.
func Parse(wasm []byte) (*Info, error) {
	m, err := parseModule(wasm)
	if err != nil {
		return nil, err
	}
	return m.info.clone(), nil
}

// Instrument parses wasm and returns the rewritten module plus Info about
// the original module. The input is expected to be a module wasmtime has
// already validated; anything the rewriter cannot handle with certainty
// (including opcodes outside the supported feature set, reported as
// *UnsupportedOpcodeError) is returned as an error.
func Instrument(wasm []byte) (out []byte, info *Info, err error) {
	m, err := parseModule(wasm)
	if err != nil {
		return nil, nil, err
	}
	if err := m.checkExportNames(); err != nil {
		return nil, nil, err
	}
	rw := newRewriter(m)
	code, err := rw.rewriteCode()
	if err != nil {
		return nil, nil, err
	}
	if err := rw.checkWasmLimits(); err != nil {
		return nil, nil, err
	}
	info = m.info.clone()
	for _, h := range rw.helpers {
		switch h.op {
		case opGrowMemory:
			info.GrowsMemory = true
		case opGrowTable:
			info.GrowsTable = true
		}
	}
	out = m.assemble(rw, code)
	info.FirstInjectedFunc = rw.firstFunc
	info.Offsets = &rw.offsets
	return out, info, nil
}

func (i *Info) clone() *Info {
	c := *i
	c.Memories = append([]MemoryInfo(nil), i.Memories...)
	c.Tables = append([]TableInfo(nil), i.Tables...)
	return &c
}

func (m *module) checkExportNames() error {
	for name := range m.exportNames {
		if strings.HasPrefix(name, ReservedPrefix) {
			return fmt.Errorf("wasmbin: module exports %q, which uses the reserved prefix %q", name, ReservedPrefix)
		}
	}
	return nil
}

// wasmparser's limits, which wasmtime enforces on the rewritten module: a
// valid module close to them must be refused here, naming the original
// counts, rather than by wasmtime with offsets in bytes the caller never
// sent.
const (
	maxWasmFuncs    = 1_000_000
	maxWasmGlobals  = 1_000_000
	maxWasmTypes    = 1_000_000
	maxWasmFuncSize = 7_654_321 // bytes of one function body
)

// checkWasmLimits refuses a module whose rewrite would pass one of
// wasmtime's limits on counts (the rewrite appends functions, types and
// globals). Body sizes are checked by rewriteBody.
func (rw *rewriter) checkWasmLimits() error {
	m := rw.m
	check := func(what string, have uint64, added int, limit uint64) error {
		if have+uint64(added) > limit {
			return fmt.Errorf("wasmbin: the module has %d %s; sandboxd's rewrite adds %d and wasmtime allows at most %d", have, what, added, limit)
		}
		return nil
	}
	if err := check("functions", uint64(m.info.ImportedFuncs)+uint64(m.funcs.count), len(rw.helpers), maxWasmFuncs); err != nil {
		return err
	}
	g := &helperGen{m: m}
	sigs := map[string]bool{} // helper types are deduplicated, as assemble does
	for _, k := range rw.helpers {
		sigs[string(g.signature(k))] = true
	}
	if err := check("types", uint64(m.types.count), len(sigs), maxWasmTypes); err != nil {
		return err
	}
	return check("globals", uint64(m.info.ImportedGlobals)+uint64(m.globals.count), numGlobals, maxWasmGlobals)
}
