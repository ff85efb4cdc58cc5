package wasmbin

import (
	"errors"
	"fmt"
)

// helperKey identifies one injected grow helper: one per memory or table
// index that the module actually grows.
type helperKey struct {
	table bool
	index uint32
}

// rewriter replaces grow instructions in function bodies with calls to
// helpers whose function indices are allocated, in order of first use,
// after all existing functions, so no existing index shifts.
type rewriter struct {
	m         *module
	helpers   []helperKey
	funcIndex map[helperKey]uint32
	firstFunc uint32 // index of the first injected function
}

func newRewriter(m *module) *rewriter {
	return &rewriter{
		m:         m,
		funcIndex: map[helperKey]uint32{},
		firstFunc: uint32(m.info.ImportedFuncs) + m.funcs.count,
	}
}

// helper returns the function index of the helper for k, allocating it on
// first use.
func (rw *rewriter) helper(k helperKey, where string, at int) (uint32, error) {
	if idx, ok := rw.funcIndex[k]; ok {
		return idx, nil
	}
	if k.table && int64(k.index) >= int64(len(rw.m.tables)) {
		return 0, fmt.Errorf("wasmbin: %s: table.grow of undefined table %d at offset %d", where, k.index, at)
	}
	if !k.table && int64(k.index) >= int64(len(rw.m.memories)) {
		return 0, fmt.Errorf("wasmbin: %s: memory.grow of undefined memory %d at offset %d", where, k.index, at)
	}
	idx := rw.firstFunc + uint32(len(rw.helpers))
	rw.helpers = append(rw.helpers, k)
	rw.funcIndex[k] = idx
	return idx, nil
}

// rewriteCode returns the code section's rewritten bodies (without the
// count prefix), or nil if the module has no code section.
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
		newBody, err := rw.rewriteBody(body, base, fmt.Sprintf("function %d", funcIdx))
		if err != nil {
			return nil, err
		}
		out = appendULEB(out, uint64(len(newBody)))
		out = append(out, newBody...)
	}
	if !r.eof() {
		return nil, fmt.Errorf("wasmbin: code section: %s", r.errorf("%d trailing bytes", len(r.buf)-r.pos))
	}
	return out, nil
}

// rewriteBody copies the local declarations and walks every instruction of
// one body, splicing calls to helpers over grow instructions. Structured
// control flow has no byte offsets, so changing instruction lengths is safe.
func (rw *rewriter) rewriteBody(body []byte, base int, where string) ([]byte, error) {
	r := newReader(body, base)
	if err := skipLocals(r); err != nil {
		return nil, fmt.Errorf("wasmbin: %s locals: %w", where, err)
	}
	d := &decoder{r: r, where: where}
	var out []byte // nil until the first rewrite
	copied := 0
	depth := 0
walk:
	for {
		at := r.pos
		in, err := d.next()
		if err != nil {
			return nil, wrapDecodeError(where, err)
		}
		switch in.kind {
		case kindBlockStart:
			depth++
		case kindEnd:
			if depth == 0 {
				break walk // end of the function's expression
			}
			depth--
		case kindMemoryGrow, kindTableGrow:
			idx, err := rw.helper(helperKey{table: in.kind == kindTableGrow, index: in.index}, where, base+at)
			if err != nil {
				return nil, err
			}
			out = append(out, body[copied:at]...)
			out = append(out, opCall)
			out = appendULEB(out, uint64(idx))
			copied = r.pos
		}
	}
	if !r.eof() {
		return nil, fmt.Errorf("wasmbin: %s: %d bytes after the final end at offset %d", where, len(body)-r.pos, r.offset())
	}
	if out == nil {
		return body, nil
	}
	return append(out, body[copied:]...), nil
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
