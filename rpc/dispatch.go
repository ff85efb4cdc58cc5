package rpc

import (
	"encoding/json"
	"errors"
	"runtime/debug"

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/protocol"
)

// readEnd says why the read loop stopped.
type readEnd struct {
	err  error // io.EOF, a *FramingError, or the input's read error; nil after exit
	exit bool  // the exit notification arrived
}

// readLoop reads, screens and dispatches messages until the input ends or
// exit arrives. It never runs or compiles anything itself: run and compile
// requests are admitted and handed on, so a large message delays the ones
// behind it only by its reading and its envelope's scan. While more than
// OutputHighWater bytes wait for a parent that is not reading, it reads
// nothing (back-pressure: the parent's writes block instead of the
// sidecar's memory growing).
func (s *Server) readLoop(r *framing.Reader) readEnd {
	for {
		s.out.waitBelow(s.opts.OutputHighWater)
		body, err := r.Read()
		var big *framing.TooLargeError
		switch {
		case errors.As(err, &big):
			// Answered before the body is read; the next Read skips it.
			s.log.Warn("refused oversized message", "error", big.Error())
			s.out.send(errorBody(nil, CodeInvalidRequest, big.Error()))
			continue
		case err != nil:
			var fe *FramingError
			if errors.As(err, &fe) {
				s.out.send(errorBody(nil, CodeParseError, fe.Error()))
			}
			return readEnd{err: err}
		}
		req, ok := s.screen(body)
		if !ok {
			continue
		}
		if s.dispatch(req) {
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
