package wasmbin

import (
	"fmt"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

func TestTableGrowCap(t *testing.T) {
	tests := []struct {
		name       string
		wat        string
		cap        int64 // 0: leave the initial "no cap" value
		steps      []step
		wantDenied int64
	}{
		{
			name: "funcref under and over cap",
			wat: `(module (table 2 funcref)
			  (func (export "grow") (param i32) (result i32) (table.grow (ref.null func) (local.get 0)))
			  (func (export "size") (result i32) (table.size)))`,
			cap:        5,
			steps:      []step{{"grow", []any{3}, 2}, {"grow", []any{1}, -1}, {"size", nil, 5}},
			wantDenied: 6,
		},
		{
			name: "externref second table, cap is per table",
			wat: `(module (table 4 funcref) (table $e 1 externref)
			  (func (export "grow") (param i32) (result i32) (table.grow $e (ref.null extern) (local.get 0)))
			  (func (export "grow0") (param i32) (result i32) (table.grow 0 (ref.null func) (local.get 0))))`,
			cap:        3,
			steps:      []step{{"grow", []any{2}, 1}, {"grow0", []any{1}, -1}, {"grow", []any{7}, -1}},
			wantDenied: 10,
		},
		{
			name: "table max is not our denial",
			wat: `(module (table 1 2 funcref)
			  (func (export "grow") (param i32) (result i32) (table.grow (ref.null func) (local.get 0))))`,
			cap:   100,
			steps: []step{{"grow", []any{5}, -1}, {"grow", []any{1}, 1}},
		},
		{
			name: "table64",
			wat: `(module (table i64 1 funcref)
			  (func (export "grow") (param i64) (result i64) (table.grow (ref.null func) (local.get 0))))`,
			cap:        2,
			steps:      []step{{"grow", []any{int64(1)}, 1}, {"grow", []any{int64(1)}, -1}},
			wantDenied: 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := instantiate(t, tc.wat)
			if got := s.global(ExportTableCap); got != noCap {
				t.Errorf("initial table cap = %#x, want %#x", got, noCap)
			}
			if tc.cap != 0 {
				s.setGlobal(ExportTableCap, tc.cap)
			}
			s.run(tc.steps)
			if got := s.global(ExportTableDenied); got != tc.wantDenied {
				t.Errorf("table denied = %d, want %d", got, tc.wantDenied)
			}
			if got := s.global(ExportMemDeniedBytes); got != 0 {
				t.Errorf("memory denied = %d, want 0", got)
			}
		})
	}
}

// TestTablesCountInTheByteCap: table storage (ElemBytes per element) and
// linear memory share the byte cap, whichever of them grows.
func TestTablesCountInTheByteCap(t *testing.T) {
	s := instantiate(t, `(module (memory 1) (table $f 100 funcref) (table $e 10 externref)
	  (func (export "growf") (param i32) (result i32) (table.grow $f (ref.null func) (local.get 0)))
	  (func (export "growe") (param i32) (result i32) (table.grow $e (ref.null extern) (local.get 0)))
	  (func (export "growm") (param i32) (result i32) (memory.grow (local.get 0))))`)
	base := int64(page + 100*8 + 10*4) // 66376 bytes before any growth
	s.setGlobal(ExportMemCapBytes, base+1000)
	s.run([]step{
		{"growf", []any{125}, 100}, // +1000 bytes: exactly the cap
		{"growe", []any{1}, -1},    // +4 bytes past it
		{"growm", []any{1}, -1},
	})
	if got, want := s.global(ExportMemDeniedBytes), base+1000+page; got != want {
		t.Errorf("denied = %d, want %d (the largest request, from memory.grow)", got, want)
	}
	if got := s.global(ExportTableDenied); got != 0 {
		t.Errorf("table denied = %d, want 0 (no per-table cap was hit)", got)
	}
	for i, want := range []uint64{225, 10} {
		if got := s.export(TableExportName(i)).Table().Size(s.store); got != want {
			t.Errorf("table %d size = %d, want %d", i, got, want)
		}
	}
}

// TestTableGrowInChunks: a grow of many chunks keeps the instruction's
// result and effect (every new element holds the init value), and one past
// the declared maximum grows nothing.
func TestTableGrowInChunks(t *testing.T) {
	s := instantiate(t, `(module (table $t 3 1000 funcref) 
	  (func $f (result i32) (i32.const 7))
	  (elem declare func $f)
	  (type $r (func (result i32)))
	  (func (export "grow") (param i32) (result i32) (table.grow $t (ref.func $f) (local.get 0)))
	  (func (export "size") (result i32) (table.size $t))
	  (func (export "callAt") (param i32) (result i32) (call_indirect $t (type $r) (local.get 0))))`)
	s.run([]step{
		{"grow", []any{int32(0)}, 3},
		{"grow", []any{int32(tableChunkElems*3 + 5)}, 3},
		{"size", nil, 3 + tableChunkElems*3 + 5},
		{"callAt", []any{int32(3)}, 7},
		{"callAt", []any{int32(3 + tableChunkElems*3 + 4)}, 7},
		{"grow", []any{int32(1000)}, -1}, // past the declared maximum
		{"size", nil, 3 + tableChunkElems*3 + 5},
		{"grow", []any{int32(1000 - 3 - tableChunkElems*3 - 5)}, 3 + tableChunkElems*3 + 5},
		{"size", nil, 1000},
	})
}

// TestTableGrowMatchesWasmtime runs the same grows on the original module
// directly in wasmtime and on the rewritten one (no caps set): every result
// and the final size must agree, including deltas of 0, exact chunk
// multiples, one past a chunk, and grows past the declared maximum.
func TestTableGrowMatchesWasmtime(t *testing.T) {
	wat := `(module (table 3 700 externref) (table $f 0 funcref)
	  (func (export "grow") (param i32) (result i32) (table.grow (ref.null extern) (local.get 0)))
	  (func (export "growF") (param i32) (result i32) (table.grow $f (ref.null func) (local.get 0)))
	  (func (export "size") (result i32) (i32.add (table.size 0) (i32.mul (table.size $f) (i32.const 1000)))))`
	engine := newTestEngine()
	orig, err := wasmtime.NewModule(engine, wat2wasm(t, wat))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := instrumentWAT(t, engine, wat)
	rewritten, err := wasmtime.NewModule(engine, out)
	if err != nil {
		t.Fatal(err)
	}
	run := func(m *wasmtime.Module) []int32 {
		store := wasmtime.NewStore(engine)
		inst, err := wasmtime.NewInstance(store, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []int32
		for _, c := range []struct {
			fn    string
			delta int32
		}{
			{"grow", 0}, {"grow", tableChunkElems}, {"grow", 1}, {"grow", tableChunkElems + 1},
			{"grow", 700}, {"grow", 700 - 3 - 2*tableChunkElems - 2}, {"grow", 1}, {"grow", 0},
			{"growF", 2*tableChunkElems - 1}, {"growF", 0}, {"growF", 3},
		} {
			res, err := inst.GetFunc(store, c.fn).Call(store, c.delta)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, res.(int32))
		}
		size, err := inst.GetFunc(store, "size").Call(store)
		if err != nil {
			t.Fatal(err)
		}
		return append(got, size.(int32))
	}
	want, got := run(orig), run(rewritten)
	t.Logf("results and final size: %v", want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rewritten %v\noriginal  %v", got, want)
	}
}
