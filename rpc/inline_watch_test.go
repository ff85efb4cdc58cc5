package rpc

import (
	"sync"
	"testing"
	"time"
)

// newTestWatch returns a watch on the real clock and its hand-offs.
func newTestWatch() (*inlineWatch, chan *reader) {
	handed := make(chan *reader, 16)
	return &inlineWatch{handOn: func(rd *reader) { handed <- rd }, now: time.Now}, handed
}

// TestInlineWatchWaitsOutTheRunsGrace: on a clock that stands
// still, the run in progress never outlasts its grace however often the
// timer fires: it re-arms itself and hands nothing on. Once the clock
// moves past the grace, the next firing hands the reading on.
func TestInlineWatchWaitsOutTheRunsGrace(t *testing.T) {
	var mu sync.Mutex
	clock := time.Unix(1e9, 0)
	handed := make(chan *reader, 16)
	w := &inlineWatch{handOn: func(rd *reader) { handed <- rd },
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }}
	rd := &reader{}
	g := w.begin(rd)
	select {
	case <-handed:
		t.Fatal("handed on before the run's grace passed")
	case <-time.After(20 * inlineGrace): // the timer fired, and fired again
	}
	mu.Lock()
	clock = clock.Add(inlineGrace)
	mu.Unlock()
	select {
	case got := <-handed:
		if got != rd {
			t.Fatal("handed on another reader")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timer stopped re-arming while a run was in progress")
	}
	if w.end(g) {
		t.Fatal("end says the role is still ours after it was handed on")
	}
}

// TestInlineWatchRearmsForTheRunInProgress: the timer one run armed fires
// during the next run, which began less than inlineGrace before; it must
// wait out that run's grace and then hand its reading on (not give up
// because the run that armed it is over).
func TestInlineWatchRearmsForTheRunInProgress(t *testing.T) {
	w, handed := newTestWatch()
	first, second := &reader{}, &reader{}
	for round := range 50 {
		a := w.begin(first)
		if !w.end(a) {
			t.Fatalf("round %d: a run that ended at once was handed on", round)
		}
		b := w.begin(second) // the timer is armed: by the first run, or still
		select {
		case rd := <-handed:
			if rd != second {
				t.Fatalf("round %d: handed on the reader of a run that had ended", round)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a run that outlasted its grace kept the reader role", round)
		}
		if w.end(b) {
			t.Fatalf("round %d: end says the role is still ours after it was handed on", round)
		}
	}
}

// TestInlineWatchQuietWhenIdle: after the last run, the timer fires at
// most once more and is then disarmed: an idle server has no timer.
func TestInlineWatchQuietWhenIdle(t *testing.T) {
	w, handed := newTestWatch()
	rd := &reader{}
	for range 100 {
		if !w.end(w.begin(rd)) {
			t.Fatal("a run that ended at once was handed on")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		armed := w.armed
		w.mu.Unlock()
		if !armed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timer is still armed 10 s after the last run")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-handed:
		t.Fatal("a hand-off with no run in progress")
	default:
	}
	// A run after the quiet spell arms it again.
	g := w.begin(rd)
	select {
	case <-handed:
	case <-time.After(10 * time.Second):
		t.Fatal("a run after an idle spell kept the reader role past its grace")
	}
	if w.end(g) {
		t.Fatal("end says the role is still ours after it was handed on")
	}
}
