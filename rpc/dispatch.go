package rpc

import (
	"encoding/json"
	"errors"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/protocol"
)

// readEnd says why reading stopped.
type readEnd struct {
	err  error // io.EOF, a *FramingError, or the input's read error; nil after exit
	exit bool  // the exit notification arrived
}

// inboxHighWater is how many bytes of read messages may wait for the
// dispatcher (beyond the one being read) before the reader stops reading.
const inboxHighWater = 1 << 20

// Input runs in two goroutines joined by an inbox. The reader reads and
// screens messages; the dispatcher handles them in order. While more than
// OutputHighWater bytes wait for a parent that is not reading, the
// dispatcher handles nothing, the inbox fills, and the reader stops
// reading: the parent's writes block instead of the sidecar's memory
// growing (back-pressure). The reader still sees the end of input that
// follows what it has read, so Serve learns that the parent closed its
// end even while the dispatcher waits for the output.

// inbox is the reader's queue to the dispatcher: screened requests, the
// answers screening wrote, and finally why reading ended.
type inbox struct {
	mu      sync.Mutex
	cond    *sync.Cond
	items   []request
	bytes   int64
	end     *readEnd // set when reading has ended
	stopped bool     // the dispatcher has stopped: nothing more is taken
	busy    bool     // the dispatcher is handling a request it took
}

func newInbox() *inbox {
	in := &inbox{}
	in.cond = sync.NewCond(&in.mu)
	return in
}

// waitRoom blocks while the inbox is full; false once the dispatcher stopped.
func (in *inbox) waitRoom() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for in.bytes > inboxHighWater && !in.stopped {
		in.cond.Wait()
	}
	return !in.stopped
}

func (in *inbox) push(r request) {
	in.mu.Lock()
	in.items = append(in.items, r)
	in.bytes += r.size
	in.cond.Broadcast()
	in.mu.Unlock()
}

func (in *inbox) finish(end readEnd) {
	in.mu.Lock()
	in.end = &end
	in.cond.Broadcast()
	in.mu.Unlock()
}

// pop returns the next request, or (false, why reading ended) when the
// inbox is empty and reading has ended or the inbox was stopped.
func (in *inbox) pop() (request, readEnd, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for len(in.items) == 0 && in.end == nil && !in.stopped {
		in.cond.Wait()
	}
	if len(in.items) == 0 {
		// A reader that finds the inbox stopped ends without finish: it
		// may have been running a request inline (not reading) when
		// Serve stopped the inbox, and then nothing else would wake us.
		if in.end == nil {
			return request{}, readEnd{}, false
		}
		return request{}, *in.end, false
	}
	r := in.items[0]
	in.items[0] = request{}
	in.items = in.items[1:]
	in.bytes -= r.size
	in.busy = true
	in.cond.Broadcast()
	return r, readEnd{}, true
}

// handled says the dispatcher is done with what it took last.
func (in *inbox) handled() {
	in.mu.Lock()
	in.busy = false
	in.mu.Unlock()
}

// idle reports whether the dispatcher has nothing queued or in hand.
func (in *inbox) idle() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.items) == 0 && !in.busy && !in.stopped
}

func (in *inbox) stop() {
	in.mu.Lock()
	in.stopped = true
	in.items = nil
	in.cond.Broadcast()
	in.mu.Unlock()
}

// reader reads and screens messages into the inbox until the input ends
// or the dispatcher stops. It never compiles or decodes large params, so
// a large message delays the ones behind it only by its reading and its
// envelope's scan. One goroutine at a time is the reader; see runInline
// for how the role passes from one to the next.
type reader struct {
	s     *Server
	r     *framing.Reader
	in    *inbox
	eof   chan<- struct{} // closed when reading has ended
	watch *inlineWatch    // shared by the goroutines that are the reader in turn
}

// run is the life of a reader goroutine: it reads until reading ends (and
// says so on eof) or it hands the role over to another goroutine.
func (rd *reader) run() {
	if rd.loop() {
		close(rd.eof)
	}
}

// loop reads until reading ends (true) or the role was handed over while
// this goroutine ran a request inline (false).
func (rd *reader) loop() (ended bool) {
	s, in := rd.s, rd.in
	for in.waitRoom() {
		s.hosts.waitRoom()
		body, err := rd.r.Read()
		var big *framing.TooLargeError
		switch {
		case errors.As(err, &big):
			// Answered before the body is read; the next Read skips it.
			s.log.Warn("refused oversized message", "error", big.Error())
			if s.refuseAnswer(big) {
				continue // an answer to a host call: that call fails, nothing is sent
			}
			in.push(request{answer: errorBody(nil, CodeInvalidRequest, big.Error())})
			continue
		case err != nil:
			var fe *FramingError
			if errors.As(err, &fe) {
				in.push(request{answer: errorBody(nil, CodeParseError, fe.Error())})
			}
			s.hosts.end() // the parent can answer no host call any more
			in.finish(readEnd{err: err})
			return true
		}
		req, ok := s.screen(body)
		if ok && (req.method == MethodRun || s.inlineCall(req)) && req.hasID && rd.r.Buffered() == 0 && req.size <= inlineDecodeBytes {
			if handled, keep := rd.runInline(req); handled {
				if !keep {
					return false
				}
				continue
			}
		}
		if ok || req.answer != nil {
			req.dispatch = ok
			in.push(req)
		}
	}
	return true
}

// inlineGrace is how long a reader runs a request inline before another
// goroutine takes over reading. A run that ends within it costs no
// goroutine hand-off at all; a longer one delays the messages behind it
// (a $/cancelRequest for it, stats) by at most this much.
const inlineGrace = 100 * time.Microsecond

// runInline handles a run on the reading goroutine when that is the
// parent's only outstanding request as far as the sidecar can tell:
// nothing more is buffered, the dispatcher has nothing queued or in hand
// (so no earlier message is answered after this one, and a shutdown
// before it has taken effect), no other request is in flight (so the
// slots have nothing else to run in parallel) and the output is below its
// high water. The run is then decoded, prepared and run here,
// and its response written from here, with no goroutine woken on the way.
// While it runs nobody reads: if it takes longer than inlineGrace, the
// reader's watch hands the reader role to a new goroutine, and this one
// ends after the response (keep false). handled is false when the request
// goes the usual way (the inbox) after all.
func (rd *reader) runInline(req request) (handled, keep bool) {
	s := rd.s
	if !rd.in.idle() || s.out.pendingBytes() > s.opts.OutputHighWater || !s.nothingInFlight() {
		return false, true
	}
	// Admitted before anything behind it can be read: a $/cancelRequest
	// or a shutdown that follows finds it.
	j, turnErr := s.admitInline(req)
	if j == nil {
		return true, true // refused (or failed), and answered
	}
	run := rd.watch.begin(rd)
	j.inlineRun = run
	s.runAdmitted(j, turnErr)
	return true, rd.watch.end(run)
}

// inlineWatch hands the reader role on when a request run inline outlasts
// inlineGrace. One timer serves every inline run of the server: a run
// arms it only if it is not armed already, and when it fires it re-arms
// itself for the grace of the run then in progress, if any. A timer per
// run (time.AfterFunc, then Stop) made the runtime wake an idle thread
// for every request, to watch the new timer; with one timer that happens
// at most once per inlineGrace while requests keep coming, and not at all
// once they stop (an idle sidecar has no timer armed).
type inlineWatch struct {
	handOn func(rd *reader) // starts a goroutine that takes over rd's reading, as a task
	now    func() time.Time // time.Now; a test's clock

	mu     sync.Mutex
	timer  *time.Timer
	armed  bool      // the timer will fire
	active bool      // an inline run is in progress, its reader role not handed on
	gen    uint64    // counts inline runs
	start  time.Time // when the active run began
	rd     *reader   // the reader running it
}

// begin notes that rd runs a request inline from now on; end takes what
// it returns.
func (w *inlineWatch) begin(rd *reader) (gen uint64) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.active, w.start, w.rd = true, now, rd
	if !w.armed {
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(inlineGrace, w.fire)
		} else {
			w.timer.Reset(inlineGrace)
		}
	}
	return w.gen
}

// end reports whether the reader role is still the caller's (keep): false
// when the watch handed it to another goroutine meanwhile.
func (w *inlineWatch) end(gen uint64) (keep bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active && w.gen == gen {
		w.active = false
		return true
	}
	return false
}

// handOnNow hands the reader role on at once if inline run gen still
// holds it: its job is about to wait for the parent, whose answer must be
// read meanwhile.
func (w *inlineWatch) handOnNow(gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.active && w.gen == gen {
		w.active = false // the timer, armed, finds nothing to do
		w.handOn(w.rd)
	}
}

// handOnReading hands the reading on from j if the reader runs j itself.
func (s *Server) handOnReading(j *job) {
	if j.inlineRun != 0 {
		s.watch.handOnNow(j.inlineRun)
	}
}

// fire is the timer's: it hands the reader role on if the active run has
// had its grace, or waits for the rest of it.
func (w *inlineWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.active {
		w.armed = false
		return
	}
	if left := inlineGrace - w.now().Sub(w.start); left > 0 {
		w.timer.Reset(left)
		return
	}
	w.active, w.armed = false, false
	// The next reader is a task before the running one can see it was
	// handed on and end (end takes w.mu): Serve's wait for its tasks
	// cannot end in between and miss it.
	w.handOn(w.rd)
}

// admitInline admits a request the reader runs, as dispatch would, and
// takes a call's place in its instance's line. A panic is answered as
// dispatch answers it.
func (s *Server) admitInline(req request) (j *job, turnErr error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic while handling a request", "method", req.method, "panic", p, "stack", string(debug.Stack()))
			if j != nil {
				s.respond(j, nil, protocolError(CodeInternalError, "internal error: %v", p))
			} else {
				s.reply(req.id, nil, protocolError(CodeInternalError, "internal error: %v", p))
			}
			j = nil
		}
	}()
	s.countRequest()
	if j = s.admitJob(req); j == nil {
		return nil, nil
	}
	return j, s.takeTurn(j)
}

// runAdmitted prepares and runs an admitted job on the calling goroutine
// (or queues it, when it must wait for a run slot after all); whatever happens,
// the job is answered.
func (s *Server) runAdmitted(j *job, turnErr error) {
	defer s.recoverJob(j)
	if s.prepareInline(j, turnErr) && s.startInline(j) {
		s.execute(j)
	}
}

// dispatchLoop handles what the reader queued, in order, until reading
// ended and the inbox is empty, or exit arrives.
func (s *Server) dispatchLoop(in *inbox) readEnd {
	for {
		req, end, ok := in.pop()
		if !ok {
			return end
		}
		s.out.waitBelow(s.opts.OutputHighWater)
		if !req.dispatch {
			s.out.send(req.answer)
			in.handled()
			continue
		}
		if s.dispatch(req) {
			in.stop()
			return readEnd{exit: true}
		}
		in.handled()
	}
}

// dispatch handles one screened message on the read loop and reports
// whether it was exit. Fast methods are answered here; runs and compiles
// are admitted (or refused) and continue in their own goroutine.
func (s *Server) dispatch(req request) (exit bool) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic while handling a request", "method", req.method, "panic", p, "stack", string(debug.Stack()))
			if req.hasID {
				s.reply(req.id, nil, protocolError(CodeInternalError, "internal error: %v", p))
			}
		}
	}()
	s.countRequest()
	if !req.hasID {
		return s.notification(req.method, req.params)
	}
	switch req.method {
	case MethodRun, MethodCompile, protocol.MethodInstantiate, protocol.MethodCall, protocol.MethodEval:
		// admitJob refuses an id in flight
	default:
		if s.refuseDuplicateID(req) {
			return false
		}
	}
	switch req.method {
	case MethodInitialize:
		s.reply(req.id, s.initializeResult(), nil)
	case MethodStats:
		s.reply(req.id, s.statsResult(), nil)
	case MethodRun, MethodCompile:
		s.admit(req)
	case protocol.MethodInstantiate, protocol.MethodCall, protocol.MethodRelease:
		s.dispatchInstance(req)
	case protocol.MethodEval:
		s.dispatchEval(req) // eval.go
	case MethodShutdown:
		s.beginShutdown(req.id)
	default:
		if hook, ok := testMethods[req.method]; ok {
			hook()
		}
		s.reply(req.id, nil, protocolError(CodeMethodNotFound, "unknown method %s (methods: %s)", protocol.Quote(req.method), requestMethods))
	}
	return false
}

// requestMethods lists the methods a request may name, for -32601's
// message (as an unknown field's message lists the fields).
var requestMethods = strings.Join([]string{MethodInitialize, MethodRun, MethodCompile, protocol.MethodInstantiate,
	protocol.MethodCall, protocol.MethodRelease, protocol.MethodEval, MethodStats, MethodShutdown}, ", ")

func (s *Server) countRequest() {
	s.mu.Lock()
	s.stats.requests++
	s.mu.Unlock()
}

// testMethods are extra methods compiled in by fault-injection builds
// (build tag sandboxd_faults); empty in release builds.
var testMethods = map[string]func(){}

func (s *Server) notification(method string, params json.RawMessage) (exit bool) {
	switch method {
	case MethodExit:
		return true
	case MethodCancel:
		var p protocol.CancelParams
		if params == nil || json.Unmarshal(params, &p) != nil {
			s.log.Warn("ignoring $/cancelRequest without a valid id")
			return false
		}
		s.cancel(keyOf(p.ID))
	default:
		s.log.Warn("ignoring notification", "method", method)
	}
	return false
}
