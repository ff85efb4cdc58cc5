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
// (snippet.FindDir when empty), the sidecar's maximums, one spare per
// language used, the Runner's notices (a runtime compiled at first use)
// logged. Nothing is read until a snippet needs it: a missing runtime is
// an error of the evaluation, never of the start.
func newSnippetRunner(eng *sandbox.Engine, dir string, maximums limits.Limits, logger *slog.Logger) (*snippet.Runner, error) {
	// The runtimes next to the binary are its own: compiling one there
	// removes what other builds left (a directory given is not pruned).
	prune := dir == "" && os.Getenv(snippet.RuntimesEnv) == ""
	return snippet.New(eng, snippetConfig(dir, maximums, prune, logger))
}

func snippetConfig(dir string, maximums limits.Limits, prune bool, logger *slog.Logger) snippet.Config {
	return snippet.Config{Dir: dir, Maximums: maximums, PruneStale: prune,
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

func (e sidecarEngine) Eval(ctx context.Context, ev protocol.Eval) (*protocol.EvalOutcome, error) {
	if e.snippets == nil {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: "this server runs no snippets"}
	}
	return e.snippets.Eval(ctx, ev)
}
