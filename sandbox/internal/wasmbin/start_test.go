package wasmbin

import (
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

func TestStartNotRunAtInstantiation(t *testing.T) {
	tests := []struct {
		name      string
		wat       string
		imports   bool
		wantStart uint32
	}{
		{
			name: "defined start",
			wat: `(module (global $ran (mut i32) (i32.const 0))
			  (func $start (global.set $ran (i32.const 1)))
			  (func (export "ran") (result i32) (global.get $ran))
			  (start $start))`,
			wantStart: 0,
		},
		{
			name: "start after imports and with memory growth",
			wat: `(module (import "env" "f" (func $f))
			  (memory 0)
			  (func (export "ran") (result i32) (memory.size))
			  (func $start (drop (memory.grow (i32.const 1))))
			  (start $start))`,
			imports:   true,
			wantStart: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, info, err := Instrument(wat2wasm(t, tc.wat))
			if err != nil {
				t.Fatal(err)
			}
			if !info.HasStart || info.Start != tc.wantStart {
				t.Errorf("info start = %v %d, want true %d", info.HasStart, info.Start, tc.wantStart)
			}
			var imports []func(*wasmtime.Store) wasmtime.AsExtern
			if tc.imports {
				imports = append(imports, func(store *wasmtime.Store) wasmtime.AsExtern {
					return wasmtime.WrapFunc(store, func() {})
				})
			}
			s := instantiate(t, tc.wat, imports...)
			if got := s.call("ran"); got != 0 {
				t.Fatalf("start ran during instantiation")
			}
			s.call(ExportStart)
			if got := s.call("ran"); got != 1 {
				t.Errorf("after %s: ran = %d, want 1", ExportStart, got)
			}
		})
	}
}

func TestNoStartExportWithoutStart(t *testing.T) {
	s := instantiate(t, `(module (func (export "f")))`)
	if s.inst.GetExport(s.store, ExportStart) != nil {
		t.Errorf("%s exported for a module without start", ExportStart)
	}
}
