package sandbox_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// wasiHello writes "hello\n" to stdout and exits with status $code (or
// returns from _start when $code is 0).
const wasiHello = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (if (i32.ne (i32.const CODE) (i32.const 0)) (then (call $proc_exit (i32.const CODE))))))`

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

func compileWAT(t testing.TB, wat string) *sandbox.Module {
	t.Helper()
	m, _, err := engine(t).Compile(context.Background(), sandbox.Source{WAT: wat})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wasiRequest runs m with w under hangLimits: the default limits with a
// hang-bound deadline, so that a loaded machine cannot fail the tests
// (the tests about deadlines set their own).
func wasiRequest(m *sandbox.Module, w *sandbox.WASI) sandbox.Request {
	return sandbox.Request{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{WASI: w}}
}

func TestWASIRefusedWithoutGrant(t *testing.T) {
	wat := strings.ReplaceAll(wasiHello, "CODE", "0")
	m := compileWAT(t, wat)
	_, err := engine(t).Run(context.Background(), sandbox.Request{Module: m, Limits: hangLimits()})
	se := wantKind(t, err, sandbox.KindDisallowedImport)
	for _, fn := range []string{"fd_write", "proc_exit", "args_sizes_get"} {
		if !strings.Contains(se.Message, fn) {
			t.Errorf("message %q does not name %s", se.Message, fn)
		}
	}
	if se.Module != sandbox.WASIModule {
		t.Errorf("module = %q", se.Module)
	}

	// The same refusal from the bytes alone, before anything is compiled.
	e := newEngine(t, sandbox.Config{})
	err = e.CheckWASIGrant(sandbox.Source{WAT: wat}, sandbox.Capabilities{})
	var pre *sandbox.Error
	if !errors.As(err, &pre) || pre.Kind != sandbox.KindDisallowedImport || pre.Message != se.Message {
		t.Fatalf("CheckWASIGrant = %v, want %v", err, se)
	}
	if st := e.CacheStats(); st.Misses != 0 || st.Entries != 0 {
		t.Errorf("CheckWASIGrant compiled something: %+v", st)
	}
	if err := e.CheckWASIGrant(sandbox.Source{WAT: wat}, sandbox.Capabilities{WASI: &sandbox.WASI{}}); err != nil {
		t.Errorf("with the grant: %v", err)
	}
	if err := e.CheckWASIGrant(sandbox.Source{WAT: `(module)`}, sandbox.Capabilities{}); err != nil {
		t.Errorf("no WASI imports: %v", err)
	}
}

func TestWASIHelloAndExitCode(t *testing.T) {
	for _, code := range []string{"0", "3"} {
		t.Run("exit "+code, func(t *testing.T) {
			m := compileWAT(t, strings.ReplaceAll(wasiHello, "CODE", code))
			var mu sync.Mutex
			var streamed []string
			req := wasiRequest(m, &sandbox.WASI{})
			req.Output = func(stream string, data []byte) {
				mu.Lock()
				streamed = append(streamed, stream+":"+string(data))
				mu.Unlock()
			}
			res, err := engine(t).Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{"0": 0, "3": 3}[code]; res.ExitCode != want {
				t.Errorf("exit code %d, want %d", res.ExitCode, want)
			}
			if res.Output == nil || string(res.Output.Stdout) != "hello\n" || string(res.Output.Stderr) != "hello\n" || res.Output.Truncated {
				t.Errorf("output %+v", res.Output)
			}
			if got := strings.Join(streamed, "|"); got != "stdout:hello\n|stderr:hello\n" {
				t.Errorf("streamed %q", got)
			}
		})
	}
}

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

// wasiRandom writes 16 bytes of random_get to stdout.
const wasiRandom = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $random_get (i32.const 16) (i32.const 16)))
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`

// random_get follows the run's seed when one is given, and the OS's
// entropy otherwise.
func TestWASIRandomSeed(t *testing.T) {
	m := compileWAT(t, wasiRandom)
	draw := func(caps sandbox.Capabilities) string {
		t.Helper()
		caps.WASI = &sandbox.WASI{}
		res, err := engine(t).Run(context.Background(), sandbox.Request{Module: m, Limits: hangLimits(), Capabilities: caps})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Output.Stdout) != 16 {
			t.Fatalf("stdout %q", res.Output.Stdout)
		}
		return string(res.Output.Stdout)
	}
	a, b := draw(sandbox.Capabilities{Random: true, Seed: 42}), draw(sandbox.Capabilities{Random: true, Seed: 42})
	if a != b {
		t.Errorf("seed 42 gave %x then %x", a, b)
	}
	// The stream is host::random's: splitmix64 from the seed, little-endian.
	if want := "\x95\x6e\xeb\x2f"; a[:4] != want { // 803958421 = 0x2feb6e95
		t.Errorf("first bytes %x, want %x", a[:4], want)
	}
	if c := draw(sandbox.Capabilities{Random: true, Seed: 43}); c == a {
		t.Errorf("seeds 42 and 43 drew the same bytes")
	}
	if x, y := draw(sandbox.Capabilities{}), draw(sandbox.Capabilities{}); x == y || x == a {
		t.Errorf("unseeded runs drew %x and %x", x, y)
	}
}

// Grants the engine refuses name the field, before any store exists.
func TestWASIGrantErrors(t *testing.T) {
	allowed := t.TempDir()
	inside := allowed + "/sub"
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{allowed}})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: strings.ReplaceAll(wasiHello, "CODE", "0")})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		grant sandbox.WASI
		field string
		in    string
	}{
		{"dir outside", sandbox.WASI{Dirs: []sandbox.Dir{{Host: inside, Guest: "/a"}, {Host: outside, Guest: "/b"}}}, "capabilities.wasi.dirs[1].host", outside},
		{"dir escaping by ..", sandbox.WASI{Dirs: []sandbox.Dir{{Host: inside + "/../..", Guest: "/a"}}}, "capabilities.wasi.dirs[0].host", "not at or under"},
		{"dir missing", sandbox.WASI{Dirs: []sandbox.Dir{{Host: allowed + "/nope", Guest: "/a"}}}, "capabilities.wasi.dirs[0].host", "not an existing directory"},
		{"guest twice", sandbox.WASI{Dirs: []sandbox.Dir{{Host: inside, Guest: "/a"}, {Host: allowed, Guest: "/a"}}}, "capabilities.wasi.dirs[1].guest", "already preopened"},
		{"files under a dir", sandbox.WASI{Dirs: []sandbox.Dir{{Host: inside, Guest: "/a"}}, Files: map[string][]byte{"/a/x": nil}}, `capabilities.wasi.files["/a/x"]`, "hide it"},
		{"files and a dir at /", sandbox.WASI{Dirs: []sandbox.Dir{{Host: inside, Guest: "/"}}, Files: map[string][]byte{"/x": nil}}, "capabilities.wasi.files", "also claims"},
		{"relative file", sandbox.WASI{Files: map[string][]byte{"x": nil}}, `capabilities.wasi.files["x"]`, "absolute"},
		{"file under a file", sandbox.WASI{Files: map[string][]byte{"/x": nil, "/x/y": nil}}, `capabilities.wasi.files["/x"]`, "cannot be under it"},
		{"env name with =", sandbox.WASI{Env: map[string]string{"A=B": "c"}}, "capabilities.wasi.env", "no '='"},
		{"NUL in an argument", sandbox.WASI{Args: []string{"ok", "a\x00b"}}, "capabilities.wasi.args[1]", "NUL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := c.grant
			_, err := e.Run(context.Background(), sandbox.Request{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{WASI: &g}})
			var ge *sandbox.GrantError
			if !errors.As(err, &ge) || ge.Field != c.field || !strings.Contains(ge.Problem, c.in) {
				t.Fatalf("err = %v, want a GrantError on %s mentioning %q", err, c.field, c.in)
			}
		})
	}
	// No allowed directories at all: every dir is refused, saying why.
	_, err = engine(t).Run(context.Background(), sandbox.Request{Module: compileWAT(t, strings.ReplaceAll(wasiHello, "CODE", "0")), Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Dirs: []sandbox.Dir{{Host: allowed, Guest: "/"}}}}})
	var ge *sandbox.GrantError
	if !errors.As(err, &ge) || !strings.Contains(ge.Problem, "--allow-dir") {
		t.Fatalf("err = %v", err)
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

// Hundreds of WASI runs, with files, output, sleeps past the deadline and
// cancels, leave no goroutine, temporary directory or resident memory
// behind.
func TestWASINoLeaks(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	hello, _, err := e.Compile(ctx, sandbox.Source{WAT: strings.ReplaceAll(wasiHello, "CODE", "1")})
	if err != nil {
		t.Fatal(err)
	}
	sleeper, _, err := e.Compile(ctx, sandbox.Source{WAT: strings.ReplaceAll(wasiSleeper, "NS", "30000000000")})
	if err != nil {
		t.Fatal(err)
	}
	// A private TMPDIR: other test processes on the machine make file trees too.
	t.Setenv("TMPDIR", t.TempDir())
	tmpDirs := func() int {
		entries, _ := os.ReadDir(os.TempDir())
		n := 0
		for _, en := range entries {
			if strings.HasPrefix(en.Name(), "sandboxd-wasi-files-") {
				n++
			}
		}
		return n
	}
	round := func(n int) {
		for i := 0; i < n; i++ {
			req := sandbox.Request{Module: hello, Limits: hangLimits(), Output: func(string, []byte) {},
				Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Files: map[string][]byte{"/in": []byte("x")}, Stdin: []byte("in")}}}
			if res, err := e.Run(ctx, req); err != nil || res.ExitCode != 1 {
				t.Fatalf("run %d: %v", i, err)
			}
			if i%20 == 0 {
				req = sandbox.Request{Module: sleeper, Limits: hangLimits(), Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{}}}
				req.Limits.Timeout = 2 * time.Millisecond
				if _, err := e.Run(ctx, req); sandbox.KindOf(err) != sandbox.KindTimeout {
					t.Fatalf("sleeper: %v", err)
				}
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				req.Limits.Timeout = time.Minute
				if _, err := e.Run(cctx, req); sandbox.KindOf(err) != sandbox.KindCancelled {
					t.Fatalf("cancelled sleeper: %v", err)
				}
			}
		}
	}
	round(100) // warm up
	settle()
	goroutines, dirs := runtime.NumGoroutine(), tmpDirs()
	rss0, rssOK := vmRSS()
	round(1000)
	if g := goroutinesBackTo(goroutines + 2); g > goroutines+2 {
		t.Errorf("goroutines %d -> %d", goroutines, g)
	}
	if d := tmpDirs(); d > dirs {
		t.Errorf("temporary file trees %d -> %d", dirs, d)
	}
	if rss1, ok := vmRSS(); rssOK && ok {
		t.Logf("RSS %d MiB -> %d MiB over 1000 WASI runs", rss0>>20, rss1>>20)
		if rss1 > rss0+64<<20 {
			t.Errorf("RSS grew by %d MiB", (rss1-rss0)>>20)
		}
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

// TestWASIArgumentOutOfRangeIsTheGuestsTrap: a preview1 argument that
// wasmtime cannot convert (a whence, clock id or flags value out of
// range) is the guest's trap, on one line, naming the function and the
// argument; it was kind host with wasmtime's chain of causes.
func TestWASIArgumentOutOfRangeIsTheGuestsTrap(t *testing.T) {
	for _, c := range []struct{ call, want string }{
		{"(drop (call $seek (i32.const 1) (i64.const 0) (i32.const 99) (i32.const 0)))", "wasi_snapshot_preview1::fd_seek: its Whence argument is out of range"},
		{"(drop (call $clock (i32.const 99) (i64.const 0) (i32.const 0)))", "wasi_snapshot_preview1::clock_time_get: its Clockid argument is out of range"},
	} {
		m := compileWAT(t, `(module
  (import "wasi_snapshot_preview1" "fd_seek" (func $seek (param i32 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") `+c.call+`))`)
		_, err := engine(t).Run(context.Background(), wasiRequest(m, &sandbox.WASI{}))
		se := wantKind(t, err, sandbox.KindTrap)
		if se.TrapCode != sandbox.TrapCodeHost || se.Message != "guest trapped: "+c.want {
			t.Errorf("%s: %+v", c.call, se)
		}
	}
}
