package snippet_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// TestSpares: after a first evaluation a spare is started; the next
// evaluation with the default store limits takes it and still sees a
// fresh state; one with another memory cap starts its own; Close
// releases the spares.
func TestSpares(t *testing.T) {
	dir := runtimesDir(t)
	sharedRunner(t) // the runtimes compiled into the shared directory
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	r, err := snippet.New(eng, snippet.Config{Dir: dir, CompiledDirs: []string{compiledDir(t)}, Spares: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	lua := protocol.LanguageLua
	evalLua := func(code string, l limits.Limits) string {
		t.Helper()
		l.Timeout = time.Minute
		o, err := r.Eval(ctx, protocol.Eval{Language: lua, Snippet: protocol.Snippet{Code: code}, Limits: l})
		if err != nil {
			t.Fatal(err)
		}
		return string(o.Value)
	}
	waitSpares := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); snippet.SpareCount(r, lua) != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d spares after a minute, want %d", snippet.SpareCount(r, lua), want)
			}
		}
	}
	if got := evalLua("leak = 1 return leak", limits.Limits{}); got != "1" {
		t.Fatalf("first: %s", got)
	}
	waitSpares(1)
	if got := evalLua("return type(leak)", limits.Limits{MemoryBytes: 48 << 20}); got != `"nil"` {
		t.Fatalf("another cap: %s", got)
	}
	if n := snippet.SpareCount(r, lua); n != 1 {
		t.Fatalf("an evaluation with another memory cap took a spare: %d left", n)
	}
	if got := evalLua("return type(leak)", limits.Limits{}); got != `"nil"` {
		t.Fatalf("on a spare: %s", got)
	}
	waitSpares(1) // taken and replaced
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := snippet.SpareCount(r, lua); n != 0 {
		t.Errorf("%d spares after Close", n)
	}
	if _, err := r.Eval(ctx, protocol.Eval{Language: lua, Snippet: protocol.Snippet{Code: "1"}}); err == nil {
		t.Error("a closed Runner evaluated")
	}
}

// TestNotARuntimeIsRefused: a file in the runtimes' place that is not a
// runtime (here a WASI command) is refused by name, before any snippet
// reaches it; a missing one names where it was looked for.
func TestNotARuntimeIsRefused(t *testing.T) {
	dir := t.TempDir()
	wasm, err := os.ReadFile(filepath.Join("..", "testdata", "wasi", "guest_c.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "js.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	r, err := snippet.New(eng, snippet.Config{Dir: dir, CompiledDirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for lang, want := range map[protocol.Language]string{
		protocol.LanguageJS:  "is not a sandboxd runtime: it is not an Extism plugin exporting \"eval\"",
		protocol.LanguageLua: "the lua runtime is not installed: open " + filepath.Join(dir, "lua.wasm"),
	} {
		_, err := r.Eval(context.Background(), protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: "1"}})
		if se := wantKind(t, err, sandbox.KindHost); se != nil && !strings.Contains(se.Message, want) {
			t.Errorf("%s: %q, want %q", lang, se.Message, want)
		}
	}
}
