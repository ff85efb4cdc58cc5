package mcpserver

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The gate holds its waiters while more than the high water waits to be
// written, lets them go once it is back at or below it, and for good once
// the connection is shut; a waiter's context ends its wait.
func TestOutputGateHoldsAboveTheHighWater(t *testing.T) {
	g := newOutputGate(10)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.wait(cancelled); err != nil {
		t.Fatalf("below the high water: %v", err)
	}
	g.add(11)
	if err := g.wait(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("above the high water, a cancelled wait: %v", err)
	}
	g.done(1) // 10: at the high water
	if err := g.wait(cancelled); err != nil {
		t.Fatalf("at the high water: %v", err)
	}
	g.add(5)
	released := make(chan error, 1)
	go func() { released <- g.wait(context.Background()) }()
	g.done(5)
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hang):
		t.Fatal("a waiter was not released when the output fell to the high water")
	}
	g.add(100)
	g.shutDown()
	if err := g.wait(cancelled); err != nil {
		t.Fatalf("after shutDown: %v", err)
	}
	g.done(110)
	g.add(100)
	if err := g.wait(cancelled); err != nil || g.waiting() != 100 {
		t.Fatalf("after shutDown, above the high water again: %v, %d waiting", err, g.waiting())
	}
}
