package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// wasiSleeper writes "ready\n", then sleeps NS nanoseconds in poll_oneoff
// (one relative monotonic clock subscription), then writes "woke\n".
const wasiSleeper = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "ready\n")
  (data (i32.const 32) "woke\n")
  (func $say (param i32 i32)
    (i32.store (i32.const 0) (local.get 0))
    (i32.store (i32.const 4) (local.get 1))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")
    (call $say (i32.const 16) (i32.const 6))
    ;; subscription at 104: userdata 7, tag clock, id monotonic, timeout NS, flags 0
    (i64.store (i32.const 104) (i64.const 7))
    (i32.store8 (i32.const 112) (i32.const 0))
    (i32.store (i32.const 120) (i32.const 1))
    (i64.store (i32.const 128) (i64.const NS))
    (i64.store (i32.const 136) (i64.const 0))
    (i32.store16 (i32.const 144) (i32.const 0))
    (drop (call $poll (i32.const 104) (i32.const 200) (i32.const 1) (i32.const 240)))
    (call $say (i32.const 32) (i32.const 5))))`

// A guest asleep in poll_oneoff stops at its deadline, with the output so
// far; wasmtime's own poll_oneoff would sleep the whole 30 s. The deadline
// is 2 s, not less: the WASI setup counts against it, and on a loaded
// machine a 200 ms one passed before the guest wrote "ready".
func TestWASISleepPastDeadline(t *testing.T) {
	m := compileWAT(t, strings.ReplaceAll(wasiSleeper, "NS", "30000000000"))
	req := wasiRequest(m, &sandbox.WASI{})
	req.Limits.Timeout = 2 * time.Second
	start := time.Now()
	_, err := engine(t).Run(context.Background(), req)
	took := time.Since(start)
	se := wantKind(t, err, sandbox.KindTimeout)
	t.Logf("stopped after %v (deadline 2s)", took)
	if took > 10*time.Second {
		t.Errorf("took %v: the sleep was not interrupted", took)
	}
	if se.Output == nil || string(se.Output.Stdout) != "ready\n" {
		t.Errorf("output so far %+v", se.Output)
	}
}

// A short sleep completes and the guest carries on.
func TestWASISleepCompletes(t *testing.T) {
	m := compileWAT(t, strings.ReplaceAll(wasiSleeper, "NS", "20000000"))
	start := time.Now()
	res, err := engine(t).Run(context.Background(), wasiRequest(m, &sandbox.WASI{}))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("a 20 ms sleep returned after %v", took)
	}
	if string(res.Output.Stdout) != "ready\nwoke\n" {
		t.Errorf("stdout %q", res.Output.Stdout)
	}
}

// Output streams while the guest runs: the test sees "ready" while the
// guest is still asleep, then cancels it.
func TestWASICancelWhileSleeping(t *testing.T) {
	m := compileWAT(t, strings.ReplaceAll(wasiSleeper, "NS", "30000000000"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := wasiRequest(m, &sandbox.WASI{})
	req.Limits.Timeout = time.Minute
	ready := make(chan struct{})
	req.Output = func(stream string, data []byte) {
		if string(data) == "ready\n" {
			close(ready)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := engine(t).Run(ctx, req)
		done <- err
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("run ended before streaming anything: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no output streamed")
	}
	cancel()
	select {
	case err := <-done:
		se := wantKind(t, err, sandbox.KindCancelled)
		if se.Output == nil || string(se.Output.Stdout) != "ready\n" {
			t.Errorf("output so far %+v", se.Output)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled guest kept sleeping")
	}
}

// wasiAbsSleep reads clock CLOCK with clock_time_get, then sleeps in
// poll_oneoff until 30 ms past it (an absolute subscription on that clock),
// next to a second, relative subscription of 60 s; it writes the userdata
// of the one event it got (1 byte) and the event count.
const wasiAbsSleep = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $now (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $now (i32.const CLOCK) (i64.const 1) (i32.const 8)))
    ;; subscription 0 at 104: userdata 65 ('A'), clock CLOCK, absolute, now + 30 ms
    (i64.store (i32.const 104) (i64.const 65))
    (i32.store (i32.const 120) (i32.const CLOCK))
    (i64.store (i32.const 128) (i64.add (i64.load (i32.const 8)) (i64.const 30000000)))
    (i32.store16 (i32.const 144) (i32.const 1))
    ;; subscription 1 at 152: userdata 66 ('B'), monotonic, relative 60 s
    (i64.store (i32.const 152) (i64.const 66))
    (i32.store (i32.const 168) (i32.const 1))
    (i64.store (i32.const 176) (i64.const 60000000000))
    (drop (call $poll (i32.const 104) (i32.const 256) (i32.const 2) (i32.const 248)))
    ;; write the first event's userdata byte and '0' + nevents
    (i32.store8 (i32.const 400) (i32.load8_u (i32.const 256)))
    (i32.store8 (i32.const 401) (i32.add (i32.const 48) (i32.load (i32.const 248))))
    (i32.store (i32.const 0) (i32.const 400))
    (i32.store (i32.const 4) (i32.const 2))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))))`

// Absolute sleeps on both clocks end when due, and only the due clock of
// several is reported.
func TestWASIAbsoluteSleep(t *testing.T) {
	for _, clock := range []string{"0", "1"} {
		m := compileWAT(t, strings.ReplaceAll(wasiAbsSleep, "CLOCK", clock))
		req := wasiRequest(m, &sandbox.WASI{})
		req.Limits.Timeout = 30 * time.Second
		start := time.Now()
		res, err := engine(t).Run(context.Background(), req)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("clock %s: %v", clock, err)
		}
		t.Logf("clock %s: a 30 ms absolute sleep took %v", clock, took)
		if string(res.Output.Stdout) != "A1" {
			t.Errorf("clock %s: events %q, want A1", clock, res.Output.Stdout)
		}
		if took < 25*time.Millisecond || took > 20*time.Second {
			t.Errorf("clock %s: took %v", clock, took)
		}
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
