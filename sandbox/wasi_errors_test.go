package sandbox_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestWASIArgumentOutOfRangeIsTheGuestsTrap: a preview1 argument that
// wasmtime cannot convert (a whence, clock id or flags value out of
// range) is the guest's trap, on one line, naming the function and the
// argument; it was kind host with wasmtime's chain of causes.
func TestWASIArgumentOutOfRangeIsTheGuestsTrap(t *testing.T) {
	for _, c := range []struct{ call, want string }{
		{"(drop (call $seek (i32.const 1) (i64.const 0) (i32.const 99) (i32.const 0)))", "wasi_snapshot_preview1::fd_seek: its Whence argument is out of range"},
		{"(drop (call $clock (i32.const 99) (i64.const 0) (i32.const 0)))", "wasi_snapshot_preview1::clock_time_get: its Clockid argument is out of range"},
	} {
		m := compileWAT(t, `(module
  (import "wasi_snapshot_preview1" "fd_seek" (func $seek (param i32 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") `+c.call+`))`)
		_, err := engine(t).Run(context.Background(), wasiRequest(m, &sandbox.WASI{}))
		se := wantKind(t, err, sandbox.KindTrap)
		if se.TrapCode != sandbox.TrapCodeHost || se.Message != "guest trapped: "+c.want {
			t.Errorf("%s: %+v", c.call, se)
		}
	}
}
