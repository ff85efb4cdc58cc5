package wasmbin

import (
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// fuzzSeedWATs are modules covering every section kind and instruction
// family; the last one is also used by TestTruncatedInputs.
var fuzzSeedWATs = []string{
	`(module)`,
	growWAT,
	`(module (memory 1) (memory $b i64 1) (table 1 externref)
	  (func (export "g") (param i32) (result i32)
	    (drop (memory.grow $b (i64.const 1)))
	    (drop (table.grow (ref.null extern) (i32.const 1)))
	    (memory.grow (local.get 0))))`,
	`(module (type $p (func (result i32 i32)))
	  (import "e" "f" (func $f))
	  (import "e" "m" (memory 1))
	  (table 2 funcref) (memory 1) (global $g (mut i32) (i32.const 0))
	  (export "x" (func $s))
	  (elem (i32.const 0) $s)
	  (data "xyz")
	  (func $s (local v128 i64)
	    (block (type $p) (i32.const 1) (i32.const 2))
	    (drop) (drop)
	    (local.set 0 (i8x16.shuffle 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 (v128.const i32x4 1 2 3 4) (local.get 0)))
	    (memory.init 1 0 (i32.const 0) (i32.const 0) (i32.const 1))
	    (drop (select (result i32) (i32.const 1) (memory.grow 1 (i32.const 1)) (i32.const 0)))
	    (drop (table.grow (ref.func $s) (i32.const 1))))
	  (start $s))`,
}

// FuzzInstrument checks that no input panics (Parse, ImportNames,
// Instrument), that output always parses again, and that whenever
// wasmtime accepts the input it also accepts the output.
func FuzzInstrument(f *testing.F) {
	for _, wat := range fuzzSeedWATs {
		wasm, err := wasmtime.Wat2Wasm(wat)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wasm)
	}
	engine := newTestEngine()
	f.Fuzz(func(t *testing.T, wasm []byte) {
		_, _ = Parse(wasm)
		_, _ = ImportNames(wasm, "e")
		out, info, err := Instrument(wasm)
		if err != nil {
			return
		}
		if info == nil {
			t.Fatal("nil Info without error")
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("output does not parse: %v", err)
		}
		if wasmtime.ModuleValidate(engine, wasm) == nil {
			if err := wasmtime.ModuleValidate(engine, out); err != nil {
				t.Fatalf("valid input became invalid: %v", err)
			}
		}
	})
}
