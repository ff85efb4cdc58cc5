package wasmbin

import "testing"

// instrOffsets lists the absolute offset of every instruction of every
// original function body of wasm (helpers excluded), in order.
func instrOffsets(t *testing.T, wasm []byte, funcs int) [][]int {
	t.Helper()
	m, err := parseModule(wasm)
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(m.code.payload, m.code.offset)
	if _, err := r.u32(); err != nil {
		t.Fatal(err)
	}
	var out [][]int
	for range funcs {
		size, _ := r.u32()
		base := r.offset()
		body, err := r.bytes(uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		br := newReader(body, base)
		if err := skipLocals(br); err != nil {
			t.Fatal(err)
		}
		d := &decoder{r: br}
		var offs []int
		for !br.eof() {
			offs = append(offs, br.offset())
			if _, err := d.next(); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, offs)
	}
	return out
}

// TestOffsetMapFindsEveryInstruction: every instruction of the rewritten
// bodies maps back to the same instruction of the original, whether it is
// a call that replaced a grow or bulk operation, or code before or after
// one, in every function.
func TestOffsetMapFindsEveryInstruction(t *testing.T) {
	wasm := wat2wasm(t, `(module (memory 1) (table 2 funcref) (global (mut i32) (i32.const 0))
	  (func (export "a") (param i32) (result i32) (i32.div_s (i32.const 1) (local.get 0)))
	  (func (export "b") (param i32) (result i32)
	    (drop (memory.grow (local.get 0)))
	    (memory.fill (i32.const 0) (i32.const 1) (local.get 0))
	    (memory.copy (i32.const 0) (i32.const 1) (local.get 0))
	    (table.fill (i32.const 0) (ref.null func) (local.get 0))
	    (i32.load (local.get 0)))
	  (func (export "c") (result i32) (global.get 0)))`)
	out, info, err := Instrument(wasm)
	if err != nil {
		t.Fatal(err)
	}
	orig, rewritten := instrOffsets(t, wasm, 3), instrOffsets(t, out, 3)
	for f := range orig {
		if len(orig[f]) != len(rewritten[f]) {
			t.Fatalf("function %d: %d instructions, rewritten %d", f, len(orig[f]), len(rewritten[f]))
		}
		for i, newOff := range rewritten[f] {
			got, ok := info.Offsets.Original(newOff)
			if !ok || got != orig[f][i] {
				t.Errorf("function %d instruction %d: rewritten offset %d maps to %d (%v), want %d", f, i, newOff, got, ok, orig[f][i])
			}
		}
	}
	if _, ok := info.Offsets.Original(len(out) - 1); ok {
		t.Error("an offset inside an injected helper maps into the original")
	}
	if _, ok := info.Offsets.Original(3); ok {
		t.Error("an offset before the code section maps into the original")
	}
}
