package wasmbin

import (
	"errors"
	"testing"
)

// TestIndicesPastTheModuleAreRefused: every index a module names is checked
// against the module's own counts, because the rewriter's functions,
// globals and types sit right after them. WAT lets numeric indices through
// unchecked, which is how these modules are built.
func TestIndicesPastTheModuleAreRefused(t *testing.T) {
	tests := []struct {
		name, wat, kind string
	}{
		{"global.set of the cap", `(module (memory 1) (func (global.set 0 (i64.const 1)) (drop (memory.grow (i32.const 1)))))`, "global"},
		{"global.get of the denial", `(module (global i32 (i32.const 0)) (func (result i64) (global.get 2)))`, "global"},
		{"global initializer", `(module (global i64 (global.get 0)))`, "global"},
		{"call of a helper", `(module (memory 1) (func (drop (memory.grow (i32.const 1))) (call 1)))`, "function"},
		{"ref.func of a helper", `(module (func (drop (ref.func 3))))`, "function"},
		{"call_indirect type", `(module (table 1 funcref) (func (call_indirect (type 4) (i32.const 0))))`, "type"},
		{"block type", `(module (type (func)) (func (block (type 3))))`, "type"},
		{"load from memory 1", `(module (memory 1) (func (drop (i32.load 1 (i32.const 0)))))`, "memory"},
		{"store without memory", `(module (func (i32.store (i32.const 0) (i32.const 0))))`, "memory"},
		{"memory.fill of memory 2", `(module (memory 1) (func (memory.fill 2 (i32.const 0) (i32.const 0) (i32.const 0))))`, "memory"},
		{"table.fill of table 1", `(module (table 1 funcref) (func (table.fill 1 (i32.const 0) (ref.null func) (i32.const 0))))`, "table"},
		{"memory.init of data 1", `(module (memory 1) (data "x") (func (memory.init 1 (i32.const 0) (i32.const 0) (i32.const 0))))`, "data segment"},
		{"elem.drop of segment 0", `(module (func (elem.drop 0)))`, "element segment"},
		{"export of an injected global", `(module (export "g" (global 0)))`, "global"},
		{"export of a helper", `(module (export "f" (func 0)))`, "function"},
		{"element segment function", `(module (table 1 funcref) (func) (elem (i32.const 0) func 0 1))`, "function"},
		{"element segment table", `(module (func) (elem (table 1) (i32.const 0) func 0))`, "table"},
		{"data segment memory", `(module (memory 1) (data (memory 1) (i32.const 0) "x"))`, "memory"},
		{"import type", `(module (import "e" "f" (func (type 0))))`, "type"},
		{"function type", `(module (type (func)) (func (type 1)))`, "type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Instrument(wat2wasm(t, tc.wat))
			var ie *IndexError
			if !errors.As(err, &ie) {
				t.Fatalf("error = %v, want an *IndexError", err)
			}
			if ie.Kind != tc.kind || ie.Index < ie.Count {
				t.Errorf("got %+v, want a %s index past the count", ie, tc.kind)
			}
		})
	}
}
