package wasmbin

import (
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// TestGrowsFlags: the host skips setting a cap that no code can reach, so
// the flags must be exact.
func TestGrowsFlags(t *testing.T) {
	cases := []struct {
		name              string
		wat               string
		growsMem, growsTb bool
	}{
		{"neither", `(module (memory 1) (func (export "run") (result i32) (memory.size)))`, false, false},
		{"memory", `(module (memory 1) (func (export "run") (result i32) (memory.grow (i32.const 1))))`, true, false},
		{"table", `(module (table 1 funcref) (func (export "run") (result i32) (table.grow (ref.null func) (i32.const 1))))`, false, true},
		{"both in start", `(module (memory 1) (table 1 funcref)
			(func $s (drop (memory.grow (i32.const 1))) (drop (table.grow (ref.null func) (i32.const 1)))) (start $s))`, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wasm, err := wasmtime.Wat2Wasm(tc.wat)
			if err != nil {
				t.Fatal(err)
			}
			_, info, err := Instrument(wasm)
			if err != nil {
				t.Fatal(err)
			}
			if info.GrowsMemory != tc.growsMem || info.GrowsTable != tc.growsTb {
				t.Errorf("GrowsMemory %v GrowsTable %v, want %v %v", info.GrowsMemory, info.GrowsTable, tc.growsMem, tc.growsTb)
			}
		})
	}
}
