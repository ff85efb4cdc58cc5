package rpc_test

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// Red team, issue 14: a small run whose module the engine has is prepared
// on the dispatcher (or on the reader), where nothing may block. The
// server asked the engine whether the module was cached, and then called
// Compile; but a module cached when asked can be evicted before Compile
// looks (another compile finishing under a small --cache-entries or
// --cache-bytes), and a path's file can change in between: Compile then
// compiled on the dispatcher, and cancels, stats and shutdown waited for
// it. Measured on the real binary (--cache-entries 1, runs of a cached
// 60 KB text pipelined with compiles of new modules): 12 compiles of 3-14
// ms on the dispatcher in 15 s. The server now takes the module from the
// engine's cache in one step (CompileCached), and anything else goes to a
// goroutine of its own.

// evictingEngine is the fake engine whose "compile:gate" module is cached
// when IsCached asks (the question the server used to ask) and evicted
// by the time anything else looks: its Compile waits for the gate (a
// compile), and CompileCached finds nothing.
type evictingEngine struct{ *fakeEngine }

func (e evictingEngine) IsCached(protocol.Source) bool { return true }

func (e evictingEngine) CompileCached(src protocol.Source) (rpc.Module, bool) {
	if src.WAT == "compile:gate" {
		return nil, false
	}
	return e.fakeEngine.CompileCached(src)
}

// sendTogether writes the bodies in one write, so the reader finds the
// later ones buffered and queues the first for the dispatcher instead of
// running it where it read it.
func sendTogether(t *testing.T, h *harness, bodies ...map[string]any) {
	t.Helper()
	var frames []byte
	for _, b := range bodies {
		body, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, "Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"...)
		frames = append(frames, body...)
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if _, err := h.inW.Write(frames); err != nil {
		t.Fatal(err)
	}
}

// responseWithin waits at most d (a hang bound) for the response to id.
func responseWithin(t *testing.T, h *harness, id string, d time.Duration) *message {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-h.msgs:
			if !ok {
				t.Fatalf("the output ended before the response to %s", id)
			}
			if m.isResponse() && string(m.ID) == id {
				return m
			}
		case <-deadline:
			t.Fatalf("no response to %s within %v: the dispatcher is held", id, d)
		}
	}
}

func TestRedteamCachedRunNeverCompilesOnTheDispatcher(t *testing.T) {
	for _, follow := range []string{"stats", "cancel"} {
		t.Run(follow, func(t *testing.T) {
			eng := evictingEngine{newFakeEngine()}
			srv, err := rpc.NewServer(eng, rpc.Options{MaxConcurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			h := &harness{t: t, srv: srv, eng: eng.fakeEngine, inW: inW, msgs: make(chan *message, 1000), served: make(chan error, 1)}
			go func() {
				h.served <- srv.Serve(context.Background(), inR, outW)
				outW.Close()
			}()
			go h.readLoop(outR)
			gate := eng.gate
			t.Cleanup(func() {
				select {
				case <-gate:
				default:
					close(gate)
				}
				inW.Close()
				select {
				case <-h.served:
				case <-time.After(10 * time.Second):
					t.Errorf("Serve did not return after the input closed")
				}
			})
			run := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "run",
				"params": map[string]any{"module": map[string]any{"wat": "compile:gate"}, "function": "run"}}
			switch follow {
			case "stats":
				sendTogether(t, h, run, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "stats"})
				if m := responseWithin(t, h, "2", 10*time.Second); m.Error != nil {
					t.Fatalf("stats: %+v", m.Error)
				}
				close(gate)
				if m := responseWithin(t, h, "1", time.Minute); m.Error != nil {
					t.Fatalf("run: %+v", m.Error)
				}
			case "cancel":
				sendTogether(t, h, run, map[string]any{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": map[string]any{"id": 1}})
				m := responseWithin(t, h, "1", 10*time.Second)
				if m.Error == nil || m.Error.Code != protocol.CodeCancelled {
					t.Fatalf("run cancelled while its module compiles: want -32800, got %+v %s", m.Error, m.Result)
				}
			}
		})
	}
}

// TestRedteamServeEndsWhenCancelledBetweenReads: Serve's context ends
// (SIGTERM) while the reader is not inside a read, e.g. while it runs a
// short run inline. The reader then stopped at its next turn without
// saying that reading had ended, the dispatcher waited for the inbox
// forever, and Serve for the dispatcher: the sidecar never exited (2 of
// 10 SIGTERMs sent during a stream of sequential runs, with the real
// binary). Each trial cancels at a random moment of such a stream.
func TestRedteamServeEndsWhenCancelledBetweenReads(t *testing.T) {
	for trial := range 60 {
		eng := newFakeEngine()
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
		time.Sleep(time.Duration(trial%7+1) * time.Millisecond)
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
