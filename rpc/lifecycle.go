package rpc

import (
	"container/list"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/protocol"
)

// ErrExitWithoutShutdown is returned by Serve when `exit` came before
// `shutdown`; the process should exit 1, as in LSP.
var ErrExitWithoutShutdown = errors.New("exit without shutdown")

// state is where the server is in its life. It only moves forward, and
// only Serve's goroutine moves it past stateShuttingDown.
type state int

const (
	// stateOpen: requests are admitted.
	stateOpen state = iota
	// stateShuttingDown: `shutdown` arrived. New runs and compiles are
	// refused; what was admitted finishes (bounded by its own limits) and
	// is answered, then shutdown is answered.
	stateShuttingDown
	// stateDraining: the end (input ended without shutdown, exit, a
	// framing error, the context): queued work is answered cancelled,
	// running work is cancelled and answered by its goroutine, and the
	// output gets DrainTimeout to reach the parent.
	stateDraining
	// stateClosed: Serve has returned.
	stateClosed
)

// Server serves one connection. Create with NewServer, then call Serve once.
type Server struct {
	eng   Engine
	opts  Options
	log   *slog.Logger
	start time.Time
	out   *outbox

	mu          sync.Mutex
	state       state
	served      bool
	exitErr     error
	runQueue    list.List      // *job prepared, waiting for a run slot, FIFO (slots.go)
	jobs        map[idKey]*job // admitted and not yet answered, by id
	waiting     int            // jobs admitted and not yet holding a run slot
	queuedBytes int64          // the message sizes of those jobs
	running     int            // jobs holding a run slot, not yet answered
	away        int            // running jobs that gave their slot back for a while (withoutSlot)
	returning   int            // those of them waiting to take one again
	inLine      int            // calls among the waiting jobs whose instance's turn has not come (instance.go)
	replying    int            // responses being handed to the outbox
	shutdownIDs []jsonrpc2.ID  // shutdown requests, answered once idle
	idle        chan struct{}  // closed once shutting down and no work is left
	stats       counters

	slots *semaphore.Weighted // MaxConcurrency run slots (slots.go)
	hosts *hostCalls          // the host calls in flight (hostcall.go)
	watch *inlineWatch        // hands the reading on from a request run inline (dispatch.go)
	// tasks owns every goroutine of an admitted job: its preparation (a
	// compile, a large message, a call waiting for its instance) and its
	// run. Each job has at most one at a time (its run's starts as its
	// preparation's ends), so with admission (MaxQueue waiting, by entries
	// and by bytes) and the slots they number at most about MaxQueue +
	// MaxConcurrency. Serve waits for them.
	tasks errgroup.Group
	// tasksLive counts the tasks of tasks not yet returned, and
	// unfinished those that had not when Serve gave up on them (drain).
	tasksLive  atomic.Int64
	unfinished atomic.Int64
	// loops are the reader (and each goroutine that takes the reader's
	// role over, see runInline) and the dispatcher. Serve waits for them.
	loops sync.WaitGroup
}

// goJob runs fn, the work of an admitted job, on a goroutine of tasks.
// The job answers its own errors: fn returns none.
func (s *Server) goJob(fn func()) {
	s.tasksLive.Add(1)
	s.tasks.Go(func() error {
		defer s.tasksLive.Add(-1)
		fn()
		return nil
	})
}

// Unfinished is how many jobs' tasks had not returned when Serve did.
// The drain waits half of DrainTimeout for the tasks it cancelled (the
// rest is for the answers to reach the parent); a task still running
// then (stuck in a system call no cancellation reaches, such as an open
// or a read of a file that never answers) is left behind: its job is
// answered cancelled, and the answer the task may give later is dropped.
// A program whose Engine such a task still uses should not close the
// engine (its Close waits for what runs in it): it should exit.
func (s *Server) Unfinished() int { return int(s.unfinished.Load()) }

// NewServer validates opts and returns a server over eng.
func NewServer(eng Engine, opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{eng: eng, opts: o, log: o.Logger, start: time.Now(),
		jobs: map[idKey]*job{}, idle: make(chan struct{}),
		stats: counters{runs: map[string]uint64{}}, slots: semaphore.NewWeighted(int64(o.MaxConcurrency)),
		hosts: newHostCalls(o.MaxQueueBytes)}
	return s, nil
}

// Serve reads requests from rd and writes responses to out until the input
// ends (it returns nil), `exit` arrives (nil, or ErrExitWithoutShutdown),
// the framing breaks (a *FramingError) or ctx ends (nil). Every request
// read gets exactly one response before Serve returns, as long as out
// accepts writes.
//
// If `shutdown` came first, the end of input (or exit) lets what was
// admitted finish and be answered; otherwise it cancels it (the parent is
// gone). Serve then gives the output DrainTimeout to reach the parent and
// abandons it after that (a write deadline on out if it has one, else
// closing it if it is an io.Closer). To stop reading early (exit, ctx),
// Serve closes rd if it is an io.Closer. Serve returns once every
// goroutine it started has ended, except the task of a job that has not
// returned DrainTimeout/2 after the drain cancelled it (Unfinished).
func (s *Server) Serve(ctx context.Context, rd io.Reader, out io.Writer) error {
	s.mu.Lock()
	if s.served {
		s.mu.Unlock()
		return errors.New("rpc: Serve called twice")
	}
	s.served = true
	s.mu.Unlock()

	s.out = newOutbox(out, s.opts.Framing)
	var writer sync.WaitGroup
	writer.Go(s.out.run)
	in := newInbox()
	inputEnded := make(chan struct{}) // the reader has stopped: end of input, or a read error
	s.watch = &inlineWatch{handOn: func(rd *reader) { s.loops.Go(rd.run) }, now: time.Now}
	reader := &reader{s: s, r: framing.NewReader(rd, s.opts.Framing, s.opts.MaxMessageBytes), in: in, eof: inputEnded,
		watch: s.watch}
	s.loops.Go(reader.run)
	var end readEnd
	dispatched := make(chan struct{}) // the dispatcher has handled everything read, or exit
	s.loops.Go(func() {
		end = s.dispatchLoop(in)
		close(dispatched)
	})

	select {
	case <-dispatched:
	case <-ctx.Done():
	case <-inputEnded:
		// The parent closed its end. What it sent before is still handled,
		// in order; if the dispatcher is held by a parent that also does not
		// read, the output is abandoned so that it can finish.
		if !s.until(ctx, dispatched) && ctx.Err() == nil {
			s.log.Warn("the parent closed its input and does not read its output: abandoning the output")
			s.out.abandon()
			<-dispatched
		}
	}
	finished := isClosed(dispatched)
	if finished && s.shuttingDown() {
		// Shutdown came before the end of input (or exit): what was
		// admitted finishes and is answered.
		s.until(ctx, s.idle)
	}
	if finished && end.exit {
		s.mu.Lock()
		if s.state == stateOpen {
			s.exitErr = ErrExitWithoutShutdown
		}
		s.mu.Unlock()
	}
	// From here on the parent gets DrainTimeout to read what it is owed;
	// then the output is abandoned, which also frees a job or the
	// dispatcher blocked on it, so nothing below can wait for longer.
	abandon := time.AfterFunc(s.opts.DrainTimeout, s.out.abandon)
	in.stop()
	s.drain(rd, !isClosed(inputEnded), time.Now().Add(s.opts.DrainTimeout/2))
	if err := s.out.close(); err != nil {
		s.log.Warn("output not fully written", "error", err)
	}
	abandon.Stop()
	writer.Wait()
	s.mu.Lock()
	s.state = stateClosed
	exitErr := s.exitErr
	s.mu.Unlock()

	var fe *FramingError
	if errors.As(end.err, &fe) {
		return fe
	}
	return exitErr
}

// shuttingDown reports whether shutdown has been requested.
func (s *Server) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateShuttingDown
}

// until waits for done and reports whether it came. It gives up (false)
// when ctx ends, the output is abandoned, or the parent has stopped
// reading: output waits and none of it has been written for DrainTimeout.
func (s *Server) until(ctx context.Context, done <-chan struct{}) bool {
	tick := time.NewTicker(max(s.opts.DrainTimeout/8, time.Millisecond))
	defer tick.Stop()
	last, since := s.out.written(), time.Now()
	for {
		select {
		case <-done:
			return true
		case <-ctx.Done():
			return false
		case <-tick.C:
			if s.out.isBroken() {
				return false
			}
			w, pending := s.out.written(), s.out.pendingBytes()
			if w != last || pending == 0 {
				last, since = w, time.Now()
				continue
			}
			if time.Since(since) > s.opts.DrainTimeout {
				s.log.Warn("the parent stopped reading: giving up on the work it is owed")
				return false
			}
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// drain is the end: it stops admitting work, answers what is queued as
// cancelled, cancels what is preparing or running (its goroutine answers),
// stops the read loop if it still runs, and waits for every task until
// giveUp. (Serve abandons the output DrainTimeout after the drain began,
// so a job blocked writing to a parent that does not read returns.) A
// task still running at giveUp is deaf to its cancellation: it is left
// behind and counted in Unfinished, so that nothing a job waits for can
// keep the server past the end of its input.
func (s *Server) drain(in io.Reader, reading bool, giveUp time.Time) {
	s.mu.Lock()
	s.state = stateDraining
	var queued []*job
	for e := s.runQueue.Front(); e != nil; e = e.Next() {
		queued = append(queued, e.Value.(*job))
	}
	for _, j := range s.jobs {
		j.cancel()
	}
	s.mu.Unlock()
	s.hosts.close() // the reader waits no more for runs to take up their answers
	for _, j := range queued {
		s.answerCancelled(j)
	}
	if reading {
		if c, ok := in.(io.Closer); ok {
			_ = c.Close()
		}
	}
	s.loops.Wait() // then no job is admitted any more
	tasksDone := make(chan struct{})
	go func() {
		_ = s.tasks.Wait()
		close(tasksDone)
	}()
	wait := time.NewTimer(time.Until(giveUp))
	select {
	case <-tasksDone:
	case <-wait.C:
		n := s.tasksLive.Load()
		s.unfinished.Store(n)
		s.log.Warn("jobs did not end after they were cancelled (stuck in a system call?): answering them cancelled and ending without them", "jobs", n)
		s.mu.Lock()
		left := make([]*job, 0, len(s.jobs))
		for _, j := range s.jobs {
			left = append(left, j)
		}
		s.mu.Unlock()
		for _, j := range left { // respond answers a job once: the task's own answer, if it ever comes, is dropped
			s.respond(j, nil, ErrorObject(s.explainCancel(&protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled"})))
		}
	}
	wait.Stop()
	// Shutdown requests still unanswered (ctx ended, or the parent stopped
	// reading) are answered now: nothing is left to wait for.
	s.answerShutdowns()
}
