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
