package mcpserver

import (
	"context"
	"sync"
)

// Back-pressure on a client that does not read. Every message the server
// writes is counted from the moment it is encoded until it is on the
// pipe (waiting for the pipe, or for another message's write, included).
// While more than the high water (Options.OutputHighWater) waits, the
// reader returns no further call to the SDK (it holds the one it read, so
// the client's writes block once the pipe's buffer is full) and no run
// starts (a call that has taken its run slot waits, holding it). What
// waits to be written is then at most the high water plus the answers
// and progress of the runs already started (at most MaxConcurrency, each
// bounded by its limits) and of the calls already read (MaxQueue,
// MaxQueueBytes). Nothing is dropped: once the client reads, what waits
// is written, and reading and running resume.
//
// Notifications and responses are not held: a client's
// notifications/cancelled read before the held call still reaches the
// SDK at once (the SDK handles it on its reading goroutine). One behind
// the held call is read when the client has read enough of its output.

// outputGate counts the bytes waiting to be written against the high
// water.
type outputGate struct {
	high int64

	mu      sync.Mutex
	pending int64
	below   chan struct{} // closed while pending <= high; replaced when it rises above
	shut    bool
}

func newOutputGate(high int64) *outputGate {
	g := &outputGate{high: high, below: make(chan struct{})}
	close(g.below)
	return g
}

// add counts n bytes about to be written.
func (g *outputGate) add(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	wasBelow := g.pending <= g.high
	g.pending += n
	if wasBelow && g.pending > g.high && !g.shut {
		g.below = make(chan struct{})
	}
}

// done uncounts n bytes: written, or failed to be.
func (g *outputGate) done(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	wasAbove := g.pending > g.high
	g.pending -= n
	if wasAbove && g.pending <= g.high && !g.shut {
		close(g.below)
	}
}

// wait blocks while more than the high water waits to be written. It
// returns ctx's error if ctx ends first, nil otherwise (also once the
// gate is shut: the connection has closed and nothing more is written).
func (g *outputGate) wait(ctx context.Context) error {
	g.mu.Lock()
	below := g.below
	g.mu.Unlock()
	select {
	case <-below:
		return nil
	default:
	}
	select {
	case <-below:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutDown opens the gate for good: the connection is closed, so every
// write fails at once and nobody need wait for the client.
func (g *outputGate) shutDown() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.shut && g.pending > g.high {
		close(g.below)
	}
	g.shut = true
}

// waiting returns the bytes waiting to be written.
func (g *outputGate) waiting() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pending
}
