package wasmbin

// Bulk operations (memory.fill/copy/init, table.fill/copy/init) run inside
// wasmtime as one libcall: wasmtime charges one unit of fuel for the whole
// instruction and checks the epoch only at function entry and loop
// headers, so one memory.fill of 16 MiB, repeated in straight-line code,
// escapes the deadline, cancellation and fuel. The rewriter therefore
// replaces each bulk instruction with a call of an injected helper that
// does the same work in chunks inside a wasm loop, where wasmtime's own
// fuel metering and epoch checks apply: a run is interruptible between any
// two chunks and pays fuel per chunk.
//
// Semantics are the instruction's, exactly:
//   - bounds first: when the whole range is out of bounds the helper
//     executes the original instruction with the original operands, which
//     traps with wasmtime's own trap code before writing anything;
//   - a segment's bounds (including a dropped segment's length 0) are
//     checked by the same instruction with a length of 0 at the end of the
//     source range, which traps exactly when the full one would;
//   - memory.copy and table.copy within one memory or table copy backwards
//     (last chunk first) when the destination lies above the source, so
//     overlapping ranges come out as if copied through a buffer; each chunk
//     is itself a memmove.

// Chunk sizes: at most memChunkBytes bytes or tableChunkElems elements per
// loop iteration. One iteration costs about 30 fuel (FuelPerChunk, the
// exact figure is pinned by TestBulkFuelPerChunk), so bulk memory costs
// about 30 fuel per KiB and tables about 30 fuel per 128 elements (1 KiB
// of funcref storage), and no iteration runs longer than a memset of 1 KiB
// between two epoch checks.
const (
	memChunkBytes   = 1024
	tableChunkElems = 128
)

// More opcodes used by the bulk helpers.
const (
	opBr       = 0x0c
	opBrIf     = 0x0d
	opElse     = 0x05
	opSelect   = 0x1b
	opI64Eqz   = 0x50
	opI32Or    = 0x72
	opI64Sub   = 0x7d
	opI64Shl   = 0x86
	opI32Wrap  = 0xa7
	pageShift  = 16
	bulkLocalD = 3 // i64 locals after the three parameters
	bulkLocalS = 4
	bulkLocalN = 5
	bulkLocalK = 6
)

// isBulk says whether op is one of the six bulk operations.
func (op helperOp) isBulk() bool { return op >= opFillMemory }

// onTable says whether the helper's destination (and source) are tables.
func (op helperOp) onTable() bool {
	return op == opGrowTable || op == opFillTable || op == opCopyTable || op == opInitTable
}

// bulkShape describes one bulk helper: the index type of each operand and
// what the destination and source are.
type bulkShape struct {
	op           helperOp
	dst          uint32 // memory or table index
	src          uint32 // source memory/table (copy) or segment (init)
	dstT, srcT   byte   // index types of the destination and source operands
	lenT         byte   // type of the length operand
	secondT      byte   // type of the second parameter (fill: the value)
	dst64, src64 bool
	chunk        int64
}

func (g *helperGen) bulkShape(k helperKey) bulkShape {
	s := bulkShape{op: k.op, chunk: memChunkBytes}
	if k.op.onTable() {
		s.chunk = tableChunkElems
	}
	is64 := func(table bool, i uint32) bool {
		if table {
			return g.m.tables[i].Table64
		}
		return g.m.memories[i].Memory64
	}
	tbl := k.op.onTable()
	switch k.op {
	case opFillMemory, opFillTable:
		s.dst = k.a
		s.dst64 = is64(tbl, s.dst)
		s.dstT = indexTypeOf(s.dst64)
		s.lenT = s.dstT
		s.secondT = valI32
		if tbl {
			s.secondT = g.m.tables[s.dst].ElemType
		}
	case opCopyMemory, opCopyTable:
		s.dst, s.src = k.a, k.b
		s.dst64, s.src64 = is64(tbl, s.dst), is64(tbl, s.src)
		s.dstT, s.srcT = indexTypeOf(s.dst64), indexTypeOf(s.src64)
		s.lenT = indexTypeOf(s.dst64 && s.src64)
		s.secondT = s.srcT
	case opInitMemory, opInitTable:
		s.src, s.dst = k.a, k.b // encoding order: segment, then memory/table
		s.dst64 = is64(tbl, s.dst)
		s.dstT = indexTypeOf(s.dst64)
		s.srcT, s.lenT, s.secondT = valI32, valI32, valI32
	}
	return s
}

func (s bulkShape) signature() []byte {
	return []byte{0x60, 3, s.dstT, s.secondT, s.lenT, 0}
}

// instr appends the original instruction with its immediates.
func (s bulkShape) instr(b []byte) []byte {
	switch s.op {
	case opFillMemory:
		b = append(b, prefixFC, fcMemoryFill)
		return appendULEB(b, uint64(s.dst))
	case opFillTable:
		b = append(b, prefixFC, fcTableFill)
		return appendULEB(b, uint64(s.dst))
	case opCopyMemory, opCopyTable:
		sub := byte(fcMemoryCopy)
		if s.op == opCopyTable {
			sub = fcTableCopy
		}
		b = append(b, prefixFC, sub)
		b = appendULEB(b, uint64(s.dst))
		return appendULEB(b, uint64(s.src))
	default: // init: segment, then memory/table
		sub := byte(fcMemoryInit)
		if s.op == opInitTable {
			sub = fcTableInit
		}
		b = append(b, prefixFC, sub)
		b = appendULEB(b, uint64(s.src))
		return appendULEB(b, uint64(s.dst))
	}
}

// sizeOf appends the size of memory/table i in bytes/elements, as an i64.
func (s bulkShape) sizeOf(b []byte, i uint32, is64 bool) []byte {
	if s.op.onTable() {
		b = append(b, prefixFC, fcTableSize)
		b = appendULEB(b, uint64(i))
		return extendU(b, indexTypeOf(is64))
	}
	b = append(b, opMemorySize)
	b = appendULEB(b, uint64(i))
	b = extendU(b, indexTypeOf(is64))
	return append(b, opI64Const, pageShift, opI64Shl)
}

// outOfBounds appends an i32 that is 1 when base+N passes limit (an i64
// on the stack pushed by pushLimit) or, for 64-bit operands, wraps.
func outOfBounds(b []byte, base byte, is64 bool, pushLimit func([]byte) []byte) []byte {
	b = append(b, opLocalGet, base, opLocalGet, bulkLocalN, opI64Add)
	b = pushLimit(b)
	b = append(b, opI64GtU)
	if is64 {
		b = append(b, opLocalGet, base, opLocalGet, bulkLocalN, opI64Add, opLocalGet, base, opI64LtU, opI32Or)
	}
	return b
}

// wrapTo narrows an i64 on the stack to t.
func wrapTo(b []byte, t byte) []byte {
	if t == valI32 {
		return append(b, opI32Wrap)
	}
	return b
}

// bulkBody encodes a bulk helper.
func (g *helperGen) bulkBody(k helperKey) []byte {
	s := g.bulkShape(k)
	b := []byte{1, 4, valI64} // four i64 locals: D, S, N, K
	b = append(b, opLocalGet, 0)
	b = extendU(b, s.dstT)
	b = append(b, opLocalSet, bulkLocalD)
	hasSrc := s.op != opFillMemory && s.op != opFillTable
	if hasSrc {
		b = append(b, opLocalGet, 1)
		b = extendU(b, s.srcT)
		b = append(b, opLocalSet, bulkLocalS)
	}
	b = append(b, opLocalGet, 2)
	b = extendU(b, s.lenT)
	b = append(b, opLocalSet, bulkLocalN)

	// Out of bounds anywhere: the original instruction traps, writing nothing.
	b = outOfBounds(b, bulkLocalD, s.dst64, func(b []byte) []byte { return s.sizeOf(b, s.dst, s.dst64) })
	switch s.op {
	case opCopyMemory, opCopyTable:
		b = outOfBounds(b, bulkLocalS, s.src64, func(b []byte) []byte { return s.sizeOf(b, s.src, s.src64) })
		b = append(b, opI32Or)
	case opInitMemory, opInitTable:
		// A source end past 2^32 is past any segment.
		b = outOfBounds(b, bulkLocalS, false, func(b []byte) []byte { return appendSLEB(append(b, opI64Const), 0xFFFFFFFF) })
		b = append(b, opI32Or)
	}
	b = append(b, opIf, blockTypeEmpty, opLocalGet, 0, opLocalGet, 1, opLocalGet, 2)
	b = s.instr(b)
	b = append(b, opReturn, opEnd)
	if s.op == opInitMemory || s.op == opInitTable {
		// The segment's bounds: init of length 0 at the source end traps
		// exactly when the source range is past the (possibly dropped)
		// segment.
		if s.dst64 {
			b = append(b, opI64Const, 0)
		} else {
			b = append(b, opI32Const, 0)
		}
		b = append(b, opLocalGet, bulkLocalS, opLocalGet, bulkLocalN, opI64Add, opI32Wrap, opI32Const, 0)
		b = s.instr(b)
	}

	if (s.op == opCopyMemory || s.op == opCopyTable) && s.dst == s.src {
		b = append(b, opLocalGet, bulkLocalD, opLocalGet, bulkLocalS, opI64GtU, opIf, blockTypeEmpty)
		b = s.loop(b, true)
		b = append(b, opElse)
		b = s.loop(b, false)
		b = append(b, opEnd)
	} else {
		b = s.loop(b, false)
	}
	return append(b, opEnd)
}

// loop appends the chunked loop: forward (advancing D and S) or backward
// (taking the last chunk of the remaining range first).
func (s bulkShape) loop(b []byte, backward bool) []byte {
	b = append(b, opBlock, blockTypeEmpty, opLoop, blockTypeEmpty,
		opLocalGet, bulkLocalN, opI64Eqz, opBrIf, 1)
	// K = min(N, chunk)
	b = append(b, opLocalGet, bulkLocalN, opI64Const)
	b = appendSLEB(b, s.chunk)
	b = append(b, opLocalGet, bulkLocalN, opI64Const)
	b = appendSLEB(b, s.chunk)
	b = append(b, opI64LtU, opSelect, opLocalSet, bulkLocalK)
	hasSrc := s.op != opFillMemory && s.op != opFillTable
	if backward {
		b = append(b, opLocalGet, bulkLocalN, opLocalGet, bulkLocalK, opI64Sub, opLocalSet, bulkLocalN)
		b = append(b, opLocalGet, bulkLocalD, opLocalGet, bulkLocalN, opI64Add)
		b = wrapTo(b, s.dstT)
		b = append(b, opLocalGet, bulkLocalS, opLocalGet, bulkLocalN, opI64Add)
		b = wrapTo(b, s.srcT)
	} else {
		b = append(b, opLocalGet, bulkLocalD)
		b = wrapTo(b, s.dstT)
		if hasSrc {
			b = append(b, opLocalGet, bulkLocalS)
			b = wrapTo(b, s.srcT)
		} else {
			b = append(b, opLocalGet, 1) // the fill value
		}
	}
	b = append(b, opLocalGet, bulkLocalK)
	b = wrapTo(b, s.lenT)
	b = s.instr(b)
	if !backward {
		b = append(b, opLocalGet, bulkLocalD, opLocalGet, bulkLocalK, opI64Add, opLocalSet, bulkLocalD)
		if hasSrc {
			b = append(b, opLocalGet, bulkLocalS, opLocalGet, bulkLocalK, opI64Add, opLocalSet, bulkLocalS)
		}
		b = append(b, opLocalGet, bulkLocalN, opLocalGet, bulkLocalK, opI64Sub, opLocalSet, bulkLocalN)
	}
	return append(b, opBr, 0, opEnd, opEnd)
}
