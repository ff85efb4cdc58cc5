package sandbox_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// wasiClocks writes, for each preview1 clock id 0..3 (realtime,
// monotonic, process and thread CPU time), clock_res_get's errno and
// resolution, then clock_time_get's errno and time twice: 4 × 40 bytes
// on stdout, little-endian (errnos as i64).
const wasiClocks = `(module
  (import "wasi_snapshot_preview1" "clock_res_get" (func $res (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $now (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (local $id i32) (local $at i32)
    (loop $clocks
      (local.set $at (i32.add (i32.const 64) (i32.mul (local.get $id) (i32.const 40))))
      (i64.store (local.get $at) (i64.extend_i32_u (call $res (local.get $id) (i32.add (local.get $at) (i32.const 8)))))
      (i64.store (i32.add (local.get $at) (i32.const 16)) (i64.extend_i32_u (call $now (local.get $id) (i64.const 1) (i32.add (local.get $at) (i32.const 24)))))
      (drop (call $now (local.get $id) (i64.const 1) (i32.add (local.get $at) (i32.const 32))))
      (local.set $id (i32.add (local.get $id) (i32.const 1)))
      (br_if $clocks (i32.lt_u (local.get $id) (i32.const 4))))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 160))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))))`

// TestWASIClocks: what a guest's clocks are, whatever the host's time
// zone (docs/wasi.md, "Clocks"): the realtime clock is the host's real
// time as seconds since 1970 UTC (a reading lies between two of the
// host's around the run); the monotonic clock advances; the CPU-time
// clocks are EBADF, in clock_res_get and clock_time_get alike.
func TestWASIClocks(t *testing.T) {
	t.Setenv("TZ", "Asia/Kolkata")
	m := compileWAT(t, wasiClocks)
	before := time.Now().UnixNano()
	res, err := engine(t).Run(context.Background(), wasiRequest(m, &sandbox.WASI{}))
	after := time.Now().UnixNano()
	if err != nil {
		t.Fatal(err)
	}
	out := res.Output.Stdout
	if len(out) != 160 {
		t.Fatalf("stdout: %d bytes, want 160", len(out))
	}
	type reading struct{ resErrno, res, nowErrno, first, second uint64 }
	var clocks [4]reading
	for id := range clocks {
		w := out[id*40:]
		clocks[id] = reading{
			binary.LittleEndian.Uint64(w), binary.LittleEndian.Uint64(w[8:]),
			binary.LittleEndian.Uint64(w[16:]), binary.LittleEndian.Uint64(w[24:]), binary.LittleEndian.Uint64(w[32:]),
		}
	}
	const errnoBadf = 8
	for id, name := range []string{"realtime", "monotonic"} {
		c := clocks[id]
		if c.resErrno != 0 || c.nowErrno != 0 || c.res == 0 || c.res > uint64(time.Millisecond) {
			t.Errorf("%s: %+v, want both calls to succeed with a resolution of at most 1 ms", name, c)
		}
		if c.second < c.first {
			t.Errorf("%s went back: %d then %d", name, c.first, c.second)
		}
	}
	if rt := clocks[0]; int64(rt.first) < before || int64(rt.second) > after {
		t.Errorf("realtime %d..%d is not the host's UTC time, %d..%d around the run", rt.first, rt.second, before, after)
	}
	for id, name := range []string{2: "process CPU time", 3: "thread CPU time"} {
		if id < 2 {
			continue
		}
		if c := clocks[id]; c.resErrno != errnoBadf || c.nowErrno != errnoBadf {
			t.Errorf("%s: errnos %d and %d, want EBADF (%d)", name, c.resErrno, c.nowErrno, errnoBadf)
		}
	}
}
