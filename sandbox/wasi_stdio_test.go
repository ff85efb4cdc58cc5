package sandbox_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// wasiWriter makes N fd_write calls of one 1-byte iovec to stdout.
const wasiWriter = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\10\00\00\00\01\00\00\00")
  (data (i32.const 16) "x")
  (func (export "_start") (local $i i32)
    (loop $l
      (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 32)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const N))))))`

// BenchmarkWASIWrite is the cost of one guest fd_write of 1 byte to stdout
// (with the output budget spent, so the sink drops it): a charged call of
// ours (wasi_stdio.go), on the guest's thread.
func BenchmarkWASIWrite(b *testing.B) {
	const calls = 10000
	m := compileWAT(b, strings.ReplaceAll(wasiWriter, "N", "10000"))
	req := wasiRequest(m, &sandbox.WASI{})
	req.Limits.OutputBytes = 1
	// The guest runs on this goroutine's thread: its CPU time, unlike the
	// wall clock, does not count what other processes of a loaded machine
	// take.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	b.ResetTimer()
	for range b.N {
		if _, err := engine(b).Run(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls), "ns/call")
	b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N*calls), "cpu-ns/call")
}
