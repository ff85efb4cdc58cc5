package wasmbin

import (
	"errors"
	"fmt"
)

// helperOp is what an injected helper does.
type helperOp int

const (
	opGrowMemory helperOp = iota
	opGrowTable
	opFillMemory // bulk operations from here on (see isBulk)
	opCopyMemory
	opInitMemory
	opFillTable
	opCopyTable
	opInitTable
)

// helperOps maps the instructions the rewriter replaces to their helpers.
var helperOps = map[instrKind]helperOp{
	kindMemoryGrow: opGrowMemory, kindTableGrow: opGrowTable,
	kindMemoryFill: opFillMemory, kindMemoryCopy: opCopyMemory, kindMemoryInit: opInitMemory,
	kindTableFill: opFillTable, kindTableCopy: opCopyTable, kindTableInit: opInitTable,
}

// helperKey identifies one injected helper: one per operation and
// immediates (memory, table, segment) that the module actually uses.
type helperKey struct {
	op   helperOp
	a, b uint32 // the instruction's immediates, in encoding order
}

// rewriter replaces grow instructions in function bodies with calls to
// helpers whose function indices are allocated, in order of first use,
// after all existing functions, so no existing index shifts.
type rewriter struct {
	m         *module
	helpers   []helperKey
	funcIndex map[helperKey]uint32
	firstFunc uint32 // index of the first injected function
	offsets   OffsetMap

	bulkHelpers int // helpers of bulk operations, at most MaxBulkHelpers
}

func newRewriter(m *module) *rewriter {
	return &rewriter{
		m:         m,
		funcIndex: map[helperKey]uint32{},
		firstFunc: uint32(m.info.ImportedFuncs) + m.funcs.count,
	}
}

// MaxBulkHelpers bounds the distinct bulk operations (operation, memory or
// table, and segment: one helper each) a module may use. Each helper is a
// function of 100-300 bytes, while the instruction that needs it can be 10
// bytes of input: 20,000 memory.init of distinct segments, a 263 KB
// module, became 3 MB whose compile took 17 times as long as the module's
// own (12 s against 0.7 s), and the 64 MiB input limit would have allowed
// millions. Toolchains use a handful (passive segments come with shared
// memory, which the engine refuses); 1,024 helpers, 150 KB of code,
// compile in about 0.4 s. Grow helpers need no bound: there is at most
// one per memory and table.
const MaxBulkHelpers = 1024

// helper returns the function index of the helper for k, allocating it on
// first use. The decoder has checked k's immediates against the module's
// index spaces.
func (rw *rewriter) helper(k helperKey) (uint32, error) {
	if idx, ok := rw.funcIndex[k]; ok {
		return idx, nil
	}
	if k.op.isBulk() {
		if rw.bulkHelpers == MaxBulkHelpers {
			return 0, fmt.Errorf("wasmbin: the module uses more than %d distinct bulk operations (each combination of operation, memory or table, and segment needs a helper function of its own)", MaxBulkHelpers)
		}
		rw.bulkHelpers++
	}
	idx := rw.firstFunc + uint32(len(rw.helpers))
	rw.helpers = append(rw.helpers, k)
	rw.funcIndex[k] = idx
	return idx, nil
}

// rewriteCode returns the code section's rewritten bodies (without the
// count prefix), or nil if the module has no code section, and records in
// rw.offsets where each original byte went (offsets relative to the start
// of the returned bytes; assemble shifts them into place).
func (rw *rewriter) rewriteCode() ([]byte, error) {
	if rw.m.code == nil {
		return nil, nil
	}
	r := newReader(rw.m.code.payload, rw.m.code.offset)
	n, err := r.count("function body", 1)
	if err != nil {
		return nil, fmt.Errorf("wasmbin: code section: %w", err)
	}
	out := make([]byte, 0, len(r.buf)+16)
	for i := range n {
		funcIdx := uint64(rw.m.info.ImportedFuncs) + uint64(i)
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("wasmbin: code section: function %d: %w", funcIdx, err)
		}
		base := r.offset()
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, fmt.Errorf("wasmbin: code section: function %d: %w", funcIdx, err)
		}
		newBody, splices, err := rw.rewriteBody(body, base, fmt.Sprintf("function %d", funcIdx))
		if err != nil {
			return nil, err
		}
		out = appendULEB(out, uint64(len(newBody)))
		start := len(out)
		rw.offsets.add(start, base)
		for _, sp := range splices {
			rw.offsets.add(start+sp.new, sp.orig)
		}
		out = append(out, newBody...)
	}
	rw.offsets.end = len(out)
	if !r.eof() {
		return nil, fmt.Errorf("wasmbin: code section: %s", r.errorf("%d trailing bytes", len(r.buf)-r.pos))
	}
	return out, nil
}

// rewriteBody copies the local declarations and walks every instruction of
// one body, splicing calls to helpers over grow and bulk instructions.
// Structured control flow has no byte offsets, so changing instruction
// lengths is safe. It returns, per splice, the anchors of the offset map:
// body-relative new offsets and absolute original offsets, where each call
// starts (it stands for the instruction it replaced) and where the copied
// bytes after it resume.
func (rw *rewriter) rewriteBody(body []byte, base int, where string) ([]byte, []offsetAnchor, error) {
	r := newReader(body, base)
	if err := skipLocals(r); err != nil {
		return nil, nil, fmt.Errorf("wasmbin: %s locals: %w", where, err)
	}
	var splices []offsetAnchor
	d := &decoder{r: r, where: where, space: &rw.m.space}
	var out []byte // nil until the first rewrite
	copied := 0
	depth := 0
walk:
	for {
		at := r.pos
		in, err := d.next()
		if err != nil {
			return nil, nil, wrapDecodeError(where, err)
		}
		switch in.kind {
		case kindBlockStart:
			depth++
		case kindEnd:
			if depth == 0 {
				break walk // end of the function's expression
			}
			depth--
		case kindMemoryGrow, kindTableGrow, kindMemoryFill, kindMemoryCopy, kindMemoryInit,
			kindTableFill, kindTableCopy, kindTableInit:
			idx, err := rw.helper(helperKey{op: helperOps[in.kind], a: in.index, b: in.index2})
			if err != nil {
				return nil, nil, err
			}
			out = append(out, body[copied:at]...)
			splices = append(splices, offsetAnchor{len(out), base + at})
			out = append(out, opCall)
			out = appendULEB(out, uint64(idx))
			copied = r.pos
			splices = append(splices, offsetAnchor{len(out), base + copied})
		}
	}
	if !r.eof() {
		return nil, nil, fmt.Errorf("wasmbin: %s: %d bytes after the final end at offset %d", where, len(body)-r.pos, r.offset())
	}
	if out == nil {
		return body, nil, nil
	}
	out = append(out, body[copied:]...)
	if len(out) > maxWasmFuncSize {
		return nil, nil, fmt.Errorf("wasmbin: %s is %d bytes after sandboxd's rewrite (calls replace grow and bulk instructions); wasmtime allows at most %d", where, len(out), maxWasmFuncSize)
	}
	return out, splices, nil
}

// skipLocals consumes the local declarations at the start of a body.
func skipLocals(r *reader) error {
	n, err := r.count("local declaration", 2)
	if err != nil {
		return err
	}
	for range n {
		if _, err := r.u32(); err != nil {
			return err
		}
		at := r.offset()
		vt, err := r.readByte()
		if err != nil {
			return err
		}
		if !isValType(vt) {
			return fmt.Errorf("offset %d: unsupported local type 0x%02x", at, vt)
		}
	}
	return nil
}

// wrapDecodeError adds the function to decoder errors that do not already
// name it.
func wrapDecodeError(where string, err error) error {
	var unsupported *UnsupportedOpcodeError
	if errors.As(err, &unsupported) {
		return fmt.Errorf("wasmbin: %w", err)
	}
	return fmt.Errorf("wasmbin: %s: %w", where, err)
}
