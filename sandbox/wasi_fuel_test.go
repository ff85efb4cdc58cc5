package sandbox_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

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
// (with the output budget spent, so the sink drops it): the price of
// forwarding a charged call to wasmtime's function.
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

// threadCPU is the CPU time (user and system) of the calling thread.
func threadCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWASIGuests is one run of each testdata/wasi guest printing its
// two arguments (the hello-world of each toolchain), with its fuel.
func BenchmarkWASIGuests(b *testing.B) {
	for _, g := range wasiGuests {
		b.Run(g.lang, func(b *testing.B) {
			e, _ := guestEnv(b)
			guestModule(b, g.file)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var fuel uint64
			cpu0 := threadCPU(b)
			b.ResetTimer()
			for range b.N {
				res, err := runGuest(b, e, g.file, sandbox.WASI{Args: []string{"hello", "world"}}, "args")
				if err != nil || res.ExitCode != 0 {
					b.Fatal(err)
				}
				fuel = res.Usage.FuelConsumed
			}
			b.StopTimer()
			b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/run")
			b.ReportMetric(float64(fuel), "fuel/run")
		})
	}
}

// TestWASIFuelRates pins the documented prices of WASI host work: the fuel
// one more call costs, less the handful of instructions around it.
func TestWASIFuelRates(t *testing.T) {
	for _, c := range []struct {
		name, imp, call string
		want            uint64 // the host work's price
	}{
		{"fd_write, one 64 KiB iovec", `(import "wasi_snapshot_preview1" "fd_write" (func $f (param i32 i32 i32 i32) (result i32)))`,
			`(i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.const 65536))
			 (drop (call $f (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))`, 4 + 64*30 + 2000},
		{"fd_write, 1,024 empty iovecs", `(import "wasi_snapshot_preview1" "fd_write" (func $f (param i32 i32 i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 1) (i32.const 65536) (i32.const 1024) (i32.const 8)))`, 1024*4 + 2000},
		{"fd_write to a file, 100 KiB (two slices)", `(import "wasi_snapshot_preview1" "fd_write" (func $f (param i32 i32 i32 i32) (result i32)))`,
			`(i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.const 102400))
			 (drop (call $f (i32.const 3) (i32.const 0) (i32.const 1) (i32.const 8)))`, 4 + 100*30 + 2*50_000},
		{"path_filestat_get of a 4-byte path", `(import "wasi_snapshot_preview1" "path_filestat_get" (func $f (param i32 i32 i32 i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 4) (i32.const 64)))`, 4*4 + 50_000},
		{"fd_close of no descriptor", `(import "wasi_snapshot_preview1" "fd_close" (func $f (param i32) (result i32)))`,
			`(drop (call $f (i32.const 99)))`, 2000},
		{"random_get, 1 MiB", `(import "wasi_snapshot_preview1" "random_get" (func $f (param i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 0) (i32.const 1048576)))`, 1024 * 64},
		{"random_get, 8 bytes", `(import "wasi_snapshot_preview1" "random_get" (func $f (param i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 0) (i32.const 8)))`, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			fuel := func(calls int) uint64 {
				wat := fmt.Sprintf(`(module %s (memory (export "memory") 32)
				  (func (export "_start") %s))`, c.imp, strings.Repeat(c.call, calls))
				req := wasiRequest(compileWAT(t, wat), &sandbox.WASI{})
				req.Limits.OutputBytes = 1
				res, err := engine(t).Run(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return res.Usage.FuelConsumed
			}
			one, two := fuel(1), fuel(2)
			if got := two - one; got < c.want || got > c.want+32 {
				t.Errorf("one more call costs %d fuel, want %d plus at most 32 for its instructions", got, c.want)
			}
		})
	}
}

// TestWASIPollDescriptors: poll_oneoff on descriptors is ours (wasmtime's
// keeps every subscription until the run ends) and answers as wasmtime's
// does. The guest exits with the errno, or 100 + 10 × nevents + the first
// event's type (+ 5 when it says hangup).
func TestWASIPollDescriptors(t *testing.T) {
	const guest = `(module
	  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
	  (memory (export "memory") 1)
	  (func (export "_start") (local $r i32)
	    (i64.store (i32.const 0) (i64.const 7))          ;; userdata
	    (i32.store8 (i32.const 8) (i32.const TAG))
	    (i32.store (i32.const 16) (i32.const FD))
	    (i32.store8 (i32.const 56) (i32.const 0))        ;; second: a clock, 1 hour away
	    (i32.store (i32.const 64) (i32.const 1))
	    (i64.store (i32.const 72) (i64.const 3600000000000))
	    (local.set $r (call $poll (i32.const 0) (i32.const 256) (i32.const N) (i32.const 512)))
	    (if (local.get $r) (then (call $exit (local.get $r))))
	    (call $exit (i32.add (i32.add (i32.const 100) (i32.mul (i32.load (i32.const 512)) (i32.const 10)))
	      (i32.add (i32.load8_u (i32.const 266)) (i32.mul (i32.load16_u (i32.const 280)) (i32.const 5)))))))`
	for _, c := range []struct {
		name       string
		tag, fd, n int
		want       int
	}{
		{"stdin is readable", 1, 0, 1, 111},
		{"stdout is writable", 2, 1, 1, 112},
		{"stderr is writable, the clock not yet due", 2, 2, 2, 112},
		{"stdout is not readable", 1, 1, 1, 8},
		{"stdin is not writable", 2, 0, 1, 8},
		{"a directory is neither", 1, 3, 1, 8},
		{"no such descriptor", 1, 99, 1, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := strings.NewReplacer("TAG", fmt.Sprint(c.tag), "FD", fmt.Sprint(c.fd), "N", fmt.Sprint(c.n))
			req := wasiRequest(compileWAT(t, r.Replace(guest)), &sandbox.WASI{Files: map[string][]byte{"/f": []byte("abc")}})
			res, err := engine(t).Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != c.want {
				t.Errorf("exit %d, want %d", res.ExitCode, c.want)
			}
		})
	}
}

// TestWASIPollFileHangup: a subscription to read a regular file says
// hangup at or past its end, as wasmtime's poll_oneoff does, and the poll
// leaves the file's position where it was. The guest opens /f ("abc"),
// polls at position 0, seeks to the end (SEEK_SKIP bytes: 0 or 3) and
// polls again; it exits 100 + 10 × the first flags + the second flags,
// or 50 + the position if the poll moved it.
func TestWASIPollFileHangup(t *testing.T) {
	const guest = `(module
	  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "fd_seek" (func $seek (param i32 i64 i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "fd_tell" (func $tell (param i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
	  (memory (export "memory") 1)
	  (data (i32.const 600) "f")
	  (func $flags (result i32)
	    (if (call $poll (i32.const 0) (i32.const 256) (i32.const 1) (i32.const 512)) (then (call $exit (i32.const 1))))
	    (i32.load16_u (i32.const 280)))
	  (func (export "_start") (local $fd i32) (local $a i32) (local $b i32)
	    (if (call $open (i32.const 3) (i32.const 0) (i32.const 600) (i32.const 1) (i32.const 0)
	          (i64.const 38) (i64.const 38) (i32.const 0) (i32.const 620)) (then (call $exit (i32.const 2))))
	    (local.set $fd (i32.load (i32.const 620)))
	    (i32.store8 (i32.const 8) (i32.const 1))
	    (i32.store (i32.const 16) (local.get $fd))
	    (local.set $a (call $flags))
	    (drop (call $seek (local.get $fd) (i64.const 3) (i32.const 0) (i32.const 640)))
	    (local.set $b (call $flags))
	    (drop (call $tell (local.get $fd) (i32.const 640)))
	    (if (i64.ne (i64.load (i32.const 640)) (i64.const 3))
	      (then (call $exit (i32.add (i32.const 50) (i32.wrap_i64 (i64.load (i32.const 640)))))))
	    (call $exit (i32.add (i32.const 100) (i32.add (i32.mul (local.get $a) (i32.const 10)) (local.get $b))))))`
	req := wasiRequest(compileWAT(t, guest), &sandbox.WASI{Files: map[string][]byte{"/f": []byte("abc")}})
	res, err := engine(t).Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 101 {
		t.Errorf("exit %d, want 101: no hangup at 0, hangup at the end, the position kept", res.ExitCode)
	}
}
