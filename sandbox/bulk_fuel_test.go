package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestBulkFuelIsProportional pins what a bulk operation costs: a fixed
// amount per call plus a fixed amount per chunk of 1 KiB of memory or 128
// table elements (the rate docs/protocol.md states), where it used to cost
// one unit whatever its length.
func TestBulkFuelIsProportional(t *testing.T) {
	e := engine(t)
	cases := []struct {
		name, instr    string
		chunk          int
		base, perChunk uint64
	}{
		{"memory.fill", "(memory.fill (i32.const 0) (i32.const 1) (i32.const %d))", 1024, 24, 25},
		{"memory.copy forward", "(memory.copy (i32.const 0) (i32.const 1) (i32.const %d))", 1024, 40, 30},
		{"memory.copy backward", "(memory.copy (i32.const 1) (i32.const 0) (i32.const %d))", 1024, 40, 26},
		{"memory.init", "(memory.init $d (i32.const 0) (i32.const 0) (i32.const %d))", 1024, 40, 30},
		{"table.fill", "(table.fill $t (i32.const 0) (ref.null func) (i32.const %d))", 128, 22, 25},
		{"table.copy", "(table.copy $t $t (i32.const 0) (i32.const 1) (i32.const %d))", 128, 36, 30},
		{"table.init", "(table.init $t $e (i32.const 0) (i32.const 0) (i32.const %d))", 128, 38, 30},
	}
	elems := strings.Repeat("$f ", 16*128)
	data := strings.Repeat("a", 16*1024)
	for _, tc := range cases {
		fuel := func(chunks int) uint64 {
			wat := fmt.Sprintf(`(module (memory 1) (table $t 4096 funcref) (func $f)
			  (data $d "%s") (elem $e func %s)
			  (func (export "run") `+tc.instr+`))`, data, elems, chunks*tc.chunk)
			m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.Run(context.Background(), sandbox.Request{Module: m, Function: "run", Limits: limits.Defaults()})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			return res.FuelConsumed
		}
		for _, chunks := range []int{0, 4, 16} {
			if got, want := fuel(chunks), tc.base+uint64(chunks)*tc.perChunk; got != want {
				t.Errorf("%s of %d chunks: fuel %d, want %d + %d × %d = %d", tc.name, chunks, got, tc.base, chunks, tc.perChunk, want)
			}
		}
	}
}
