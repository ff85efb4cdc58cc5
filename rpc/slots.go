package rpc

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// Run slots: the --max-concurrency bound. A job runs guest code (a run,
// an instantiate, a call) only while it holds one of MaxConcurrency
// slots, a golang.org/x/sync/semaphore. Prepared jobs wait for a slot in
// the run queue, in the order they were prepared (FIFO: runs start in the
// order their modules are ready); the queue is a list the dispatcher
// appends to without blocking, and from which a queued job is taken out
// and answered at once when it is cancelled. Whenever a slot may have
// come free (a job prepared, a job answered, a slot given back), the
// queue's head takes it and starts on a goroutine of its own (startQueued),
// owned by the server's errgroup. The reader takes a slot the same way
// for a job it runs itself (startInline), and only when none is queued.
//
// A running job can give its slot back while it waits on something
// outside the sidecar and take one again when that ends (withoutSlot):
// the parent answering a host call (docs/protocol.md), which may itself
// send runs, calls, compiles and stats that need a slot.

// enqueueRun puts a prepared job in the run queue, or answers it cancelled
// if it was cancelled meanwhile or the server is draining; it starts at
// once if a slot is free.
func (s *Server) enqueueRun(j *job) {
	s.mu.Lock()
	if j.ctx.Err() != nil || s.state >= stateDraining {
		s.mu.Unlock()
		s.answerCancelled(j)
		return
	}
	j.phase = phaseQueued
	j.queuedAt = time.Now()
	j.elem = s.runQueue.PushBack(j)
	s.mu.Unlock()
	s.startQueued()
}

// startQueued starts queued jobs, oldest first, while slots are free and
// no job waits to come back to one (withoutSlot).
// Back-pressure: a started job waits to run while the parent is not
// reading (Options.OutputHighWater), holding its slot, so no new run
// starts then.
func (s *Server) startQueued() {
	for {
		s.mu.Lock()
		front := s.runQueue.Front()
		if front == nil || s.state >= stateDraining || s.returning > 0 || !s.slots.TryAcquire(1) {
			s.mu.Unlock()
			return
		}
		j := s.runQueue.Remove(front).(*job)
		j.elem = nil
		j.phase, j.holding = phaseStarting, true
		s.mu.Unlock()
		s.goJob(func() {
			// Counted running from here, where it runs, as stats say: a
			// cancel that finds it running finds it running guest code
			// soon after, not waiting for its goroutine to be scheduled.
			s.mu.Lock()
			s.runLocked(j)
			s.mu.Unlock()
			s.out.waitBelow(s.opts.OutputHighWater)
			s.execute(j)
		})
	}
}

// startInline takes a slot for a prepared job the calling goroutine (the
// reader) runs itself, if one is free and no job is queued; otherwise the
// job is queued (or answered cancelled) and startInline returns false.
func (s *Server) startInline(j *job) bool {
	s.mu.Lock()
	if j.ctx.Err() == nil && s.state < stateDraining && s.runQueue.Len() == 0 && s.slots.TryAcquire(1) {
		j.holding = true
		s.runLocked(j)
		j.queuedAt = time.Now()
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	s.enqueueRun(j)
	return false
}

// runLocked counts a job that holds a slot as running, no longer waiting.
// Call with s.mu held.
func (s *Server) runLocked(j *job) {
	j.phase = phaseRunning
	s.waiting--
	s.queuedBytes -= j.size
	s.running++
}

// leaveSlotLocked is the job's end: it reports whether the job held a
// slot, which the caller then gives back (slotFreed). Call with s.mu held.
func (s *Server) leaveSlotLocked(j *job) bool {
	if !j.holding {
		return false
	}
	j.holding = false
	if j.phase == phaseRunning { // a starting job is not counted yet
		s.running--
	}
	return true
}

// slotFreed gives a slot back to the semaphore and lets the queue use it
// (unless a job waits to come back to one: it gets it).
func (s *Server) slotFreed() {
	s.slots.Release(1)
	s.startQueued()
}

// withoutSlot runs wait, which waits on something outside the sidecar (the
// parent answering a host call), with the running job's slot given back,
// so that the next queued job runs meanwhile: a parent that answers by
// sending runs of its own is served even with --max-concurrency 1. The
// job then takes a slot again before withoutSlot returns, ahead of the
// jobs in the run queue (it holds a store already; finishing it frees
// that). If ctx (the run's: its deadline and cancellation; the drain
// cancels it too) ends while the job waits for a slot, withoutSlot
// returns the context's error holding none; the job ends with it and is
// answered as usual. While away the job counts as running in stats
// (inFlight), not against the slots.
//
// Call it on the goroutine that runs j, while j holds a slot (a job's
// goroutine from startQueued, or the reader's for a job run inline).
func (s *Server) withoutSlot(ctx context.Context, j *job, wait func()) error {
	s.mu.Lock()
	if !s.leaveSlotLocked(j) {
		s.mu.Unlock()
		panic("rpc: withoutSlot of a job that holds no run slot")
	}
	s.away++
	s.mu.Unlock()
	s.slotFreed()

	wait()

	s.mu.Lock()
	s.returning++ // from now on the queue starts nothing: the next free slot is ours
	s.mu.Unlock()
	err := s.slots.Acquire(ctx, 1)
	s.mu.Lock()
	s.returning--
	s.away--
	if err == nil {
		j.holding = true
		s.running++
	}
	s.mu.Unlock()
	s.startQueued() // slots the queue left free for us meanwhile
	return err
}

// yieldSlot runs wait with job j's slot given back (withoutSlot), the
// reader's role handed on first if j runs on the reader: j's waits for
// the parent's answer to a host call, and the engine's for room in its
// pool (slotYield).
func (s *Server) yieldSlot(ctx context.Context, j *job, wait func()) error {
	s.handOnReading(j)
	return s.withoutSlot(ctx, j, wait)
}

// engineContext is the context job j's run is made with: the engine
// waits in it without j's slot (protocol.SlotYield), so a run never
// waits for the pool while holding a slot that the runs holding the pool
// need to finish; and it frees the run's store after j's answer is out
// (protocol.AfterAnswer, respond).
func (s *Server) engineContext(j *job) context.Context {
	ctx := protocol.WithSlotYield(j.ctx, func(ctx context.Context, wait func()) error {
		return s.yieldSlot(ctx, j, wait)
	})
	return protocol.WithAfterAnswer(ctx, func(work func()) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if j.replied {
			return false
		}
		j.afterAnswer = append(j.afterAnswer, work)
		return true
	})
}
