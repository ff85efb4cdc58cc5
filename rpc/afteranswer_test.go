package rpc

import (
	"testing"
	"time"
)

// Work after the answer (protocol.AfterAnswer, respond): a run's store
// is freed once its answer is out, while the run keeps its slot.

// TestAfterAnswerKeepsTheSlotNotTheCount: with one slot and a queue of
// one, a run whose store is still being freed after its answer holds the
// slot (no other run's store opens meanwhile), but it is answered: it is
// no longer in flight in stats, and a parent that keeps one run and one
// queued in flight, sending the next when it reads an answer, is not
// refused busy.
func TestAfterAnswerKeepsTheSlotNotTheCount(t *testing.T) {
	h := startSlotServer(t, 1)
	h.run(1, "after")
	h.event("after")
	if m := h.answer(1); m["error"] != nil {
		t.Fatalf("run 1: %v", m)
	}
	h.event("after: freeing")
	if st := h.stats(); st.InFlight != 0 || st.Queued != 0 {
		t.Errorf("stats after the answer, its store being freed: inFlight %d queued %d, want 0 and 0", st.InFlight, st.Queued)
	}
	// The answer is out: the parent's next two are within one slot and a
	// queue of one.
	h.run(2, "run")
	h.run(3, "run")
	h.stats() // fails on any answer before it: 3 refused busy
	h.eng.free <- struct{}{}
	h.event("run")
	h.event("run")
	h.answerSet(2, 3)
	h.eng.mu.Lock()
	most, freed, stores := h.eng.mostStores, h.eng.freed, h.eng.stores
	h.eng.mu.Unlock()
	if most != 1 || freed != 1 || stores != 0 {
		t.Errorf("stores at most %d at once on one slot, %d freed after the answer, %d left; want 1, 1, 0", most, freed, stores)
	}
	h.oneAtATime()
}

// TestAfterAnswerCancelIsIgnored: a $/cancelRequest for a run that was
// answered and is freeing its store gets nothing: the run is answered
// once, and its store freed once.
func TestAfterAnswerCancelIsIgnored(t *testing.T) {
	h := startSlotServer(t)
	h.run(1, "after")
	h.event("after")
	h.answer(1)
	h.event("after: freeing")
	h.send(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`)
	h.eng.free <- struct{}{}
	h.run(2, "run")
	h.event("run")
	h.answer(2) // the next message is 2's: nothing more for 1
	if st := h.stats(); st.InFlight != 0 || st.Runs["ok"] != 2 || st.Runs["cancelled"] != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestAfterAnswerPanicKeepsServing: work after an answer that panics is
// logged; the slot is given back and the sidecar goes on serving.
func TestAfterAnswerPanicKeepsServing(t *testing.T) {
	h := startSlotServer(t)
	h.run(1, "afterpanic")
	h.event("afterpanic")
	h.answer(1)
	h.run(2, "run")
	h.event("run")
	if m := h.answer(2); m["error"] != nil {
		t.Fatalf("run after the panic: %v", m)
	}
}

// TestAfterAnswerReadingGoesOn: while the work after an answer waits, on
// whichever goroutine answered (the reader's, for a run it ran itself),
// requests are still read and answered.
func TestAfterAnswerReadingGoesOn(t *testing.T) {
	h := startSlotServer(t)
	h.run(1, "after") // nothing in flight: the reader may run it itself
	h.event("after")
	h.answer(1)
	h.event("after: freeing")
	if st := h.stats(); st.Runs["ok"] != 1 {
		t.Errorf("stats while freeing: %+v", st)
	}
	h.eng.free <- struct{}{}
}

// TestAfterAnswerShutdownWaits: shutdown is answered, and Serve returns
// at the end of input, only once the work after every answer is done (in
// the sidecar the engine is closed after Serve returns: a store freed
// after that would be freed into a closed engine).
func TestAfterAnswerShutdownWaits(t *testing.T) {
	for _, how := range []string{"shutdown", "end of input"} {
		t.Run(how, func(t *testing.T) {
			h := startSlotServer(t)
			h.run(1, "after")
			h.event("after")
			h.answer(1)
			h.event("after: freeing")
			if how == "shutdown" {
				h.send(`{"jsonrpc":"2.0","id":"down","method":"shutdown"}`)
			}
			h.in.Close()
			select { // cannot fail falsely: nothing may come before the store is freed
			case m := <-h.answers:
				if m != nil {
					t.Fatalf("answered %v while a store was being freed", m)
				}
			case <-h.served:
				t.Fatal("Serve returned while a store was being freed")
			case <-time.After(20 * time.Millisecond):
			}
			h.eng.free <- struct{}{}
			if how == "shutdown" {
				if m := <-h.answers; m["id"] != "down" || m["error"] != nil {
					t.Fatalf("shutdown: %v", m)
				}
			}
			select {
			case err := <-h.served:
				h.served <- err // for Cleanup
			case <-time.After(time.Minute): // a hang bound
				t.Fatal("Serve did not return")
			}
			h.eng.mu.Lock()
			defer h.eng.mu.Unlock()
			if h.eng.stores != 0 || h.eng.freed != 1 {
				t.Errorf("after Serve: %d stores left, %d freed after their answer; want 0 and 1", h.eng.stores, h.eng.freed)
			}
		})
	}
}
