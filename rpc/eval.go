package rpc

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Snippets (docs/snippets.md): `eval` evaluates code in an interpreted
// language. A one-shot evaluation is a job like a run: admitted (the
// same queue, --max-queue and --max-queue-bytes), decoded in its prepare
// goroutine, then run in a run slot, cancelled by $/cancelRequest, its
// stdout and stderr streamed as `output` notifications with its id
// before its response.

// SnippetEngine is implemented by an engine that runs snippets. Without
// it, eval is an unknown method. Eval is called in a run slot, like Run;
// Languages and EvalDefaults on the dispatcher, and must not block.
// A snippet's own failure is an error of kind script_error; a fence's,
// its kind, as for a run; a runtime that is not installed, kind host
// with a message naming where it was looked for.
type SnippetEngine interface {
	// Languages lists the languages whose runtime is installed.
	Languages() []protocol.Language
	// EvalDefaults are the limits an evaluation in lang gets for those it
	// leaves out: the operator's run defaults with a memory cap of at
	// least the language's (snippet.Runner.Defaults), within the maximums.
	EvalDefaults(lang protocol.Language) limits.Limits
	Eval(ctx context.Context, e protocol.Eval) (*protocol.EvalOutcome, error)
	// NewSession starts a session (session.go), in a run slot like
	// Instantiate: an instance of the engine's table, whose Instance is a
	// sessionInstance and whose Turns are evalTurns. Its errors are
	// Instantiate's.
	NewSession(ctx context.Context, req protocol.SessionRequest) (protocol.SessionInfo, error)
}

func (s *Server) snippets() (SnippetEngine, bool) {
	se, ok := s.eng.(SnippetEngine)
	return se, ok
}

// dispatchEval handles eval on the dispatcher: admitted, an evaluation
// in a session takes its turn in the session's line (session.go), then
// it is prepared in a goroutine of its own. (A small eval read when
// nothing else is in flight is run by the reader instead, as a run is:
// runInline, prepareEvalNow.)
func (s *Server) dispatchEval(req request) {
	if _, ok := s.snippets(); !ok {
		s.reply(req.id, nil, protocolError(CodeMethodNotFound, "unknown method %s: this engine runs no snippets", protocol.Quote(req.method)))
		return
	}
	j := s.admitJob(req)
	if j == nil {
		return // refused and answered
	}
	turnErr := s.takeTurn(j)
	s.goJob(func() {
		defer s.recoverJob(j)
		if s.prepareEvalNow(j, turnErr) { // leaves the line, whatever happens
			s.enqueueRun(j)
		}
	})
}

// prepareEvalNow decodes an eval (or answers it: bad params, or turnErr,
// what takeTurn found). ready: the caller queues or runs it, a one-shot
// evaluation at once, one in a session when its turn has come; otherwise
// it was answered, or the wait for its turn goes on in a goroutine of its
// own, which queues it.
func (s *Server) prepareEvalNow(j *job, turnErr error) (ready bool) {
	defer func() {
		if p := recover(); p != nil {
			ready = false
			s.leaveLine(j)
			s.answerPanic(j, p)
		}
	}()
	raw := j.params
	j.params = nil
	spec, err := decodeEval(raw)
	if err == nil {
		err = turnErr
	}
	if err == nil && spec.instance != "" {
		return s.prepareSessionEval(j, spec) // session.go
	}
	var l limits.Limits
	if err == nil {
		se, _ := s.snippets()
		l, err = spec.evalLimits(se.EvalDefaults(spec.language), s.opts.Maximums)
	}
	if err != nil {
		s.leaveLine(j)
		s.respond(j, nil, ErrorObject(err))
		return false
	}
	j.exec = func(queued time.Duration) (any, error) { return s.execEval(j, spec, l, queued) }
	return true
}

// execEval runs a one-shot evaluation in its run slot.
func (s *Server) execEval(j *job, spec *evalSpec, l limits.Limits, queued time.Duration) (any, error) {
	if j.ctx.Err() != nil {
		return nil, cancelledError()
	}
	se, _ := s.snippets()
	output := s.newOutputWire(j.id, l.OutputBytes)
	o, err := se.Eval(j.ctx, protocol.Eval{Language: spec.language, Limits: l,
		Snippet: protocol.Snippet{Code: spec.code, Input: spec.input, Output: output.write}})
	output.flush() // before the response
	if err != nil {
		return nil, err
	}
	res := protocol.EvalResultOf(spec.language, o)
	res.QueuedMicros = queued.Microseconds()
	return &res, nil
}

// describeSnippets adds the languages installed to initialize's result.
func (s *Server) describeSnippets(res *protocol.InitializeResult) {
	if se, ok := s.snippets(); ok {
		res.Capabilities.Languages = se.Languages()
	}
}
