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

// stdioMover moves its stdout onto fd 0 (wasmtime renumbers only onto an
// open descriptor), writes, moves its stderr onto fd 0 too, writes, closes
// fd 0 and writes; it returns the errno of each call, four bits each, the
// first call's lowest.
const stdioMover = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_renumber" (func $rn (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $close (param i32) (result i32)))
  (memory (export "memory") 1)
  (global $e (mut i64) (i64.const 0))
  (global $n (mut i64) (i64.const 0))
  (data (i32.const 100) "abxcyd")
  (func $errno (param $v i32)
    (global.set $e (i64.or (global.get $e) (i64.shl (i64.extend_i32_u (local.get $v)) (global.get $n))))
    (global.set $n (i64.add (global.get $n) (i64.const 4))))
  (func $put (param $fd i32) (param $at i32)
    (i32.store (i32.const 0) (local.get $at))
    (i32.store (i32.const 4) (i32.const 1))
    (call $errno (call $w (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 32))))
  (func (export "run") (result i64)
    (call $put (i32.const 1) (i32.const 100))            ;; a to stdout
    (call $errno (call $rn (i32.const 1) (i32.const 0))) ;; stdout onto fd 0
    (call $put (i32.const 0) (i32.const 101))            ;; b to stdout
    (call $put (i32.const 1) (i32.const 102))            ;; x: fd 1 is gone
    (call $errno (call $rn (i32.const 2) (i32.const 0))) ;; stderr onto fd 0, over stdout
    (call $put (i32.const 0) (i32.const 103))            ;; c to stderr
    (call $put (i32.const 2) (i32.const 104))            ;; y: fd 2 is gone
    (call $errno (call $close (i32.const 0)))
    (call $put (i32.const 0) (i32.const 105))            ;; d: fd 0 is closed
    (global.get $e)))`

// TestStdioFollowsRenumber: the guest's stdout and stderr are wherever
// fd_renumber put them, and gone once closed or renumbered over: what it
// writes there reaches the run's output as the right stream, and a write
// to a descriptor that no longer holds one is EBADF, as wasmtime's
// descriptor table has it.
func TestStdioFollowsRenumber(t *testing.T) {
	m := compileWAT(t, stdioMover)
	req := wasiRequest(m, &sandbox.WASI{})
	req.Function = "run"
	res, err := engine(t).Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	const ebadf = 8
	want := uint64(ebadf)<<(3*4) | uint64(ebadf)<<(6*4) | uint64(ebadf)<<(8*4)
	if got := uint64(res.Values[0].I64()); got != want {
		t.Errorf("errnos %#x, want %#x (the writes to fd 1 and 2 once moved and to the closed fd 0 EBADF, the rest 0)", got, want)
	}
	if string(res.Output.Stdout) != "ab" || string(res.Output.Stderr) != "c" {
		t.Errorf("stdout %q, stderr %q; want \"ab\" and \"c\"", res.Output.Stdout, res.Output.Stderr)
	}
}
