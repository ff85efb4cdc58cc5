package snippet_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

func newRunner(t *testing.T, cfg snippet.Config) *snippet.Runner {
	t.Helper()
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	cfg.Dir, cfg.CompiledDirs, cfg.Spares = runtimesDir(t), []string{compiledDir(t)}, snippet.NoSpares
	r, err := snippet.New(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRunnerDefaultsAreTheOperators: an evaluation's defaults are the
// Runner's (an operator's --default-* flags), but a memory cap of at
// least its language's, each lowered to the maximums; without defaults
// of its own a Runner gives the language's (snippet.Defaults).
func TestRunnerDefaultsAreTheOperators(t *testing.T) {
	if got, want := newRunner(t, snippet.Config{}).Defaults(js), snippet.Defaults(js); got != want {
		t.Errorf("no defaults given: %+v, want %+v", got, want)
	}
	op := limits.Defaults()
	op.Timeout, op.Fuel, op.OutputBytes = time.Minute, 5_000_000, 4096
	r := newRunner(t, snippet.Config{Defaults: op})
	for lang, memory := range map[protocol.Language]uint64{js: 64 << 20, lua: 32 << 20, starlark: 32 << 20} {
		want := op
		want.MemoryBytes = memory
		if got := r.Defaults(lang); got != want {
			t.Errorf("%s: %+v, want %+v", lang, got, want)
		}
	}
	op.MemoryBytes = 128 << 20
	if got := newRunner(t, snippet.Config{Defaults: op}).Defaults(js).MemoryBytes; got != op.MemoryBytes {
		t.Errorf("an operator's memory default above the language's: %d", got)
	}
	max := limits.DefaultMaximums()
	max.MemoryBytes, max.Timeout = 48<<20, time.Second
	if got := newRunner(t, snippet.Config{Defaults: op, Maximums: max}).Defaults(js); got.MemoryBytes != max.MemoryBytes || got.Timeout != max.Timeout {
		t.Errorf("defaults above the maximums: %+v", got)
	}
	// An evaluation and a session that set no limits get them.
	spin := "while true do end"
	_, err := r.Eval(context.Background(), protocol.Eval{Language: lua, Snippet: protocol.Snippet{Code: spin}})
	if se := wantKind(t, err, sandbox.KindFuelExhausted); se != nil && se.Budget != op.Fuel {
		t.Errorf("one-shot: budget %d, want the operator's %d", se.Budget, op.Fuel)
	}
	s, _, err := r.NewSession(context.Background(), protocol.SessionRequest{Language: lua})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Eval(context.Background(), sessionEval(spin))
	if se := wantKind(t, err, sandbox.KindFuelExhausted); se != nil && se.Budget != op.Fuel {
		t.Errorf("session: budget %d, want the operator's %d", se.Budget, op.Fuel)
	}
}

// TestStartIsNeverCharged: an interpreter whose start fails (here the
// memory cap is below what JavaScript needs to start: the pre-initialised
// runtime's initial memory, so it is refused before it runs) fails the
// evaluation with the start's fence, but the start's usage is not the
// evaluation's: it reports none.
func TestStartIsNeverCharged(t *testing.T) {
	_, err := eval(t, protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "1"}, Limits: roomy(limits.Limits{MemoryBytes: 11 << 20})})
	if se := wantKind(t, err, sandbox.KindMemoryLimitExceeded); se != nil && se.Usage != nil && *se.Usage != (sandbox.Usage{}) {
		t.Errorf("a start that failed is charged: %+v", se.Usage)
	}
}
