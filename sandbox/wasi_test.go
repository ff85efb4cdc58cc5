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
