package rpc_test

// The server's life (lifecycle.go): shutdown, exit, the end of input, a
// broken framing, a parent that never reads, a context that ends; and its
// options.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/rpc"
)

func TestNewServerOptions(t *testing.T) {
	for _, o := range []rpc.Options{
		{Framing: "xml"},
		{MaxConcurrency: -1},
		{MaxQueue: -1},
		{MaxMessageBytes: 10},
		{Maximums: limits.HardMaximums(), Defaults: limits.Limits{Fuel: 1}},
	} {
		if _, err := rpc.NewServer(rpctest.NewEngine(), o); err == nil {
			t.Errorf("NewServer(%+v) accepted", o)
		}
	}
}

func TestServerShutdown(t *testing.T) {
	eng := rpctest.NewEngine()
	h := startServer(t, eng, rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "gate", nil)
	h.waitStarted()
	h.run(`2`, "run", nil) // queued: still in flight, must finish too
	h.request(`10`, rpc.MethodShutdown, nil)
	h.run(`11`, "run", nil)
	m, _ := h.response(`11`) // the first response: shutdown waits for the runs
	wantError(t, m, rpc.CodeInvalidRequest, "shutting down")
	h.request(`12`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
	m, _ = h.response(`12`)
	wantError(t, m, rpc.CodeInvalidRequest, "shutting down")
	// stats still works.
	h.request(`13`, rpc.MethodStats, nil)
	if m, _ := h.response(`13`); m.Error != nil {
		t.Errorf("stats during shutdown: %+v", m.Error)
	}
	close(eng.Gate)
	// 1's slot is free before its answer is written: 2 may be answered
	// first (it was, about once in a hundred runs under -race).
	for id, m := range h.responses(`1`, `2`) {
		if m.Error != nil {
			t.Errorf("run %s: %+v", id, m.Error)
		}
	}
	m, _ = h.response(`10`)
	if m.Error != nil || string(m.Result) != "null" {
		t.Errorf("shutdown: result %s error %+v", m.Result, m.Error)
	}
	h.run(`14`, "run", nil)
	m, _ = h.response(`14`)
	wantError(t, m, rpc.CodeInvalidRequest, "shutting down")
	h.notify(rpc.MethodExit, nil)
	if err := h.serveResult(2 * time.Second); err != nil {
		t.Errorf("Serve after shutdown and exit = %v, want nil", err)
	}
}

// TestServerExit: exit returns from Serve with nil after shutdown and with
// ErrExitWithoutShutdown without it, whatever the timing of the read loop.
func TestServerExit(t *testing.T) {
	for i := 0; i < 10; i++ {
		t.Run("without shutdown", func(t *testing.T) {
			h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
			h.notify(rpc.MethodExit, nil)
			if err := h.serveResult(2 * time.Second); !errors.Is(err, rpc.ErrExitWithoutShutdown) {
				t.Errorf("Serve = %v (%T), want ErrExitWithoutShutdown", err, err)
			}
		})
		t.Run("after shutdown", func(t *testing.T) {
			h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
			h.request(`1`, rpc.MethodShutdown, nil)
			m, _ := h.response(`1`)
			if m.Error != nil || string(m.Result) != "null" {
				t.Errorf("shutdown: %s %+v", m.Result, m.Error)
			}
			h.notify(rpc.MethodExit, nil)
			if err := h.serveResult(2 * time.Second); err != nil {
				t.Errorf("Serve = %v (%T), want nil", err, err)
			}
		})
	}
}

func TestServerExitCancelsRuns(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil)
	h.notify(rpc.MethodExit, nil)
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		m := h.next(2 * time.Second)
		wantError(t, m, -32800, "cancelled")
		got[string(m.ID)] = true
	}
	if !got["1"] || !got["2"] {
		t.Errorf("answered %v", got)
	}
	h.serveResult(2 * time.Second)
}

func TestServerInputEOF(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil) // queued
	h.run(`3`, "gate", nil)  // queued
	start := time.Now()
	h.inW.Close()
	got := map[string]bool{}
	for i := 0; i < 3; i++ {
		m := h.next(time.Second)
		wantError(t, m, -32800, "cancelled")
		if got[string(m.ID)] {
			t.Errorf("two responses to %s", m.ID)
		}
		got[string(m.ID)] = true
	}
	if err := h.serveResult(time.Second); err != nil {
		t.Errorf("Serve at EOF = %v, want nil", err)
	}
	if el := time.Since(start); el > hangFloor {
		t.Errorf("took %v", el)
	}
	if m, ok := <-h.msgs; ok {
		t.Errorf("extra message after EOF: %+v", m)
	}
}

func TestServerFramingError(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "run", nil) // queued
	h.wmu.Lock()
	_, _ = io.WriteString(h.inW, "Content-Length: twelve\r\n\r\n{}")
	h.wmu.Unlock()
	// Both runs are answered cancelled, and the broken frame itself with
	// an error (id null) that says what was wrong.
	got := map[string]bool{}
	for i := 0; i < 3; i++ {
		m := h.next(2 * time.Second)
		if string(m.ID) == "null" {
			wantError(t, m, rpc.CodeParseError, "Content-Length")
		} else {
			wantError(t, m, -32800, "cancelled")
		}
		got[string(m.ID)] = true
	}
	if !got["1"] || !got["2"] || !got["null"] {
		t.Errorf("answered %v", got)
	}
	err := h.serveResult(2 * time.Second)
	var fe *rpc.FramingError
	if !errors.As(err, &fe) || !strings.Contains(fe.Error(), "Content-Length") {
		t.Errorf("Serve = %v, want a *FramingError about Content-Length", err)
	}
}

// TestServeReturnsWhenParentNeverReads: with a small output high water and
// a parent that never reads, Serve returns soon after the input closes
// (the output is abandoned after DrainTimeout), having waited for every
// goroutine it started (issue 10 item 11: it did not return at all).
func TestServeReturnsWhenParentNeverReads(t *testing.T) {
	srv, err := rpc.NewServer(rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1, OutputHighWater: 1024, DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	_, outW := io.Pipe() // never read
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), inR, outW) }()
	for i := range 4 {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"run","params":{"module":{"wat":"x"},"function":"log:2000"}}`, i)
		if _, err := fmt.Fprintf(inW, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			t.Fatal(err)
		}
	}
	inW.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of the input closing, with a parent that never reads")
	}
}

// TestServeEndsWhenCancelledBetweenReads (red team, issue 14): Serve's context ends
// (SIGTERM) while the reader is not inside a read, e.g. while it runs a
// short run inline. The reader then stopped at its next turn without
// saying that reading had ended, the dispatcher waited for the inbox
// forever, and Serve for the dispatcher: the sidecar never exited (2 of
// 10 SIGTERMs sent during a stream of sequential runs, with the real
// binary). Each trial cancels at a random moment of such a stream.
func TestServeEndsWhenCancelledBetweenReads(t *testing.T) {
	for trial := range 60 {
		eng := rpctest.NewEngine()
		srv, err := rpc.NewServer(eng, rpc.Options{MaxConcurrency: 2, Framing: rpc.FramingNDJSON})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		served := make(chan error, 1)
		go func() {
			served <- srv.Serve(ctx, inR, outW)
			outW.Close()
		}()
		// A parent that sends one run at a time and reads its answer.
		go func() {
			defer inW.Close()
			buf := make([]byte, 64<<10)
			for i := 0; ; i++ {
				req := `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"run","params":{"module":{"wat":"(module)"},"function":"run"}}` + "\n"
				if _, err := io.WriteString(inW, req); err != nil {
					return
				}
				if _, err := outR.Read(buf); err != nil {
					return
				}
			}
		}()
		time.Sleep(time.Duration(trial%7+1) * time.Millisecond) // not to wait for anything: the moment of the cancel, varied
		cancel()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatalf("trial %d: Serve did not return within 10 s of its context ending", trial)
		}
		inR.Close()
		outR.Close()
	}
}

// TestServeEndsWithoutAStuckJob: at the end of input, a job whose task
// does not end when cancelled (a compile stuck in a system call) neither
// keeps Serve from returning nor goes unanswered: it is answered
// cancelled, and Unfinished counts it.
func TestServeEndsWithoutAStuckJob(t *testing.T) {
	eng := rpctest.NewEngine()
	defer close(eng.Gate) // the stuck compile ends with the test
	h := startServer(t, eng, rpc.Options{DrainTimeout: 100 * time.Millisecond})
	h.request(`"stuck"`, "compile", map[string]any{"module": map[string]any{"wat": "compile:stuck"}})
	h.waitStarted()
	h.inW.Close()
	wantError(t, h.next(hangFloor), -32800, "cancelled")
	if err := h.serveResult(hangFloor); err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	if n := h.srv.Unfinished(); n != 1 {
		t.Errorf("Unfinished = %d, want the stuck job", n)
	}
	if m, ok := <-h.msgs; ok {
		t.Errorf("extra message: %+v", m)
	}
}
