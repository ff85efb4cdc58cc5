package rpc

import (
	"sync"
	"testing"
	"time"
)

// The inline watch on a clock of the test's: the timer is real, but a run
// outlasts its grace only when the test moves the clock, so a loaded
// machine that stalls a goroutine for longer than inlineGrace cannot make
// a run look long. Where a test needs the timer to have fired, it fires
// it itself (fire is the timer's function): the real timer may fire too,
// which changes nothing the test checks.
type watchClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *watchClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *watchClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func newTestWatch() (*inlineWatch, *watchClock, chan *reader) {
	clock := &watchClock{now: time.Unix(1e9, 0)}
	handed := make(chan *reader, 16)
	return &inlineWatch{handOn: func(rd *reader) { handed <- rd }, now: clock.Now}, clock, handed
}

func waitHandOn(t *testing.T, handed chan *reader, want *reader, what string) {
	t.Helper()
	select {
	case rd := <-handed:
		if rd != want {
			t.Fatalf("%s: handed on another reader", what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: a run past its grace kept the reader role", what)
	}
}

func noHandOn(t *testing.T, handed chan *reader, what string) {
	t.Helper()
	select {
	case <-handed:
		t.Fatalf("%s: handed on", what)
	default:
	}
}

// TestInlineWatchWaitsOutTheRunsGrace: while the run in progress is within
// its grace the timer fires, re-arms itself and hands nothing on; once the
// run is past it, the next firing hands the reading on.
func TestInlineWatchWaitsOutTheRunsGrace(t *testing.T) {
	w, clock, handed := newTestWatch()
	rd := &reader{}
	g := w.begin(rd)
	w.fire() // the timer fires, and fires again
	w.fire()
	noHandOn(t, handed, "within the grace")
	clock.advance(inlineGrace)
	waitHandOn(t, handed, rd, "past the grace")
	if w.end(g) {
		t.Fatal("end says the role is still ours after it was handed on")
	}
}

// TestInlineWatchRearmsForTheRunInProgress: the timer one run armed fires
// during the next run; it waits out that run's grace and hands on its
// reader, not the reader of the run that armed it.
func TestInlineWatchRearmsForTheRunInProgress(t *testing.T) {
	w, clock, handed := newTestWatch()
	first, second := &reader{}, &reader{}
	for round := range 20 {
		if !w.end(w.begin(first)) {
			t.Fatalf("round %d: a run within its grace was handed on", round)
		}
		b := w.begin(second) // the timer is armed, by the first run or earlier
		w.fire()
		noHandOn(t, handed, "the second run within its grace")
		clock.advance(inlineGrace)
		waitHandOn(t, handed, second, "the second run past its grace")
		if w.end(b) {
			t.Fatalf("round %d: end says the role is still ours after it was handed on", round)
		}
	}
}

// TestInlineWatchQuietWhenIdle: after the last run the timer fires at most
// once more and is disarmed (an idle server has no timer), and a run
// after that arms it again.
func TestInlineWatchQuietWhenIdle(t *testing.T) {
	w, clock, handed := newTestWatch()
	rd := &reader{}
	for range 100 {
		if !w.end(w.begin(rd)) {
			t.Fatal("a run within its grace was handed on")
		}
	}
	w.fire() // the timer's next firing finds no run in progress
	w.mu.Lock()
	armed := w.armed
	w.mu.Unlock()
	if armed {
		t.Fatal("the timer is still armed after firing with no run in progress")
	}
	noHandOn(t, handed, "no run in progress")
	g := w.begin(rd)
	clock.advance(inlineGrace)
	waitHandOn(t, handed, rd, "a run after an idle spell, past its grace")
	if w.end(g) {
		t.Fatal("end says the role is still ours after it was handed on")
	}
}
