package sandboxd

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

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// --- a fake engine behind the real rpc.Server ---

// fakeEngine implements rpc.Engine. By function:
//
//	run         returns i32 42
//	echo(k)     returns k, after a pause of k%3 ms so that answers reorder
//	logs(k, n)  logs n lines "k:i", then returns k
//	block       reports it started, then waits for its context (cancelled)
//	gate        reports it started, then waits for the gate, returns 1
type fakeEngine struct {
	started chan string
	gate    chan struct{}
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{started: make(chan string, 1000), gate: make(chan struct{})}
}

// fakeModule is the one module of the fake engine.
type fakeModule struct{ info protocol.ModuleInfo }

func (m *fakeModule) Info() *protocol.ModuleInfo { return &m.info }

func (e *fakeEngine) Compile(ctx context.Context, src protocol.Source) (rpc.Module, protocol.CompileInfo, error) {
	return &fakeModule{protocol.ModuleInfo{ID: "sha256:fake", Exports: []protocol.Export{
		{Name: "run", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "echo", Kind: "func", Params: []string{"i32"}, Results: []string{"i32"}},
		{Name: "logs", Kind: "func", Params: []string{"i32", "i32"}, Results: []string{"i32"}},
	}}}, protocol.CompileInfo{}, nil
}

func (e *fakeEngine) CacheStats() protocol.CacheStats { return protocol.CacheStats{} }

func (e *fakeEngine) Run(ctx context.Context, _ rpc.Module, req protocol.Run) (*protocol.RunOutcome, error) {
	res := &protocol.RunOutcome{}
	switch req.Function {
	case "run":
		res.Values = []protocol.Value{protocol.ValueI32(42)}
	case "echo":
		k := req.Args[0].I32()
		time.Sleep(time.Duration(k%3) * time.Millisecond)
		res.Values = []protocol.Value{protocol.ValueI32(k)}
	case "logs":
		k, n := req.Args[0].I32(), int(req.Args[1].I32())
		for i := range n {
			req.Log(fmt.Sprintf("%d:%d", k, i))
		}
		res.LogLines = n
		res.Values = []protocol.Value{protocol.ValueI32(k)}
	case "block":
		e.started <- "block"
		<-ctx.Done()
		return nil, &protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller"}
	case "gate":
		e.started <- "gate"
		select {
		case <-e.gate:
			res.Values = []protocol.Value{protocol.ValueI32(1)}
		case <-ctx.Done():
			return nil, &protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller"}
		}
	default:
		return nil, &protocol.Error{Kind: protocol.KindExport, Data: protocol.ErrorData{Function: &req.Function}, Message: "no export " + req.Function}
	}
	return res, nil
}

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
	eng    *fakeEngine
	sent   *recorder
	outW   *io.PipeWriter // the server's stdout: closing it kills the stream
	served chan error
}

// serve starts an rpc.Server with a fake engine and a client over io.Pipe.
func serve(t *testing.T, ndjson bool, concurrency int) *fixture {
	t.Helper()
	eng := newFakeEngine()
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
		case <-f.eng.gate:
		default:
			close(f.eng.gate)
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

var mod = rpc.ModuleSpec{WAT: Str("(module)")}

func runP(fn string, args ...int) RunParams {
	p := RunParams{Module: mod, Function: fn}
	for _, a := range args {
		p.Args = append(p.Args, json.RawMessage(fmt.Sprint(a)))
	}
	return p
}

func value(t *testing.T, res *rpc.RunResult) string {
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
			res, err := f.c.Run(ctx, runP("echo", i*3), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := value(t, res); got != fmt.Sprint(i*3) {
				t.Fatalf("echo %d = %s", i*3, got)
			}
		}
		cr, err := f.c.Compile(ctx, mod)
		if err != nil || cr.ModuleID != "sha256:fake" || len(cr.Exports) != 3 {
			t.Fatalf("compile: %+v %v", cr, err)
		}
		st, err := f.c.Stats(ctx)
		if err != nil || st.Runs["ok"] != 100 {
			t.Fatalf("stats: %+v %v", st, err)
		}
		var info rpc.InitializeResult
		if err := f.c.Call(ctx, rpc.MethodInitialize, map[string]any{}, &info); err != nil || info.MaxConcurrency != 2 {
			t.Fatalf("initialize: %+v %v", info, err)
		}
		// Errors carry code, message and data.
		_, err = f.c.Run(ctx, runP("nope"), nil)
		var e *Error
		if !errors.As(err, &e) || e.Code != 7 || e.Kind() != "export" || !strings.Contains(string(e.Data), `"function":"nope"`) {
			t.Fatalf("export error: %v", err)
		}
		err = f.c.Call(ctx, "no/such/method", nil, nil)
		if !errors.As(err, &e) || e.Code != rpc.CodeMethodNotFound || e.Kind() != "" {
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
						res, err := f.c.Run(context.Background(), runP("echo", k), nil)
						if err != nil {
							errs <- err
							return
						}
						if got := string(res.Values[0].Value); got != fmt.Sprint(k) {
							errs <- fmt.Errorf("echo %d got %s", k, got)
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
		<-f.eng.started
		cancel()
	}()
	_, err := f.c.Run(ctx, runP("block"), nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != rpc.CodeCancelled || e.Kind() != "cancelled" {
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
	<-f.eng.started // the gate run
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		<-f.eng.started
		cancel2()
	}()
	_, err = f.c.Run(ctx2, runP("block"), nil)
	if !errors.As(err, &e) || e.Code != rpc.CodeCancelled {
		t.Fatalf("second cancelled run: %v", err)
	}
	if n := f.sent.count(`"method":"$/cancelRequest","params":{"id":3}`); n != 1 {
		t.Fatalf("%d cancel notifications for id 3, want 1", n)
	}
	close(f.eng.gate)
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

// silentServer reads requests and answers only when told, over os.Pipes
// (which have read deadlines, as Start's pipes do) or io.Pipes.
type silentServer struct {
	c       *Client
	reqs    chan map[string]any
	answers *os.File
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{reqs: make(chan map[string]any, 100), answers: outW}
	go func() {
		fr := newFrameReader(inR, false)
		for {
			body, err := fr.next()
			if err != nil {
				close(s.reqs)
				return
			}
			var m map[string]any
			_ = json.Unmarshal(body, &m)
			s.reqs <- m
		}
	}()
	s.c = New(context.Background(), outR, inW, false)
	t.Cleanup(func() { inW.Close(); outW.Close(); outR.Close(); inR.Close() })
	return s
}

func (s *silentServer) answer(id any, result string) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":%s}`, id, result)
	fmt.Fprintf(s.answers, "Content-Length: %d\r\n\r\n%s", len(body), body)
}

func TestCancelGraceRunsOut(t *testing.T) {
	old := cancelGrace
	cancelGrace = 200 * time.Millisecond
	defer func() { cancelGrace = old }()
	s := newSilentServer(t)

	// One call alone: it is blocked reading when its grace runs out, and
	// the read deadline wakes it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.c.Call(ctx, "run", map[string]any{}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	// The grace is honoured (not before 250 ms); the upper bound only
	// detects a call that the read deadline did not wake.
	if d := time.Since(start); d < 250*time.Millisecond || d > time.Minute {
		t.Fatalf("gave up after %v, want about 250ms", d)
	}
	if m := <-s.reqs; m["method"] != "run" {
		t.Fatalf("first request %v", m)
	}
	if m := <-s.reqs; m["method"] != rpc.MethodCancel || m["params"].(map[string]any)["id"] != 1.0 {
		t.Fatalf("second message %v, want a cancel of id 1", m)
	}

	// Two: one with a context that ends, one waiting for an answer. The
	// late answer to the abandoned call is dropped; the other still works.
	got := make(chan error, 1)
	go func() {
		var v int
		err := s.c.Call(context.Background(), "stats", nil, &v)
		if err == nil && v != 7 {
			err = fmt.Errorf("got %d", v)
		}
		got <- err
	}()
	<-s.reqs // stats, id 2
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := s.c.Call(ctx2, "run", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second: %v", err)
	}
	s.answer(3, "1") // too late
	s.answer(2, "7")
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stats call hangs")
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
		<-f.eng.started // the slow caller is now (most likely) the reader
		var wg sync.WaitGroup
		bounded(t, 20*time.Second, "fast calls beside a slow one", func() {
			for g := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						k := g*100 + i
						res, err := f.c.Run(context.Background(), runP("echo", k), nil)
						if err != nil || string(res.Values[0].Value) != fmt.Sprint(k) {
							t.Errorf("echo %d: %+v %v", k, res, err)
						}
					}
				}()
			}
			wg.Wait()
		})
		// Every fast caller has returned; the slow one must still get its
		// answer, so someone must be reading.
		close(f.eng.gate)
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
		<-f.eng.started
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

// --- framing ---

func TestFrameReader(t *testing.T) {
	long := `{"x":"` + strings.Repeat("a", 200000) + `"}`
	cl := "Content-Type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(long), long) +
		"Content-Length:2\r\n\r\n{}"
	fr := newFrameReader(strings.NewReader(cl), false)
	for _, want := range []string{`{"a":1}`, long, `{}`} {
		got, err := fr.next()
		if err != nil || string(got) != want {
			t.Fatalf("got %.40q %v, want %.40q", got, err, want)
		}
	}
	if _, err := fr.next(); err != io.EOF {
		t.Fatalf("end: %v, want EOF", err)
	}

	nd := "{\"a\":1}\n\n  \r\n" + long + "\n{}"
	fr = newFrameReader(strings.NewReader(nd), true)
	for _, want := range []string{`{"a":1}`, long} {
		got, err := fr.next()
		if err != nil || string(got) != want {
			t.Fatalf("ndjson: got %.40q %v, want %.40q", got, err, want)
		}
	}
	if _, err := fr.next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("unterminated line: %v", err)
	}

	for _, bad := range []string{
		"Content-Length: 300000000\r\n\r\n",
		"Content-Length: -1\r\n\r\n",
		"Content-Length: x\r\n\r\n",
		"Content-Type: a\r\n\r\n{}",
		"garbage\r\n\r\n",
		"Content-Length: " + strings.Repeat("1", 70000) + "\r\n",
	} {
		_, err := newFrameReader(strings.NewReader(bad), false).next()
		if !errors.Is(err, errFrame) {
			t.Errorf("%.40q: %v, want a broken frame", bad, err)
		}
	}
	for _, cut := range []string{"Content-Length: 5\r\n", "Content-Length: 5\r\n\r\n{}"} {
		if _, err := newFrameReader(strings.NewReader(cut), false).next(); err != io.ErrUnexpectedEOF {
			t.Errorf("%q: %v, want unexpected EOF", cut, err)
		}
	}
}

func TestWriteFrame(t *testing.T) {
	var b bytes.Buffer
	w := framing.NewWriter(&b, framing.ContentLength)
	w.Write([]byte(`{"a":1}`))
	w.Flush()
	w = framing.NewWriter(&b, framing.NDJSON)
	w.Write([]byte(`{}`))
	w.Flush()
	if got := b.String(); got != "Content-Length: 7\r\n\r\n{\"a\":1}{}\n" {
		t.Fatalf("%q", got)
	}
}

// BenchmarkSequential is one run round trip through the real rpc.Server.
func BenchmarkSequential(b *testing.B) {
	eng := newFakeEngine()
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
