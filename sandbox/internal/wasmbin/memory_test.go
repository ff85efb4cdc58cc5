package wasmbin

import (
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// page is the size of a wasm page: the byte cap and the denial are in bytes.
const page = 1 << 16

// growWAT is a one-memory module whose exports grow and size memory 0.
const growWAT = `(module (memory 1)
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  (func (export "size") (result i32) (memory.size)))`

func TestMemoryGrowCap(t *testing.T) {
	tests := []struct {
		name       string
		wat        string
		cap        int64 // bytes; 0: leave the initial "no cap" value
		steps      []step
		wantDenied int64
	}{
		{
			name:  "under cap returns old size",
			wat:   growWAT,
			cap:   4 * page,
			steps: []step{{"grow", []any{2}, 1}, {"size", nil, 3}, {"grow", []any{1}, 3}, {"size", nil, 4}},
		},
		{
			name:       "over cap denied and recorded",
			wat:        growWAT,
			cap:        4 * page,
			steps:      []step{{"grow", []any{4}, -1}, {"size", nil, 1}},
			wantDenied: 5 * page,
		},
		{
			name:       "largest denial kept",
			wat:        growWAT,
			cap:        2 * page,
			steps:      []step{{"grow", []any{10}, -1}, {"grow", []any{5}, -1}, {"grow", []any{1}, 1}},
			wantDenied: 11 * page,
		},
		{
			name:       "huge unsigned delta denied",
			wat:        growWAT,
			cap:        2 * page,
			steps:      []step{{"grow", []any{-1}, -1}},
			wantDenied: (1 + 0xFFFFFFFF) * page,
		},
		{
			name:  "module max is not our denial",
			wat:   `(module (memory 1 2) (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))) (func (export "size") (result i32) (memory.size)))`,
			cap:   100 * page,
			steps: []step{{"grow", []any{5}, -1}, {"size", nil, 1}, {"grow", []any{1}, 1}},
		},
		{
			name:  "no cap by default",
			wat:   `(module (memory 0) (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))`,
			steps: []step{{"grow", []any{100}, 0}, {"grow", []any{1}, 100}},
		},
		{
			name: "multi-memory sums all memories",
			wat: `(module (memory $a 1) (memory $b 2)
			  (func (export "grow0") (param i32) (result i32) (memory.grow $a (local.get 0)))
			  (func (export "grow1") (param i32) (result i32) (memory.grow $b (local.get 0)))
			  (func (export "size1") (result i32) (memory.size $b)))`,
			cap: 5 * page,
			steps: []step{
				{"grow1", []any{2}, 2},  // total 1+4 = 5
				{"grow0", []any{1}, -1}, // total 6
				{"size1", nil, 4},
			},
			wantDenied: 6 * page,
		},
		{
			name: "memory64",
			wat: `(module (memory i64 1)
			  (func (export "grow") (param i64) (result i64) (memory.grow (local.get 0))))`,
			cap:        3 * page,
			steps:      []step{{"grow", []any{int64(2)}, 1}, {"grow", []any{int64(1)}, -1}, {"grow", []any{int64(-1)}, -1}},
			wantDenied: (3 + 0xFFFFFFFF) * page, // 2^64-1 pages, clamped to 2^32-1
		},
		{
			name: "grow inside nested blocks reached by tail call",
			wat: `(module (memory 1)
			  (func $g (param i32) (result i32)
			    (block (result i32)
			      (loop (result i32)
			        (if (result i32) (local.get 0)
			          (then (memory.grow (local.get 0)))
			          (else (i32.const 7))))))
			  (func (export "grow") (param i32) (result i32) (return_call $g (local.get 0))))`,
			cap:        2 * page,
			steps:      []step{{"grow", []any{0}, 7}, {"grow", []any{1}, 1}, {"grow", []any{1}, -1}},
			wantDenied: 3 * page,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := instantiate(t, tc.wat)
			if got := s.global(ExportMemCapBytes); got != noByteCap {
				t.Errorf("initial cap = %#x, want %#x", got, noByteCap)
			}
			if tc.cap != 0 {
				s.setGlobal(ExportMemCapBytes, tc.cap)
			}
			s.run(tc.steps)
			if got := s.global(ExportMemDeniedBytes); got != tc.wantDenied {
				t.Errorf("denied = %d, want %d", got, tc.wantDenied)
			}
			if got := s.global(ExportTableDenied); got != 0 {
				t.Errorf("table denied = %d, want 0", got)
			}
		})
	}
}

// TestImportedMemoryCounted checks that an imported memory takes part in
// the sum and is exported under index 0.
func TestImportedMemoryCounted(t *testing.T) {
	wat := `(module (import "env" "mem" (memory 2))
	  (memory 1)
	  (func (export "grow") (param i32) (result i32) (memory.grow 1 (local.get 0))))`
	var imported *wasmtime.Memory
	s := instantiate(t, wat, func(store *wasmtime.Store) wasmtime.AsExtern {
		ty, err := wasmtime.NewMemoryType(2, false, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		mem, err := wasmtime.NewMemory(store, ty)
		if err != nil {
			t.Fatal(err)
		}
		imported = mem
		return mem
	})
	s.setGlobal(ExportMemCapBytes, 4*page)
	s.run([]step{{"grow", []any{1}, 1}, {"grow", []any{1}, -1}})
	if got := s.global(ExportMemDeniedBytes); got != 5*page {
		t.Errorf("denied = %d, want 5", got)
	}
	if got := s.export(MemoryExportName(0)).Memory().Size(s.store); got != imported.Size(s.store) || got != 2 {
		t.Errorf("memory 0 size = %d, want 2", got)
	}
	if got := s.export(MemoryExportName(1)).Memory().Size(s.store); got != 2 {
		t.Errorf("memory 1 size = %d, want 2", got)
	}
}
