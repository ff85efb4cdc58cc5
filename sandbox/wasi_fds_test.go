package sandbox_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// fdGuest opens its first preopen (fd 3) as "." again and again. fill
// opens until an error or $max and returns count<<8 | errno; reopen
// closes the last descriptor opened and opens one, returning the errno;
// leak opens one descriptor, then opens another and renumbers it onto
// the first until an error or $max (count<<8 | errno): a guest that never
// has more than two numbers while wasmtime keeps every one it replaced.
const fdGuest = `(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_renumber" (func $renumber (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) ".")
  (func $open1 (param $at i32) (result i32)
    (call $open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 2) (i64.const 0) (i64.const 0) (i32.const 0) (local.get $at)))
  (func (export "fill") (param $max i32) (result i32) (local $n i32) (local $e i32)
    (block $done (loop $l
      (local.set $e (call $open1 (i32.const 16)))
      (br_if $done (local.get $e))
      (i32.store (i32.const 20) (i32.load (i32.const 16)))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (local.get $max)))))
    (i32.or (i32.shl (local.get $n) (i32.const 8)) (local.get $e)))
  (func (export "reopen") (result i32)
    (if (call $close (i32.load (i32.const 20))) (then unreachable))
    (call $open1 (i32.const 16)))
  (func (export "leak") (param $max i32) (result i32) (local $n i32) (local $e i32)
    (if (call $open1 (i32.const 24)) (then unreachable))
    (block $done (loop $l
      (local.set $e (call $open1 (i32.const 28)))
      (br_if $done (local.get $e))
      (if (call $renumber (i32.load (i32.const 28)) (i32.load (i32.const 24))) (then unreachable))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (local.get $max)))))
    (i32.or (i32.shl (local.get $n) (i32.const 8)) (local.get $e))))`

const (
	errnoMfile = 33
	errnoNfile = 41
)

func fdInstance(t *testing.T, e *sandbox.Engine, dir string) *sandbox.Instance {
	t.Helper()
	return instantiate(t, e, fdGuest, func(r *sandbox.InstanceRequest) {
		r.Limits = hangLimits()
		r.Capabilities.WASI = &sandbox.WASI{Dirs: []sandbox.Dir{{Host: dir, Guest: "/d"}}}
	})
}

// TestOpenDescriptorsAreBoundedPerStore: a guest's open descriptors,
// preopens included, are bounded by Config.MaxOpenFiles; past it
// path_open answers EMFILE, and a close makes room again. Before, a guest
// looping over path_open held as many as the process could (~18,000 in a
// second), starving every other run.
func TestOpenDescriptorsAreBoundedPerStore(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}, MaxOpenFiles: 50})
	in := fdInstance(t, e, dir)
	got := callI32(t, in, "fill", sandbox.ValueI32(5000))
	if n, errno := got>>8, got&0xff; n != 49 || errno != errnoMfile {
		t.Fatalf("fill: %d opened, errno %d; want 49 (50 less the preopen) and EMFILE (%d)", n, errno, errnoMfile)
	}
	if e.GuestDescriptors() != 50 {
		t.Errorf("the engine counts %d descriptors, want 50", e.GuestDescriptors())
	}
	if errno := callI32(t, in, "reopen"); errno != 0 {
		t.Errorf("a close did not make room: errno %d", errno)
	}
	in.Release()
	if n := e.GuestDescriptors(); n != 0 {
		t.Errorf("%d descriptors counted after the instance was released", n)
	}
}

// TestRenumberedDescriptorsStayCounted: fd_renumber onto an open
// descriptor drops wasmtime's entry without closing it (it is held until
// the store ends), so a guest that renumbers new descriptors onto one
// number still meets the bound.
func TestRenumberedDescriptorsStayCounted(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}, MaxOpenFiles: 50})
	got := callI32(t, fdInstance(t, e, dir), "leak", sandbox.ValueI32(5000))
	if n, errno := got>>8, got&0xff; n != 48 || errno != errnoMfile {
		t.Fatalf("leak: %d renumbered, errno %d; want 48 and EMFILE", n, errno)
	}
}

// TestOpenDescriptorsAreBoundedPerEngine: all guests together stay within
// what the engine may give them (RLIMIT_NOFILE less a reserve for the
// sidecar's own work); past it ENFILE.
func TestOpenDescriptorsAreBoundedPerEngine(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}})
	sandbox.SetGuestDescriptorLimit(e, 30)
	a, b := fdInstance(t, e, dir), fdInstance(t, e, dir)
	if got := callI32(t, a, "fill", sandbox.ValueI32(20)); got>>8 != 20 || got&0xff != 0 {
		t.Fatalf("a: %d opened, errno %d; want 20", got>>8, got&0xff)
	}
	if got := callI32(t, b, "fill", sandbox.ValueI32(5000)); got>>8 != 8 || got&0xff != errnoNfile {
		t.Fatalf("b: %d opened, errno %d; want 8 (30 less a's 21 and b's preopen) and ENFILE (%d)", got>>8, got&0xff, errnoNfile)
	}
}
