package sandboxd

// The client against the real rpc.Server over the fake engine of
// internal/rpctest, through pipes, in both framings.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// recorder keeps a copy of everything the client writes.
type recorder struct {
	io.WriteCloser
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.buf.Write(p)
	r.mu.Unlock()
	return r.WriteCloser.Write(p)
}

func (r *recorder) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Count(r.buf.String(), s)
}

type fixture struct {
	c      *Client
	eng    *rpctest.Engine
	sent   *recorder
	outW   *io.PipeWriter // the server's stdout: closing it kills the stream
	served chan error
}

// serve starts an rpc.Server with a fake engine and a client over io.Pipe.
func serve(t *testing.T, ndjson bool, concurrency int) *fixture {
	t.Helper()
	eng := rpctest.NewEngine()
	opts := rpc.Options{MaxConcurrency: concurrency}
	if ndjson {
		opts.Framing = rpc.FramingNDJSON
	}
	srv, err := rpc.NewServer(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	f := &fixture{eng: eng, sent: &recorder{WriteCloser: inW}, outW: outW, served: make(chan error, 1)}
	go func() {
		err := srv.Serve(context.Background(), inR, outW)
		outW.Close()
		f.served <- err
	}()
	f.c = New(context.Background(), outR, f.sent, ndjson)
	t.Cleanup(func() {
		select {
		case <-f.eng.Gate:
		default:
			close(f.eng.Gate)
		}
		_ = f.c.Close()
		inW.Close()
		select {
		case <-f.served:
		case <-time.After(5 * time.Second):
			t.Errorf("server did not stop")
		}
	})
	return f
}

var mod = ModuleSpec{WAT: Str("(module)")}

func runP(fn string, args ...int) RunParams {
	p := RunParams{Module: mod, Function: fn}
	for _, a := range args {
		p.Args = append(p.Args, json.RawMessage(fmt.Sprint(a)))
	}
	return p
}

func value(t *testing.T, res *RunResult) string {
	t.Helper()
	if res == nil || len(res.Values) != 1 {
		t.Fatalf("want one value, got %+v", res)
	}
	return string(res.Values[0].Value)
}

// bounded fails the test if fn does not return within d.
func bounded(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
	}
}

func framings(t *testing.T, fn func(t *testing.T, ndjson bool)) {
	t.Run("content-length", func(t *testing.T) { fn(t, false) })
	t.Run("ndjson", func(t *testing.T) { fn(t, true) })
}

func TestSequential(t *testing.T) {
	framings(t, func(t *testing.T, ndjson bool) {
		f := serve(t, ndjson, 2)
		ctx := context.Background()
		for i := range 100 {
			res, err := f.c.Run(ctx, runP("pause", i*3), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := value(t, res); got != fmt.Sprint(i*3) {
				t.Fatalf("pause %d = %s", i*3, got)
			}
		}
		cr, err := f.c.Compile(ctx, mod)
		if err != nil || cr.ModuleID != rpctest.ModuleID || len(cr.Exports) != len(rpctest.Exports) {
			t.Fatalf("compile: %+v %v", cr, err)
		}
		st, err := f.c.Stats(ctx)
		if err != nil || st.Runs["ok"] != 100 {
			t.Fatalf("stats: %+v %v", st, err)
		}
		info, err := f.c.Initialize(ctx)
		if err != nil || info.MaxConcurrency != 2 {
			t.Fatalf("initialize: %+v %v", info, err)
		}
		// Errors carry code, message and data.
		_, err = f.c.Run(ctx, runP("nope"), nil)
		var e *Error
		if !errors.As(err, &e) || e.Code != 7 || e.Kind() != "export" || !strings.Contains(string(e.Data), `"function":"nope"`) {
			t.Fatalf("export error: %v", err)
		}
		err = f.c.Call(ctx, "no/such/method", nil, nil)
		if !errors.As(err, &e) || e.Code != protocol.CodeMethodNotFound || e.Kind() != "" {
			t.Fatalf("unknown method: %v", err)
		}
	})
}

func TestConcurrent(t *testing.T) {
	framings(t, func(t *testing.T, ndjson bool) {
		f := serve(t, ndjson, 4)
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		bounded(t, 30*time.Second, "200 calls", func() {
			for g := range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 4 {
						k := g*4 + i
						res, err := f.c.Run(context.Background(), runP("pause", k), nil)
						if err != nil {
							errs <- err
							return
						}
						if got := string(res.Values[0].Value); got != fmt.Sprint(k) {
							errs <- fmt.Errorf("pause %d got %s", k, got)
						}
					}
				}()
			}
			wg.Wait()
		})
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestLogs(t *testing.T) {
	framings(t, func(t *testing.T, ndjson bool) {
		f := serve(t, ndjson, 4)
		var wg sync.WaitGroup
		bounded(t, 30*time.Second, "runs with logs", func() {
			for k := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := 20 + k*7
					var lines []string
					var returned atomic.Bool
					res, err := f.c.Run(context.Background(), runP("logs", k, n), func(seq int, line string) {
						if returned.Load() {
							t.Errorf("run %d: log after Run returned", k)
						}
						if seq != len(lines) {
							t.Errorf("run %d: seq %d after %d lines", k, seq, len(lines))
						}
						lines = append(lines, line)
					})
					returned.Store(true)
					if err != nil {
						t.Errorf("run %d: %v", k, err)
						return
					}
					if res.LogLines != n || len(lines) != n {
						t.Errorf("run %d: %d lines, logLines %d, want %d", k, len(lines), res.LogLines, n)
					}
					for i, l := range lines {
						if l != fmt.Sprintf("%d:%d", k, i) {
							t.Errorf("run %d: line %d = %q", k, i, l)
							break
						}
					}
				}()
			}
			wg.Wait()
		})
	})
}

func TestCancel(t *testing.T) {
	f := serve(t, false, 2)
	// Alone: the cancelled call is the reader. The context ends once the
	// run has started (a run cancelled in the queue never starts).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-f.eng.Started
		cancel()
	}()
	_, err := f.c.Run(ctx, runP("block"), nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != protocol.CodeCancelled || e.Kind() != "cancelled" {
		t.Fatalf("cancelled run: %v", err)
	}
	if n := f.sent.count(`"method":"$/cancelRequest","params":{"id":1}`); n != 1 {
		t.Fatalf("%d cancel notifications for id 1, want 1", n)
	}
	// Alongside a call that may be the reader instead.
	gate := make(chan error, 1)
	go func() {
		_, err := f.c.Run(context.Background(), runP("gate"), nil)
		gate <- err
	}()
	<-f.eng.Started // the gate run
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		<-f.eng.Started
		cancel2()
	}()
	_, err = f.c.Run(ctx2, runP("block"), nil)
	if !errors.As(err, &e) || e.Code != protocol.CodeCancelled {
		t.Fatalf("second cancelled run: %v", err)
	}
	if n := f.sent.count(`"method":"$/cancelRequest","params":{"id":3}`); n != 1 {
		t.Fatalf("%d cancel notifications for id 3, want 1", n)
	}
	close(f.eng.Gate)
	if err := <-gate; err != nil {
		t.Fatalf("gate run: %v", err)
	}
	// A context already done still gets the server's answer.
	done, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if _, err := f.c.Run(done, runP("run"), nil); err != nil && !errors.As(err, &e) {
		t.Fatalf("run with a done context: %v", err)
	}
}

func TestReaderHandoff(t *testing.T) {
	framings(t, func(t *testing.T, ndjson bool) {
		f := serve(t, ndjson, 2)
		slow := make(chan error, 1)
		go func() {
			res, err := f.c.Run(context.Background(), runP("gate"), nil)
			if err == nil && (len(res.Values) != 1 || string(res.Values[0].Value) != "1") {
				err = fmt.Errorf("wrong values %+v", res.Values)
			}
			slow <- err
		}()
		<-f.eng.Started // the slow caller is now (most likely) the reader
		var wg sync.WaitGroup
		bounded(t, 20*time.Second, "fast calls beside a slow one", func() {
			for g := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						k := g*100 + i
						res, err := f.c.Run(context.Background(), runP("pause", k), nil)
						if err != nil || string(res.Values[0].Value) != fmt.Sprint(k) {
							t.Errorf("pause %d: %+v %v", k, res, err)
						}
					}
				}()
			}
			wg.Wait()
		})
		// Every fast caller has returned; the slow one must still get its
		// answer, so someone must be reading.
		close(f.eng.Gate)
		select {
		case err := <-slow:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("slow call never answered")
		}
	})
}

func TestServerDeath(t *testing.T) {
	f := serve(t, false, 4)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := f.c.Run(context.Background(), runP("block"), nil)
			errs <- err
		}()
	}
	for range 3 {
		<-f.eng.Started
	}
	f.outW.Close()
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("pending call: %v, want ErrClosed", err)
			}
		case <-time.After(time.Minute): // a hang bound
			t.Fatal("a pending call hangs after the stream closed")
		}
	}
	if _, err := f.c.Run(context.Background(), runP("run"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after the end: %v", err)
	}
}

func TestClose(t *testing.T) {
	framings(t, func(t *testing.T, ndjson bool) {
		f := serve(t, ndjson, 2)
		if _, err := f.c.Run(context.Background(), runP("run"), nil); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := f.c.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		select {
		case err := <-f.served:
			if err != nil {
				t.Fatalf("Serve = %v after shutdown/exit", err)
			}
			f.served <- nil // for the cleanup
		case <-time.After(5 * time.Second):
			t.Fatal("server still running after Close")
		}
		if _, err := f.c.Run(context.Background(), runP("run"), nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("run after close: %v", err)
		}
		if err := f.c.Call(context.Background(), "stats", nil, nil); !errors.Is(err, ErrClosed) {
			t.Fatalf("call after close: %v", err)
		}
	})
}

// TestStartExitReason spawns a "sidecar" that dies at once: calls fail with
// ErrClosed naming the exit status, and Close still returns.
func TestStartExitReason(t *testing.T) {
	script := filepath.Join(t.TempDir(), "dead-sidecar")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nread line\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Start(context.Background(), script, Options{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if c.Process() == nil {
		t.Fatal("no process")
	}
	err = c.Call(context.Background(), "stats", nil, nil)
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want ErrClosed with exit status 3", err)
	}
	bounded(t, 15*time.Second, "Close", func() { _ = c.Close() })
	if _, err := Start(context.Background(), filepath.Join(t.TempDir(), "missing"), Options{}); err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
}

// BenchmarkSequential is one run round trip through the real rpc.Server.
func BenchmarkSequential(b *testing.B) {
	eng := rpctest.NewEngine()
	srv, _ := rpc.NewServer(eng, rpc.Options{MaxConcurrency: 2})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { _ = srv.Serve(context.Background(), inR, outW); outW.Close() }()
	c := New(context.Background(), outR, inW, false)
	defer c.Close()
	p := runP("run")
	for b.Loop() {
		if _, err := c.Run(context.Background(), p, nil); err != nil {
			b.Fatal(err)
		}
	}
}
