package sandbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestWASIOutputBudget(t *testing.T) {
	m := compileWAT(t, strings.ReplaceAll(wasiHello, "CODE", "0"))
	req := wasiRequest(m, &sandbox.WASI{})
	req.Limits.OutputBytes = 4
	res, err := engine(t).Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output.Stdout) != "hell" || string(res.Output.Stderr) != "hell" || !res.Output.Truncated {
		t.Errorf("output %+v", res.Output)
	}
}

// wasiByteFlood writes its stdout one byte per fd_write, 20,000 times.
const wasiByteFlood = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "x")
  (func (export "_start") (local $i i32)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 1))
    (loop $l
      (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 20000))))))`

// A guest writing a byte at a time is streamed in coalesced pieces, not
// one notification per byte, and nothing is lost or reordered.
func TestWASIOutputCoalesced(t *testing.T) {
	m := compileWAT(t, wasiByteFlood)
	var calls int
	var got []byte
	req := wasiRequest(m, &sandbox.WASI{})
	req.Output = func(stream string, data []byte) {
		calls++
		got = append(got, data...)
	}
	res, err := engine(t).Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("20000 one-byte writes streamed in %d pieces", calls)
	if string(got) != strings.Repeat("x", 20000) || string(res.Output.Stdout) != string(got) {
		t.Errorf("streamed %d bytes, result %d", len(got), len(res.Output.Stdout))
	}
	if calls > 5000 { // a piece per 5 ms would need a 25 s loop
		t.Errorf("%d pieces for 20000 bytes: not coalesced", calls)
	}
}
