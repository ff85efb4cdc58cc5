package sandbox_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// openOnce opens "target" in its first preopen (fd 3) for reading and
// exits with path_open's errno (0: opened). openForever does so in a loop
// until its fence stops it.
const (
	openOnce = `(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "target")
  (func (export "_start")
    (call $exit (call $open (i32.const 3) (i32.const 1) (i32.const 100) (i32.const 6) (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 16)))))`
	openForever = `(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $close (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "target")
  (func (export "_start")
    (loop $l
      (if (i32.eqz (call $open (i32.const 3) (i32.const 1) (i32.const 100) (i32.const 6) (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 16)))
        (then (drop (call $close (i32.load (i32.const 16))))))
      (br $l))))`
)

const errnoAcces = 2

// TestSpecialFilesAreNotOpened: a FIFO, a socket or a symlink to either
// inside an allowed directory is refused with EACCES at once; opening a
// FIFO nobody writes blocked the guest's thread inside wasmtime, out of
// reach of every fence (the run and its cancel were never answered).
func TestSpecialFilesAreNotOpened(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: openOnce})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	for _, c := range []struct {
		name string
		make func() error
	}{
		{"a FIFO", func() error { return syscall.Mkfifo(target, 0o600) }},
		{"a socket", func() error { _, err := net.Listen("unix", target); return err }},
		{"a symlink to a FIFO", func() error {
			if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
				return err
			}
			return os.Symlink("fifo", target)
		}},
		{"a regular file (opened)", func() error { return os.WriteFile(target, nil, 0o644) }},
	} {
		os.Remove(target)
		os.Remove(filepath.Join(dir, "fifo"))
		if err := c.make(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		done := make(chan struct{})
		var res *sandbox.Result
		go func() {
			defer close(done)
			res, err = e.Run(context.Background(), wasiRequest(m, &sandbox.WASI{Dirs: []sandbox.Dir{{Host: dir, Guest: "/d"}}}))
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the run did not end within a minute", c.name)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := errnoAcces
		if c.name == "a regular file (opened)" {
			want = 0
		}
		if res.ExitCode != want {
			t.Errorf("%s: path_open answered %d, want %d", c.name, res.ExitCode, want)
		}
	}
}

// TestFIFOSwappedInDuringAnOpenMeetsTheFence: a FIFO renamed into place
// between the look before an open and the open itself still cannot hold
// the run past its deadline: the watchdog releases the blocked open when
// the fence comes. The guest opens in a loop while a host goroutine swaps
// a FIFO and a regular file under the name as fast as it can.
func TestFIFOSwappedInDuringAnOpenMeetsTheFence(t *testing.T) {
	dir := t.TempDir()
	fifo, file, target := filepath.Join(dir, "fifo"), filepath.Join(dir, "file"), filepath.Join(dir, "target")
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: openForever})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			syscall.Mkfifo(fifo, 0o600)
			os.WriteFile(file, nil, 0o644)
			os.Rename(file, target)
			os.Rename(fifo, target)
		}
	}()
	defer func() { close(stop); <-swapped }()
	for i := range 5 {
		req := wasiRequest(m, &sandbox.WASI{Dirs: []sandbox.Dir{{Host: dir, Guest: "/d"}}})
		req.Limits.Timeout = 300 * time.Millisecond
		done := make(chan error, 1)
		go func() { _, err := e.Run(context.Background(), req); done <- err }()
		select {
		case err := <-done:
			wantKind(t, err, sandbox.KindTimeout)
		case <-time.After(time.Minute):
			t.Fatalf("run %d: still running a minute after its 300 ms deadline", i)
		}
	}
}

// TestReexportedImportsAreNotCallable: a module may export one of its
// imports again; called by name, it would run the host function with no
// guest as its caller, past everything that expects one (path_open
// panicked in the host, a 320 MiB fd_write ignored the deadline and its
// price). Such an export is refused as the export error it is, for runs
// and instance calls alike.
func TestReexportedImportsAreNotCallable(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: `(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (export "x_path_open" (func $open))
  (export "x_fd_write" (func $write))
  (func (export "own") (result i32) (i32.const 7)))`})
	if err != nil {
		t.Fatal(err)
	}
	grant := &sandbox.WASI{Dirs: []sandbox.Dir{{Host: dir, Guest: "/d"}}}
	args := map[string][]sandbox.Value{
		"x_path_open": {sandbox.ValueI32(3), sandbox.ValueI32(0), sandbox.ValueI32(0), sandbox.ValueI32(1), sandbox.ValueI32(0), sandbox.ValueI64(0), sandbox.ValueI64(0), sandbox.ValueI32(0), sandbox.ValueI32(16)},
		"x_fd_write":  {sandbox.ValueI32(1), sandbox.ValueI32(0), sandbox.ValueI32(1), sandbox.ValueI32(8)},
	}
	for fn, a := range args {
		req := wasiRequest(m, grant)
		req.Function, req.Args = fn, a
		_, err := e.Run(context.Background(), req)
		if se := wantKind(t, err, sandbox.KindExport); !strings.Contains(se.Message, "imported function passed through") {
			t.Errorf("run %s: %v", fn, se)
		}
	}
	in, err := e.Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{WASI: grant}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	for fn, a := range args {
		_, err := in.Call(context.Background(), sandbox.CallRequest{Function: fn, Args: a})
		wantKind(t, err, sandbox.KindExport)
	}
	if res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "own"}); err != nil || res.Values[0].I32() != 7 {
		t.Errorf("the instance after refused calls: %v, %+v", err, res)
	}
}
