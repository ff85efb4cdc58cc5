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
	"github.com/sandboxd/sandboxd/rpc"
)

// The test engine's sessions: an instance that keeps one value. A
// snippet "set:JSON" keeps JSON, "get" answers what was kept, "fence"
// fails with a timeout that closes the session; any other as fakeEval.
type fakeSession struct {
	id   string
	lang protocol.Language
	lim  limits.Limits
	e    *snippetEngine

	mu    sync.Mutex
	kept  json.RawMessage
	evals []protocol.SessionEval
}

func (e *snippetEngine) NewSession(_ context.Context, req protocol.SessionRequest) (protocol.SessionInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.sessions) >= 2 {
		return protocol.SessionInfo{}, &protocol.TooManyInstancesError{Live: 2, Max: 2}
	}
	id := fmt.Sprintf("inst-%d", len(e.made)+1)
	fs := &fakeSession{id: id, lang: req.Language, lim: req.Limits, e: e}
	e.sessions[id] = fs
	e.made = append(e.made, fs)
	return protocol.SessionInfo{ID: id, Language: req.Language, Usage: protocol.Usage{FuelConsumed: 1000}}, nil
}

// LookupInstance finds a session first, then the plugin instances.
func (e *snippetEngine) LookupInstance(id string) (rpc.Instance, error) {
	e.mu.Lock()
	fs, ok := e.sessions[id]
	reason, closed := e.closed[id]
	e.mu.Unlock()
	switch {
	case ok:
		return fs, nil
	case closed:
		return nil, &protocol.InstanceClosedError{Instance: id, Reason: reason}
	}
	return e.engine.LookupInstance(id)
}

func (e *snippetEngine) closeSession(id, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.sessions, id)
	e.closed[id] = reason
}

func (s *fakeSession) ID() string { return s.id }
func (s *fakeSession) Module() *protocol.ModuleInfo {
	return &protocol.ModuleInfo{ID: "runtime-" + string(s.lang)}
}
func (s *fakeSession) Limits() limits.Limits       { return s.lim }
func (s *fakeSession) Language() protocol.Language { return s.lang }
func (s *fakeSession) Release()                    { s.e.closeSession(s.id, "released") }
func (s *fakeSession) Enqueue() rpc.Turn           { return fakeTurn{s} }
func (s *fakeSession) lastEval() protocol.SessionEval {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evals[len(s.evals)-1]
}

type fakeTurn struct{ s *fakeSession }

var ready = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (fakeTurn) Ready() <-chan struct{} { return ready }
func (fakeTurn) Abandon()               {}
func (fakeTurn) Call(context.Context, protocol.Call) (*protocol.CallOutcome, error) {
	return nil, errors.New("a session is not called")
}

func (t fakeTurn) Eval(ctx context.Context, e protocol.SessionEval) (*protocol.EvalOutcome, error) {
	s := t.s
	s.mu.Lock()
	s.evals = append(s.evals, e)
	s.mu.Unlock()
	switch code := e.Code; {
	case strings.HasPrefix(code, "set:"):
		s.mu.Lock()
		s.kept = json.RawMessage(strings.TrimPrefix(code, "set:"))
		s.mu.Unlock()
		return &protocol.EvalOutcome{Value: json.RawMessage("null")}, nil
	case code == "get":
		s.mu.Lock()
		defer s.mu.Unlock()
		return &protocol.EvalOutcome{Value: s.kept}, nil
	case code == "fence":
		s.e.closeSession(s.id, "closed after timeout in an evaluation")
		ms := uint64(5)
		return nil, &protocol.Error{Kind: protocol.KindTimeout, Message: "deadline of 5 ms exceeded",
			Data: protocol.ErrorData{TimeoutMs: &ms, InstanceClosed: true}}
	}
	return fakeEval(ctx, s.e.started, s.lang, e.Snippet, e.Limits.OutputBytes)
}

func TestASessionKeepsItsStateUntilClosed(t *testing.T) {
	eng := newSnippetEngine()
	cs := session(t, eng, Options{}, nil)
	srv, _ := New(eng, Options{})
	tools := map[string]*tool{}
	for _, tl := range srv.tools() {
		tools[tl.def.Name] = tl
	}

	res, out := callTool(t, cs, "session_create", map[string]any{"language": "lua", "limits": map[string]any{"memoryBytes": 1 << 20}})
	if errorKind(t, res, out) != "" || out["session"] != "inst-1" || out["language"] != "lua" || out["fuelConsumed"] != float64(1000) {
		t.Fatalf("session_create: %v", out)
	}
	if err := validates(t, tools["session_create"].def.OutputSchema, out); err != nil {
		t.Errorf("session_create's output does not fit its schema: %v", err)
	}
	// the session's limits: the language's defaults, memoryBytes as asked
	want := eng.EvalDefaults(protocol.LanguageLua)
	want.MemoryBytes = 1 << 20
	if got := eng.made[0].lim; got != want {
		t.Errorf("the session's limits %+v, want %+v", got, want)
	}

	res, out = callTool(t, cs, "session_eval", map[string]any{"session": "inst-1", "code": `set:{"n":1}`})
	if errorKind(t, res, out) != "" {
		t.Fatalf("session_eval: %v", out)
	}
	res, out = callTool(t, cs, "session_eval", map[string]any{"session": "inst-1", "code": "get", "limits": map[string]any{"timeoutMs": 20}})
	if errorKind(t, res, out) != "" || fmt.Sprint(out["value"]) != "map[n:1]" || out["language"] != "lua" {
		t.Fatalf("the state: %v", out)
	}
	if err := validates(t, tools["session_eval"].def.OutputSchema, out); err != nil {
		t.Errorf("session_eval's output does not fit its schema: %v", err)
	}
	if l := eng.made[0].lastEval().Limits; l != (protocol.CallLimits{Timeout: 20 * time.Millisecond}) {
		t.Errorf("the evaluation's limits %+v", l)
	}

	res, out = callTool(t, cs, "session_close", map[string]any{"session": "inst-1"})
	if errorKind(t, res, out) != "" || out["session"] != "inst-1" {
		t.Fatalf("session_close: %v", out)
	}
	if err := validates(t, tools["session_close"].def.OutputSchema, out); err != nil {
		t.Errorf("session_close's output does not fit its schema: %v", err)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"session_eval", map[string]any{"session": "inst-1", "code": "get"}},
		{"session_close", map[string]any{"session": "inst-1"}},
	} {
		res, out = callTool(t, cs, tc.tool, tc.args)
		if kind := errorKind(t, res, out); kind != KindSessionClosed {
			t.Errorf("%s of a closed session: %v", tc.tool, out)
		}
		if e := out["error"].(map[string]any); e["field"] != "session" || !strings.Contains(fmt.Sprint(e["message"]), `"inst-1" is closed: released`) {
			t.Errorf("%s of a closed session: %v", tc.tool, e)
		}
		if err := validates(t, tools[tc.tool].def.OutputSchema, out); err != nil {
			t.Errorf("%s: the output does not fit the schema: %v", tc.tool, err)
		}
	}
}

func TestAFenceClosesTheSession(t *testing.T) {
	cs := session(t, newSnippetEngine(), Options{}, nil)
	callTool(t, cs, "session_create", map[string]any{"language": "js"})
	res, out := callTool(t, cs, "session_eval", map[string]any{"session": "inst-1", "code": "fence"})
	if kind := errorKind(t, res, out); kind != "timeout" {
		t.Fatalf("kind %q: %v", kind, out)
	}
	if data := out["error"].(map[string]any)["data"].(map[string]any); data["instanceClosed"] != true {
		t.Errorf("data %v: want instanceClosed", data)
	}
	res, out = callTool(t, cs, "session_eval", map[string]any{"session": "inst-1", "code": "get"})
	if kind := errorKind(t, res, out); kind != KindSessionClosed || !strings.Contains(fmt.Sprint(out["error"]), "closed after timeout") {
		t.Errorf("after the fence: %v", out)
	}
}

func TestSessionArgumentsAreChecked(t *testing.T) {
	eng := newSnippetEngine()
	max := limits.DefaultMaximums()
	max.Fuel = 5000
	cs := session(t, eng, Options{Maximums: max}, nil)
	callTool(t, cs, "session_create", map[string]any{"language": "js"})
	if _, _, err := eng.engine.Instantiate(context.Background(), pluginModule, protocol.InstanceRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tool        string
		args        map[string]any
		kind, field string
		words       string
	}{
		{"session_create", map[string]any{}, KindInvalidParams, "language", "is required"},
		{"session_create", map[string]any{"language": "starlark"}, KindInvalidParams, "language", "not installed"},
		{"session_create", map[string]any{"language": "js", "limits": map[string]any{"fuel": 5001}}, KindInvalidParams, "limits.fuel", "maximum of 5000"},
		{"session_eval", map[string]any{"code": "1"}, KindInvalidParams, "session", "is required"},
		{"session_eval", map[string]any{"session": "inst-1"}, KindInvalidParams, "code", "is required"},
		{"session_eval", map[string]any{"session": "inst-1", "code": "1", "limits": map[string]any{"memoryBytes": 1}}, KindInvalidParams, "limits.memoryBytes", "unknown field"},
		{"session_eval", map[string]any{"session": "inst-1", "code": "1", "limits": map[string]any{"fuel": 5001}}, KindInvalidParams, "limits.fuel", "maximum of 5000"},
		{"session_eval", map[string]any{"session": "inst-1", "code": "1", "language": "js"}, KindInvalidParams, "language", "unknown field"},
		{"session_eval", map[string]any{"session": "inst-404", "code": "1"}, KindSessionClosed, "session", "closed"},
		{"session_eval", map[string]any{"session": "inst-fake-1", "code": "1"}, KindInvalidParams, "session", "is not a session"},
		{"session_close", map[string]any{"session": "inst-fake-1"}, KindInvalidParams, "session", "is not a session"},
	} {
		res, out := callTool(t, cs, tc.tool, tc.args)
		if kind := errorKind(t, res, out); kind != tc.kind {
			t.Errorf("%s %v: kind %q: %v", tc.tool, tc.args, kind, out)
			continue
		}
		e := out["error"].(map[string]any)
		if e["field"] != tc.field || !strings.Contains(fmt.Sprint(e["message"]), tc.words) {
			t.Errorf("%s %v: %v", tc.tool, tc.args, e)
		}
	}
	// the fake allows two live sessions
	callTool(t, cs, "session_create", map[string]any{"language": "js"})
	res, out := callTool(t, cs, "session_create", map[string]any{"language": "js"})
	if kind := errorKind(t, res, out); kind != KindTooManySessions {
		t.Errorf("a third session: %v", out)
	}
}

func TestCancellingASessionEval(t *testing.T) {
	eng := newSnippetEngine()
	cs := session(t, eng, Options{MaxConcurrency: 1}, nil)
	callTool(t, cs, "session_create", map[string]any{"language": "js"})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_eval", Arguments: map[string]any{"session": "inst-1", "code": "spin"}})
		errc <- err
	}()
	<-eng.started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call returned %v", err)
	}
	if res, out := callTool(t, cs, "session_eval", map[string]any{"session": "inst-1", "code": "2"}); errorKind(t, res, out) != "" {
		t.Errorf("after the cancel: %v", out)
	}
}
