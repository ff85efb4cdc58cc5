package sandbox

import (
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// TestGuardedHostFunctionPanics: a panic in a host function (a bug of
// ours, whatever the guest passed) becomes a trap that stops the guest
// and the call's error of kind host naming the function, not a panic
// unwinding through wasmtime into the caller.
func TestGuardedHostFunctionPanics(t *testing.T) {
	s := &store{}
	fn := s.guarded("wasi_snapshot_preview1::path_open", func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		var b []byte
		return nil, wasmtime.NewTrap(string(b[16:])) // slice bounds out of range
	})
	vals, trap := fn(nil, nil)
	if vals != nil || trap == nil {
		t.Fatalf("a panicking host function returned %v, %v; want a trap", vals, trap)
	}
	if f := s.cur.fault; f == nil || f.Kind != KindHost || !strings.Contains(f.Message, "internal error in wasi_snapshot_preview1::path_open") {
		t.Errorf("fault = %+v", f)
	}
}

// TestStoreFuncFindsItsStore: a host function shared by every store of an
// engine (one linker, defined once) runs with the store whose guest
// called it, and a panic in it is guarded as in a store's own.
func TestStoreFuncFindsItsStore(t *testing.T) {
	eng := wasmtime.NewEngine()
	linker := wasmtime.NewLinker(eng)
	defer linker.Close()
	ty := signatureType("(i32) -> ()")
	var seen []*store
	err := linker.FuncNew("m", "f", ty, storeFunc("m::f", func(s *store, _ *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		seen = append(seen, s)
		if a[0].I32() != 0 {
			var b []byte
			return nil, wasmtime.NewTrap(string(b[16:])) // slice bounds out of range
		}
		return nil, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := wasmtime.Wat2Wasm(`(module (import "m" "f" (func $f (param i32)))
	  (func (export "call") (param i32) (call $f (local.get 0))))`)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := wasmtime.NewModule(eng, wasm)
	if err != nil {
		t.Fatal(err)
	}
	var stores [2]*store
	for i := range stores {
		s := &store{}
		s.wt = wasmtime.NewStoreWithData(eng, s)
		defer s.wt.Close()
		inst, err := linker.Instantiate(s.wt, mod)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inst.GetFunc(s.wt, "call").Call(s.wt, int32(i)); (err != nil) != (i == 1) {
			t.Fatalf("store %d: %v", i, err)
		}
		stores[i] = s
	}
	if len(seen) != 2 || seen[0] != stores[0] || seen[1] != stores[1] {
		t.Errorf("the function saw stores %p, want %p", seen, stores)
	}
	if stores[0].cur.fault != nil {
		t.Errorf("a call that returned has fault %+v", stores[0].cur.fault)
	}
	if f := stores[1].cur.fault; f == nil || f.Kind != KindHost || !strings.Contains(f.Message, "internal error in m::f") {
		t.Errorf("fault = %+v", f)
	}
}
