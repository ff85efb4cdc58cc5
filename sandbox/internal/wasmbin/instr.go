package wasmbin

import "fmt"

// Opcode prefixes and the few opcodes the rewriter treats specially.
const (
	opBlock      = 0x02
	opLoop       = 0x03
	opIf         = 0x04
	opEnd        = 0x0b
	opCall       = 0x10
	opTryTable   = 0x1f
	opMemorySize = 0x3f
	opMemoryGrow = 0x40
	prefixFC     = 0xfc
	prefixFD     = 0xfd
	prefixFE     = 0xfe

	fcMemoryInit = 8
	fcMemoryCopy = 10
	fcMemoryFill = 11
	fcTableInit  = 12
	fcTableCopy  = 14
	fcTableGrow  = 15
	fcTableSize  = 16
	fcTableFill  = 17
)

// Value types the decoder accepts. Anything else (typed function
// references, GC types) is outside the feature set sandboxd enables, so it
// is rejected rather than guessed at.
const (
	valI32     = 0x7f
	valI64     = 0x7e
	valF32     = 0x7d
	valF64     = 0x7c
	valV128    = 0x7b
	valFuncref = 0x70
	valExtern  = 0x6f
	valExnref  = 0x69
)

func isValType(b byte) bool {
	switch b {
	case valI32, valI64, valF32, valF64, valV128, valFuncref, valExtern, valExnref:
		return true
	}
	return false
}

func isRefType(b byte) bool {
	return b == valFuncref || b == valExtern || b == valExnref
}

// instrKind classifies a decoded instruction for the code walker: only
// structure (to find the end of a body) and the two grow instructions
// matter; everything else is copied through byte for byte.
type instrKind int

const (
	kindPlain instrKind = iota
	kindBlockStart
	kindEnd
	kindMemoryGrow
	kindTableGrow
	kindMemoryInit // index: data segment, index2: memory
	kindMemoryCopy // index: destination memory, index2: source memory
	kindMemoryFill // index: memory
	kindTableInit  // index: element segment, index2: table
	kindTableCopy  // index: destination table, index2: source table
	kindTableFill  // index: table
	kindTableSet   // index: table (pre-initialisation refuses it, preinit.go)
	kindDataDrop   // index: data segment
	kindElemDrop   // index: element segment
)

// instr is one decoded instruction; index (and index2) are the immediates
// of a grow or bulk instruction, in encoding order.
type instr struct {
	kind          instrKind
	index, index2 uint32
}

// UnsupportedOpcodeError reports an opcode outside the feature set the
// decoder knows. The sandbox refuses such modules instead of guessing at
// immediates, because a wrong guess would let a memory.grow slip through
// uninstrumented.
type UnsupportedOpcodeError struct {
	Opcode string // e.g. "0x06" or "0xfc 0x13"
	Where  string // e.g. "function 12" or "global 3 initializer"
	Offset int    // absolute offset of the opcode in the module
}

func (e *UnsupportedOpcodeError) Error() string {
	return fmt.Sprintf("unsupported opcode %s in %s at offset %d", e.Opcode, e.Where, e.Offset)
}

// decoder walks instructions of one function body or constant expression.
// Every index an instruction names is checked against space, so no
// instruction can reach a function, global, type, memory or table that the
// rewriter injects after the module's own (the injected ones sit right past
// the module's counts). A nil space checks nothing (tests that only count
// instructions).
type decoder struct {
	r     *reader
	where string
	space *indexSpace
}

// index reads an index immediate of the given kind and checks it.
func (d *decoder) index(k idxKind) error {
	_, err := d.indexOf(k)
	return err
}

func (d *decoder) indexOf(k idxKind) (uint32, error) {
	at := d.r.offset()
	v, err := d.r.u32()
	if err != nil {
		return 0, err
	}
	return v, d.space.check(k, uint64(v), at)
}

// pair reads two index immediates of a bulk instruction.
func (d *decoder) pair(kind instrKind, k1, k2 idxKind) (instr, error) {
	a, err := d.indexOf(k1)
	if err != nil {
		return instr{}, err
	}
	b, err := d.indexOf(k2)
	return instr{kind: kind, index: a, index2: b}, err
}

func (d *decoder) unsupported(opcode string, at int) error {
	return &UnsupportedOpcodeError{Opcode: opcode, Where: d.where, Offset: at}
}

// next decodes one instruction, consuming its immediates.
func (d *decoder) next() (instr, error) {
	r := d.r
	at := r.offset()
	op, err := r.readByte()
	if err != nil {
		return instr{}, err
	}
	switch {
	case op <= 0x01, op == 0x05, op == 0x0f, op == 0x1a, op == 0x1b, op >= 0x45 && op <= 0xc4:
		// unreachable, nop, else, return, drop, select, numeric and
		// sign-extension ops: no immediates.
		return instr{}, nil
	case op == opBlock, op == opLoop, op == opIf:
		return instr{kind: kindBlockStart}, d.blockType()
	case op == opEnd:
		return instr{kind: kindEnd}, nil
	case op == 0x08: // throw tagidx
		err = d.index(idxTag)
	case op == 0x0a: // throw_ref
	case op == 0x0c, op == 0x0d: // br, br_if labelidx
		_, err = r.u32()
	case op == 0x0e: // br_table vec(labelidx) labelidx
		err = d.brTable()
	case op == opCall, op == 0x12: // call, return_call funcidx
		err = d.index(idxFunc)
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect typeidx tableidx
		if err = d.index(idxType); err == nil {
			err = d.index(idxTable)
		}
	case op == 0x1c: // typed select vec(valtype)
		err = d.valTypes()
	case op == opTryTable:
		return instr{kind: kindBlockStart}, d.tryTable()
	case op >= 0x20 && op <= 0x22: // local.get, local.set, local.tee
		_, err = r.u32()
	case op == opGlobalGet, op == opGlobalSet:
		err = d.index(idxGlobal)
	case op == 0x25: // table.get
		err = d.index(idxTable)
	case op == 0x26: // table.set
		idx, err := d.indexOf(idxTable)
		return instr{kind: kindTableSet, index: idx}, err
	case op >= 0x28 && op <= 0x3e: // loads and stores
		err = d.memarg()
	case op == opMemorySize:
		err = d.index(idxMemory)
	case op == opMemoryGrow:
		idx, err := d.indexOf(idxMemory)
		return instr{kind: kindMemoryGrow, index: idx}, err
	case op == 0x41:
		_, err = r.sleb(32)
	case op == 0x42:
		_, err = r.sleb(64)
	case op == 0x43:
		err = r.skip(4)
	case op == 0x44:
		err = r.skip(8)
	case op == 0xd0: // ref.null heaptype
		err = d.refType()
	case op == 0xd1: // ref.is_null
	case op == 0xd2: // ref.func funcidx
		err = d.index(idxFunc)
	case op == prefixFC:
		return d.prefixFC(at)
	case op == prefixFD:
		return instr{}, d.prefixFD(at)
	case op == prefixFE:
		return instr{}, d.prefixFE(at)
	default:
		return instr{}, d.unsupported(fmt.Sprintf("0x%02x", op), at)
	}
	return instr{}, err
}

func (d *decoder) u32s(n int) error {
	for range n {
		if _, err := d.r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// blockType decodes the empty type 0x40, a single value type, or a
// non-negative s33 type index (multi-value).
func (d *decoder) blockType() error {
	r := d.r
	if r.eof() {
		_, err := r.readByte()
		return err
	}
	b := r.buf[r.pos]
	if b == 0x40 || isValType(b) {
		r.pos++
		return nil
	}
	at := r.offset()
	v, err := r.sleb(33)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("offset %d: invalid block type 0x%02x", at, b)
	}
	return d.space.check(idxType, uint64(v), at)
}

func (d *decoder) brTable() error {
	n, err := d.r.count("br_table label", 1)
	if err != nil {
		return err
	}
	return d.u32s(int(n) + 1)
}

func (d *decoder) valTypes() error {
	n, err := d.r.count("select type", 1)
	if err != nil {
		return err
	}
	for range n {
		at := d.r.offset()
		b, err := d.r.readByte()
		if err != nil {
			return err
		}
		if !isValType(b) {
			return fmt.Errorf("offset %d: unsupported value type 0x%02x", at, b)
		}
	}
	return nil
}

func (d *decoder) refType() error {
	at := d.r.offset()
	b, err := d.r.readByte()
	if err != nil {
		return err
	}
	if !isRefType(b) {
		return fmt.Errorf("offset %d: unsupported reference type 0x%02x", at, b)
	}
	return nil
}

// tryTable decodes try_table: a block type and a vector of catch clauses
// (exception handling).
func (d *decoder) tryTable() error {
	if err := d.blockType(); err != nil {
		return err
	}
	n, err := d.r.count("catch clause", 2)
	if err != nil {
		return err
	}
	for range n {
		at := d.r.offset()
		kind, err := d.r.readByte()
		if err != nil {
			return err
		}
		switch kind {
		case 0x00, 0x01: // catch, catch_ref: tagidx labelidx
			if err = d.index(idxTag); err == nil {
				_, err = d.r.u32()
			}
		case 0x02, 0x03: // catch_all, catch_all_ref: labelidx
			_, err = d.r.u32()
		default:
			return fmt.Errorf("offset %d: invalid catch kind 0x%02x", at, kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// memarg decodes alignment, the optional memory index (multi-memory sets bit
// 6 of the alignment field) and the offset (u64 for memory64).
func (d *decoder) memarg() error {
	at := d.r.offset()
	align, err := d.r.u32()
	if err != nil {
		return err
	}
	mem := uint32(0)
	if align&0x40 != 0 {
		if mem, err = d.r.u32(); err != nil {
			return err
		}
		align &^= 0x40
	}
	if err := d.space.check(idxMemory, uint64(mem), at); err != nil {
		return err
	}
	if align >= 0x40 {
		return fmt.Errorf("offset %d: invalid memarg alignment %d", at, align)
	}
	_, err = d.r.u64()
	return err
}

// prefixFC decodes saturating truncation and bulk memory / table ops.
func (d *decoder) prefixFC(at int) (instr, error) {
	r := d.r
	sub, err := r.u32()
	if err != nil {
		return instr{}, err
	}
	switch {
	case sub <= 7: // i32.trunc_sat_f32_s ... i64.trunc_sat_f64_u
	case sub == fcMemoryInit: // memory.init dataidx memidx
		return d.pair(kindMemoryInit, idxData, idxMemory)
	case sub == 9: // data.drop dataidx
		idx, err := d.indexOf(idxData)
		return instr{kind: kindDataDrop, index: idx}, err
	case sub == fcMemoryCopy: // memory.copy memidx memidx
		return d.pair(kindMemoryCopy, idxMemory, idxMemory)
	case sub == fcMemoryFill: // memory.fill memidx
		idx, err := d.indexOf(idxMemory)
		return instr{kind: kindMemoryFill, index: idx}, err
	case sub == fcTableInit: // table.init elemidx tableidx
		return d.pair(kindTableInit, idxElem, idxTable)
	case sub == 13: // elem.drop elemidx
		idx, err := d.indexOf(idxElem)
		return instr{kind: kindElemDrop, index: idx}, err
	case sub == fcTableCopy: // table.copy tableidx tableidx
		return d.pair(kindTableCopy, idxTable, idxTable)
	case sub == fcTableGrow:
		idx, err := d.indexOf(idxTable)
		return instr{kind: kindTableGrow, index: idx}, err
	case sub == fcTableSize:
		err = d.index(idxTable)
	case sub == fcTableFill:
		idx, err := d.indexOf(idxTable)
		return instr{kind: kindTableFill, index: idx}, err
	default:
		return instr{}, d.unsupported(fmt.Sprintf("0xfc %d", sub), at)
	}
	return instr{}, err
}

// prefixFD decodes SIMD and relaxed SIMD ops.
func (d *decoder) prefixFD(at int) error {
	r := d.r
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11, sub == 92, sub == 93: // v128 loads and stores
		return d.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 21 && sub <= 34: // extract_lane / replace_lane
		return r.skip(1)
	case sub >= 84 && sub <= 91: // load_lane / store_lane
		if err := d.memarg(); err != nil {
			return err
		}
		return r.skip(1)
	case sub <= 255: // remaining SIMD ops have no immediates
		return nil
	case sub >= 0x100 && sub <= 0x113: // relaxed SIMD
		return nil
	}
	return d.unsupported(fmt.Sprintf("0xfd %d", sub), at)
}

// prefixFE decodes the threads proposal's atomic ops, which shared
// memories imply.
func (d *decoder) prefixFE(at int) error {
	r := d.r
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 2, sub >= 0x10 && sub <= 0x4e: // notify, wait, atomic loads/stores/rmw
		return d.memarg()
	case sub == 3: // atomic.fence has a single reserved zero byte
		b, err := r.readByte()
		if err == nil && b != 0 {
			err = fmt.Errorf("offset %d: atomic.fence flags 0x%02x", r.offset()-1, b)
		}
		return err
	}
	return d.unsupported(fmt.Sprintf("0xfe %d", sub), at)
}

// constExpr decodes a constant expression up to and including its final
// end, rejecting grow instructions and blocks, which are never constant.
func (d *decoder) constExpr() error {
	for {
		at := d.r.offset()
		in, err := d.next()
		if err != nil {
			return err
		}
		switch in.kind {
		case kindEnd:
			return nil
		case kindPlain:
		default:
			return fmt.Errorf("offset %d: non-constant instruction", at)
		}
	}
}
