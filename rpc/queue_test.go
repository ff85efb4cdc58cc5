package rpc_test

// Admission, ids and cancellation (queue.go).

import (
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/rpc"
)

func TestServerCancel(t *testing.T) {
	eng := rpctest.NewEngine()
	h := startServer(t, eng, rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil) // queued behind 1
	h.run(`"q"`, "block", nil)
	h.barrier() // both queued, nothing answered

	// Cancel the queued run: answered at once, never started.
	h.notify(rpc.MethodCancel, map[string]any{"id": 2})
	m, _ := h.response(`2`)
	wantError(t, m, -32800, "cancelled")
	if d := errorData(t, m); d["kind"] != "cancelled" {
		t.Errorf("data %v", d)
	}
	// Unknown ids (and the string "2" is not the number 2) are ignored.
	h.notify(rpc.MethodCancel, map[string]any{"id": 99})
	h.notify(rpc.MethodCancel, map[string]any{"id": "1"})
	h.notify(rpc.MethodCancel, map[string]any{"id": 2}) // already answered
	h.notify(rpc.MethodCancel, nil)
	h.notify(rpc.MethodCancel, map[string]any{"id": true})
	h.barrier() // none of them answered anything

	// Cancel the running run.
	start := time.Now()
	h.notify(rpc.MethodCancel, map[string]any{"id": 1})
	m, _ = h.response(`1`)
	wantError(t, m, -32800, "cancelled")
	if d := errorData(t, m); d["kind"] != "cancelled" || d["fuelConsumed"] != 1.0 {
		t.Errorf("data %v", d)
	}
	if el := time.Since(start); el > hangFloor {
		t.Errorf("cancel took %v", el)
	}
	// The string-id run now starts; cancel it by its string id.
	h.waitStarted()
	h.notify(rpc.MethodCancel, map[string]any{"id": "q"})
	m, _ = h.response(`"q"`)
	wantError(t, m, -32800, "cancelled")

	if n := eng.Runs.Load(); n != 2 {
		t.Errorf("engine ran %d runs, want 2 (the cancelled queued run must not start)", n)
	}
	// The server still works.
	h.run(`3`, "run", nil)
	if m, _ := h.response(`3`); m.Error != nil {
		t.Errorf("run after cancels: %+v", m.Error)
	}
	h.request(`4`, rpc.MethodStats, nil)
	m, _ = h.response(`4`)
	var st rpc.StatsResult
	_ = json.Unmarshal(m.Result, &st)
	if st.Runs["cancelled"] != 3 || st.Runs["ok"] != 1 {
		t.Errorf("stats runs %v", st.Runs)
	}
}

func TestServerBusy(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1, MaxQueue: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil) // queued
	h.run(`3`, "run", nil)   // queue full
	m, _ := h.response(`3`)
	wantError(t, m, rpc.CodeBusy, "busy")
	d := errorData(t, m)
	if d["queued"] != 1.0 || d["maxQueue"] != 1.0 {
		t.Errorf("busy data %v", d)
	}
	// Compile shares the queue.
	h.request(`4`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
	m, _ = h.response(`4`)
	wantError(t, m, rpc.CodeBusy, "busy")
	// stats is answered while every worker is busy, and busy is not counted.
	h.request(`5`, rpc.MethodStats, nil)
	m, _ = h.response(`5`)
	var st rpc.StatsResult
	_ = json.Unmarshal(m.Result, &st)
	if st.InFlight != 1 || st.Queued != 1 {
		t.Errorf("stats inFlight %d queued %d", st.InFlight, st.Queued)
	}
	for k, n := range st.Runs {
		if n != 0 {
			t.Errorf("stats runs[%s] = %d, want 0", k, n)
		}
	}
	h.notify(rpc.MethodCancel, map[string]any{"id": 2})
	h.response(`2`)
	h.notify(rpc.MethodCancel, map[string]any{"id": 1})
	h.response(`1`)
}

func TestServerDuplicateID(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`5`, "block", nil)
	h.waitStarted()
	h.run(`5`, "run", nil)
	m, _ := h.response(`5`)
	wantError(t, m, rpc.CodeInvalidRequest, "already used")
	// A queued duplicate too.
	h.run(`"six"`, "run", nil)
	h.run(`"six"`, "run", nil)
	m, _ = h.response(`"six"`)
	wantError(t, m, rpc.CodeInvalidRequest, "already used")
	// The cancel frees the slot six waits for: their responses may come
	// in either order (JSON-RPC orders none across ids).
	h.notify(rpc.MethodCancel, map[string]any{"id": 5})
	got := map[string]*message{}
	for len(got) < 2 {
		m := h.next(5 * time.Second)
		if m.isResponse() {
			got[string(m.ID)] = m
		}
	}
	if got[`5`] == nil || got[`"six"`] == nil {
		t.Fatalf("want the responses to 5 and \"six\", got %v", got)
	}
	wantError(t, got[`5`], -32800, "cancelled")
	if got[`"six"`].Error != nil {
		t.Errorf("queued six: %+v", got[`"six"`].Error)
	}
	// Once answered, an id may be used again.
	h.run(`5`, "run", nil)
	if m, _ := h.response(`5`); m.Error != nil {
		t.Errorf("reused id: %+v", m.Error)
	}
	h.endsWithNoMore()
}

// TestServerReuseIDAfterResponse: a client may reuse an id as soon as it has
// read the response. Several loops answer-and-reuse their own id at once.
// (The server forgets the id before it writes the response, so a client
// that reuses an id as soon as it reads the response is never told
// "already used"; were the order reversed, the window would be narrow and
// -race would widen it enough for this test to see it.)
func TestServerReuseIDAfterResponse(t *testing.T) {
	const loops, iterations = 8, 3000
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: loops})
	route := make([]chan *message, loops)
	for i := range route {
		route[i] = make(chan *message, 1)
	}
	go func() {
		for m := range h.msgs {
			if n, err := strconv.Atoi(string(m.ID)); err == nil && n >= 0 && n < loops {
				route[n] <- m
			}
		}
	}()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for l := 0; l < loops; l++ {
		wg.Add(1)
		go func(l int) {
			defer wg.Done()
			id := strconv.Itoa(l)
			for i := 0; i < iterations && failed.Load() == 0; i++ {
				h.run(id, "run", nil)
				select {
				case m := <-route[l]:
					if m.Error != nil {
						failed.Add(1)
						t.Errorf("id %s, iteration %d: reusing the id right after its response: %d %s", id, i, m.Error.Code, m.Error.Message)
					}
				case <-time.After(5 * time.Second):
					failed.Add(1)
					t.Errorf("id %s: no response", id)
				}
			}
		}(l)
	}
	wg.Wait()
}

// TestServerLargeIDs: ids are echoed exactly as sent, for every string and
// every integer in 0..2^63-1; larger integers get -32600 with id null
// (docs/protocol.md).
func TestServerLargeIDs(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	for _, id := range []string{`0`, `9007199254740993`, `9223372036854775807`, `""`, `"x y"`, `"18446744073709551615"`} {
		h.run(id, "run", nil)
		m := h.next(2 * time.Second)
		if string(m.ID) != id || m.Error != nil {
			t.Errorf("run with id %s: answered id %s error %+v", id, m.ID, m.Error)
		}
	}
	for _, id := range []string{`9223372036854775808`, `18446744073709551615`} {
		h.run(id, "run", nil)
		m := h.next(2 * time.Second)
		if string(m.ID) != "null" || m.Error == nil || m.Error.Code != rpc.CodeInvalidRequest {
			t.Errorf("run with id %s: answered id %s error %+v; want -32600 id null", id, m.ID, m.Error)
		}
	}
}
