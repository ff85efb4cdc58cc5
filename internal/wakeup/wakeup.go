// Package wakeup is a one-shot signal that a goroutine waits for with its
// thread asleep in the kernel (futex(2) on Linux), woken directly by the
// goroutine that sets it.
//
// Why: the sidecar's host call waits on the thread that runs the guest,
// which wasmtime's call of the import has pinned to its goroutine (a cgo
// callback is locked to its thread). A pinned goroutine parked on a
// channel is woken through the Go scheduler: the waker readies it, an
// idle thread is woken to run it, finds it pinned, hands its P to the
// pinned thread, wakes that thread and goes back to sleep — three thread
// wake-ups on the round trip's critical path, several µs each and far
// more on a loaded machine. Asleep in futex(2), the pinned thread is woken
// by the kernel itself when Set calls FUTEX_WAKE: one wake-up, and the
// thread takes a P back on its way out of the system call (its own, or an
// idle one) without the scheduler's hand-off.
//
// The wait is a system call, so the thread blocks while the P it held is
// given to other goroutines as for any blocking system call. A deadline
// ends it through the kernel's timeout (no Go timer is armed), a context's
// end through Interrupt (context.AfterFunc). Elsewhere than Linux a
// channel does the same job.
package wakeup

import (
	"context"
	"time"
)

// Outcome is how a Wait ended.
type Outcome int

const (
	// Signalled: Set was called.
	Signalled Outcome = iota + 1
	// Interrupted: the context ended (or Interrupt was called).
	Interrupted
	// Expired: the deadline passed.
	Expired
)

// Wait blocks until e is set, ctx ends, or deadline passes (the zero
// time: no deadline), and says which came first, Signalled winning a tie.
// Only one goroutine waits on an Event, once.
func (e *Event) Wait(ctx context.Context, deadline time.Time) Outcome {
	if e.isSet() {
		return Signalled
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, e.Interrupt)
		defer stop()
	}
	return e.wait(deadline)
}
