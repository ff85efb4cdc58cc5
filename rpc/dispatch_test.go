package rpc_test

// The reader and the dispatcher (dispatch.go): what the reader answers
// itself, and the runs it runs inline.

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

func TestServerOversizedAndGarbage(t *testing.T) {
	for _, framing := range []rpc.Framing{rpc.FramingContentLength, rpc.FramingNDJSON} {
		t.Run(string(framing), func(t *testing.T) {
			h := startServer(t, rpctest.NewEngine(), rpc.Options{Framing: framing, MaxConcurrency: 1, MaxMessageBytes: 1024})
			h.sendRaw(`{"jsonrpc":"2.0","id":1,"method":"stats","params":{"pad":"` + strings.Repeat("x", 2000) + `"}}`)
			m := h.next(2 * time.Second)
			wantError(t, m, rpc.CodeInvalidRequest, "exceeds --max-message-bytes 1024")
			if string(m.ID) != "null" {
				t.Errorf("id %s", m.ID)
			}
			h.sendRaw(`{not json`)
			m = h.next(2 * time.Second)
			wantError(t, m, rpc.CodeParseError, "")
			h.sendRaw(`[{"jsonrpc":"2.0","id":2,"method":"stats"}]`)
			m = h.next(2 * time.Second)
			wantError(t, m, rpc.CodeInvalidRequest, "batch")
			h.sendRaw(`{"jsonrpc":"2.0","id":-3,"method":"stats"}`)
			m = h.next(2 * time.Second)
			wantError(t, m, rpc.CodeInvalidRequest, "id")
			h.sendRaw(`{"jsonrpc":"2.0","id":3,"result":1}`) // a response: ignored
			h.sendRaw(`{"jsonrpc":"2.0","id":4,"method":"run","params":"x"}`)
			m, _ = h.response(`4`)
			wantError(t, m, rpc.CodeInvalidParams, "params")
			h.request(`5`, rpc.MethodStats, nil)
			if m, _ := h.response(`5`); m.Error != nil {
				t.Errorf("stats after bad input: %+v", m.Error)
			}
		})
	}
}

// TestServerInlineHammer mixes what the reading goroutine runs itself
// (quick runs with nothing else in flight), runs that outlast the inline
// grace (the reader role passes to another goroutine while the run goes
// on), cancels of such runs, stats and compiles, sent one at a time and in
// bursts from several writers: every request gets exactly one response,
// of the right kind.
func TestServerInlineHammer(t *testing.T) {
	eng := rpctest.NewEngine()
	go func() { // block runs report their start; nobody else waits for it here
		for range eng.Started {
		}
	}()
	h := startServer(t, eng, rpc.Options{MaxConcurrency: 2, MaxQueue: 100000})
	t.Cleanup(func() { close(eng.Gate) })
	const n = 1500
	kinds := map[string]string{}
	send := func(i int) {
		id := strconv.Itoa(i)
		module := map[string]any{"id": rpctest.ModuleID}
		switch i % 6 {
		case 0, 1, 2:
			h.request(id, rpc.MethodRun, map[string]any{"module": module, "function": "run"})
		case 3:
			h.request(id, rpc.MethodRun, map[string]any{"module": module, "function": "sleep"})
		case 4:
			h.request(id, rpc.MethodRun, map[string]any{"module": module, "function": "block"})
			h.notify(rpc.MethodCancel, map[string]any{"id": i})
		case 5:
			if i%12 == 5 {
				h.request(id, rpc.MethodStats, nil)
			} else {
				h.request(id, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
			}
		}
	}
	for i := 0; i < n; i++ {
		switch i % 6 {
		case 0, 1, 2, 3:
			kinds[strconv.Itoa(i)] = "ok"
		case 4:
			kinds[strconv.Itoa(i)] = "cancelled"
		case 5:
			kinds[strconv.Itoa(i)] = "ok"
		}
	}
	count := map[string]int{}
	check := func(m *message) {
		id := string(m.ID)
		count[id]++
		switch kinds[id] {
		case "ok":
			if m.Error != nil {
				t.Errorf("request %s: %+v", id, m.Error)
			}
		case "cancelled":
			if m.Error == nil || m.Error.Code != protocol.CodeCancelled {
				t.Errorf("request %s: %+v %s, want cancelled", id, m.Error, m.Result)
			}
		default:
			t.Errorf("response to an id never sent: %s", id)
		}
	}
	// One at a time: each run is the only request in flight.
	for i := 0; i < n/3; i++ {
		send(i)
		for {
			m := h.next(10 * time.Second)
			if m.isResponse() {
				check(m)
				break
			}
		}
	}
	// In bursts, from four writers at once.
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := n/3 + w; i < n; i += 4 {
				send(i)
			}
		})
	}
	for got := n / 3; got < n; {
		m := h.next(10 * time.Second)
		if m.isResponse() {
			check(m)
			got++
		}
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if c := count[strconv.Itoa(i)]; c != 1 {
			t.Errorf("request %d answered %d times", i, c)
		}
	}
	h.endsWithNoMore()
}

// TestServerInlineHandOffAfterQuickRuns: the reader's one watch timer is
// armed by one inline run and serves the next ones (it re-arms itself for
// the run in progress when it fires). A run that blocks right after quick
// ones, whichever of them armed the timer, still hands reading on: stats
// and its cancel are read and answered while it blocks.
func TestServerInlineHandOffAfterQuickRuns(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	fake := map[string]any{"id": rpctest.ModuleID}
	id := 0
	next := func() string { id++; return strconv.Itoa(id) }
	for round := range 20 {
		for range round % 5 {
			q := next()
			h.request(q, rpc.MethodRun, map[string]any{"module": fake, "function": "run"})
			if m, _ := h.response(q); m.Error != nil {
				t.Fatalf("quick run %s: %+v", q, m.Error)
			}
		}
		b := next()
		h.request(b, rpc.MethodRun, map[string]any{"module": fake, "function": "block"})
		h.waitStarted()
		st := next()
		h.request(st, rpc.MethodStats, nil)
		if m, _ := h.response(st); m.Error != nil {
			t.Fatalf("round %d: stats while an inline run blocks: %+v", round, m.Error)
		}
		n, _ := strconv.Atoi(b)
		h.notify(rpc.MethodCancel, map[string]any{"id": n})
		m, _ := h.response(b)
		wantError(t, m, protocol.CodeCancelled, "cancelled")
	}
	h.endsWithNoMore()
}

// TestServerInlineRunHandsReadingOn: a run read with nothing else in
// flight runs on the reading goroutine; while it blocks, what the parent
// sends next (stats, another run, the cancel) is still read and answered,
// because the reader role passes to another goroutine.
func TestServerInlineRunHandsReadingOn(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	h.request(`1`, rpc.MethodRun, map[string]any{"module": map[string]any{"id": rpctest.ModuleID}, "function": "block"})
	h.waitStarted()
	h.request(`2`, rpc.MethodStats, nil)
	if m, _ := h.response(`2`); m.Error != nil {
		t.Fatalf("stats while an inline run blocks: %+v", m.Error)
	}
	h.request(`3`, rpc.MethodRun, map[string]any{"module": map[string]any{"id": rpctest.ModuleID}, "function": "run"})
	if m, _ := h.response(`3`); m.Error != nil {
		t.Fatalf("a run while an inline run blocks: %+v", m.Error)
	}
	h.notify(rpc.MethodCancel, map[string]any{"id": 1})
	m, _ := h.response(`1`)
	wantError(t, m, protocol.CodeCancelled, "cancelled")
	h.endsWithNoMore()
}
