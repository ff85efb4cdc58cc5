package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// snippetEngine is the test engine with snippets in js and lua (no
// starlark runtime installed). A snippet's code says what it does:
// "error" fails at line 2, column 5; "spin" waits for its context;
// "print:TEXT" writes TEXT to stdout; "zeros:N" writes N NUL bytes (cut
// at limits.outputBytes, the engine's default if 0) to stdout and to
// stderr, and "zeros-error:N" as much before a script error; any other
// code is its own value (JSON; a syntax error quoting it if it is not),
// or the input when it is "input".
type snippetEngine struct {
	*engine
	started chan string

	mu       sync.Mutex
	evals    []protocol.Eval
	sessions map[string]*fakeSession // live (session_test.go)
	made     []*fakeSession
	closed   map[string]string // id: why
}

func newSnippetEngine() *snippetEngine {
	return &snippetEngine{engine: newEngine(), started: make(chan string, 10), sessions: map[string]*fakeSession{}, closed: map[string]string{}}
}

func (e *snippetEngine) Languages() []protocol.Language {
	return []protocol.Language{protocol.LanguageJS, protocol.LanguageLua}
}

func (e *snippetEngine) EvalDefaults(lang protocol.Language) limits.Limits {
	l := limits.Defaults()
	if lang == protocol.LanguageJS {
		l.MemoryBytes = 64 << 20
	}
	return l
}

func (e *snippetEngine) Eval(ctx context.Context, ev protocol.Eval) (*protocol.EvalOutcome, error) {
	e.mu.Lock()
	e.evals = append(e.evals, ev)
	e.mu.Unlock()
	return fakeEval(ctx, e.started, ev.Language, ev.Snippet, ev.Limits.OutputBytes)
}

func fakeEval(ctx context.Context, started chan string, lang protocol.Language, sn protocol.Snippet, outputBytes uint64) (*protocol.EvalOutcome, error) {
	o := &protocol.EvalOutcome{Usage: protocol.Usage{FuelConsumed: 7}, Elapsed: time.Millisecond, Output: &protocol.Output{}}
	if outputBytes == 0 {
		outputBytes = limits.Defaults().OutputBytes
	}
	nuls := func(n string) []byte {
		out := zeros("zeros:" + n)
		if uint64(len(out)) > outputBytes {
			out, o.Output.Truncated = out[:outputBytes], true
		}
		return out
	}
	switch code := sn.Code; {
	case strings.HasPrefix(code, "zeros:"):
		out := nuls(strings.TrimPrefix(code, "zeros:"))
		o.Value, o.Output.Stdout, o.Output.Stderr = json.RawMessage("null"), out, out
	case strings.HasPrefix(code, "zeros-error:"):
		msg := "Error: " + strings.Repeat("\x00", protocol.MaxScriptMessageBytes)
		text := strings.Repeat("\x00", protocol.MaxScriptTextBytes)
		line := 1
		out := nuls(strings.TrimPrefix(code, "zeros-error:"))
		return nil, &protocol.Error{Kind: protocol.KindScriptError, Message: msg,
			Data: protocol.ErrorData{Language: string(lang), Message: &msg, Line: &line, Column: &line, Text: &text,
				WASIOutput: &protocol.WASIOutput{Stdout: out, Stderr: out, OutputTruncated: o.Output.Truncated}}}
	case code == "error":
		line, column, text := 2, 5, "Error: boom\n  at snippet:2:5"
		msg := "Error: boom"
		return nil, &protocol.Error{Kind: protocol.KindScriptError, Message: msg,
			Data: protocol.ErrorData{Language: string(lang), Message: &msg, Line: &line, Column: &column, Text: &text,
				WASIOutput: &protocol.WASIOutput{Stdout: []byte("before\n")}}}
	case code == "spin":
		started <- code
		<-ctx.Done()
		return nil, &protocol.Error{Kind: protocol.KindCancelled, Message: "cancelled"}
	case strings.HasPrefix(code, "print:"):
		text := []byte(strings.TrimPrefix(code, "print:"))
		if sn.Output != nil {
			sn.Output("stdout", text)
		}
		o.Value, o.Output.Stdout = json.RawMessage("null"), text
	case code == "input":
		o.Value = sn.Input
	case !json.Valid([]byte(code)): // quoted whole, as an interpreter's syntax error may quote its line
		return nil, &protocol.Error{Kind: protocol.KindScriptError, Message: "SyntaxError: " + code}
	default:
		o.Value = json.RawMessage(code)
	}
	return o, nil
}

func (e *snippetEngine) lastEval() protocol.Eval {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evals[len(e.evals)-1]
}

func TestRunSnippetReturnsTheValue(t *testing.T) {
	eng := newSnippetEngine()
	cs := session(t, eng, Options{}, nil)
	res, out := callTool(t, cs, "run_snippet", map[string]any{"language": "js", "code": "input", "input": map[string]any{"a": []int{1, 2}}})
	if errorKind(t, res, out) != "" {
		t.Fatalf("failed: %v", out)
	}
	if got := fmt.Sprint(out["value"], " ", out["language"], " ", out["stdout"], " ", out["fuelConsumed"]); got != "map[a:[1 2]] js map[text:] 7" {
		t.Errorf("output %v", out)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != `value: {"a":[1,2]}` {
		t.Errorf("text %q", text)
	}
	srv, _ := New(eng, Options{})
	if err := validates(t, srv.snippetOutputSchema(), out); err != nil {
		t.Errorf("the output does not fit the output schema: %v", err)
	}
	// No limits given: all zero, the language's defaults (the engine's).
	if ev := eng.lastEval(); ev.Language != protocol.LanguageJS || string(ev.Input) != `{"a":[1,2]}` || ev.Limits != (limits.Limits{}) {
		t.Errorf("the engine got %+v", ev)
	}
	_, out = callTool(t, cs, "run_snippet", map[string]any{"language": "lua", "code": "[1, 2.5, null]", "limits": map[string]any{"timeoutMs": 50}})
	if fmt.Sprint(out["value"]) != "[1 2.5 <nil>]" {
		t.Errorf("output %v", out)
	}
	if ev := eng.lastEval(); ev.Limits != (limits.Limits{Timeout: 50 * time.Millisecond}) {
		t.Errorf("limits %+v: want only the timeout", ev.Limits)
	}
}

func TestRunSnippetScriptErrorHasThePosition(t *testing.T) {
	eng := newSnippetEngine()
	cs := session(t, eng, Options{}, nil)
	res, out := callTool(t, cs, "run_snippet", map[string]any{"language": "js", "code": "error"})
	if kind := errorKind(t, res, out); kind != "script_error" {
		t.Fatalf("kind %q: %v", kind, out)
	}
	data := out["error"].(map[string]any)["data"].(map[string]any)
	if data["line"] != float64(2) || data["column"] != float64(5) || data["language"] != "js" || !strings.Contains(fmt.Sprint(data["text"]), "snippet:2:5") {
		t.Errorf("data %v", data)
	}
	if fmt.Sprint(out["stdout"]) != "map[text:before\n]" {
		t.Errorf("the output until the error: %v", out)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(text, "script_error: Error: boom") {
		t.Errorf("text %q", text)
	}
	srv, _ := New(eng, Options{})
	if err := validates(t, srv.snippetOutputSchema(), out); err != nil {
		t.Errorf("the output does not fit the output schema: %v", err)
	}
}

func TestRunSnippetArgumentsAreChecked(t *testing.T) {
	max := limits.DefaultMaximums()
	max.Fuel = 5000
	cs := session(t, newSnippetEngine(), Options{Maximums: max}, nil)
	for _, tc := range []struct {
		args         map[string]any
		field, words string
	}{
		{map[string]any{"code": "1"}, "language", "is required: one of js, lua"},
		{map[string]any{"language": "python", "code": "1"}, "language", `"starlark"`},
		{map[string]any{"language": "starlark", "code": "1"}, "language", "starlark is not installed here"},
		{map[string]any{"language": 1, "code": "1"}, "language", "must be a string"},
		{map[string]any{"language": "js"}, "code", "is required"},
		// (an input nested deeper than 1,000 levels never reaches the tool:
		// the SDK refuses a message that deep, the client before sending)
		{map[string]any{"language": "js", "code": "1", "limits": map[string]any{"fuel": 5001}}, "limits.fuel", "operator's maximum of 5000"},
		{map[string]any{"language": "js", "code": "1", "session": "x"}, "session", "unknown field"},
	} {
		res, out := callTool(t, cs, "run_snippet", tc.args)
		if kind := errorKind(t, res, out); kind != KindInvalidParams {
			t.Errorf("%v: kind %q", tc.args, kind)
			continue
		}
		e := out["error"].(map[string]any)
		if e["field"] != tc.field || !strings.Contains(e["message"].(string), tc.words) {
			t.Errorf("%v: %v", tc.args, e)
		}
	}
}

func TestRunSnippetStreamsItsOutput(t *testing.T) {
	got := make(chan string, 10)
	cs := session(t, newSnippetEngine(), Options{}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			got <- fmt.Sprintf("%v:%s", req.Params.Meta[StreamMetaKey], req.Params.Message)
		}})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	params := &mcp.CallToolParams{Name: "run_snippet", Arguments: map[string]any{"language": "js", "code": "print:hello\n"}}
	params.SetProgressToken(1)
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if out := structured(t, res); fmt.Sprint(out["stdout"]) != "map[text:hello\n]" {
		t.Errorf("output %v", out)
	}
	select {
	case p := <-got:
		if p != "stdout:hello\n" {
			t.Errorf("progress %q", p)
		}
	case <-ctx.Done():
		t.Fatal("no progress notification")
	}
}

func TestCancellationStopsTheSnippet(t *testing.T) {
	eng := newSnippetEngine()
	cs := session(t, eng, Options{MaxConcurrency: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_snippet", Arguments: map[string]any{"language": "js", "code": "spin"}})
		errc <- err
	}()
	select {
	case <-eng.started:
	case <-time.After(hang):
		t.Fatal("the snippet did not start")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call returned %v", err)
	}
	// the one run slot is free again only if the evaluation stopped
	if res, out := callTool(t, cs, "run_snippet", map[string]any{"language": "js", "code": "1"}); errorKind(t, res, out) != "" {
		t.Errorf("after the cancel: %v", out)
	}
}
