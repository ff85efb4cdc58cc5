package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// The snippet half of sidecarEngine: rpc.SnippetEngine over a
// snippet.Runner (docs/snippets.md). The Runner's errors are already the
// protocol's: a *sandbox.Error of kind script_error, a fence's or host.

var _ rpc.SnippetEngine = sidecarEngine{}

// newSnippetRunner is the sidecar's Runner on eng: the runtimes in dir
// (snippet.FindDir when empty), the operator's run defaults and maximums
// (an evaluation's limits are the run defaults, but a memory cap of at
// least its language's: snippet.Runner.Defaults), one spare per language
// used, the Runner's notices (a runtime compiled at first use) logged.
// Nothing is read until a snippet needs it: a missing runtime is an error
// of the evaluation, never of the start.
func newSnippetRunner(eng *sandbox.Engine, dir string, def, maximums limits.Limits, logger *slog.Logger) (*snippet.Runner, error) {
	// The runtimes next to the binary are its own: compiling one there
	// removes what other builds left (a directory given is not pruned).
	prune := dir == "" && os.Getenv(snippet.RuntimesEnv) == ""
	return snippet.New(eng, snippetConfig(dir, def, maximums, prune, logger))
}

func snippetConfig(dir string, def, maximums limits.Limits, prune bool, logger *slog.Logger) snippet.Config {
	return snippet.Config{Dir: dir, Defaults: def, Maximums: maximums, PruneStale: prune,
		Notice: func(m string) { logger.Info(m) }}
}

func (e sidecarEngine) Languages() []protocol.Language {
	if e.snippets == nil {
		return nil
	}
	return e.snippets.Installed()
}

func (e sidecarEngine) EvalDefaults(lang protocol.Language) limits.Limits {
	if e.snippets == nil {
		return snippet.Defaults(lang)
	}
	return e.snippets.Defaults(lang)
}

func (e sidecarEngine) NewSession(ctx context.Context, req protocol.SessionRequest) (protocol.SessionInfo, error) {
	if e.snippets == nil {
		return protocol.SessionInfo{}, &sandbox.Error{Kind: sandbox.KindHost, Message: "this server runs no snippets"}
	}
	_, info, err := e.snippets.NewSession(ctx, req)
	if err != nil {
		return info, e.instanceError(err, "")
	}
	return info, nil
}

// sessionOf is in as a session, or nil.
func (e sidecarEngine) sessionOf(in *sandbox.Instance) *snippet.Session {
	if e.snippets == nil {
		return nil
	}
	s, _ := e.snippets.SessionOf(in)
	return s
}

// Language makes a sidecarInstance an rpc sessionInstance: a session's
// language, "" for an instance of a module.
func (i *sidecarInstance) Language() protocol.Language {
	if i.session == nil {
		return ""
	}
	return i.session.Language()
}

// Eval makes a sidecarTurn an rpc evalTurn: an evaluation in the
// session, on this turn; a fence's error says it closed the session.
func (t *sidecarTurn) Eval(ctx context.Context, ev protocol.SessionEval) (*protocol.EvalOutcome, error) {
	if t.i.session == nil {
		t.t.Abandon()
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: "instance " + t.i.in.ID() + " is not a session"}
	}
	o, err := t.i.session.EvalTurn(ctx, t.t, ev)
	if err != nil {
		return nil, t.i.e.instanceError(err, t.i.in.ID())
	}
	return o, nil
}

func (e sidecarEngine) Eval(ctx context.Context, ev protocol.Eval) (*protocol.EvalOutcome, error) {
	if e.snippets == nil {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: "this server runs no snippets"}
	}
	return e.snippets.Eval(ctx, ev)
}
