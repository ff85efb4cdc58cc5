package sandbox_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// wasiRandom writes 16 bytes of random_get to stdout.
const wasiRandom = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $random_get (i32.const 16) (i32.const 16)))
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`

// random_get follows the run's seed when one is given, and the OS's
// entropy otherwise.
func TestWASIRandomSeed(t *testing.T) {
	m := compileWAT(t, wasiRandom)
	draw := func(caps sandbox.Capabilities) string {
		t.Helper()
		caps.WASI = &sandbox.WASI{}
		res, err := engine(t).Run(context.Background(), sandbox.Request{Module: m, Limits: hangLimits(), Capabilities: caps})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Output.Stdout) != 16 {
			t.Fatalf("stdout %q", res.Output.Stdout)
		}
		return string(res.Output.Stdout)
	}
	a, b := draw(sandbox.Capabilities{Random: true, Seed: 42}), draw(sandbox.Capabilities{Random: true, Seed: 42})
	if a != b {
		t.Errorf("seed 42 gave %x then %x", a, b)
	}
	// The stream is host::random's: splitmix64 from the seed, little-endian.
	if want := "\x95\x6e\xeb\x2f"; a[:4] != want { // 803958421 = 0x2feb6e95
		t.Errorf("first bytes %x, want %x", a[:4], want)
	}
	if c := draw(sandbox.Capabilities{Random: true, Seed: 43}); c == a {
		t.Errorf("seeds 42 and 43 drew the same bytes")
	}
	if x, y := draw(sandbox.Capabilities{}), draw(sandbox.Capabilities{}); x == y || x == a {
		t.Errorf("unseeded runs drew %x and %x", x, y)
	}
}
