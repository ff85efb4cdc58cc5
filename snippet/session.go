package snippet

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Session is an interpreter that keeps its state (variables, functions)
// from one evaluation to the next: an instance of its language's runtime
// in the engine's table (sandbox.Engine.Instantiate), so it counts toward
// MaxInstances, is evicted when idle, is found by its id and released
// like any instance. Its store limits (the memory cap) hold for its life;
// its fuel, timeoutMs, logBytes and outputBytes are each evaluation's
// defaults. Evaluations run one at a time, in the order they took their
// turn. A script error leaves the session as it was; a fence (fuel, the
// deadline, the memory cap, cancellation) closes it, as a trap closes an
// instance, and so does an interpreter that cannot go on (a Go panic in
// it, or its runtime unable to set up an evaluation: that evaluation is
// a script error, "closed after the js interpreter failed: …"); later
// evaluations fail with *sandbox.InstanceClosedError saying why.
type Session struct {
	in   *sandbox.Instance
	lang protocol.Language
}

// NewSession starts a session of req.Language under req.Limits (a zero
// field takes the Runner's default, Runner.Defaults; a field set must lie
// within the Runner's maximums). Starting the interpreter is fenced by
// StartFuel and StartTimeout, and its cost is reported in the
// SessionInfo, never charged to an evaluation. Too many instances live is
// sandbox.ErrTooManyInstances.
func (r *Runner) NewSession(ctx context.Context, req protocol.SessionRequest) (*Session, protocol.SessionInfo, error) {
	if err := r.checkOpen(); err != nil {
		return nil, protocol.SessionInfo{}, err
	}
	rt, err := r.runtime(req.Language)
	if err != nil {
		return nil, protocol.SessionInfo{}, err
	}
	l, err := resolveLimits(req.Limits, r.Defaults(req.Language), r.cfg.Maximums)
	if err != nil {
		return nil, protocol.SessionInfo{}, &sandbox.Error{Kind: sandbox.KindHost, Message: "limits." + err.Error()}
	}
	m, err := rt.load(ctx, r)
	if err != nil {
		return nil, protocol.SessionInfo{}, err
	}
	in, err := r.start(ctx, m, req.Language, l, true)
	if err != nil {
		return nil, protocol.SessionInfo{}, err
	}
	boot := in.Instantiation()
	return &Session{in: in, lang: req.Language}, protocol.SessionInfo{ID: in.ID(), Language: req.Language,
		Usage:   protocol.Usage{FuelConsumed: boot.FuelConsumed, PeakMemoryBytes: boot.PeakMemoryBytes},
		Elapsed: boot.Elapsed}, nil
}

// Session returns the live session with the id NewSession gave. An id
// that names no live instance is the engine's *sandbox.InstanceClosedError
// (released, evicted, closed by a fence, or never made); one that names
// an instance that is not a session, an error of kind host saying so.
func (r *Runner) Session(id string) (*Session, error) {
	in, err := r.eng.LookupInstance(id)
	if err != nil {
		return nil, err
	}
	s, ok := r.SessionOf(in)
	if !ok {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: fmt.Sprintf("instance %s is not a session", protocol.Escape(id))}
	}
	return s, nil
}

// SessionOf returns in as a session if it is one: an instance of one of
// the Runner's runtimes in the engine's table.
func (r *Runner) SessionOf(in *sandbox.Instance) (*Session, bool) {
	for lang, rt := range r.runtimes {
		if m := rt.loaded(); m != nil && in.Module() == m {
			return &Session{in: in, lang: lang}, true
		}
	}
	return nil, false
}

// EvalIn evaluates e in the session with the given id (Session, then
// Session.Eval).
func (r *Runner) EvalIn(ctx context.Context, id string, e protocol.SessionEval) (*protocol.EvalOutcome, error) {
	s, err := r.Session(id)
	if err != nil {
		return nil, err
	}
	return s.Eval(ctx, e)
}

// ID is the session's instance id.
func (s *Session) ID() string { return s.in.ID() }

// Language is the session's language.
func (s *Session) Language() protocol.Language { return s.lang }

// Eval evaluates e after the session's evaluations already waiting.
func (s *Session) Eval(ctx context.Context, e protocol.SessionEval) (*protocol.EvalOutcome, error) {
	return s.EvalTurn(ctx, s.in.Enqueue(), e)
}

// EvalTurn evaluates e on t, a turn in the session's instance
// (sandbox.Instance.Enqueue) the caller took where it read the request,
// which orders the session's evaluations. The turn is used, whatever
// happens. The outcome's Queued is the wait for the turn.
func (s *Session) EvalTurn(ctx context.Context, t *sandbox.Turn, e protocol.SessionEval) (*protocol.EvalOutcome, error) {
	l := s.in.Limits()
	input, err := request(e.Snippet, l.MemoryBytes)
	if err != nil {
		t.Abandon()
		return nil, err
	}
	cl := sandbox.CallLimits{Fuel: or(e.Limits.Fuel, l.Fuel), Timeout: l.Timeout, LogBytes: or(e.Limits.LogBytes, l.LogBytes),
		OutputBytes: or(e.Limits.OutputBytes, l.OutputBytes)}
	if e.Limits.Timeout > 0 {
		cl.Timeout = e.Limits.Timeout
	}
	return evaluate(ctx, t.Call, s.lang, input, e.Output, cl, s.in.Close)
}

// Close releases the session (sandbox.Instance.Release): an evaluation
// running is cancelled, those waiting fail.
func (s *Session) Close() { s.in.Release() }

func or(v, fallback uint64) uint64 {
	if v != 0 {
		return v
	}
	return fallback
}
