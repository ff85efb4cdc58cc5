package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// Run slots (slots.go). withoutSlot is the host calls' (hostcall.go);
// these tests hold it to its contract alone.

// slotEngine runs guest code only while a job holds a slot, and checks
// that no more than the slots run at once. By function:
//
//	run      returns at once
//	gate     reports it started, waits for the gate (or its cancellation)
//	outside  gives its slot back (the SlotYield of its context: the
//	         server's withoutSlot) until release is closed, then takes
//	         one again and returns
//	after    returns, and frees its store once its answer is out
//	         (protocol.AfterAnswer): reports "after: freeing", then
//	         waits for free
//	afterpanic  returns; the work after its answer panics
//
// Every run holds a store from its start until it is freed (at once,
// or after its answer for after): stores counts them.
type slotEngine struct {
	srv     *Server
	gate    chan struct{}
	release chan struct{}
	free    chan struct{}
	events  chan string // what ran, in order

	mu         sync.Mutex
	inside     int // jobs running guest code now
	most       int
	stores     int // stores not freed yet
	mostStores int
	freed      int // stores freed after their answer
}

func newSlotEngine() *slotEngine {
	return &slotEngine{gate: make(chan struct{}), release: make(chan struct{}), free: make(chan struct{}),
		events: make(chan string, 100)}
}

type slotModule struct{}

func (slotModule) Info() *protocol.ModuleInfo {
	return &protocol.ModuleInfo{ID: "sha256:5555555555555555555555555555555555555555555555555555555555555555", Exports: []protocol.Export{
		{Name: "run", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "gate", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "outside", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "after", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "afterpanic", Kind: "func", Params: []string{}, Results: []string{"i32"}},
	}}
}

// Compile is at once, but a module by path "gate" compiles until the gate
// opens (or the compile is cancelled).
func (e *slotEngine) Compile(ctx context.Context, src protocol.Source) (Module, protocol.CompileInfo, error) {
	if src.Path == "gate" {
		select {
		case <-e.gate:
		case <-ctx.Done():
			return nil, protocol.CompileInfo{}, errSlotCancelled
		}
	}
	return slotModule{}, protocol.CompileInfo{}, nil
}

func (e *slotEngine) CacheStats() protocol.CacheStats { return protocol.CacheStats{} }

func (e *slotEngine) enter() {
	e.mu.Lock()
	e.inside++
	e.most = max(e.most, e.inside)
	e.mu.Unlock()
}

func (e *slotEngine) leave() {
	e.mu.Lock()
	e.inside--
	e.mu.Unlock()
}

func (e *slotEngine) openStore() {
	e.mu.Lock()
	e.stores++
	e.mostStores = max(e.mostStores, e.stores)
	e.mu.Unlock()
}

func (e *slotEngine) closeStore(after bool) {
	e.mu.Lock()
	e.stores--
	if after {
		e.freed++
	}
	e.mu.Unlock()
}

func (e *slotEngine) mostAtOnce() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.most
}

var errSlotCancelled = &protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller"}

func (e *slotEngine) Run(ctx context.Context, _ Module, run protocol.Run) (*protocol.RunOutcome, error) {
	e.enter()
	defer e.leave()
	e.openStore()
	e.events <- run.Function
	switch run.Function {
	case "after":
		protocol.DoAfterAnswer(ctx, func() {
			e.events <- "after: freeing"
			<-e.free
			e.closeStore(true)
		})
		return &protocol.RunOutcome{Values: []protocol.Value{protocol.ValueI32(1)}}, nil
	case "afterpanic":
		protocol.DoAfterAnswer(ctx, func() {
			e.closeStore(true)
			panic("freeing the store broke")
		})
		return &protocol.RunOutcome{Values: []protocol.Value{protocol.ValueI32(1)}}, nil
	}
	defer e.closeStore(false)
	switch run.Function {
	case "gate":
		select {
		case <-e.gate:
		case <-ctx.Done():
			return nil, errSlotCancelled
		}
	case "outside":
		e.leave()                                      // no guest code runs while the job waits outside
		err := protocol.SlotYieldOf(ctx)(ctx, func() { // the server's: withoutSlot
			e.events <- "outside: waiting"
			<-e.release
		})
		e.enter()
		if err != nil {
			e.events <- "outside: cancelled"
			return nil, errSlotCancelled
		}
		e.events <- "outside: back"
	}
	return &protocol.RunOutcome{Values: []protocol.Value{protocol.ValueI32(1)}}, nil
}

// slotServer serves ndjson over pipes to a slotEngine with one slot.
type slotServer struct {
	t       *testing.T
	eng     *slotEngine
	in      *io.PipeWriter
	answers chan map[string]any
	served  chan error // Serve's result, once it returned
}

func startSlotServer(t *testing.T, maxQueue ...int) *slotServer {
	eng := newSlotEngine()
	opts := Options{Framing: FramingNDJSON, MaxConcurrency: 1}
	if len(maxQueue) > 0 {
		opts.MaxQueue = maxQueue[0]
	}
	srv, err := NewServer(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	eng.srv = srv
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	h := &slotServer{t: t, eng: eng, in: inW, answers: make(chan map[string]any, 100), served: served}
	go func() {
		err := srv.Serve(context.Background(), inR, outW)
		outW.Close()
		served <- err
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				panic(err)
			}
			h.answers <- m
		}
		close(h.answers)
	}()
	t.Cleanup(func() {
		close(eng.release)
		close(eng.free)
		inW.Close()
		select {
		case <-served:
		case <-time.After(time.Minute): // a hang bound
			t.Error("Serve did not return")
		}
	})
	return h
}

func (h *slotServer) send(format string, args ...any) {
	if _, err := fmt.Fprintf(h.in, format+"\n", args...); err != nil {
		h.t.Fatal(err)
	}
}

func (h *slotServer) run(id int, fn string) {
	h.send(`{"jsonrpc":"2.0","id":%d,"method":"run","params":{"module":{"id":"sha256:5555555555555555555555555555555555555555555555555555555555555555"},"function":%q}}`, id, fn)
}

// answer is the next response, which must be to id.
func (h *slotServer) answer(id int) map[string]any {
	h.t.Helper()
	select {
	case m := <-h.answers:
		if m["id"] != float64(id) {
			h.t.Fatalf("got %v, want the answer to %d", m, id)
		}
		return m
	case <-time.After(time.Minute): // a hang bound
		h.t.Fatalf("no answer to %d", id)
		return nil
	}
}

// goOutside runs "outside" as id and waits until it has given its slot
// back.
func (h *slotServer) goOutside(id int) {
	h.t.Helper()
	h.run(id, "outside")
	h.event("outside")
	h.event("outside: waiting")
}

// oneAtATime checks that never more jobs than the one slot ran guest code.
func (h *slotServer) oneAtATime() {
	h.t.Helper()
	if most := h.eng.mostAtOnce(); most != 1 {
		h.t.Errorf("%d jobs ran guest code at once on one slot", most)
	}
}

// answerSet waits for the answers to ids, in any order, each once and
// without error.
func (h *slotServer) answerSet(ids ...int) {
	h.t.Helper()
	want := map[float64]bool{}
	for _, id := range ids {
		want[float64(id)] = true
	}
	for range ids {
		select {
		case m := <-h.answers:
			id, _ := m["id"].(float64)
			if !want[id] || m["error"] != nil {
				h.t.Fatalf("got %v, want an answer to one of %v", m, ids)
			}
			delete(want, id)
		case <-time.After(time.Minute): // a hang bound
			h.t.Fatalf("no answer to one of %v", ids)
		}
	}
}

// event waits for the engine's next event, which must be want.
func (h *slotServer) event(want string) {
	h.t.Helper()
	select {
	case got := <-h.eng.events:
		if got != want {
			h.t.Fatalf("engine event %q, want %q", got, want)
		}
	case <-time.After(time.Minute): // a hang bound
		h.t.Fatalf("no engine event, want %q", want)
	}
}

// until waits for cond on the server's state, read under its lock.
func (h *slotServer) until(what string, cond func(*Server) bool) {
	h.t.Helper()
	s := h.eng.srv
	waitUntil(h.t, what, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return cond(s)
	})
}

func (h *slotServer) stats() *protocol.StatsResult {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":"stats","method":"stats"}`)
	m := <-h.answers
	b, _ := json.Marshal(m["result"])
	var st protocol.StatsResult
	if err := json.Unmarshal(b, &st); err != nil || m["id"] != "stats" {
		h.t.Fatalf("stats: %v", m)
	}
	return &st
}

// TestWithoutSlotLetsOtherJobsRun: with one slot, a job that gave its slot
// back lets other runs go meanwhile (so a parent answering a host call by
// sending runs is served), counts as in flight, and runs again once it
// takes a slot back; never more than one job runs guest code.
func TestWithoutSlotLetsOtherJobsRun(t *testing.T) {
	h := startSlotServer(t)
	h.goOutside(1)
	for id := 2; id <= 4; id++ {
		h.run(id, "run")
		h.event("run")
		if m := h.answer(id); m["error"] != nil {
			t.Fatalf("run %d: %v", id, m)
		}
	}
	if st := h.stats(); st.InFlight != 1 || st.Queued != 0 {
		t.Errorf("stats while away: inFlight %d queued %d, want 1 and 0", st.InFlight, st.Queued)
	}
	h.eng.release <- struct{}{}
	h.event("outside: back")
	if m := h.answer(1); m["error"] != nil {
		t.Fatalf("the job that was away: %v", m)
	}
	if st := h.stats(); st.InFlight != 0 || st.Runs["ok"] != 4 {
		t.Errorf("stats after: inFlight %d runs %v", st.InFlight, st.Runs)
	}
	h.oneAtATime()
}

// TestWithoutSlotComesBackFirst: a job coming back from outside waits for
// a slot if none is free, and takes the next one ahead of the runs queued
// before it came back.
func TestWithoutSlotComesBackFirst(t *testing.T) {
	h := startSlotServer(t)
	h.goOutside(1)
	h.run(2, "gate") // takes the slot
	h.event("gate")
	h.run(3, "run") // queued behind 2
	h.eng.release <- struct{}{}
	h.until("job 1 waits to come back to a slot", func(s *Server) bool { return s.returning == 1 })
	if st := h.stats(); st.InFlight != 2 || st.Queued != 1 { // 1 is away, not queued
		t.Errorf("stats while 1 comes back: inFlight %d queued %d, want 2 and 1", st.InFlight, st.Queued)
	}
	close(h.eng.gate)
	h.event("outside: back") // before 3 starts
	h.event("run")
	h.answerSet(1, 2, 3) // 2's slot is free before its answer is written: any order
	h.oneAtATime()
}

// TestWithoutSlotCancelledWhileComingBack: a job cancelled while it waits
// for a slot to come back to is answered cancelled holding none, and the
// slot accounting stays right: the next runs still get the one slot.
func TestWithoutSlotCancelledWhileComingBack(t *testing.T) {
	h := startSlotServer(t)
	h.goOutside(1)
	h.run(2, "gate")
	h.event("gate")
	h.eng.release <- struct{}{}
	h.send(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`)
	h.event("outside: cancelled")
	if m := h.answer(1); m["error"] == nil {
		t.Fatalf("the cancelled job: %v", m)
	}
	close(h.eng.gate)
	h.answer(2)
	h.run(3, "run")
	h.event("run")
	h.answer(3)
	if st := h.stats(); st.InFlight != 0 || st.Queued != 0 || st.Runs["cancelled"] != 1 || st.Runs["ok"] != 2 {
		t.Errorf("stats after: %+v", st)
	}
}

// TestJobGoroutinesBounded: a job has at most one goroutine, and what
// admission takes is bounded (MaxQueue waiting): a flood of compiles that
// all wait holds MaxQueue goroutines, however many are sent; the rest are
// answered busy.
func TestJobGoroutinesBounded(t *testing.T) {
	const maxQueue, flood = 8, 200
	h := startSlotServer(t, maxQueue)
	h.stats() // the server's own goroutines have started
	base := runtime.NumGoroutine()
	for id := 1; id <= flood; id++ {
		h.send(`{"jsonrpc":"2.0","id":%d,"method":"compile","params":{"module":{"path":"gate"}}}`, id)
	}
	busy := 0
	for range flood - maxQueue - 1 { // one more is taken: a free slot counts as not waiting
		m := <-h.answers
		if e, _ := m["error"].(map[string]any); e == nil || e["code"] != float64(CodeBusy) {
			t.Fatalf("want only busy answers while compiles wait, got %v", m)
		}
		busy++
	}
	if n := runtime.NumGoroutine() - base; n > maxQueue+1 {
		t.Errorf("%d goroutines more with %d compiles admitted (%d answered busy)", n, maxQueue+1, busy)
	}
	close(h.eng.gate)
	for range maxQueue + 1 {
		if m := <-h.answers; m["error"] != nil {
			t.Fatalf("an admitted compile: %v", m)
		}
	}
}
