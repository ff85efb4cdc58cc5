package rpc

import (
	"encoding/json"
	"errors"
	"runtime/debug"
	"sync"

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
// inbox is empty and reading has ended.
func (in *inbox) pop() (request, readEnd, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for len(in.items) == 0 && in.end == nil {
		in.cond.Wait()
	}
	if len(in.items) == 0 {
		return request{}, *in.end, false
	}
	r := in.items[0]
	in.items[0] = request{}
	in.items = in.items[1:]
	in.bytes -= r.size
	in.cond.Broadcast()
	return r, readEnd{}, true
}

func (in *inbox) stop() {
	in.mu.Lock()
	in.stopped = true
	in.items = nil
	in.cond.Broadcast()
	in.mu.Unlock()
}

// readLoop reads and screens messages into the inbox until the input ends
// or the dispatcher stops. It never runs, compiles or decodes params, so
// a large message delays the ones behind it only by its reading and its
// envelope's scan.
func (s *Server) readLoop(r *framing.Reader, in *inbox, eof chan<- struct{}) {
	defer close(eof)
	for in.waitRoom() {
		body, err := r.Read()
		var big *framing.TooLargeError
		switch {
		case errors.As(err, &big):
			// Answered before the body is read; the next Read skips it.
			s.log.Warn("refused oversized message", "error", big.Error())
			in.push(request{answer: errorBody(nil, CodeInvalidRequest, big.Error())})
			continue
		case err != nil:
			var fe *FramingError
			if errors.As(err, &fe) {
				in.push(request{answer: errorBody(nil, CodeParseError, fe.Error())})
			}
			in.finish(readEnd{err: err})
			return
		}
		req, ok := s.screen(body)
		if ok || req.answer != nil {
			req.dispatch = ok
			in.push(req)
		}
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
			continue
		}
		if s.dispatch(req) {
			in.stop()
			return readEnd{exit: true}
		}
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
	s.mu.Lock()
	s.stats.requests++
	s.mu.Unlock()
	if !req.hasID {
		return s.notification(req.method, req.params)
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
	case MethodShutdown:
		s.beginShutdown(req.id)
	default:
		if hook, ok := testMethods[req.method]; ok {
			hook()
		}
		s.reply(req.id, nil, protocolError(CodeMethodNotFound, "unknown method %q", req.method))
	}
	return false
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
