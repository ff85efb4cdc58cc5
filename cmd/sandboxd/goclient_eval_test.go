package main

// The Go client's Eval and sessions against the binary make build makes
// and its runtimes.

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

func startEvalClient(t *testing.T, args ...string) *sandboxd.Client {
	t.Helper()
	bin := evalBin(t)
	c, stderr := startClient(t, bin, append([]string{"--runtimes", filepath.Join(filepath.Dir(bin), "runtimes")}, args...)...)
	t.Cleanup(func() {
		if strings.Contains(stderr.String(), "compiling the") {
			t.Errorf("a runtime was compiled at a snippet (make build compiles them): %s", stderr.String())
		}
	})
	return c
}

func TestGoClientEval(t *testing.T) {
	t.Parallel()
	c := startEvalClient(t)
	ctx := ctxT(t, 5*time.Minute)
	var mu sync.Mutex
	streamed := map[string]string{}
	res, err := c.Eval(ctx, sandboxd.EvalParams{Language: protocol.LanguageJS, Code: "console.log('hi', input.who); [input.n * 2]",
		Input: json.RawMessage(`{"who": "Ada", "n": 21}`)}, sandboxd.RunHandlers{Output: func(_ int, stream string, data []byte) {
		mu.Lock()
		streamed[stream] += string(data)
		mu.Unlock()
	}})
	if err != nil || string(res.Value) != "[42]" || string(res.Stdout) != "hi Ada\n" || res.Language != protocol.LanguageJS {
		t.Fatalf("eval: %+v, %v", res, err)
	}
	if streamed["stdout"] != "hi Ada\n" {
		t.Errorf("streamed output %q", streamed)
	}

	_, err = c.Eval(ctx, sandboxd.EvalParams{Language: protocol.LanguageStarlark, Code: "x = 1\ny = x +\n"}, sandboxd.RunHandlers{})
	var se *sandboxd.ScriptError
	var e *sandboxd.Error
	if !errors.As(err, &se) || se.Language != protocol.LanguageStarlark || se.Line != 2 || se.Message == "" || se.Text == "" ||
		!errors.As(err, &e) || e.Code != 13 || e.Kind() != "script_error" {
		t.Errorf("a syntax error: %T %v", err, err)
	}
	_, err = c.Eval(ctx, sandboxd.EvalParams{Language: protocol.LanguageLua, Code: "while true do end", Limits: map[string]uint64{"timeoutMs": 100}}, sandboxd.RunHandlers{})
	if !errors.As(err, &e) || e.Kind() != "timeout" {
		t.Errorf("a loop: %v", err)
	}

	// ctx ending cancels the evaluation.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.Eval(short, sandboxd.EvalParams{Language: protocol.LanguageJS, Code: "while (true) {}", Limits: map[string]uint64{"timeoutMs": 600000}}, sandboxd.RunHandlers{})
	if !errors.As(err, &e) || e.Kind() != "cancelled" {
		t.Errorf("an evaluation whose ctx ended: %v", err)
	}
}

func TestGoClientSession(t *testing.T) {
	t.Parallel()
	c := startEvalClient(t, "--max-instances", "3")
	ctx := ctxT(t, 5*time.Minute)
	for _, c2 := range []struct {
		lang        protocol.Language
		define, use string
	}{
		{protocol.LanguageJS, "function inc(x) { return x + 1 }", "inc(input)"},
		{protocol.LanguageLua, "function inc(x) return x + 1 end", "return inc(input)"},
		{protocol.LanguageStarlark, "def inc(x):\n    return x + 1\n", "inc(input)"},
	} {
		lang, define, use := c2.lang, c2.define, c2.use
		s, err := c.NewSession(ctx, sandboxd.SessionParams{Language: lang})
		if err != nil || s.Language != lang || s.ID == "" || s.Result.PeakMemoryBytes == 0 {
			t.Fatalf("%s: new session: %+v, %v", lang, s, err)
		}
		if _, err := s.Eval(ctx, define, sandboxd.SessionEvalOptions{}); err != nil {
			t.Fatalf("%s: define: %v", lang, err)
		}
		res, err := s.Eval(ctx, use, sandboxd.SessionEvalOptions{Input: json.RawMessage("41")})
		if err != nil || string(res.Value) != "42" {
			t.Errorf("%s: use: %+v, %v", lang, res, err)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = s.Eval(ctx, use, sandboxd.SessionEvalOptions{})
		var ce *sandboxd.InstanceClosedError
		if !errors.As(err, &ce) || ce.Reason != "released" || !errors.Is(err, sandboxd.ErrInstanceClosed) {
			t.Errorf("%s: eval after Close: %v", lang, err)
		}
	}

	// A fence closes the session; a script error does not.
	s, err := c.NewSession(ctx, sandboxd.SessionParams{Language: protocol.LanguageJS, Limits: map[string]uint64{"timeoutMs": 100}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Eval(ctx, "throw new TypeError('nope')", sandboxd.SessionEvalOptions{})
	var se *sandboxd.ScriptError
	if !errors.As(err, &se) || sandboxd.InstanceClosed(err) || !strings.Contains(se.Message, "nope") {
		t.Errorf("a script error: %v", err)
	}
	_, err = s.Eval(ctx, "for (;;) {}", sandboxd.SessionEvalOptions{})
	var e *sandboxd.Error
	if !errors.As(err, &e) || e.Kind() != "timeout" || !sandboxd.InstanceClosed(err) {
		t.Errorf("a loop past the session's timeoutMs: %v", err)
	}
	_, err = s.Eval(ctx, "1", sandboxd.SessionEvalOptions{})
	var ce *sandboxd.InstanceClosedError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "timeout") {
		t.Errorf("eval after the fence: %v", err)
	}

	// --max-instances counts sessions.
	var held []*sandboxd.Session
	for range 3 {
		s, err := c.NewSession(ctx, sandboxd.SessionParams{Language: protocol.LanguageLua})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	_, err = c.NewSession(ctx, sandboxd.SessionParams{Language: protocol.LanguageLua})
	var tm *sandboxd.TooManyInstancesError
	if !errors.As(err, &tm) || tm.MaxInstances != 3 {
		t.Errorf("a fourth session: %v", err)
	}
	for _, s := range held {
		_ = s.Close(ctx)
	}
}
