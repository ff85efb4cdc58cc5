package wasmbin

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// TestBulkOn64BitMemory: the helpers widen every operand to i64, so a
// memory64 fill or copy works across chunks, and an end that wraps 2^64
// traps like the original instead of wrapping to a small in-bounds range.
// (sandboxd's own engine turns memory64 off; the rewriter still handles it.)
func TestBulkOn64BitMemory(t *testing.T) {
	s := instantiate(t, `(module (memory $m i64 1) (memory $n 1)
	  (func (export "fill") (param i64 i32 i64) (memory.fill $m (local.get 0) (local.get 1) (local.get 2)))
	  (func (export "copy") (param i64 i64 i64) (memory.copy $m $m (local.get 0) (local.get 1) (local.get 2)))
	  (func (export "copy32") (param i32 i64 i32) (memory.copy $n $m (local.get 0) (local.get 1) (local.get 2)))
	  (func (export "at") (param i64) (result i32) (i32.load8_u $m (local.get 0)))
	  (func (export "at32") (param i32) (result i32) (i32.load8_u $n (local.get 0))))`)
	s.run([]step{
		{"fill", []any{int64(10), int32(7), int64(3000)}, 0},
		{"at", []any{int64(9)}, 0}, {"at", []any{int64(10)}, 7}, {"at", []any{int64(3009)}, 7}, {"at", []any{int64(3010)}, 0},
		{"copy", []any{int64(20), int64(10), int64(3000)}, 0}, // overlapping, upwards: backwards
		{"at", []any{int64(3019)}, 7}, {"at", []any{int64(3020)}, 0},
		{"copy32", []any{int32(1), int64(3015), int32(10)}, 0},
		{"at32", []any{int32(5)}, 7}, {"at32", []any{int32(6)}, 0},
	})
	for _, args := range [][]any{
		{int64(-1), int32(1), int64(2)},    // end wraps 2^64
		{int64(65535), int32(1), int64(2)}, // one byte past the end
	} {
		_, err := s.export("fill").Func().Call(s.store, args...)
		var trap *wasmtime.Trap
		if !errors.As(err, &trap) || trap.Code() == nil || *trap.Code() != wasmtime.MemoryOutOfBounds {
			t.Errorf("fill%v: want an out-of-bounds trap, got %v", args, err)
		}
	}
	if got := s.call("at", int64(65535)); got != 0 {
		t.Errorf("a trapping fill wrote byte 65535: %d", got)
	}
}

// TestBulkHelpersAreBounded: one helper per distinct bulk operation, at
// most MaxBulkHelpers; the next distinct one refuses the module, however
// often the ones already seen repeat.
func TestBulkHelpersAreBounded(t *testing.T) {
	module := func(segments int) []byte {
		var b strings.Builder
		b.WriteString("(module (memory 1)\n")
		for i := range segments {
			fmt.Fprintf(&b, "(data $d%d \"\")\n", i)
		}
		b.WriteString("(func (export \"run\")\n")
		for i := range segments {
			fmt.Fprintf(&b, "(memory.init $d%d (i32.const 0) (i32.const 0) (i32.const 0))\n", i)
			b.WriteString("(memory.fill (i32.const 0) (i32.const 0) (i32.const 0))\n")
		}
		b.WriteString("))")
		return wat2wasm(t, b.String())
	}
	// MaxBulkHelpers-1 init helpers and one fill helper.
	if _, _, err := Instrument(module(MaxBulkHelpers - 1)); err != nil {
		t.Fatalf("%d distinct bulk operations: %v", MaxBulkHelpers, err)
	}
	_, _, err := Instrument(module(MaxBulkHelpers))
	if err == nil || !strings.Contains(err.Error(), "more than 1024 distinct bulk operations") {
		t.Fatalf("%d distinct bulk operations: err %v, want the bound", MaxBulkHelpers+1, err)
	}
}
