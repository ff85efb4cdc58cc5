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
	opI64Mul       = 0x7e
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
	globalMemCap:      ExportMemCapBytes,
	globalMemDenied:   ExportMemDeniedBytes,
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
		if isNameSection(s) {
			continue // replaced by the bounded one at the end (names.go)
		}
		payload := s.payload
		if p, ok := replaced[s.id]; ok {
			payload = p
		}
		out = append(out, s.id)
		out = appendULEB(out, uint64(len(payload)))
		if s.id == secCode && m.code != nil {
			// The rewritten bodies start after the new function count.
			rw.offsets.shift(len(out) + len(appendULEB(nil, uint64(m.funcs.count)+uint64(len(rw.helpers)))))
		}
		out = append(out, payload...)
	}
	return append(out, m.nameSection()...)
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

// exportEntries encodes the injected exports: every memory and table, the control
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
	for i := range m.tables {
		add(TableExportName(i), kindTable, uint64(i))
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
		switch i {
		case globalMemCap:
			init = noByteCap
		case globalTableCap:
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

// body encodes a helper. Each computes a request as an i64 in a scratch
// local, denies it (recording the largest denied request) when it exceeds
// a cap global, and otherwise performs the original grow, whose own
// failure (e.g. the declared maximum) is deliberately not recorded.
//
// memory.grow checks one request: the bytes of every memory and every
// table after the growth against the byte cap. table.grow checks two: the
// table's elements after the growth against the per-table element cap,
// then the same byte total against the byte cap.
func (g *helperGen) body(k helperKey) []byte {
	if k.op.isBulk() {
		return g.bulkBody(k)
	}
	table := k.op == opGrowTable
	it := g.indexType(k)
	// Locals: params, then one i64 scratch local holding the request (and,
	// for a 32-bit table, the two i64 locals of the chunked grow).
	b := []byte{1, 1, valI64}
	var delta, scratch byte = 0, 1
	if table {
		delta, scratch = 1, 2
		if it == valI32 {
			b = []byte{1, 3, valI64}
		}
	}
	ret := func(b []byte) []byte { // return -1 of the index type
		if it == valI64 {
			return append(b, opI64Const, 0x7f, opReturn)
		}
		return append(b, opI32Const, 0x7f, opReturn)
	}
	if table {
		b = append(b, opLocalGet, delta)
		b = extendU(b, it)
		b = append(b, prefixFC, fcTableSize)
		b = appendULEB(b, uint64(k.a))
		b = extendU(b, it)
		b = append(b, opI64Add, opLocalSet, scratch)
		if it == valI64 {
			// A 64-bit delta can wrap the sum; saturate so it is denied.
			b = append(b, opLocalGet, scratch, opLocalGet, delta, opI64LtU,
				opIf, blockTypeEmpty, opI64Const, 0x7f, opLocalSet, scratch, opEnd)
		}
		b = g.denyAbove(b, scratch, globalTableCap, globalTableDenied, ret)
	}
	// The byte total after the growth. A 64-bit delta is clamped to 2^32-1
	// first, which is still past any cap and cannot overflow the sum.
	b = append(b, opLocalGet, delta)
	b = extendU(b, it)
	if it == valI64 {
		b = append(b, opI64Const)
		b = appendSLEB(b, 0xFFFFFFFF)
		b = append(b, opLocalGet, delta, opI64Const)
		b = appendSLEB(b, 0xFFFFFFFF)
		b = append(b, opI64LtU, opSelect)
	}
	if table {
		b = append(b, opI64Const)
		b = appendSLEB(b, int64(g.m.tables[k.a].ElemBytes()))
		b = append(b, opI64Mul)
		b = g.memoryBytes(b)
		b = append(b, opI64Add)
	} else {
		for i, mem := range g.m.memories {
			b = append(b, opMemorySize)
			b = appendULEB(b, uint64(i))
			b = extendU(b, indexTypeOf(mem.Memory64))
			b = append(b, opI64Add)
		}
		b = append(b, opI64Const, pageShift, opI64Shl)
	}
	b = g.tableBytes(b)
	b = append(b, opLocalSet, scratch)
	b = g.denyAbove(b, scratch, globalMemCap, globalMemDenied, ret)
	// The original grow.
	if table && it == valI32 {
		return append(g.chunkedTableGrow(b, k.a), opEnd)
	}
	if table {
		b = append(b, opLocalGet, 0, opLocalGet, 1, prefixFC, fcTableGrow)
	} else {
		b = append(b, opLocalGet, 0, opMemoryGrow)
	}
	b = appendULEB(b, uint64(k.a))
	return append(b, opEnd)
}

// denyAbove appends: if request > cap { if denied < request { denied =
// request }; return -1 }.
func (g *helperGen) denyAbove(b []byte, request byte, capG, deniedG uint32, ret func([]byte) []byte) []byte {
	capGlobal, deniedGlobal := uint64(g.firstGlobal+capG), uint64(g.firstGlobal+deniedG)
	b = append(b, opLocalGet, request, opGlobalGet)
	b = appendULEB(b, capGlobal)
	b = append(b, opI64GtU, opIf, blockTypeEmpty, opGlobalGet)
	b = appendULEB(b, deniedGlobal)
	b = append(b, opLocalGet, request, opI64LtU, opIf, blockTypeEmpty,
		opLocalGet, request, opGlobalSet)
	b = appendULEB(b, deniedGlobal)
	b = append(b, opEnd)
	b = ret(b)
	return append(b, opEnd)
}

// memoryBytes appends the bytes of all memories, as an i64.
func (g *helperGen) memoryBytes(b []byte) []byte {
	b = append(b, opI64Const, 0)
	for i, mem := range g.m.memories {
		b = append(b, opMemorySize)
		b = appendULEB(b, uint64(i))
		b = extendU(b, indexTypeOf(mem.Memory64))
		b = append(b, opI64Add)
	}
	return append(b, opI64Const, pageShift, opI64Shl)
}

// tableBytes adds the storage of every table to the i64 on the stack.
func (g *helperGen) tableBytes(b []byte) []byte {
	for i, t := range g.m.tables {
		b = append(b, prefixFC, fcTableSize)
		b = appendULEB(b, uint64(i))
		b = extendU(b, indexTypeOf(t.Table64))
		b = append(b, opI64Const)
		b = appendSLEB(b, int64(t.ElemBytes()))
		b = append(b, opI64Mul, opI64Add)
	}
	return b
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

// Locals of the chunked table.grow, after the helper's scratch local.
const (
	growLocalRem = 3 // elements still to add
	growLocalK   = 4 // elements added by this iteration
)

// More opcodes used by the chunked table.grow.
const (
	opI32Eq  = 0x46
	opI32Sub = 0x6b
)

// chunkedTableGrow appends the growth of a 32-bit table, after the caps:
// wasmtime writes the init value into every new element inside one
// instruction (10 M elements, 40 ms, for one fuel and no epoch check), so
// the helper grows in steps of tableChunkElems inside a loop, where fuel
// and the deadline apply, at the table fill's rate. The instruction is all
// or nothing, so what wasmtime would refuse is refused first, with nothing
// grown: past the declared maximum (or 2^32-1 elements). The caps were
// checked above, so the store's limiter (the same per-table cap) never
// refuses a step; only a host allocation failure could stop it midway,
// and then the helper returns -1 with the steps already taken kept.
// table64 tables keep the single grow: memory64 is off in the engine, so
// none reaches the rewriter.
func (g *helperGen) chunkedTableGrow(b []byte, table uint32) []byte {
	t := g.m.tables[table]
	limit := int64(0xFFFFFFFF)
	if t.HasMax && int64(t.Max) < limit {
		limit = int64(t.Max)
	}
	size := func(b []byte) []byte {
		b = append(b, prefixFC, fcTableSize)
		return appendULEB(b, uint64(table))
	}
	minusOne := func(b []byte) []byte { return append(b, opI32Const, 0x7f, opReturn) }
	// if size + delta > limit { return -1 }
	b = append(b, opLocalGet, 1, opI64ExtendU)
	b = size(b)
	b = append(b, opI64ExtendU, opI64Add, opI64Const)
	b = appendSLEB(b, limit)
	b = append(b, opI64GtU, opIf, blockTypeEmpty)
	b = minusOne(b)
	b = append(b, opEnd)
	b = append(b, opLocalGet, 1, opI64ExtendU, opLocalSet, growLocalRem)
	b = append(b, opBlock, blockTypeEmpty, opLoop, blockTypeEmpty,
		opLocalGet, growLocalRem, opI64Eqz, opBrIf, 1)
	// K = min(rem, chunk)
	b = append(b, opLocalGet, growLocalRem, opI64Const)
	b = appendSLEB(b, tableChunkElems)
	b = append(b, opLocalGet, growLocalRem, opI64Const)
	b = appendSLEB(b, tableChunkElems)
	b = append(b, opI64LtU, opSelect, opLocalSet, growLocalK)
	b = append(b, opLocalGet, 0, opLocalGet, growLocalK, opI32Wrap, prefixFC, fcTableGrow)
	b = appendULEB(b, uint64(table))
	b = append(b, opI32Const, 0x7f, opI32Eq, opIf, blockTypeEmpty)
	b = minusOne(b)
	b = append(b, opEnd)
	b = append(b, opLocalGet, growLocalRem, opLocalGet, growLocalK, opI64Sub, opLocalSet, growLocalRem,
		opBr, 0, opEnd, opEnd)
	// The size before the growth.
	b = size(b)
	return append(b, opLocalGet, 1, opI32Sub)
}
