package wasmbin

import (
	"reflect"
	"testing"
)

func TestInfo(t *testing.T) {
	wat := `(module
	  (import "e" "f" (func))
	  (import "e" "t" (table 1 funcref))
	  (import "e" "m" (memory 1))
	  (import "e" "g" (global i32))
	  (import "e" "f2" (func))
	  (table 3 10 externref)
	  (table i64 1 funcref)
	  (memory 2 5)
	  (memory i64 7)
	  (memory 1 1 shared)
	  (func $s)
	  (start $s))`
	want := &Info{
		ImportedFuncs: 2, ImportedTables: 1, ImportedMemories: 1, ImportedGlobals: 1,
		Memories: []MemoryInfo{
			{MinPages: 2, MaxPages: 5, HasMax: true},
			{MinPages: 7, Memory64: true},
			{MinPages: 1, MaxPages: 1, HasMax: true, Shared: true},
		},
		Tables: []TableInfo{
			{Min: 3, Max: 10, HasMax: true, ElemType: 0x6f},
			{Min: 1, ElemType: 0x70, Table64: true},
		},
		HasStart: true,
		Start:    2,
	}
	wasm := wat2wasm(t, wat)
	got, err := Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v\nwant    %+v", got, want)
	}
	out, got, err := Instrument(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if got.FirstInjectedFunc != 3 || got.Offsets == nil {
		t.Errorf("FirstInjectedFunc %d, Offsets %v: want 3 and a map", got.FirstInjectedFunc, got.Offsets)
	}
	got.FirstInjectedFunc, got.Offsets = 0, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Instrument info = %+v\nwant               %+v", got, want)
	}
	if err := validate(out); err != nil {
		t.Errorf("output does not validate: %v", err)
	}
	after, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if after.HasStart {
		t.Errorf("start section survived instrumentation")
	}
}
