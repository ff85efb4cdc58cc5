package wasmbin

// Opcodes used in the injected helper bodies.
const (
	opReturn       = 0x0f
	opLocalGet     = 0x20
	opLocalSet     = 0x21
	opGlobalGet    = 0x23
	opGlobalSet    = 0x24
	opI32Const     = 0x41
	opI64Const     = 0x42
	opI64LtU       = 0x54
	opI64GtU       = 0x56
	opI64Add       = 0x7c
	opI64ExtendU   = 0xad // i64.extend_i32_u
	blockTypeEmpty = 0x40
)

// Positions of the injected globals, relative to the first injected global.
const (
	globalMemCap = iota
	globalMemDenied
	globalTableCap
	globalTableDenied
	numGlobals
)

// injectedGlobalNames lists export names in injected-global order.
var injectedGlobalNames = [numGlobals]string{
	globalMemCap:      ExportMemCapPages,
	globalMemDenied:   ExportMemDeniedPages,
	globalTableCap:    ExportTableCap,
	globalTableDenied: ExportTableDenied,
}

// assemble emits the rewritten module: the original sections in their
// original order with type, function, global, export and code sections
// extended, the start section dropped, and missing sections created at
// their canonical position. code is the rewritten bodies without count.
func (m *module) assemble(rw *rewriter, code []byte) []byte {
	g := &helperGen{m: m, firstGlobal: uint32(m.info.ImportedGlobals) + m.globals.count}
	replaced := map[byte][]byte{
		secGlobal: m.globals.append(numGlobals, g.globals()),
		secExport: m.exports.append(m.exportEntries()),
	}
	hs := g.helpers(rw.helpers, m.types.count)
	if len(rw.helpers) > 0 {
		replaced[secType] = m.types.append(hs.numTypes, hs.types)
		replaced[secFunction] = m.funcs.append(len(rw.helpers), hs.funcs)
	}
	if m.code != nil || len(rw.helpers) > 0 {
		replaced[secCode] = vecSection{count: m.funcs.count, items: code}.append(len(rw.helpers), hs.bodies)
	}

	out := append([]byte(nil), wasmHeader...)
	for _, s := range m.withNewSections(replaced) {
		if s.id == secStart {
			continue // the host runs the start function via ExportStart
		}
		payload := s.payload
		if p, ok := replaced[s.id]; ok {
			payload = p
		}
		out = append(out, s.id)
		out = appendULEB(out, uint64(len(payload)))
		out = append(out, payload...)
	}
	return out
}

// withNewSections returns the section list with an empty placeholder for
// every replaced section the module lacks, each placed right after the last
// section that must precede it, so custom sections keep their neighbours.
func (m *module) withNewSections(replaced map[byte][]byte) []section {
	secs := append([]section(nil), m.sections...)
	for _, id := range []byte{secType, secFunction, secGlobal, secExport, secCode} {
		if _, ok := replaced[id]; !ok || hasSection(secs, id) {
			continue
		}
		at := insertPos(secs, sectionRank[id])
		secs = append(secs[:at], append([]section{{id: id}}, secs[at:]...)...)
	}
	return secs
}

func hasSection(secs []section, id byte) bool {
	for _, s := range secs {
		if s.id == id {
			return true
		}
	}
	return false
}

// insertPos finds where a new section of the given rank goes: after the
// last non-custom section of lower rank, or else before the first
// non-custom section, or else at the end.
func insertPos(secs []section, rank int) int {
	pos := -1
	for i, s := range secs {
		if s.id != secCustom && sectionRank[s.id] < rank {
			pos = i + 1
		}
	}
	if pos >= 0 {
		return pos
	}
	for i, s := range secs {
		if s.id != secCustom {
			return i
		}
	}
	return len(secs)
}

// exportEntries encodes the injected exports: every memory, the control
// globals, and the original start function.
func (m *module) exportEntries() (int, []byte) {
	var out []byte
	n := 0
	add := func(name string, kind byte, idx uint64) {
		out = appendULEB(out, uint64(len(name)))
		out = append(out, name...)
		out = append(out, kind)
		out = appendULEB(out, idx)
		n++
	}
	for i := range m.memories {
		add(MemoryExportName(i), kindMemory, uint64(i))
	}
	firstGlobal := uint64(m.info.ImportedGlobals) + uint64(m.globals.count)
	for i, name := range injectedGlobalNames {
		add(name, kindGlobal, firstGlobal+uint64(i))
	}
	if m.info.HasStart {
		add(ExportStart, kindFunc, uint64(m.info.Start))
	}
	return n, out
}

// helperGen encodes the injected globals and helper functions.
type helperGen struct {
	m           *module
	firstGlobal uint32
}

// globals encodes the four mutable i64 control globals.
func (g *helperGen) globals() []byte {
	var out []byte
	for i := range numGlobals {
		init := int64(0)
		if i == globalMemCap || i == globalTableCap {
			init = noCap
		}
		out = append(out, valI64, 0x01, opI64Const)
		out = appendSLEB(out, init)
		out = append(out, opEnd)
	}
	return out
}

// helperSections holds the encoded additions for the type, function and
// code sections.
type helperSections struct {
	numTypes     int
	types, funcs []byte
	bodies       []byte
}

// helpers encodes, for each helper, its function type (deduplicated and
// appended after the existing firstType types), its function section entry
// and its code section body.
func (g *helperGen) helpers(keys []helperKey, firstType uint32) helperSections {
	var hs helperSections
	typeIndex := map[string]uint32{}
	for _, k := range keys {
		sig := g.signature(k)
		idx, ok := typeIndex[string(sig)]
		if !ok {
			idx = firstType + uint32(len(typeIndex))
			typeIndex[string(sig)] = idx
			hs.types = append(hs.types, sig...)
		}
		hs.funcs = appendULEB(hs.funcs, uint64(idx))
		body := g.body(k)
		hs.bodies = appendULEB(hs.bodies, uint64(len(body)))
		hs.bodies = append(hs.bodies, body...)
	}
	hs.numTypes = len(typeIndex)
	return hs
}

// indexType is the type of sizes and grow deltas of the memory or table a
// helper serves: i64 for memory64 / table64, else i32.
func (g *helperGen) indexType(k helperKey) byte {
	if (k.op == opGrowTable && g.m.tables[k.a].Table64) || (k.op == opGrowMemory && g.m.memories[k.a].Memory64) {
		return valI64
	}
	return valI32
}

// signature encodes the helper's function type, which mirrors the stack
// effect of the instruction it replaces: memory.grow is [idx] -> [idx],
// table.grow is [ref idx] -> [idx].
func (g *helperGen) signature(k helperKey) []byte {
	if k.op.isBulk() {
		return g.bulkShape(k).signature()
	}
	it := g.indexType(k)
	if k.op == opGrowTable {
		return []byte{0x60, 2, g.m.tables[k.a].ElemType, it, 1, it}
	}
	return []byte{0x60, 1, it, 1, it}
}

// body encodes a helper. Both kinds compute the requested size as an i64 in
// a scratch local, deny (recording the largest denied request) when it
// exceeds the cap global, and otherwise perform the original grow, whose
// own failure (e.g. the declared maximum) is deliberately not recorded.
func (g *helperGen) body(k helperKey) []byte {
	if k.op.isBulk() {
		return g.bulkBody(k)
	}
	table := k.op == opGrowTable
	it := g.indexType(k)
	// Locals: params, then one i64 scratch local holding the request.
	b := []byte{1, 1, valI64}
	var delta, scratch uint64 = 0, 1
	if table {
		delta, scratch = 1, 2
	}
	b = append(b, opLocalGet, byte(delta))
	b = extendU(b, it)
	if table {
		b = append(b, prefixFC, fcTableSize)
		b = appendULEB(b, uint64(k.a))
		b = extendU(b, it)
		b = append(b, opI64Add)
	} else {
		for i, mem := range g.m.memories {
			b = append(b, opMemorySize)
			b = appendULEB(b, uint64(i))
			b = extendU(b, indexTypeOf(mem.Memory64))
			b = append(b, opI64Add)
		}
	}
	b = append(b, opLocalSet, byte(scratch))
	if it == valI64 {
		// A 64-bit delta can wrap the sum; saturate so it is denied.
		b = append(b, opLocalGet, byte(scratch), opLocalGet, byte(delta), opI64LtU,
			opIf, blockTypeEmpty, opI64Const, 0x7f, opLocalSet, byte(scratch), opEnd)
	}
	capGlobal, deniedGlobal := g.firstGlobal+globalMemCap, g.firstGlobal+globalMemDenied
	if table {
		capGlobal, deniedGlobal = g.firstGlobal+globalTableCap, g.firstGlobal+globalTableDenied
	}
	// if request > cap { if denied < request { denied = request }; return -1 }
	b = append(b, opLocalGet, byte(scratch), opGlobalGet)
	b = appendULEB(b, uint64(capGlobal))
	b = append(b, opI64GtU, opIf, blockTypeEmpty, opGlobalGet)
	b = appendULEB(b, uint64(deniedGlobal))
	b = append(b, opLocalGet, byte(scratch), opI64LtU, opIf, blockTypeEmpty,
		opLocalGet, byte(scratch), opGlobalSet)
	b = appendULEB(b, uint64(deniedGlobal))
	b = append(b, opEnd)
	if it == valI64 {
		b = append(b, opI64Const, 0x7f)
	} else {
		b = append(b, opI32Const, 0x7f)
	}
	b = append(b, opReturn, opEnd)
	// The original grow.
	if table {
		b = append(b, opLocalGet, 0, opLocalGet, 1, prefixFC, fcTableGrow)
	} else {
		b = append(b, opLocalGet, 0, opMemoryGrow)
	}
	b = appendULEB(b, uint64(k.a))
	return append(b, opEnd)
}

func indexTypeOf(is64 bool) byte {
	if is64 {
		return valI64
	}
	return valI32
}

// extendU widens an i32 on the stack to i64; i64 values are left alone.
func extendU(b []byte, t byte) []byte {
	if t == valI32 {
		return append(b, opI64ExtendU)
	}
	return b
}
