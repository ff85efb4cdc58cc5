package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// The guests of testdata/wasi, built from the sources beside them
// (make wasi-guests). Each takes its mode in argv[1].
var wasiGuests = []struct{ lang, file string }{
	{"c", "guest_c.wasm"},
	{"rust", "guest_rust.wasm"},
	{"go", "guest_go.wasm"},
}

var (
	guestOnce    sync.Once
	guestEngine  *sandbox.Engine
	guestDirs    string // the engine's allowed WASI directory
	guestMu      sync.Mutex
	guestModules = map[string]*sandbox.Module{}
)

// guestEnv is one engine for the guests' tests, allowing WASI runs to
// preopen directories under the returned one.
func guestEnv(t testing.TB) (*sandbox.Engine, string) {
	guestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandboxd-wasi-test-")
		if err != nil {
			t.Fatal(err)
		}
		guestDirs = dir
		if guestEngine, err = sandbox.NewEngine(sandbox.Config{WASIDirs: []string{dir}, CompileTimeout: compileHangBound}); err != nil {
			t.Fatal(err)
		}
	})
	return guestEngine, guestDirs
}

// guestModule compiles a testdata/wasi guest once per test binary on the
// guests' engine (the Go one takes seconds).
func guestModule(t testing.TB, file string) *sandbox.Module {
	t.Helper()
	e, _ := guestEnv(t)
	guestMu.Lock()
	defer guestMu.Unlock()
	if m, ok := guestModules[file]; ok {
		return m
	}
	m, _, err := e.Compile(context.Background(), sandbox.Source{Path: filepath.Join("..", "testdata", "wasi", file)})
	if err != nil {
		t.Fatal(err)
	}
	guestModules[file] = m
	return m
}

// runGuest runs a guest with g (its Args prefixed by mode) on e.
func runGuest(t testing.TB, e *sandbox.Engine, file string, g sandbox.WASI, mode ...string) (*sandbox.Result, error) {
	t.Helper()
	g.Args = append(mode, g.Args...)
	return e.Run(context.Background(), sandbox.Request{Module: guestModule(t, file), Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{WASI: &g}})
}

func mustExit(t testing.TB, res *sandbox.Result, err error, code int) *sandbox.Result {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != code {
		t.Fatalf("exit code %d, want %d; stdout %q stderr %q", res.ExitCode, code, res.Output.Stdout, res.Output.Stderr)
	}
	return res
}

func TestWASIGuests(t *testing.T) {
	e, base := guestEnv(t)
	allowed := filepath.Join(base, t.Name())
	if err := os.MkdirAll(allowed, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(allowed) })
	for _, guest := range wasiGuests {
		t.Run(guest.lang, func(t *testing.T) {
			file := guest.file
			t.Run("stdin", func(t *testing.T) {
				in := []byte("bytes\x00in\xfe\xff\n")
				res, err := runGuest(t, e, file, sandbox.WASI{Stdin: in}, "echo")
				res = mustExit(t, res, err, 0)
				if string(res.Output.Stdout) != string(in) {
					t.Errorf("stdout %q, want %q", res.Output.Stdout, in)
				}
			})
			t.Run("args", func(t *testing.T) {
				args := []string{"two words", "ünïcode", "--flag", ""}
				res, err := runGuest(t, e, file, sandbox.WASI{Args: args}, "args")
				res = mustExit(t, res, err, 0)
				if want := strings.Join(args, "\n") + "\n"; string(res.Output.Stdout) != want {
					t.Errorf("stdout %q, want %q", res.Output.Stdout, want)
				}
			})
			t.Run("env is exactly the grant", func(t *testing.T) {
				env := map[string]string{"A": "1", "GREETING": "two words", "EMPTY": ""}
				res, err := runGuest(t, e, file, sandbox.WASI{Env: env}, "env")
				res = mustExit(t, res, err, 0)
				got := strings.Split(strings.TrimSuffix(string(res.Output.Stdout), "\n"), "\n")
				slices.Sort(got)
				if want := []string{"A=1", "EMPTY=", "GREETING=two words"}; !slices.Equal(got, want) {
					t.Errorf("environment %q, want %q", got, want)
				}
			})
			t.Run("files", func(t *testing.T) {
				g := sandbox.WASI{Files: map[string][]byte{"/data/in.txt": []byte("in memory\n"), "/top.txt": []byte("top\n")}}
				g.Args = []string{"/data/in.txt", "/top.txt"}
				res, err := runGuest(t, e, file, g, "cat")
				res = mustExit(t, res, err, 0)
				if string(res.Output.Stdout) != "in memory\ntop\n" {
					t.Errorf("stdout %q", res.Output.Stdout)
				}
				// No other file exists: not the host's, not even with files granted.
				g.Args = []string{"/etc/passwd"}
				res, err = runGuest(t, e, file, g, "cat")
				mustExit(t, res, err, 1)
				res, err = runGuest(t, e, file, sandbox.WASI{Args: []string{"/etc/passwd"}}, "cat")
				mustExit(t, res, err, 1)
				if guest.lang != "go" { // the files tree is read-only
					g.Args = []string{"/data/new.txt", "x"}
					res, err = runGuest(t, e, file, g, "write")
					mustExit(t, res, err, 1)
					g.Args = []string{"/data/in.txt", "overwritten"}
					res, err = runGuest(t, e, file, g, "write")
					mustExit(t, res, err, 1)
				}
			})
			t.Run("exit code", func(t *testing.T) {
				res, err := runGuest(t, e, file, sandbox.WASI{Args: []string{"7"}}, "exit")
				mustExit(t, res, err, 7)
			})
			if guest.lang != "go" {
				t.Run("writable dir", func(t *testing.T) {
					host := filepath.Join(allowed, guest.lang+"-rw")
					if err := os.Mkdir(host, 0o755); err != nil {
						t.Fatal(err)
					}
					g := sandbox.WASI{Dirs: []sandbox.Dir{{Host: host, Guest: "/out", Writable: true}}, Args: []string{"/out/x.txt", "written"}}
					res, err := runGuest(t, e, file, g, "write")
					res = mustExit(t, res, err, 0)
					if b, err := os.ReadFile(filepath.Join(host, "x.txt")); err != nil || string(b) != "written" || string(res.Output.Stdout) != "written" {
						t.Errorf("host file %q (%v), stdout %q", b, err, res.Output.Stdout)
					}
					// Read-only by default: the guest can read, not write.
					g = sandbox.WASI{Dirs: []sandbox.Dir{{Host: host, Guest: "/out"}}, Args: []string{"/out/y.txt", "nope"}}
					res, err = runGuest(t, e, file, g, "write")
					mustExit(t, res, err, 1)
					if _, err := os.Stat(filepath.Join(host, "y.txt")); !os.IsNotExist(err) {
						t.Errorf("a read-only dir was written: %v", err)
					}
					g.Args = []string{"/out/x.txt"}
					res, err = runGuest(t, e, file, g, "cat")
					if res = mustExit(t, res, err, 0); string(res.Output.Stdout) != "written" {
						t.Errorf("reading back: %q", res.Output.Stdout)
					}
				})
			}
			t.Run("sleep past the deadline", func(t *testing.T) {
				req := sandbox.Request{Module: guestModule(t, file), Limits: hangLimits(),
					Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Args: []string{"sleep", "30000"}}}}
				req.Limits.Timeout = 300 * time.Millisecond
				start := time.Now()
				_, err := e.Run(context.Background(), req)
				took := time.Since(start)
				se := wantKind(t, err, sandbox.KindTimeout)
				t.Logf("a 30 s sleep under a 300 ms deadline stopped after %v", took)
				if took > 15*time.Second {
					t.Errorf("took %v", took)
				}
				if strings.Contains(string(se.Output.Stdout), "woke") {
					t.Errorf("the guest woke: %q", se.Output.Stdout)
				}
			})
			t.Run("streams and is cancelled while sleeping", func(t *testing.T) {
				testStreamThenCancel(t, e, file)
			})
			t.Run("memory hog", func(t *testing.T) {
				req := sandbox.Request{Module: guestModule(t, file), Limits: hangLimits(),
					Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Args: []string{"hog"}}}}
				req.Limits.MemoryBytes = 32 << 20
				req.Limits.Timeout = 60 * time.Second
				req.Limits.Fuel = 1 << 40
				_, err := e.Run(context.Background(), req)
				se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
				t.Logf("%s; stderr %q", se.Message, firstLineOf(se.Output.Stderr))
				if se.Usage == nil || se.Usage.PeakMemoryBytes > 32<<20 {
					t.Errorf("usage %+v", se.Usage)
				}
			})
			t.Run("refused without the grant", func(t *testing.T) {
				m := guestModule(t, file)
				_, err := e.Run(context.Background(), sandbox.Request{Module: m, Limits: hangLimits()})
				se := wantKind(t, err, sandbox.KindDisallowedImport)
				for _, imp := range m.Imports {
					if imp.Module == sandbox.WASIModule && !strings.Contains(se.Message, imp.Name) {
						t.Errorf("refusal %q does not name %s", se.Message, imp.Name)
					}
				}
			})
		})
	}
}

func firstLineOf(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}

// testStreamThenCancel runs "tick 1000 100": each tick reaches Output while
// the guest is still running (the test cancels it once the second arrived),
// so the output is streamed, and the cancel stops it asleep between ticks.
// A write may arrive in pieces (wasi-libc writes "tick 1" and "\n" as two
// buffers of one fd_write).
func testStreamThenCancel(t *testing.T, e *sandbox.Engine, file string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var streamed strings.Builder
	second := make(chan struct{})
	req := sandbox.Request{Module: guestModule(t, file), Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Args: []string{"tick", "1000", "100"}}}}
	req.Limits.Timeout = 5 * time.Minute
	req.Limits.Fuel = 1 << 50
	req.Output = func(stream string, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		if stream != sandbox.StreamStdout {
			t.Errorf("%s: %q", stream, data)
		}
		had := strings.Contains(streamed.String(), "tick 2\n")
		streamed.Write(data)
		if !had && strings.Contains(streamed.String(), "tick 2\n") {
			close(second)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Run(ctx, req)
		done <- err
	}()
	select {
	case <-second:
	case err := <-done:
		t.Fatalf("the run ended before two ticks were streamed: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("two ticks were not streamed")
	}
	cancel()
	select {
	case err := <-done:
		se := wantKind(t, err, sandbox.KindCancelled)
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(string(se.Output.Stdout), "tick 1\ntick 2\n") || string(se.Output.Stdout) != streamed.String() {
			t.Errorf("output so far %q, streamed %q", se.Output.Stdout, streamed.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the cancelled guest kept running")
	}
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

// threadCPU is the CPU time (user and system) of the calling thread.
func threadCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
