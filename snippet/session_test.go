package snippet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

func sessionEval(code string) protocol.SessionEval {
	return protocol.SessionEval{Snippet: protocol.Snippet{Code: code}}
}

// TestSessionKeepsState: what one evaluation defines (a counter and a
// function), the next uses and rebinds, in each language; a script error
// leaves the session as it was.
func TestSessionKeepsState(t *testing.T) {
	r := sharedRunner(t)
	ctx := context.Background()
	for _, c := range []struct {
		lang               protocol.Language
		define, use, error string
	}{
		{protocol.LanguageJS, "let count = 40; const bump = () => ++count", "bump(); bump()", "null.x"},
		{protocol.LanguageLua, "count = 40 function bump() count = count + 1 return count end", "bump() return bump()", "local t = nil; return t.x"},
		{protocol.LanguageStarlark, "count = 40\ndef bump(n):\n    return n + 1\n", "count = bump(count)\nbump(count)", "1 // 0"},
	} {
		s, info, err := r.NewSession(ctx, protocol.SessionRequest{Language: c.lang})
		if err != nil {
			t.Fatalf("%s: %v", c.lang, err)
		}
		if info.ID != s.ID() || info.Language != c.lang || info.FuelConsumed == 0 || s.Language() != c.lang {
			t.Errorf("%s: info %+v", c.lang, info)
		}
		if _, err := s.Eval(ctx, sessionEval(c.define)); err != nil {
			t.Fatalf("%s: define: %v", c.lang, err)
		}
		_, err = s.Eval(ctx, sessionEval(c.error))
		wantKind(t, err, sandbox.KindScriptError)
		o, err := r.EvalIn(ctx, s.ID(), sessionEval(c.use))
		if err != nil || !sameJSON(t, o.Value, "42") {
			t.Errorf("%s: use after define and a script error: %v %v", c.lang, o, err)
		}
		s.Close()
		_, err = r.EvalIn(ctx, s.ID(), sessionEval(c.use))
		var ce *sandbox.InstanceClosedError
		if !errors.As(err, &ce) || ce.Reason != "released" {
			t.Errorf("%s: eval after Close: %v", c.lang, err)
		}
	}
}

// TestSessionFenceCloses: a fence ends the evaluation with its kind and
// closes the session, saying why; an evaluation's own limits fence it.
func TestSessionFenceCloses(t *testing.T) {
	r := sharedRunner(t)
	ctx := context.Background()
	s, _, err := r.NewSession(ctx, protocol.SessionRequest{Language: protocol.LanguageJS, Limits: limits.Limits{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	e := sessionEval("while (true) {}")
	e.Limits.Timeout = 100 * time.Millisecond
	_, err = s.Eval(ctx, e)
	wantKind(t, err, sandbox.KindTimeout)
	_, err = s.Eval(ctx, sessionEval("1"))
	var ce *sandbox.InstanceClosedError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "timeout") {
		t.Errorf("eval after a timeout: %v", err)
	}

	// The memory cap holds for the session's life.
	s, _, err = r.NewSession(ctx, protocol.SessionRequest{Language: protocol.LanguageLua})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(ctx, sessionEval("t = {} for i = 1, 100000 do t[i] = i end")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Eval(ctx, sessionEval("local s = 'x' while true do s = s .. s end"))
	wantKind(t, err, sandbox.KindMemoryLimitExceeded)
}

// TestSessionRefusals: an unknown language, limits past the maximums, an
// id that names no session.
func TestSessionRefusals(t *testing.T) {
	r := sharedRunner(t)
	ctx := context.Background()
	_, _, err := r.NewSession(ctx, protocol.SessionRequest{Language: "python"})
	if se := wantKind(t, err, sandbox.KindHost); se != nil && !strings.Contains(se.Message, "starlark") {
		t.Errorf("python: %v", err)
	}
	_, _, err = r.NewSession(ctx, protocol.SessionRequest{Language: protocol.LanguageLua, Limits: limits.Limits{MemoryBytes: 1 << 50}})
	wantKind(t, err, sandbox.KindHost)
	_, err = r.EvalIn(ctx, "inst-000000000000-1", sessionEval("1"))
	var ce *sandbox.InstanceClosedError
	if !errors.As(err, &ce) {
		t.Errorf("an unknown id: %v", err)
	}
}
