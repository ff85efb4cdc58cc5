package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/internal/wakeup"
	"github.com/sandboxd/sandboxd/protocol"
)

// Host calls: the requests the sidecar sends the parent when a guest
// calls a host function the parent serves (docs/protocol.md, "Host
// functions served by the parent").
//
// The wait lives in the job's own goroutine, inside the engine's call of
// the job's HostCaller (the guest is in the middle of an import): it
// registers the call, gives the job's run slot back (withoutSlot), queues
// the request in the outbox behind everything the guest wrote before it,
// and waits for the answer or the run's context. The reader never waits
// for anything of a host call: it takes an answer apart (screening),
// hands it to the waiting call and reads on; the job decodes it once it
// holds a slot again. A job the reader runs itself (runInline) hands the
// reading to another goroutine before it waits.

// hostCalls is the server's table of the host calls in flight, and their
// counters. Its lock is never held with Server.mu.
type hostCalls struct {
	mu      sync.Mutex
	room    *sync.Cond // held went down, or the table closed
	next    uint64
	pending map[string]*hostCall // sent and not answered, by id
	ended   bool                 // the parent's input ended: nothing more can be answered
	closed  bool                 // the server drains: the reader waits for room no more
	// held is the size of the answers delivered to their calls and not
	// yet taken up (a run takes its answer up once it holds a slot
	// again); the reader waits while it is over heldMax, so a parent
	// answering many waiting runs with large answers cannot make the
	// sidecar hold more than that.
	held    int64
	heldMax int64

	sent, answered, failed, cancelled, waiting, unexpected uint64
	dropsLogged                                            int // answers dropped so far (logDroppedAnswer)
}

// hostCall is one host call in flight.
type hostCall struct {
	id       string
	instance string // the instance whose call made it, if any
	// from is the host call whose handler sent the request that made this
	// one ("" if none): the chain the cycle check follows.
	from string
	// ans is the reader's one delivery, written under hostCalls.mu
	// before ready is set; ready wakes the waiting job's thread directly
	// (wakeup: the thread is pinned by the guest's call of the import,
	// and a channel would wake it through the scheduler).
	ans   hostAnswer
	ready wakeup.Event
}

// hostAnswer is what the reader delivers to a host call.
type hostAnswer struct {
	result  json.RawMessage // the answer's result, or
	rerr    json.RawMessage // its error object, or
	problem string          // why the sidecar could not take it, or
	gone    bool            // the parent's input ended first
	size    int64           // what it adds to hostCalls.held
}

func newHostCalls(heldMax int64) *hostCalls {
	h := &hostCalls{pending: map[string]*hostCall{}, heldMax: heldMax}
	h.room = sync.NewCond(&h.mu)
	return h
}

// open registers a new host call; false once the parent's input ended.
func (h *hostCalls) open(instance, from string) (*hostCall, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return nil, false
	}
	h.next++
	hc := &hostCall{id: protocol.HostCallIDPrefix + strconv.FormatUint(h.next, 10), instance: instance, from: from}
	h.pending[hc.id] = hc
	h.sent++
	h.waiting++
	return hc, true
}

// deliver hands an answer to the host call id, if it is in flight, and
// reports whether it was. It never blocks.
func (h *hostCalls) deliver(id string, a hostAnswer) bool {
	h.mu.Lock()
	hc := h.pending[id]
	if hc == nil {
		h.unexpected++
		h.mu.Unlock()
		return false
	}
	delete(h.pending, id)
	h.held += a.size
	hc.ans = a
	h.mu.Unlock()
	hc.ready.Set()
	return true
}

// withdraw takes a call whose run stopped waiting out of the table, and
// reports whether it was still there (no answer was delivered): the
// parent is then told to stop ($/cancelRequest), unless its input ended.
func (h *hostCalls) withdraw(hc *hostCall) (pending, ended bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending[hc.id] != hc {
		return false, h.ended
	}
	delete(h.pending, hc.id)
	return true, h.ended
}

// delivered is the answer the reader delivered to hc, which withdraw
// found taken out of the table.
func (h *hostCalls) delivered(hc *hostCall) hostAnswer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return hc.ans
}

// done counts how a host call ended (answered, failed or cancelled: one
// of the counters) and gives back what its answer held.
func (h *hostCalls) done(outcome *uint64, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*outcome++
	h.waiting--
	if size > 0 {
		h.held -= size
		h.room.Broadcast()
	}
}

// end says the parent's input ended: every call in flight is told so, and
// none is opened any more.
func (h *hostCalls) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	for id, hc := range h.pending {
		delete(h.pending, id)
		hc.ans = hostAnswer{gone: true}
		hc.ready.Set()
	}
}

// close stops the reader's waits for room (the server drains).
func (h *hostCalls) close() {
	h.mu.Lock()
	h.closed = true
	h.room.Broadcast()
	h.mu.Unlock()
}

// waitRoom blocks the reader while the answers held pass heldMax.
func (h *hostCalls) waitRoom() {
	h.mu.Lock()
	for h.held > h.heldMax && !h.closed {
		h.room.Wait()
	}
	h.mu.Unlock()
}

// waitsFor reports whether the instance waits, through the chain of host
// calls that starts at from, for the handler of from: a call from that
// handler to the instance would wait for itself.
func (h *hostCalls) waitsFor(from, instance string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for steps := 0; from != "" && steps <= len(h.pending); steps++ {
		hc := h.pending[from]
		if hc == nil {
			return false
		}
		if hc.instance == instance {
			return true
		}
		from = hc.from
	}
	return false
}

// hostStats is stats' hostCalls.
func (h *hostCalls) stats() protocol.HostCallStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return protocol.HostCallStats{Sent: h.sent, Answered: h.answered, Failed: h.failed, Cancelled: h.cancelled,
		Waiting: h.waiting, Unexpected: h.unexpected}
}

// hostSite is where a job's host calls come from: its declarations, the
// instance whose call it is (for host/call's instance and the cycle
// check), the host call whose handler sent it, and its output wire (held
// output goes out before the request).
type hostSite struct {
	fns      []protocol.HostFunction
	instance string
	from     string
	output   *outputWire
}

// hostCaller is job j's HostCaller, or nil when it declares nothing.
func (s *Server) hostCaller(j *job, site hostSite) protocol.HostCaller {
	if len(site.fns) == 0 {
		return nil
	}
	return func(ctx context.Context, call protocol.HostCall) ([]protocol.HostValue, error) {
		return s.callHost(ctx, j, site, call)
	}
}

// callHost asks the parent and waits for its answer, without a run slot.
func (s *Server) callHost(ctx context.Context, j *job, site hostSite, call protocol.HostCall) ([]protocol.HostValue, error) {
	fn, ok := declared(site.fns, call)
	if !ok { // the engine links declared imports only
		return nil, fmt.Errorf("host call of %s::%s, which hostFunctions does not declare", call.Module, call.Name)
	}
	h := s.hosts
	hc, ok := h.open(site.instance, site.from)
	if !ok { // the parent can answer nothing any more: the run ends as the drain ends it
		j.cancel()
		return nil, ctx.Err()
	}
	body, err := encodeHostCall(hc.id, j, site.instance, call)
	if err != nil {
		h.withdraw(hc)
		h.done(&h.failed, 0)
		return nil, err
	}
	if site.output != nil {
		site.output.flush()
	}
	var ans hostAnswer
	answered := false
	err = s.yieldSlot(ctx, j, func() {
		// Written from this thread when nothing else is being written (as
		// a response is), not handed to the outbox's writer goroutine: a
		// hand-off to a goroutine from a pinned thread that then sleeps
		// costs wake-ups of other threads. Like a response's write, it
		// waits for the parent to read if the pipe is full; the parent
		// then reads the request before it could see the run's answer.
		s.out.sendDirect(body)
		deadline, _ := ctx.Deadline()
		switch hc.ready.Wait(ctx, deadline) {
		case wakeup.Signalled:
			answered = true
		case wakeup.Expired:
			// By the clock, maybe just before ctx's own timer fired: the
			// engine tells a timeout from a cancel by ctx's error.
			<-ctx.Done()
		}
	})
	if answered {
		ans = hc.ans // written before ready was set
	} else {
		if pending, ended := h.withdraw(hc); pending && !ended {
			s.cancelHostCall(hc.id)
		} else if !pending {
			ans = h.delivered(hc) // delivered as the wait ended: give back what it holds
		}
	}
	switch {
	case ans.gone:
		j.cancel() // the drain cancels it too, or, after shutdown, nothing else would
		h.done(&h.cancelled, 0)
		return nil, ctx.Err()
	case !answered || err != nil:
		h.done(&h.cancelled, ans.size)
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	}
	values, err := decodeHostAnswer(fn, ans)
	if err != nil {
		h.done(&h.failed, ans.size)
		return nil, err
	}
	h.done(&h.answered, ans.size)
	return values, nil
}

// declared finds the declaration of the function called.
func declared(fns []protocol.HostFunction, call protocol.HostCall) (protocol.HostFunction, bool) {
	for _, f := range fns {
		if f.Module == call.Module && f.Name == call.Name {
			return f, true
		}
	}
	return protocol.HostFunction{}, false
}

// checkHostCallerID refuses the request of job j if its run can call the
// parent (fns not empty) and its id, which each host call repeats, is
// longer than protocol.MaxHostCallerIDBytes as JSON.
func checkHostCallerID(j *job, fns []protocol.HostFunction) error {
	if len(fns) == 0 {
		return nil
	}
	b, err := j.id.MarshalJSON()
	if err != nil || len(b) <= protocol.MaxHostCallerIDBytes {
		return nil
	}
	return paramErr("id", "is %d bytes; a request whose run can call the parent (hostFunctions) takes an id of at most %d bytes (as JSON), which every host/call repeats", len(b), protocol.MaxHostCallerIDBytes)
}

// encodeHostCall writes the host/call request, protocol.HostCallParams
// as json.Marshal would write them, in one buffer: a bytes argument of
// megabytes is encoded once (json.Marshal checks and copies what a
// Marshaler returns again). TestHostCallEncoding holds the two to the
// same bytes.
func encodeHostCall(id string, j *job, instance string, call protocol.HostCall) ([]byte, error) {
	reqID, err := j.id.MarshalJSON()
	if err != nil {
		return nil, err
	}
	module, _ := json.Marshal(call.Module)
	name, _ := json.Marshal(call.Name)
	args := protocol.EncodeHostValues(call.Args)
	n := 160 + len(reqID) + len(instance) + len(module) + len(name)
	for _, a := range args {
		n += 48 + len(a.Value)
	}
	b := make([]byte, 0, n)
	b = append(append(append(b, `{"jsonrpc":"2.0","id":"`...), id...), `","method":"`+protocol.MethodHostCall+`","params":{"id":`...)
	b = append(b, reqID...)
	if instance != "" {
		inst, _ := json.Marshal(instance)
		b = append(append(b, `,"instance":`...), inst...)
	}
	b = append(append(append(append(b, `,"module":`...), module...), `,"name":`...), name...)
	b = appendValues(append(b, `,"args":`...), args)
	return append(b, "}}"...), nil
}

type hostCancelNotification struct {
	JSONRPC string                    `json:"jsonrpc"`
	Method  string                    `json:"method"`
	Params  protocol.HostCancelParams `json:"params"`
}

// cancelHostCall tells the parent the sidecar waits no more for host call
// id (the run's deadline passed, or it was cancelled).
func (s *Server) cancelHostCall(id string) {
	body, _ := json.Marshal(hostCancelNotification{JSONRPC: "2.0", Method: MethodCancel,
		Params: protocol.HostCancelParams{ID: id}})
	s.out.send(body)
}

// inputEnded reports whether the parent's input ended.
func (h *hostCalls) inputEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// hostCycleError refuses a call that would wait for itself (-32003): its
// instance waits, through the chain of host calls, for the handler that
// sent it.
type hostCycleError struct{ instance, hostCall string }

func (e *hostCycleError) Error() string {
	return fmt.Sprintf("instance %s is waiting for your answer to host call %s; a call to it from that handler would wait for itself",
		protocol.Escape(e.instance), protocol.Escape(e.hostCall))
}

func (e *hostCycleError) RPCError() *jsonrpc2.Error {
	err := &jsonrpc2.Error{Code: protocol.CodeHostCallCycle, Message: e.Error()}
	err.SetError(struct {
		Instance string `json:"instance"`
		HostCall string `json:"hostCall"`
	}{e.instance, e.hostCall})
	return err
}
