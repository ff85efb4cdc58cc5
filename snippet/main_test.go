package snippet_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// TestMain lets the test binary serve as the engine's compile child.
func TestMain(m *testing.M) {
	if sandbox.IsCompileChild() {
		os.Exit(sandbox.CompileChildMain())
	}
	os.Exit(m.Run())
}

// runtimesDir is where make runtimes puts the runtimes; the tests need
// them (make test builds them first).
func runtimesDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "bin", "runtimes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range protocol.Languages() {
		if _, err := os.Stat(filepath.Join(dir, snippet.RuntimeFile(lang))); err != nil {
			t.Fatalf("%v: run make runtimes first", err)
		}
	}
	return dir
}

// compiledDir holds the runtimes compiled by this test binary, kept
// between runs of the same build (each build of a program has its own
// artefacts; other builds' are pruned), so that the runtimes, a minute of
// CPU, are compiled once per build of the tests, not once per test.
func compiledDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "sandboxd-snippet-test-runtimes")
	var keep []string
	for _, lang := range protocol.Languages() {
		wasm, err := os.ReadFile(filepath.Join(runtimesDir(t), snippet.RuntimeFile(lang)))
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, snippet.RuntimeID(wasm))
	}
	if _, err := sandbox.PruneArtefacts(dir, keep); err != nil {
		t.Logf("pruning %s: %v", dir, err)
	}
	return dir
}

var shared struct {
	once   sync.Once
	runner *snippet.Runner
	err    error
}

// sharedRunner is one Runner for the tests of this package, without
// spares (the spare tests make their own): loading a runtime is the
// expensive part, and the Runner keeps each loaded.
func sharedRunner(t *testing.T) *snippet.Runner {
	t.Helper()
	dir, compiled := runtimesDir(t), ""
	shared.once.Do(func() {
		compiled = compiledDir(t)
		eng, err := sandbox.NewEngine(sandbox.Config{})
		if err != nil {
			shared.err = err
			return
		}
		shared.runner, shared.err = snippet.New(eng, snippet.Config{Dir: dir, CompiledDirs: []string{compiled}, Spares: snippet.NoSpares,
			Notice: func(m string) { t.Log(m) }})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.runner
}

func eval(t *testing.T, e protocol.Eval) (*protocol.EvalOutcome, error) {
	t.Helper()
	return sharedRunner(t).Eval(context.Background(), e)
}
