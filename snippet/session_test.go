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
		if info.ID != s.ID() || info.Language != c.lang || info.PeakMemoryBytes == 0 || s.Language() != c.lang {
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

// TestSessionThatCannotGoOnCloses: when the runtime says its interpreter
// cannot go on — a Go panic inside it (caught by its guard), or a snippet
// that left it unable to set the next evaluation's input — that
// evaluation is a script error and the session closes, naming why; a
// one-shot evaluation only fails.
func TestSessionThatCannotGoOnCloses(t *testing.T) {
	r := sharedRunner(t)
	ctx := context.Background()
	for _, c := range []struct {
		lang         protocol.Language
		before, fail string
		reason       string
	}{
		{js, "1", "new Array(2**31).sort()", "closed after the js interpreter failed: internal error in the JavaScript interpreter: "},
		{starlark, "1", "list(range(1 << 40))", "closed after the starlark interpreter failed: internal error in the Starlark interpreter: "},
		{js, "Object.freeze(globalThis); 1", "1 + 1", "closed after the js interpreter failed: the JavaScript runtime cannot set the global input: TypeError: Cannot redefine property: input"},
	} {
		s, _, err := r.NewSession(ctx, protocol.SessionRequest{Language: c.lang, Limits: limits.Limits{Timeout: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Eval(ctx, sessionEval(c.before)); err != nil {
			t.Fatalf("%s %q: %v", c.lang, c.before, err)
		}
		_, err = s.Eval(ctx, sessionEval(c.fail))
		wantKind(t, err, sandbox.KindScriptError)
		_, err = s.Eval(ctx, sessionEval("1"))
		var ce *sandbox.InstanceClosedError
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Reason, c.reason) {
			t.Errorf("%s: after %q, the next evaluation: %v, want the session closed: %q…", c.lang, c.fail, err, c.reason)
		}
		if _, err := r.Session(s.ID()); !errors.As(err, &ce) {
			t.Errorf("%s: the session is still found: %v", c.lang, err)
		}
	}
	// One-shot: the evaluation's own script error, nothing more.
	_, err := r.Eval(ctx, protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "new Array(2**31).sort()"}, Limits: roomy(limits.Limits{})})
	if se := wantKind(t, err, sandbox.KindScriptError); se != nil && !strings.Contains(se.Message, "internal error in the JavaScript interpreter") {
		t.Errorf("one-shot: %q", se.Message)
	}
	if o, err := r.Eval(ctx, protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "1 + 1"}, Limits: roomy(limits.Limits{})}); err != nil || string(o.Value) != "2" {
		t.Errorf("one-shot after it: %v, %v", o, err)
	}
}

// TestSessionElapsedIsTheEvaluations: evaluations that wait for their
// turn behind another report their own time, never the wait (which is
// queued), so never a negative one.
func TestSessionElapsedIsTheEvaluations(t *testing.T) {
	r := sharedRunner(t)
	ctx := context.Background()
	s, _, err := r.NewSession(ctx, protocol.SessionRequest{Language: lua, Limits: limits.Limits{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	outcomes := make(chan *protocol.EvalOutcome, n)
	for range n {
		go func() {
			o, err := s.Eval(ctx, sessionEval("local t = os.clock() while os.clock() - t < 0.1 do end return 1"))
			if err != nil {
				t.Error(err)
			}
			outcomes <- o
		}()
	}
	for range n {
		if o := <-outcomes; o != nil && (o.Elapsed <= 0 || o.Queued < 0) {
			t.Errorf("elapsed %v, queued %v", o.Elapsed, o.Queued)
		}
	}
}
