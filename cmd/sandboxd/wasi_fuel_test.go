package main

// Red-team regression tests, through the real binary, for the fuel fence
// on WASI host work (sandbox/wasi_fuel.go): a preview1 call whose
// guest-chosen counts or lengths made the host work without end cost a
// few fuel before; each attack below ran to "ok" (exit 0) under a small
// fuel budget and now stops with fuel_exhausted (exit 2) or is refused.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wasiLoop is a WASI command that evaluates call (an i32 expression,
// usually a call of $f, the import fn of type sig) n times after setup,
// then exits with the last value (an errno).
func wasiLoop(fn, sig string, pages, n int, setup, call string) string {
	return fmt.Sprintf(`(module
	  (import "wasi_snapshot_preview1" %q (func $f %s))
	  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
	  (memory (export "memory") %d)
	  (func (export "_start") (local $i i32) (local $r i32)
	    %s
	    (loop $l
	      (local.set $r %s)
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $l (i32.lt_u (local.get $i) (i32.const %d))))
	    (call $exit (local.get $r))))`, fn, sig, pages, setup, call, n)
}

const (
	sigFdWrite  = "(param i32 i32 i32 i32) (result i32)"
	sigPath     = "(param i32 i32 i32 i32 i32) (result i32)" // path_filestat_get
	sigReaddir  = "(param i32 i32 i32 i64 i32) (result i32)"
	sigRandom   = "(param i32 i32) (result i32)"
	sigPoll     = "(param i32 i32 i32 i32) (result i32)"
	fuelExhaust = 2 // the exit status of fuel_exhausted
)

// runFuelAttack runs guest under --fuel 1000000 and wants the fuel fence.
func runFuelAttack(t *testing.T, guest string, flags ...string) {
	t.Helper()
	args := append([]string{guest, "--wasi", "--fuel", "1000000", "--output-bytes", "1"}, flags...)
	r := runWASICLI(t, "", args...)
	wantCode(t, r, fuelExhaust)
	if !strings.Contains(r.stderr, "fuel_exhausted") {
		t.Errorf("stderr does not say fuel_exhausted: %q", r.stderr)
	}
}

// TestWASIIovecsPayFuel: fd_write walked every iovec the guest named (1 M
// of them for a few fuel: 2,000 calls ran 5.5 s under --fuel 100000); now
// iovs_len is at most 1,024 (EINVAL past it, like readv(2)) and each
// iovec and each KiB of the buffer written costs fuel before the call.
func TestWASIIovecsPayFuel(t *testing.T) {
	t.Run("iovecs are paid for", func(t *testing.T) {
		// 1,024 empty iovecs per call (zeroed memory), 50,000 calls.
		runFuelAttack(t, writeGuest(t, "iovecs.wat", wasiLoop("fd_write", sigFdWrite, 1, 50000, "",
			`(call $f (i32.const 1) (i32.const 0) (i32.const 1024) (i32.const 60000))`)))
	})
	t.Run("more than IOV_MAX iovecs is EINVAL", func(t *testing.T) {
		guest := writeGuest(t, "iov_max.wat", wasiLoop("fd_write", sigFdWrite, 1, 1, "",
			`(call $f (i32.const 1) (i32.const 0) (i32.const 1025) (i32.const 60000))`))
		wantCode(t, runWASICLI(t, "", guest, "--wasi"), 28)
	})
	t.Run("bytes are paid for", func(t *testing.T) {
		// One 1 MiB iovec per call, 500 calls (output dropped past 1 byte).
		runFuelAttack(t, writeGuest(t, "bytes.wat", wasiLoop("fd_write", sigFdWrite, 17, 500,
			`(i32.store (i32.const 0) (i32.const 65536)) (i32.store (i32.const 4) (i32.const 1048576))`,
			`(call $f (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))`)))
	})
}

// TestWASIRandomGetPaysFuel: wasmtime's random_get filled 16 MiB per call
// for a few fuel (200 calls: 9.8 s under --fuel 100000), and sized a host
// buffer by the guest's length before checking it: a 1-page guest under
// --memory-mb 1 made the host allocate and fill 1 GiB (4.8 s, 1 GB RSS),
// then was reported as a host error. Now random_get is ours: bounds first
// (a trap, the guest's fault), then 64 fuel per KiB before filling.
func TestWASIRandomGetPaysFuel(t *testing.T) {
	t.Run("bytes are paid for", func(t *testing.T) {
		runFuelAttack(t, writeGuest(t, "random.wat", wasiLoop("random_get", sigRandom, 64, 100, "",
			`(call $f (i32.const 0) (i32.const 4194304))`)), "--memory-mb", "16")
	})
	t.Run("a buffer past the memory traps before any work", func(t *testing.T) {
		guest := writeGuest(t, "random_oob.wat", wasiLoop("random_get", sigRandom, 1, 1, "",
			`(call $f (i32.const 0) (i32.const 268435456))`))
		r := runWASICLI(t, "", guest, "--wasi", "--memory-mb", "1")
		wantCode(t, r, 8) // trap
		if !strings.Contains(r.stderr, "random_get") || !strings.Contains(r.stderr, "outside the guest's memory") {
			t.Errorf("stderr does not name random_get's bounds: %q", r.stderr)
		}
	})
}

// TestWASIPathsPayFuel: wasmtime resolves a path one component at a time,
// a system call each: a 4,001-byte "a/../a/../…" path cost 165 µs of host
// time per path_filestat_get for a few fuel (2,000 calls ran under
// --fuel 1000000). Each path byte now costs 4 fuel, and paths past
// PATH_MAX (4,096) are ENAMETOOLONG before wasmtime copies them.
func TestWASIPathsPayFuel(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := strings.Repeat("a/../", 800) + "a"
	guest := writeGuest(t, "paths.wat", strings.Replace(wasiLoop("path_filestat_get", sigPath, 1, 2000, "",
		fmt.Sprintf(`(call $f (i32.const 3) (i32.const 1) (i32.const 1024) (i32.const %d) (i32.const 0))`, len(path))),
		"(func (export", fmt.Sprintf("(data (i32.const 1024) %q)\n(func (export", path), 1))
	runFuelAttack(t, guest, "--dir", dir+":/d")
	// Within its fuel the same path resolves as before.
	wantCode(t, runWASICLI(t, "", strings.Replace(guest, "(i32.const 2000)", "(i32.const 1)", 1), "--wasi", "--dir", dir+":/d"), 0)
}

// TestWASIReaddirPaysFuel: wasmtime's fd_readdir reads the whole directory
// and stats every entry on each call, whatever the buffer and cookie: with
// 1,000 entries a 0-byte read took ~15 ms (10,000 entries: 300 ms) for a
// few fuel. It now costs fuel for the time it took.
func TestWASIReaddirPaysFuel(t *testing.T) {
	dir := t.TempDir()
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("entry-%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	guest := writeGuest(t, "readdir.wat", wasiLoop("fd_readdir", sigReaddir, 1, 200, "",
		`(call $f (i32.const 3) (i32.const 64) (i32.const 0) (i64.const 0) (i32.const 0))`))
	runFuelAttack(t, guest, "--dir", dir+":/d")
}

// TestWASIArgsPayFuel: args_sizes_get and args_get copy every argument on
// each call (wasmtime clones the list); 800 KiB of arguments were copied
// 5,000 times for a few fuel. Each call now pays for the copy.
func TestWASIArgsPayFuel(t *testing.T) {
	guest := writeGuest(t, "args.wat", wasiLoop("args_sizes_get", sigRandom, 1, 5000, "",
		`(call $f (i32.const 0) (i32.const 4))`))
	args := []string{guest, "--wasi", "--fuel", "1000000", "--"}
	for range 8 {
		args = append(args, strings.Repeat("x", 100<<10))
	}
	r := runWASICLI(t, "", args...)
	wantCode(t, r, fuelExhaust)
}

// TestWASIPollSubscriptionsAreBounded: our poll_oneoff walked every
// subscription the guest named (up to what its memory holds: 350,000 under
// 16 MiB), twice per call, and handed them all to wasmtime's when one was
// on a descriptor; now nsubscriptions is at most 4,096 (EINVAL past it)
// and each costs fuel.
func TestWASIPollSubscriptionsAreBounded(t *testing.T) {
	// Subscriptions of zeroed memory are relative realtime clocks of 0 ns:
	// due at once.
	t.Run("past the bound is EINVAL", func(t *testing.T) {
		guest := writeGuest(t, "poll_max.wat", wasiLoop("poll_oneoff", sigPoll, 8, 1, "",
			`(call $f (i32.const 0) (i32.const 262144) (i32.const 4097) (i32.const 524280))`))
		wantCode(t, runWASICLI(t, "", guest, "--wasi"), 28)
	})
	t.Run("subscriptions are paid for", func(t *testing.T) {
		runFuelAttack(t, writeGuest(t, "poll.wat", wasiLoop("poll_oneoff", sigPoll, 8, 1000, "",
			`(call $f (i32.const 0) (i32.const 262144) (i32.const 4096) (i32.const 524280))`)))
	})
}

// TestWASIBadPointersAreTheGuestsTrap: a pointer wasmtime's WASI cannot
// use (outside the guest's memory, misaligned) was reported as sandboxd's
// own failure (kind host, exit 1) with wasmtime's multi-line error chain;
// it is the guest's trap, naming the function and the bytes.
func TestWASIBadPointersAreTheGuestsTrap(t *testing.T) {
	for _, c := range []struct{ name, fn, sig, call, code, want string }{
		{"an iovec array past the memory", "fd_write", sigFdWrite,
			`(call $f (i32.const 1) (i32.const 65532) (i32.const 2) (i32.const 8))`,
			"memory_out_of_bounds", "fd_write: bytes [65536, 65540) lie outside the guest's memory"},
		{"a result past the memory", "fd_filestat_get", "(param i32 i32) (result i32)",
			`(call $f (i32.const 1) (i32.const 65530))`,
			"memory_out_of_bounds", "fd_filestat_get: bytes [65530, 65538) lie outside the guest's memory"},
		{"a misaligned result", "fd_filestat_get", "(param i32 i32) (result i32)",
			`(call $f (i32.const 1) (i32.const 1001))`,
			"heap_misaligned", "fd_filestat_get: bytes [1001, 1009) are not aligned to 8 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			guest := writeGuest(t, "bad_pointer.wat", wasiLoop(c.fn, c.sig, 1, 1, "", c.call))
			r := runWASICLI(t, "", guest, "--wasi", "--json")
			wantCode(t, r, 8)
			if !strings.Contains(r.stdout, `"trapCode":"`+c.code+`"`) || !strings.Contains(r.stdout, c.want) {
				t.Errorf("want trap %s saying %q: %s", c.code, c.want, r.stdout)
			}
		})
	}
}

// TestWASIPollKeepsNoMemory: wasmtime's poll_oneoff, which answered
// descriptor subscriptions, kept every subscription of every call in the
// store until the run ended, outside the memory cap: 1,000 calls of 4,096
// stdin subscriptions held 394 MB of the sidecar (2,000 calls: 766 MB; a
// clock subscription beside a descriptor 220 bytes each), for 16 fuel a
// subscription. Descriptor polls are ours now and keep nothing.
func TestWASIPollKeepsNoMemory(t *testing.T) {
	guest := writeGuest(t, "poll_stdin.wat", wasiLoop("poll_oneoff", sigPoll, 8, 1000, `
	    (loop $s ;; 4,096 subscriptions: fd_read of fd 0
	      (i32.store8 (i32.add (i32.mul (local.get $i) (i32.const 48)) (i32.const 8)) (i32.const 1))
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $s (i32.lt_u (local.get $i) (i32.const 4096))))
	    (local.set $i (i32.const 0))`,
		`(call $f (i32.const 0) (i32.const 262144) (i32.const 4096) (i32.const 524280))`))
	s := startRaw(t, binPath)
	s.request("1", "run", runParams(guest, "", nil, map[string]uint64{"fuel": 1 << 40, "timeoutMs": 60000}, map[string]any{"wasi": true}))
	m, _ := s.response("1", 120*time.Second)
	if m.Error != nil || !strings.Contains(string(m.Result), `"exitCode":0`) {
		t.Fatalf("want exit 0: %s", trunc(m.raw))
	}
	if peak := vmHWM(t, s.pid()); peak > 150<<20 {
		t.Errorf("sidecar peak RSS %s after 4,096,000 stdin subscriptions, want well under 150 MiB", mib(peak))
	}
}
