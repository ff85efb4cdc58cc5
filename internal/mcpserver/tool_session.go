package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// Sessions: session_create starts an interpreter that keeps its state
// (variables, functions) from one session_eval to the next, until
// session_close. A session is an instance of the engine's table, as the
// sidecar's are (rpc/session.go): at most the engine's --max-instances
// live, closed when idle for --instance-idle, its evaluations one at a
// time in the order they came. A script error leaves it as it was; a
// fence (fuel, the deadline, the memory cap, cancellation) closes it, and
// the error says so (data.instanceClosed).

var (
	sessionCreateFields = []string{"language", "limits"}
	sessionEvalFields   = []string{"session", "code", "input", "limits"}
	sessionCloseFields  = []string{"session"}
	// sessionCallLimits are the limits one evaluation in a session may
	// set: the store's (the memory cap) are the session's for its life.
	sessionCallLimits = []string{"fuel", "timeoutMs", "logBytes", "outputBytes"}
)

// The kinds of a session that cannot be used (beside the protocol's).
const (
	KindSessionClosed   = "session_closed"    // released, evicted when idle, closed by a fence, or never made
	KindTooManySessions = "too_many_sessions" // --max-instances are live, or no room for another
)

// sessionInstance is implemented by an instance that may be a session
// (rpc's sessionInstance): its language, "" for an instance of a module.
type sessionInstance interface {
	Language() protocol.Language
}

// evalTurn is implemented by a session's turn (rpc's evalTurn).
type evalTurn interface {
	Eval(ctx context.Context, e protocol.SessionEval) (*protocol.EvalOutcome, error)
}

// sessionOutput is session_create's structured output.
type sessionOutput struct {
	Session  string            `json:"session"`
	Language protocol.Language `json:"language"`
	usage                      // of the interpreter's start
}

// closeOutput is session_close's.
type closeOutput struct {
	Session string `json:"session"`
}

func (s *Server) sessionNote() string {
	return fmt.Sprintf("At most %d sessions live; one without an evaluation for %v is closed.",
		s.inst.InstanceStats().Max, s.inst.InstanceIdle().Round(time.Second))
}

func (s *Server) sessionTools() []*tool {
	return []*tool{{
		def: &mcp.Tool{
			Name:  "session_create",
			Title: "Start a snippet session",
			Description: "Starts an interpreter of " + s.languagesText() + " in sandboxd that keeps its state (variables, " +
				"functions) from one session_eval to the next; returns its id. The memory cap holds for the session's " +
				"life; fuel, timeoutMs, logBytes and outputBytes are each evaluation's defaults. " + s.sessionNote() +
				" Close it with session_close when done.",
			InputSchema: objectSchema([]string{"language"},
				"language", s.languageSchema(),
				"limits", s.snippetLimitsSchema(limitFields(), false),
			),
			OutputSchema: output([]any{
				"session", typed("string", "the session's id, for session_eval and session_close"),
				"language", s.languageSchema(),
			}),
			Annotations: annotations(true),
		},
		fields: sessionCreateFields,
		run:    s.runSessionCreate,
	}, {
		def: &mcp.Tool{
			Name:  "session_eval",
			Title: "Evaluate a snippet in a session",
			Description: "Evaluates a snippet in a session from session_create: what earlier evaluations defined is " +
				"there. Answers as run_snippet does. A script error leaves the session as it was; a fence (fuel, the " +
				"deadline, the memory cap) or a cancellation closes it (error.data.instanceClosed), and later " +
				"evaluations fail with session_closed.",
			InputSchema: objectSchema([]string{"session", "code"},
				"session", typed("string", "the id session_create returned"),
				"code", typed("string", "the snippet"),
				"input", &jsonschema.Schema{Description: "any JSON value (nested at most 1,000 levels): the snippet's global input; default null"},
				"limits", s.snippetLimitsSchema(sessionCallLimits, true),
			),
			OutputSchema: s.snippetOutputSchema(),
			Annotations:  annotations(true),
		},
		fields: sessionEvalFields,
		run:    s.runSessionEval,
	}, {
		def: &mcp.Tool{
			Name:         "session_close",
			Title:        "Close a snippet session",
			Description:  "Closes a session from session_create (an evaluation running in it is cancelled) and frees its memory.",
			InputSchema:  objectSchema([]string{"session"}, "session", typed("string", "the id session_create returned")),
			OutputSchema: closeOutputSchema(),
			Annotations:  annotations(true),
		},
		fields: sessionCloseFields,
		run:    s.runSessionClose,
	}}
}

func (s *Server) runSessionCreate(ctx context.Context, c *call) outcome {
	lang, err := s.readLanguage(c.args)
	if err != nil {
		return s.fail(err)
	}
	l, err := s.readLimits(c.args, s.snip.EvalDefaults(lang), limitFields(), nil)
	if err != nil {
		return s.fail(err)
	}
	var info protocol.SessionInfo
	err = s.withSlot(ctx, func() error { // starting the interpreter is a run
		var err error
		info, err = s.snip.NewSession(ctx, protocol.SessionRequest{Language: lang, Limits: l})
		return err
	})
	if err != nil {
		return s.fail(err)
	}
	out := sessionOutput{Session: info.ID, Language: info.Language,
		usage: usage{FuelConsumed: info.FuelConsumed, PeakMemoryBytes: info.PeakMemoryBytes, ElapsedMicros: info.Elapsed.Microseconds()}}
	return outcome{output: out, text: fmt.Sprintf("session %s (%s) started", info.ID, info.Language)}
}

func (s *Server) runSessionEval(ctx context.Context, c *call) outcome {
	in, lang, err := s.lookupSession(c.args)
	if err != nil {
		return s.fail(err)
	}
	sn, err := readSnippet(c.args)
	if err != nil {
		return s.fail(err)
	}
	l, err := s.readLimits(c.args, limits.Limits{}, sessionCallLimits, nil) // zero: the session's
	if err != nil {
		return s.fail(err)
	}
	sn.Output = c.progress.output()
	// The evaluation's place in the session's line, then a run slot: it
	// waits for the evaluations before it holding none.
	turn := in.Enqueue()
	et, ok := turn.(evalTurn)
	if !ok {
		turn.Abandon()
		return s.fail(errors.New("the engine's session turn cannot evaluate"))
	}
	select {
	case <-turn.Ready():
	case <-ctx.Done():
		turn.Abandon()
		return s.fail(&protocol.Error{Kind: protocol.KindCancelled, Message: "cancelled while waiting for the session's earlier evaluations"})
	}
	used := false
	var o *protocol.EvalOutcome
	err = s.withSlot(ctx, func() error {
		used = true
		var err error
		o, err = et.Eval(ctx, protocol.SessionEval{Snippet: sn,
			Limits: protocol.CallLimits{Fuel: l.Fuel, Timeout: l.Timeout, LogBytes: l.LogBytes, OutputBytes: l.OutputBytes}})
		return err
	})
	if !used {
		turn.Abandon()
	}
	if err != nil {
		return s.fail(err)
	}
	return evalOutcome(lang, o)
}

func (s *Server) runSessionClose(_ context.Context, c *call) outcome {
	in, _, err := s.lookupSession(c.args)
	if err != nil {
		return s.fail(err)
	}
	in.Release()
	return outcome{output: closeOutput{Session: in.ID()}, text: "session " + in.ID() + " closed"}
}

// lookupSession finds the live session the session argument names.
func (s *Server) lookupSession(args *object) (rpc.Instance, protocol.Language, error) {
	var id string
	if err := args.string("session", &id); err != nil {
		return nil, "", err
	}
	if id == "" {
		return nil, "", inputErr("session", "is required: the id session_create returned")
	}
	in, err := s.inst.LookupInstance(id)
	if err != nil {
		return nil, "", err // closed, evicted or never made: session_closed
	}
	si, ok := in.(sessionInstance)
	if !ok || si.Language() == "" {
		return nil, "", inputErr("session", "%s is not a session", protocol.Quote(protocol.CutUTF8(id, maxFieldBytes)))
	}
	return in, si.Language(), nil
}

// sessionError is a session the engine would not use or make, as a tool
// error; ok false for any other error.
func sessionError(err error) (*toolError, bool) {
	var ce *protocol.InstanceClosedError
	if errors.As(err, &ce) {
		return &toolError{Kind: KindSessionClosed, Field: "session",
			Message: fmt.Sprintf("session %s is closed: %s", protocol.Quote(protocol.CutUTF8(ce.Instance, maxFieldBytes)), ce.Reason)}, true
	}
	var te *protocol.TooManyInstancesError
	if errors.As(err, &te) {
		return &toolError{Kind: KindTooManySessions, Message: te.Error() + " (session_close one)"}, true
	}
	return nil, false
}

func closeOutputSchema() *jsonschema.Schema {
	s := objectSchema(nil, "session", typed("string", "the session closed"), "error", errorSchema())
	s.AnyOf = []*jsonschema.Schema{{Required: []string{"session"}}, {Required: []string{"error"}}}
	return s
}
