package wakeup

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestSetBeforeWait(t *testing.T) {
	var e Event
	e.Set()
	e.Set() // twice is fine
	if got := e.Wait(context.Background(), time.Time{}); got != Signalled {
		t.Fatalf("Wait = %v, want Signalled", got)
	}
}

func TestSetWakesWaiter(t *testing.T) {
	for range 200 {
		var e Event
		done := make(chan Outcome, 1)
		go func() { done <- e.Wait(context.Background(), time.Time{}) }()
		e.Set()
		if got := <-done; got != Signalled {
			t.Fatalf("Wait = %v, want Signalled", got)
		}
	}
}

func TestCancelInterrupts(t *testing.T) {
	var e Event
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Outcome, 1)
	go func() { done <- e.Wait(ctx, time.Time{}) }()
	cancel()
	if got := <-done; got != Interrupted {
		t.Fatalf("Wait = %v, want Interrupted", got)
	}
	// A context ended before the wait ends it at once too.
	var f Event
	if got := f.Wait(ctx, time.Time{}); got != Interrupted {
		t.Fatalf("Wait with an ended context = %v, want Interrupted", got)
	}
}

func TestDeadlineExpires(t *testing.T) {
	var e Event
	if got := e.Wait(context.Background(), time.Now().Add(time.Millisecond)); got != Expired {
		t.Fatalf("Wait = %v, want Expired", got)
	}
	if got := e.Wait(context.Background(), time.Now().Add(-time.Second)); got != Expired {
		t.Fatalf("Wait past its deadline = %v, want Expired", got)
	}
}

func TestSignalWinsOverInterrupt(t *testing.T) {
	var e Event
	e.Interrupt()
	e.Set()
	if got := e.Wait(context.Background(), time.Time{}); got != Signalled {
		t.Fatalf("Wait = %v, want Signalled", got)
	}
}

// Many waiters woken by setters and cancels racing them: every wait ends
// (the race detector watches the rest).
func TestRacingSetAndCancel(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 100 {
		var e Event
		ctx, cancel := context.WithCancel(context.Background())
		wg.Add(3)
		go func() { defer wg.Done(); e.Wait(ctx, time.Time{}) }()
		go func() { defer wg.Done(); e.Set() }()
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				cancel()
			}
		}()
		defer cancel()
	}
	wg.Wait()
}
