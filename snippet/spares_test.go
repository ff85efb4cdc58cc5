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
