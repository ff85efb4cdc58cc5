package rpc

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Sessions: an interpreter that keeps its state between evaluations, made
// by `instantiate` with a language and used by `eval` with its instance
// id. A session is an instance of the engine's table (--max-instances,
// idle eviction, release, stats, the closed reasons), so its evaluations
// go the way of calls (instance.go): the dispatcher takes each one's turn
// in the session's line where it reads it, the prepare goroutine decodes
// it and waits for the turn holding no run slot, and it then runs in a
// run slot. A `call` on a session, or an `eval` naming an instance that
// is not one, is refused naming the instance.

// sessionInstance is implemented by an Instance that may be a session:
// Language is its language, "" for an instance of a module.
type sessionInstance interface {
	Language() protocol.Language
}

// evalTurn is implemented by the Turn of a session: an evaluation in
// place of a call. A fence closes the session (the error then says
// instanceClosed, as a call's does); a script error does not.
type evalTurn interface {
	Eval(ctx context.Context, e protocol.SessionEval) (*protocol.EvalOutcome, error)
}

// sessionLanguage is in's language if it is a session, else "".
func sessionLanguage(in Instance) protocol.Language {
	if si, ok := in.(sessionInstance); ok {
		return si.Language()
	}
	return ""
}

// prepareSession reads a session's limits, for its language's defaults,
// and queues its start for a run slot (or answers err, decoding's).
func (s *Server) prepareSession(j *job, spec *sessionSpec, err error) {
	se, ok := s.snippets()
	if err == nil && !ok {
		err = paramErr("language", "this engine runs no snippets")
	}
	var l limits.Limits
	if err == nil {
		l, err = decodeLimits(spec.rawLimits, se.EvalDefaults(spec.language), s.opts.Maximums)
	}
	if err != nil {
		s.respond(j, nil, ErrorObject(err))
		return
	}
	j.exec = func(queued time.Duration) (any, error) {
		info, err := se.NewSession(j.ctx, protocol.SessionRequest{Language: spec.language, Limits: l})
		if err != nil {
			return nil, err
		}
		return &protocol.SessionResult{Instance: info.ID, Language: info.Language, FuelConsumed: info.FuelConsumed,
			PeakMemoryBytes: info.PeakMemoryBytes, ElapsedMicros: info.Elapsed.Microseconds(), QueuedMicros: queued.Microseconds()}, nil
	}
	s.enqueueRun(j)
}

// takeEvalTurn looks up the session an eval names and takes the
// evaluation's place in its line, where the eval was read (takeTurn).
// Other evals take none. What goes wrong is answered by whoever prepares
// the eval.
func (s *Server) takeEvalTurn(j *job) error {
	var p members
	if evalShape.read(j.params, &p) != nil {
		return nil // decodeEval says why
	}
	raw := p.values[evalInstance]
	if raw == nil || p.values[evalLanguage] != nil {
		return nil // one-shot, or refused when decoded
	}
	id, err := instanceID(raw)
	if err != nil {
		return err
	}
	ie, ok := s.instances()
	if !ok {
		return paramErr("instance", "this engine keeps no instances")
	}
	in, err := ie.LookupInstance(id)
	if err != nil {
		return err
	}
	if sessionLanguage(in) == "" {
		return paramErr("instance", "%s is not a session (instantiate with \"language\" makes one)", protocol.Escape(in.ID()))
	}
	s.enterLine(j, in)
	return nil
}

// prepareSessionEval reads an evaluation's limits in a session. ready:
// its turn has come (prepareEvalNow); otherwise it was answered, or a
// goroutine waits for the turn and queues it.
func (s *Server) prepareSessionEval(j *job, spec *evalSpec) (ready bool) {
	cl, err := spec.sessionEvalLimits(s.opts.Defaults, s.opts.Maximums)
	if err != nil {
		s.leaveLine(j)
		s.respond(j, nil, ErrorObject(err)) // the turn is given back
		return false
	}
	exec := func(time.Duration) (any, error) { return s.execSessionEval(j, spec, cl) }
	select {
	case <-j.turn.Ready():
		s.leaveLine(j)
		j.exec = exec
		return true
	default:
		s.goJob(func() {
			defer s.recoverJob(j)
			defer s.leaveLine(j)
			s.awaitTurn(j, exec)
		})
		return false
	}
}

// execSessionEval runs an evaluation in a session, on its turn, in a run
// slot.
func (s *Server) execSessionEval(j *job, spec *evalSpec, cl protocol.CallLimits) (any, error) {
	lang := sessionLanguage(j.inst)
	output := s.newOutputWire(j.id, or(cl.OutputBytes, j.inst.Limits().OutputBytes))
	t, _ := j.turn.(evalTurn) // a session's (takeSessionTurn)
	o, err := t.Eval(j.ctx, protocol.SessionEval{Limits: cl,
		Snippet: protocol.Snippet{Code: spec.code, Input: spec.input, Output: output.write}})
	output.flush() // before the response
	if err != nil {
		return nil, err
	}
	res := protocol.EvalResultOf(lang, o) // queued: the wait for the turn, as a call's
	return &res, nil
}
