package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// bigWriter opens "out" in its first preopen (fd 3) for writing, logs
// "go", then writes 320 MiB to it with one fd_write. The write follows
// the log line with no loop header or function entry between (where
// wasmtime checks the epoch).
const bigWriter = `(module
  (import "host" "log" (func $log (param i32 i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 5121)
  (data (i32.const 0) "out")
  (data (i32.const 8) "go")
  (func (export "_start")
    (if (call $open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 3) (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 16))
      (then unreachable))
    (i32.store (i32.const 32) (i32.const 65536))
    (i32.store (i32.const 36) (i32.const 335544320))
    (call $log (i32.const 8) (i32.const 2))
    (drop (call $write (i32.load (i32.const 16)) (i32.const 32) (i32.const 1) (i32.const 40)))))`

func bigWriterRun(t *testing.T) (sandbox.Request, *sandbox.Engine, string) {
	t.Helper()
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: bigWriter})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.Request{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{Log: true,
		WASI: &sandbox.WASI{Dirs: []sandbox.Dir{{Host: dir, Guest: "/w", Writable: true}}}}}
	req.Limits.MemoryBytes = 512 << 20
	req.Limits.Fuel = 1 << 40
	return req, e, filepath.Join(dir, "out")
}

// TestBigWriteStopsAtACancel: a 320 MiB fd_write is done a slice at a
// time, the fence checked between slices, so a cancel that arrives before
// it (here from the guest's own log line, deterministic) stops it after
// one slice. Before, the whole 320 MiB was written in one host call
// (4.8–8.8 s under load) before the guest could be stopped.
func TestBigWriteStopsAtACancel(t *testing.T) {
	req, e, out := bigWriterRun(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req.Log = func(string) { cancel() }
	_, err := e.Run(ctx, req)
	wantKind(t, err, sandbox.KindCancelled)
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 64<<10 {
		t.Errorf("%d bytes written after the cancel; want at most one slice (64 KiB)", fi.Size())
	}
}

// TestBigWriteStopsAtTheDeadline: a 320 MiB fd_write to stdout whose
// deadline passes inside it (the test's output callback, called inside
// the write, waits it out) stops within a slice: the output delivered is
// at most a slice and a coalesced piece. Before, the whole write went
// through first, and the callback saw the whole output budget (1 MiB).
func TestBigWriteStopsAtTheDeadline(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 5121)
  (func (export "_start")
    (i32.store (i32.const 32) (i32.const 65536))
    (i32.store (i32.const 36) (i32.const 335544320))
    (drop (call $write (i32.const 1) (i32.const 32) (i32.const 1) (i32.const 40)))))`})
	if err != nil {
		t.Fatal(err)
	}
	req := wasiRequest(m, &sandbox.WASI{})
	req.Limits.MemoryBytes = 512 << 20
	req.Limits.Timeout = 2 * time.Second // the guest reaches its write well within it
	delivered := 0
	req.Output = func(_ string, data []byte) {
		if delivered == 0 {
			time.Sleep(req.Limits.Timeout + 50*time.Millisecond)
		}
		delivered += len(data)
	}
	_, err = e.Run(context.Background(), req)
	wantKind(t, err, sandbox.KindTimeout)
	if delivered > 64<<10+16<<10 {
		t.Errorf("%d bytes of output delivered after the deadline passed inside the write; want at most a slice and a piece", delivered)
	}
}

// TestBigWriteIsWhole: a run that is not stopped writes every byte of a
// big fd_write, and the guest sees the whole count (the slices are the
// host's business).
func TestBigWriteIsWhole(t *testing.T) {
	req, e, out := bigWriterRun(t)
	if _, err := e.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() != 320<<20 {
		t.Errorf("file: %v, %v bytes; want %d", err, fi.Size(), 320<<20)
	}
}

// TestSlicedTransfersKeepTheirBytes: reads and writes larger than a slice
// move exactly the guest's bytes, whatever lies around the buffer: the
// guest's iovec list inside its own buffer, pread and pwrite at offsets.
func TestSlicedTransfersKeepTheirBytes(t *testing.T) {
	dir := t.TempDir()
	const size = 200_000
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i/251)
	}
	if err := os.WriteFile(filepath.Join(dir, "in"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}})
	// Read "in" with fd_read into [4096, 4096+size) through an iovec at
	// 4096+1000 (inside the buffer), pwrite it to "copy" at offset 10,
	// pread it back at 300000 with the list at 1024 and compare.
	wat := fmt.Sprintf(`(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_pwrite" (func $pwrite (param i32 i32 i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_pread" (func $pread (param i32 i32 i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 16)
  (data (i32.const 0) "in")
  (data (i32.const 8) "copy")
  (func $fail (param i32) (call $exit (local.get 0)))
  (func (export "_start") (local $i i32)
    (if (call $open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 2) (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 16)) (then (call $fail (i32.const 10))))
    (if (call $open (i32.const 3) (i32.const 0) (i32.const 8) (i32.const 4) (i32.const 1) (i64.const 70) (i64.const 0) (i32.const 0) (i32.const 20)) (then (call $fail (i32.const 11))))
    (i32.store (i32.const 5096) (i32.const 4096))
    (i32.store (i32.const 5100) (i32.const %[1]d))
    (if (call $read (i32.load (i32.const 16)) (i32.const 5096) (i32.const 1) (i32.const 24)) (then (call $fail (i32.const 12))))
    (if (i32.ne (i32.load (i32.const 24)) (i32.const %[1]d)) (then (call $fail (i32.const 13))))
    (i32.store (i32.const 1024) (i32.const 4096))
    (i32.store (i32.const 1028) (i32.const %[1]d))
    (if (call $pwrite (i32.load (i32.const 20)) (i32.const 1024) (i32.const 1) (i64.const 10) (i32.const 24)) (then (call $fail (i32.const 14))))
    (if (i32.ne (i32.load (i32.const 24)) (i32.const %[1]d)) (then (call $fail (i32.const 15))))
    (i32.store (i32.const 1032) (i32.const 300000))
    (i32.store (i32.const 1036) (i32.const %[1]d))
    (if (call $pread (i32.load (i32.const 20)) (i32.const 1032) (i32.const 1) (i64.const 10) (i32.const 24)) (then (call $fail (i32.const 16))))
    (if (i32.ne (i32.load (i32.const 24)) (i32.const %[1]d)) (then (call $fail (i32.const 17))))
    (loop $cmp
      (if (i32.ne (i32.load8_u (i32.add (i32.const 300000) (local.get $i))) (i32.load8_u (i32.add (i32.const 4096) (local.get $i))))
        (then (call $fail (i32.const 18))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $cmp (i32.lt_u (local.get $i) (i32.const %[1]d))))))`, size)
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.Request{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{
		WASI: &sandbox.WASI{Dirs: []sandbox.Dir{{Host: dir, Guest: "/w", Writable: true}}}}}
	res, err := e.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("the guest failed its own check %d", res.ExitCode)
	}
	got, err := os.ReadFile(filepath.Join(dir, "copy"))
	if err != nil {
		t.Fatal(err)
	}
	// The read put the file at 4096, except the 8 bytes of the guest's
	// iovec at 5096, which the read overwrote with the file's own bytes:
	// all of it is the file.
	if len(got) != 10+size || string(got[10:]) != string(want) {
		t.Errorf("copy: %d bytes, equal past offset 10: %v", len(got), string(got[10:]) == string(want))
	}
}

// TestSlicedWriteSendsTheGuestsBytes: a big fd_write whose result pointer
// lies inside a later slice of its own buffer sends the guest's bytes:
// the count of one slice, written where the guest asked for the count,
// went out as data in the next slice.
func TestSlicedWriteSendsTheGuestsBytes(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}})
	const size = 200_000
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: fmt.Sprintf(`(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 8)
  (data (i32.const 0) "out")
  (func (export "_start") (local $i i32)
    (loop $fill
      (i32.store8 (i32.add (i32.const 4096) (local.get $i)) (i32.add (local.get $i) (i32.const 1)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $fill (i32.lt_u (local.get $i) (i32.const %[1]d))))
    (if (call $open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 3) (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 16))
      (then unreachable))
    (i32.store (i32.const 32) (i32.const 4096))
    (i32.store (i32.const 36) (i32.const %[1]d))
    (drop (call $write (i32.load (i32.const 16)) (i32.const 32) (i32.const 1) (i32.const %[2]d)))))`, size, 4096+100_000)})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.Request{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{
		WASI: &sandbox.WASI{Dirs: []sandbox.Dir{{Host: dir, Guest: "/w", Writable: true}}}}}
	if _, err := e.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != size {
		t.Fatalf("%d bytes written, want %d", len(got), size)
	}
	for i, b := range got {
		if b != byte(i+1) {
			t.Fatalf("byte %d is %d, want %d: not the guest's", i, b, byte(i+1))
		}
	}
}
