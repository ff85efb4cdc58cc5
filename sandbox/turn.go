package sandbox

// Turns: the calls to one instance run one at a time, in the order they
// took their turn (Enqueue), which a server does where it reads requests,
// before any goroutine or worker can reorder them.

import (
	"context"
	"time"
)

// Turn is a place in an instance's queue of calls. A server takes turns in
// the order requests arrive and runs them later, on workers.
type Turn struct {
	in      *Instance
	ready   chan struct{} // closed once the verdict is in; nil: granted at once
	verdict bool          // granted (true) or the instance closed; set under in.mu before ready closes
	granted bool          // the turn is held (and not yet handed on)
	used    bool          // Call ran, or Abandon gave the turn back
	err     error
	queued  time.Time
}

// Enqueue takes the next place in the instance's queue. The turn must be
// used by Call or given back with Abandon.
func (in *Instance) Enqueue() *Turn {
	t := &Turn{in: in, queued: time.Now()}
	in.update(func(st *instanceState) {
		switch {
		case st.closed != nil:
			t.err, t.used = st.closed, true
		case !st.busy:
			st.busy, t.granted = true, true // evict sees busy: the idle timer runs on
		default:
			t.ready = make(chan struct{})
			st.waiting = append(st.waiting, t)
		}
	})
	return t
}

// closedChan is a channel that is always ready.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Ready returns a channel that is closed once Call would not wait for the
// turn: the calls before it are done, or the instance closed (Call then
// fails at once). A server waits on it (or polls it) instead of holding a
// worker in Call.
func (t *Turn) Ready() <-chan struct{} {
	if t.ready == nil {
		return closedChan
	}
	return t.ready
}

// grant tells a waiting turn its verdict. Call with in.mu held.
func (t *Turn) grant(ok bool) {
	t.verdict = ok
	close(t.ready)
}

// wait blocks until the turn comes, the instance closes or ctx ends.
func (t *Turn) wait(ctx context.Context) error {
	if t.err != nil || t.granted {
		return t.err
	}
	select {
	case <-t.ready:
		t.granted = t.takeVerdict()
		if !t.granted {
			return t.in.closedErr()
		}
		return nil
	case <-ctx.Done():
		t.Abandon()
		return cancelledError()
	}
}

// Abandon gives the turn back without calling (for a request cancelled
// while queued). After Call, or a second time, it does nothing.
func (t *Turn) Abandon() {
	if t.used {
		return
	}
	t.used = true
	if t.ready != nil && !t.granted {
		waiting := false
		t.in.update(func(st *instanceState) {
			for i, w := range st.waiting {
				if w == t {
					st.waiting = append(st.waiting[:i], st.waiting[i+1:]...)
					waiting = true
					return
				}
			}
			t.granted = t.verdict // no longer waiting, so the verdict is in
		})
		if waiting {
			return
		}
	}
	if t.granted {
		t.granted = false
		t.in.release()
	}
}

// takeVerdict reads the verdict of a turn whose ready channel closed.
func (t *Turn) takeVerdict() (ok bool) {
	t.in.update(func(*instanceState) { ok = t.verdict })
	return ok
}

// Call waits for the turn and runs req.
func (t *Turn) Call(ctx context.Context, req CallRequest) (*CallResult, error) {
	if t.used && t.err == nil {
		return nil, newError(KindHost, "a turn can be used once")
	}
	if err := t.wait(ctx); err != nil {
		t.used = true
		return nil, err
	}
	in := t.in
	t.granted, t.used = false, true
	defer in.release()
	if err := in.closedErr(); err != nil { // closed while this turn was held, unused
		return nil, err
	}
	queued := time.Since(t.queued)
	res, err := in.call(ctx, req)
	if res != nil {
		res.Queued = queued
	}
	return res, err
}
