package rpc

import (
	"container/list"
	"context"
	"encoding/json"
	"runtime/debug"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/protocol"
)

// phase is where an admitted job is.
type phase int

const (
	phasePreparing phase = iota // its params are decoded and its module compiled, in its own goroutine
	phaseQueued                 // in the run queue, waiting for a run slot
	phaseStarting               // it took a run slot (slots.go); its goroutine starts
	phaseRunning                // it runs, holding a slot (or away from it: withoutSlot)
)

// job is one admitted run or compile request, from admission to its
// response. Fields below mu are guarded by Server.mu.
type job struct {
	id       jsonrpc2.ID
	key      idKey
	method   string
	params   json.RawMessage // until decoded
	size     int64           // the message's size, charged to the queue while the job waits
	ctx      context.Context
	cancel   context.CancelFunc
	queuedAt time.Time // when it entered the run queue

	// Set by the prepare stage for runs.
	spec *runSpec
	mod  Module
	args []protocol.Value

	// Set for the instance methods (instance.go): the call's instance and
	// its turn in the instance's line (given back when the job is
	// answered), and what runs instead of a plain run.
	inst       Instance
	turn       Turn
	callParams members // a call's params, read where it was read
	hostCall   string  // a call's hostCall, read where it was read
	inLine     bool    // counted in Server.inLine; guarded by Server.mu
	exec       func(queued time.Duration) (any, error)

	phase   phase         // guarded by Server.mu
	holding bool          // holds a run slot; guarded by Server.mu
	elem    *list.Element // in the run queue while phaseQueued
	replied bool          // guarded by Server.mu
	// afterAnswer is the engine's work put off until the answer is out
	// (protocol.AfterAnswer); guarded by Server.mu. The job keeps its
	// slot until it is done.
	afterAnswer []func()
	// inlineRun is the reader's inline run (inlineWatch's gen) that runs
	// the job, if one does; 0 otherwise.
	inlineRun uint64
}

// admit queues a run or compile request for its prepare stage, or answers
// it at once: the server is shutting down, the id is in use, or the queue
// is full by entries or by bytes (busy).
func (s *Server) admit(req request) {
	j := s.admitJob(req)
	if j == nil {
		return
	}
	if j.method == MethodRun && j.size <= inlineDecodeBytes {
		// A small run is decoded here; its goroutine, if it needs one,
		// starts only to wait for a compile (prepareRun).
		if s.prepareRun(j) {
			s.enqueueRun(j)
		}
		return
	}
	s.goJob(func() { s.prepare(j) })
}

// admitJob registers the job of an admitted request, or answers the
// request refused and returns nil.
func (s *Server) admitJob(req request) *job {
	s.mu.Lock()
	var refuse *jsonrpc2.Error
	key := keyOf(req.id)
	switch {
	case s.state != stateOpen:
		refuse = protocolError(CodeInvalidRequest, "server is shutting down")
	case s.inFlightLocked(key):
		refuse = duplicateIDError(key)
	case s.waitingLocked() >= s.opts.MaxQueue:
		refuse = busyError(s.waitingLocked(), s.opts.MaxQueue, s.queuedBytes, s.opts.MaxQueueBytes, 0)
	case s.queuedBytes+req.size > s.opts.MaxQueueBytes:
		refuse = busyError(s.waitingLocked(), s.opts.MaxQueue, s.queuedBytes, s.opts.MaxQueueBytes, req.size)
	}
	if refuse != nil {
		s.mu.Unlock()
		s.reply(req.id, nil, refuse)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{id: req.id, key: key, method: req.method, params: req.params, size: req.size,
		ctx: ctx, cancel: cancel}
	s.jobs[key] = j
	s.waiting++
	s.queuedBytes += j.size
	s.mu.Unlock()
	return j
}

// inFlightLocked says whether a request with the id key is in flight: an
// admitted job not answered yet, or a shutdown waiting for its answer.
// Call with s.mu held.
func (s *Server) inFlightLocked(key idKey) bool {
	if s.jobs[key] != nil {
		return true
	}
	for _, id := range s.shutdownIDs {
		if keyOf(id) == key {
			return true
		}
	}
	return false
}

// refuseDuplicateID answers -32600 a request whose id is in flight, and
// reports whether it did. Jobs are checked when admitted (admitJob); the
// methods answered on the spot are checked with this, so that a parent
// never gets two responses with one id, whatever the method.
func (s *Server) refuseDuplicateID(req request) bool {
	key := keyOf(req.id)
	s.mu.Lock()
	dup := s.inFlightLocked(key)
	s.mu.Unlock()
	if dup {
		s.reply(req.id, nil, duplicateIDError(key))
	}
	return dup
}

func duplicateIDError(key idKey) *jsonrpc2.Error {
	return protocolError(CodeInvalidRequest, "id %s is already used by a request in flight", key)
}

// waitingLocked is how many admitted jobs have no free run slot to take:
// a job that is about to take a free slot is not waiting. Call with s.mu
// held.
func (s *Server) waitingLocked() int {
	// A slot whose job is answered is idle here, though the job may
	// still hold it while it frees its store (respond): the parent is
	// done with that job, and the next job takes the slot then.
	idle := s.opts.MaxConcurrency - s.running
	// Calls waiting for their instance's turn wait whatever the slots do.
	return max(0, s.waiting-s.inLine-idle) + s.inLine
}

// nothingInFlight reports whether no admitted request is unanswered (and
// the server is open): a run read now is the parent's only one, and
// running it on the reading goroutine delays nothing. With requests in
// flight the run slots run them in parallel instead.
func (s *Server) nothingInFlight() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stateOpen && len(s.jobs) == 0 && s.replying == 0
}

// cancel ends the job with the given id: a queued one is answered now, a
// preparing or running one is interrupted and answered by its goroutine.
// Unknown ids are ignored.
func (s *Server) cancel(key idKey) {
	s.mu.Lock()
	j := s.jobs[key]
	if j == nil {
		s.mu.Unlock()
		return
	}
	j.cancel()
	queued := j.phase == phaseQueued
	s.mu.Unlock()
	if queued {
		s.answerCancelled(j)
	}
}

// answerCancelled answers a job that never ran (or never finished
// preparing) as cancelled. A queued job is taken out of the queue first;
// if it started meanwhile, its goroutine answers instead.
func (s *Server) answerCancelled(j *job) {
	s.mu.Lock()
	switch {
	case j.phase == phaseQueued && j.elem != nil:
		s.runQueue.Remove(j.elem)
		j.elem = nil
	case j.phase == phaseStarting || j.phase == phaseRunning: // its goroutine answers
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	j.cancel()
	if j.method != MethodCompile { // runs, calls and instantiates
		s.count(string(protocol.KindCancelled))
	}
	s.respond(j, nil, ErrorObject(s.explainCancel(&protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller"})))
}

// respond sends the job's one response. The id is released and the stats
// are up to date before the parent can read it, so a parent may reuse the
// id as soon as it reads the response. The response goes out from the
// calling goroutine when the output is idle.
func (s *Server) respond(j *job, result any, rerr *jsonrpc2.Error) {
	s.mu.Lock()
	if j.replied {
		s.mu.Unlock()
		return
	}
	j.replied = true
	delete(s.jobs, j.key)
	if j.phase != phaseRunning {
		s.waiting--
		s.queuedBytes -= j.size
	}
	after := j.afterAnswer
	j.afterAnswer = nil
	// The job is answered: it no longer counts as running (stats, and
	// admission: a parent that sends its next request when it reads
	// this answer finds it gone). A job with work after its answer
	// keeps its slot itself until the work is done: the store it frees
	// is still held, and the slots bound them.
	held := s.leaveSlotLocked(j)
	s.replying++
	s.mu.Unlock()
	j.cancel()
	if j.turn != nil {
		j.turn.Abandon() // the instance's next call may go
	}
	if held && after == nil {
		s.slotFreed() // the next queued run starts while this response goes out
	}

	s.out.sendDirect(s.encodeResponse(j.id, result, rerr))

	if after != nil {
		s.runAfterAnswer(j, after)
		if held {
			s.slotFreed()
		}
	}
	s.mu.Lock()
	s.replying--
	ids := s.idleLocked()
	s.mu.Unlock()
	s.answer(ids)
}

// runAfterAnswer runs the engine's work put off until j's answer was
// out. A panic in it is logged, not let through: the answer is gone, and
// the sidecar goes on serving.
func (s *Server) runAfterAnswer(j *job, after []func()) {
	for _, work := range after {
		func() {
			defer func() {
				if p := recover(); p != nil {
					s.log.Error("panic after answering a request", "method", j.method, "panic", p, "stack", string(debug.Stack()))
				}
			}()
			work()
		}()
	}
}

// beginShutdown refuses new work from now on and answers once what was
// admitted is answered.
func (s *Server) beginShutdown(id jsonrpc2.ID) {
	s.mu.Lock()
	if s.state == stateOpen {
		s.state = stateShuttingDown
	}
	s.shutdownIDs = append(s.shutdownIDs, id)
	ids := s.idleLocked()
	s.mu.Unlock()
	s.answer(ids)
}

// idleLocked returns the shutdown requests to answer if shutdown has been
// requested and no work is left, and marks the server idle. Call with
// s.mu held.
func (s *Server) idleLocked() []jsonrpc2.ID {
	if s.state != stateShuttingDown || len(s.jobs) > 0 || s.replying > 0 {
		return nil
	}
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
	ids := s.shutdownIDs
	s.shutdownIDs = nil
	return ids
}

// answerShutdowns answers every shutdown request not answered yet.
func (s *Server) answerShutdowns() {
	s.mu.Lock()
	ids := s.shutdownIDs
	s.shutdownIDs = nil
	s.mu.Unlock()
	s.answer(ids)
}

func (s *Server) answer(shutdownIDs []jsonrpc2.ID) {
	for _, id := range shutdownIDs {
		s.reply(id, nil, nil)
	}
}

// explainCancel rewords a cancellation that the sidecar itself caused (its
// input ended, or exit arrived) so the parent does not blame itself.
func (s *Server) explainCancel(err error) error {
	pe, ok := protocol.AsError(err)
	if !ok || pe.Kind != protocol.KindCancelled {
		return err
	}
	s.mu.Lock()
	draining := s.state >= stateDraining
	s.mu.Unlock()
	if !draining && !s.hosts.inputEnded() {
		return err
	}
	return &protocol.Error{Kind: protocol.KindCancelled, Data: pe.Data,
		Message: "run cancelled: the sidecar is exiting (its input ended or exit arrived)"}
}
