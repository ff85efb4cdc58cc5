package snippet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// garbage are snippets whose live data is small but whose garbage is many
// times their language's default memory cap (32 MiB for Lua and
// Starlark, 64 MiB for JavaScript): strings, tables or arrays made and
// dropped in a loop, strings built by concatenation, printing far past
// outputBytes. Each evaluates to 1.
var garbage = []struct {
	lang       protocol.Language
	name, code string
}{
	{lua, "string.rep", "for i = 1, 300000 do local s = string.rep('y', 10000 + i % 7) end return 1"},
	{lua, "tables", "for i = 1, 20000 do local t = {i, {}, 'x' .. i} for j = 1, 50 do t[j] = j end end return 1"},
	{lua, "concatenation", "local n = 0 for i = 1, 50000 do local s = 'row ' .. i .. ': ' .. string.rep('z', 2000) n = n + #s end return n > 0 and 1"},
	{lua, "a growing string", "local s = '' for i = 1, 5000 do s = s .. string.rep('x', 400) end return #s > 0 and 1"},
	{lua, "printing", "for i = 1, 100000 do print(string.rep('x', 1000)) end return 1"},
	{js, "repeat", "for (let i = 0; i < 20000; i++) { let s = 'y'.repeat(10000 + i % 7) } 1"},
	{js, "arrays", "for (let i = 0; i < 20000; i++) { let a = []; for (let j = 0; j < 50; j++) a.push({j}) } 1"},
	{js, "printing", "for (let i = 0; i < 100000; i++) console.log('x'.repeat(1000)); 1"},
	{starlark, "string multiplication", "def f():\n    for i in range(30000):\n        s = 'y' * (10000 + i % 7)\n    return 1\nf()"},
	{starlark, "lists", "def f():\n    for i in range(20000):\n        l = [{'j': j} for j in range(50)]\n    return 1\nf()"},
	{starlark, "printing", "def f():\n    for i in range(100000):\n        print('x' * 1000)\n    return 1\nf()"},
}

// TestGarbageNeverMeetsTheCap: the interpreter collects its garbage
// before the memory cap binds, so a snippet whose live data fits the cap
// finishes, in every language, under the default cap, however much
// garbage it makes (runtimes/script.FitCollector).
func TestGarbageNeverMeetsTheCap(t *testing.T) {
	for _, c := range garbage {
		o, err := eval(t, protocol.Eval{Language: c.lang, Snippet: protocol.Snippet{Code: c.code}, Limits: roomy(limits.Limits{})})
		if err != nil {
			t.Errorf("%s %s: %v", c.lang, c.name, err)
			continue
		}
		if string(o.Value) != "1" {
			t.Errorf("%s %s: value %s", c.lang, c.name, o.Value)
		}
	}
}

// TestSessionGarbageNeverMeetsTheCap: garbage made over many evaluations
// of a session (together ten times the cap and more) is collected too:
// the session never meets its cap, and keeps its state.
func TestSessionGarbageNeverMeetsTheCap(t *testing.T) {
	r := sharedRunner(t)
	ctx := context.Background()
	for _, c := range []struct {
		lang          protocol.Language
		define, waste string
	}{
		{lua, "n = 0", "n = n + 1 for i = 1, 3000 do local s = string.rep('y', 10000 + i % 7) end return n"},
		{js, "var n = 0", "n++; for (let i = 0; i < 3000; i++) { let s = 'y'.repeat(10000 + i % 7) } n"},
		{starlark, "n = [0]\ndef waste():\n    for i in range(3000):\n        s = 'y' * (10000 + i % 7)\n    n[0] += 1\n    return n[0]\n", "waste()"},
	} {
		s, _, err := r.NewSession(ctx, protocol.SessionRequest{Language: c.lang, Limits: limits.Limits{Timeout: time.Minute}})
		if err != nil {
			t.Fatalf("%s: %v", c.lang, err)
		}
		if _, err := s.Eval(ctx, sessionEval(c.define)); err != nil {
			t.Fatalf("%s: define: %v", c.lang, err)
		}
		const evals = 25
		for i := 1; i <= evals; i++ {
			o, err := s.Eval(ctx, sessionEval(c.waste))
			if err != nil {
				t.Errorf("%s: evaluation %d of %d: %v", c.lang, i, evals, err)
				break
			}
			if want := fmt.Sprint(i); string(o.Value) != want {
				t.Errorf("%s: evaluation %d: value %s, want %s", c.lang, i, o.Value, want)
				break
			}
		}
		s.Close()
	}
}

// TestLiveDataStillMeetsTheCap: data a snippet keeps is never collected:
// past the cap it ends memory_limit_exceeded, in every language, though
// the collector works harder as the heap nears the cap.
func TestLiveDataStillMeetsTheCap(t *testing.T) {
	for lang, code := range map[protocol.Language]string{
		lua:      "local t = {} for i = 1, 100000 do t[i] = string.rep('y', 10000 + i % 7) end return #t",
		js:       "let a = []; for (let i = 0; i < 100000; i++) a.push('y'.repeat(10000 + i % 7)); a.length",
		starlark: "def f():\n    l = []\n    for i in range(100000):\n        l.append('y' * (10000 + i % 7))\n    return len(l)\nf()",
	} {
		_, err := eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: code}, Limits: roomy(limits.Limits{})})
		if se := wantKind(t, err, sandbox.KindMemoryLimitExceeded); se != nil {
			wantNoCrashReport(t, lang, se.Output)
		}
	}
}
