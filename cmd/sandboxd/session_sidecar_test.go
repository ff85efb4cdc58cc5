package main

// Sessions on the sidecar's wire (instantiate with a language, eval with
// an instance), through the binary make build makes and its runtimes:
// state kept between evaluations in each language, a script error that
// keeps the session, a fence that closes it with the reason, the
// instance table's rules (release, --max-instances, idle eviction),
// order, cancel, and bad params.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// rawSession makes a session on a raw sidecar and returns its result.
func rawSession(t *testing.T, s *rawSidecar, id string, params map[string]any) protocol.SessionResult {
	t.Helper()
	s.request(id, "instantiate", params)
	m := mustResponse(s, id)
	var res protocol.SessionResult
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || res.Instance == "" {
		t.Fatalf("instantiate %v: %s", params, m.raw)
	}
	return res
}

// sessionEvalRaw evaluates code in the session inst and returns the response.
func sessionEvalRaw(s *rawSidecar, id, inst, code string, extra map[string]any) *message {
	s.t.Helper()
	p := map[string]any{"instance": inst, "code": code}
	for k, v := range extra {
		p[k] = v
	}
	s.request(id, "eval", p)
	return mustResponse(s, id)
}

func TestSessionSidecarKeepsState(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, c := range []struct {
		lang                   protocol.Language
		define, use, scriptErr string
	}{
		{protocol.LanguageJS, "var n = 40; function add(a, b) { return a + b }", "add(n, input)", "throw new Error('boom')"},
		{protocol.LanguageLua, "n = 40 function add(a, b) return a + b end", "return add(n, input)", "error('boom')"},
		{protocol.LanguageStarlark, "n = 40\ndef add(a, b):\n    return a + b\n", "add(n, input)", "fail('boom')"},
	} {
		res := rawSession(t, s, `"new-`+string(c.lang)+`"`, map[string]any{"language": c.lang})
		if res.Language != c.lang || !strings.HasPrefix(res.Instance, "inst-") || res.PeakMemoryBytes == 0 {
			t.Errorf("%s: session result %+v", c.lang, res)
		}
		inst := res.Instance
		if r := evalResult(t, sessionEvalRaw(s, `"def"`, inst, c.define, nil)); r.Language != c.lang {
			t.Errorf("%s: define: %+v", c.lang, r)
		}
		m := sessionEvalRaw(s, `"err"`, inst, c.scriptErr, nil)
		if d := errData(t, m); m.Error.Code != 13 || d["instanceClosed"] != nil || !strings.Contains(m.Error.Message, "boom") {
			t.Errorf("%s: a script error in a session: %s", c.lang, m.raw)
		}
		if r := evalResult(t, sessionEvalRaw(s, `"use"`, inst, c.use, map[string]any{"input": 2})); string(r.Value) != "42" {
			t.Errorf("%s: the state of earlier evaluations: %s", c.lang, r.Value)
		}
		// A session is an instance: call refused, release closes it.
		s.request(`"call"`, "call", callParams(inst, "eval"))
		if m := mustResponse(s, `"call"`); m.Error == nil || m.Error.Code != protocol.CodeInvalidParams ||
			m.Error.Message != fmt.Sprintf("instance: %s is a %s session: use eval", inst, c.lang) {
			t.Errorf("%s: call on a session: %s", c.lang, m.raw)
		}
		s.request(`"rel"`, "release", map[string]any{"instance": inst})
		if m := mustResponse(s, `"rel"`); m.Error != nil {
			t.Fatalf("release: %s", m.raw)
		}
		m = sessionEvalRaw(s, `"late"`, inst, c.use, nil)
		if d := errData(t, m); m.Error.Code != protocol.CodeInstanceClosed || d["reason"] != "released" {
			t.Errorf("%s: eval after release: %s", c.lang, m.raw)
		}
	}
}

// TestSessionSidecarFenceCloses: a fence ends the evaluation with its
// kind and closes the session, the error saying so; later evaluations
// are -32001 with the reason. The memory cap holds for the session's life.
func TestSessionSidecarFenceCloses(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, c := range []struct {
		name    string
		session map[string]any
		setup   string
		code    string
		limits  map[string]any
		kind    string
	}{
		{"loop", map[string]any{"language": "js"}, "var a = 1", "while (true) {}", map[string]any{"timeoutMs": 100}, "timeout"},
		{"fuel", map[string]any{"language": "starlark"}, "a = 1", "x = 0\nfor i in range(100000000):\n    x += i\n", map[string]any{"fuel": 1000000}, "fuel_exhausted"},
		{"memory", map[string]any{"language": "lua", "limits": map[string]any{"memoryBytes": 24 << 20}}, "t = {} for i = 1, 100000 do t[i] = i end",
			"local s = 'x' while true do s = s .. s end", nil, "memory_limit_exceeded"},
	} {
		inst := rawSession(t, s, `"new-`+c.name+`"`, c.session).Instance
		evalResult(t, sessionEvalRaw(s, `"setup"`, inst, c.setup, nil))
		var extra map[string]any
		if c.limits != nil {
			extra = map[string]any{"limits": c.limits}
		}
		m := sessionEvalRaw(s, `"fence"`, inst, c.code, extra)
		if d := errData(t, m); m.kind() != c.kind || d["instanceClosed"] != true {
			t.Errorf("%s: want %s closing the session, got %s", c.name, c.kind, m.raw)
		}
		m = sessionEvalRaw(s, `"after"`, inst, "1", nil)
		if d := errData(t, m); m.Error.Code != protocol.CodeInstanceClosed || !strings.Contains(fmt.Sprint(d["reason"]), c.kind) {
			t.Errorf("%s: eval after the fence: %s", c.name, m.raw)
		}
	}
	evalResult(t, sessionEvalRaw(s, `"fresh"`, rawSession(t, s, `"new"`, map[string]any{"language": "js"}).Instance, "1", nil))
}

// TestSessionSidecarOrderCancelAndTable: pipelined evaluations run in
// request order; one cancelled while it waits for its turn leaves the
// session open, one cancelled running closes it; --max-instances counts
// sessions.
func TestSessionSidecarOrderCancelAndTable(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t, "--max-instances", "2")
	inst := rawSession(t, s, `"a"`, map[string]any{"language": "js"}).Instance
	evalResult(t, sessionEvalRaw(s, `"def"`, inst, "var seen = []", nil))
	// The first holds the session while the others queue behind it.
	s.request(`"slow"`, "eval", map[string]any{"instance": inst, "limits": map[string]any{"timeoutMs": 60000},
		"code": "let t = Date.now(); while (Date.now() - t < 2000) {} seen.push('slow')"})
	for i := range 5 {
		s.request(fmt.Sprintf(`"p%d"`, i), "eval", map[string]any{"instance": inst, "code": fmt.Sprintf("seen.push(%d); seen.join(',')", i)})
	}
	s.waitRunning(1, 5) // stats count an evaluation waiting for its session as queued
	s.notify("$/cancelRequest", map[string]any{"id": "p2"})
	if m := mustResponse(s, `"p2"`); m.Error == nil || m.Error.Code != protocol.CodeCancelled || errData(t, m)["instanceClosed"] != nil {
		t.Errorf("an evaluation cancelled while it waits: %s", m.raw)
	}
	evalResult(t, mustResponse(s, `"slow"`))
	if r := evalResult(t, mustResponse(s, `"p4"`)); string(r.Value) != `"slow,0,1,3,4"` {
		t.Errorf("pipelined evaluations: %s, want them in request order without the cancelled one", r.Value)
	}
	for _, id := range []string{`"p0"`, `"p1"`, `"p3"`} {
		evalResult(t, mustResponse(s, id))
	}

	other := rawSession(t, s, `"b"`, map[string]any{"language": "lua"}).Instance
	s.request(`"c"`, "instantiate", map[string]any{"language": "starlark"})
	if m := mustResponse(s, `"c"`); m.Error == nil || m.Error.Code != protocol.CodeTooManyInstances {
		t.Errorf("a third session with --max-instances 2: %s", m.raw)
	}
	s.request(`"spin"`, "eval", map[string]any{"instance": other, "code": "while true do end", "limits": map[string]any{"timeoutMs": 600000}})
	s.waitRunning(1, 0)
	s.notify("$/cancelRequest", map[string]any{"id": "spin"})
	if m := mustResponse(s, `"spin"`); m.kind() != "cancelled" || errData(t, m)["instanceClosed"] != true {
		t.Errorf("an evaluation cancelled running: %s", m.raw)
	}
	// Its slot is free again.
	evalResult(t, sessionEvalRaw(s, `"c2"`, rawSession(t, s, `"c2s"`, map[string]any{"language": "starlark"}).Instance, "1", nil))
}

// TestSessionSidecarEvicted: a session without an evaluation for
// --instance-idle is evicted, and says so.
func TestSessionSidecarEvicted(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t, "--instance-idle", "500ms")
	inst := rawSession(t, s, `"a"`, map[string]any{"language": "lua"}).Instance
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		time.Sleep(time.Second)
		m := sessionEvalRaw(s, fmt.Sprintf(`"probe%d"`, i), inst, "return 1", nil)
		if m.Error == nil {
			if time.Now().After(deadline) {
				t.Fatalf("the session was never evicted")
			}
			continue
		}
		if d := errData(t, m); m.Error.Code != protocol.CodeInstanceClosed || !strings.Contains(fmt.Sprint(d["reason"]), "evicted") {
			t.Errorf("an idle session: %s", m.raw)
		}
		return
	}
}

// TestSessionSidecarBadParams: every refusal is one -32602 naming the
// field; the sidecar serves on.
func TestSessionSidecarBadParams(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	plain := rawInstance(t, s, `"plain"`)
	inst := rawSession(t, s, `"sess"`, map[string]any{"language": "lua"}).Instance
	for i, c := range []struct {
		method string
		params map[string]any
		want   string
	}{
		{"instantiate", map[string]any{"language": "js", "module": map[string]string{"wat": "(module)"}}, "module: give module (an instance of it) or language (a session), not both"},
		{"instantiate", map[string]any{"language": "js", "capabilities": map[string]any{"clock": true}}, "capabilities: not offered for a session"},
		{"instantiate", map[string]any{"language": "js", "config": map[string]any{}}, "config: not offered for a session"},
		{"instantiate", map[string]any{"language": "js", "hostFunctions": []any{}}, "hostFunctions: not offered for a session"},
		{"instantiate", map[string]any{"language": "python"}, `language: unknown language "python"`},
		{"instantiate", map[string]any{"language": true}, "language: must be a string"},
		{"instantiate", map[string]any{"language": "js", "limits": map[string]any{"varBytes": 10}}, "limits.varBytes: unknown field"},
		{"instantiate", map[string]any{"language": "js", "limits": map[string]any{"memoryBytes": 1 << 50}}, "limits.memoryBytes"},
		{"instantiate", map[string]any{}, "module: required: one of {wat}, {wasm}, {id}, {path} (or language, for a session)"},
		{"eval", map[string]any{"instance": plain, "code": "1"}, fmt.Sprintf(`instance: %s is not a session (instantiate with "language" makes one)`, plain)},
		{"eval", map[string]any{"instance": inst, "code": "1", "limits": map[string]any{"memoryBytes": 1 << 20}}, "limits.memoryBytes: fixed at instantiate"},
		{"eval", map[string]any{"instance": inst, "language": "lua", "code": "1"}, "instance: give language"},
		{"eval", map[string]any{"instance": inst}, "code: required"},
		{"eval", map[string]any{"instance": 5, "code": "1"}, "instance: must be a string"},
	} {
		id := fmt.Sprintf(`"bad%d"`, i)
		s.request(id, c.method, c.params)
		if m := mustResponse(s, id); m.Error == nil || m.Error.Code != protocol.CodeInvalidParams || !strings.HasPrefix(m.Error.Message, c.want) {
			t.Errorf("%s %v: want -32602 %q, got %s", c.method, c.params, c.want, m.raw)
		}
	}
	m := sessionEvalRaw(s, `"unknown"`, "inst-000000000000-99", "1", nil)
	if m.Error == nil || m.Error.Code != protocol.CodeInstanceClosed {
		t.Errorf("eval in an unknown session: %s", m.raw)
	}
	if r := evalResult(t, sessionEvalRaw(s, `"still"`, inst, "return 'ok'", nil)); string(r.Value) != `"ok"` {
		t.Errorf("the session after the refusals: %s", r.Value)
	}
}

// TestSessionSidecarInterpreterThatCannotGoOnCloses: a Go panic inside
// the interpreter (`new Array(2**31).sort()`, `list(range(1 << 40))`:
// "makeslice: cap out of range"), or a snippet that leaves the runtime
// unable to set the next evaluation's input (Object.freeze(globalThis), a
// non-configurable input), ends the session: that evaluation is a
// script_error with data.instanceClosed, later ones -32001 naming why.
func TestSessionSidecarInterpreterThatCannotGoOnCloses(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, c := range []struct {
		lang         protocol.Language
		before, fail string
	}{
		{protocol.LanguageJS, "1", "new Array(2**31).sort()"},
		{protocol.LanguageStarlark, "1", "list(range(1 << 40))"},
		{protocol.LanguageJS, "Object.freeze(globalThis); 1", "1 + 1"},
		{protocol.LanguageJS, "Object.defineProperty(globalThis, 'input', {value: 0, writable: false, configurable: false}); 1", "1 + 1"},
	} {
		inst := rawSession(t, s, `"new"`, map[string]any{"language": c.lang}).Instance
		evalResult(t, sessionEvalRaw(s, `"before"`, inst, c.before, nil))
		m := sessionEvalRaw(s, `"fail"`, inst, c.fail, map[string]any{"input": 3})
		if m.Error == nil || m.Error.Code != 13 || errData(t, m)["instanceClosed"] != true {
			t.Errorf("%s %q after %q: want a script error that closed the session, got %s", c.lang, c.fail, c.before, m.raw)
		}
		next := sessionEvalRaw(s, `"next"`, inst, "1", nil)
		if next.Error == nil || next.Error.Code != protocol.CodeInstanceClosed ||
			!strings.Contains(next.Error.Message, "closed after the "+string(c.lang)+" interpreter failed: ") {
			t.Errorf("%s: after %q, the next evaluation: %s", c.lang, c.fail, next.raw)
		}
	}
}

// TestSessionSidecarElapsedExcludesTheTurnsWait: an evaluation that
// waited for its turn behind a long one reports its own time in
// elapsedMicros (never negative) and the wait in queuedMicros.
func TestSessionSidecarElapsedExcludesTheTurnsWait(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	inst := rawSession(t, s, `"new"`, map[string]any{"language": "lua"}).Instance
	s.request(`"long"`, "eval", map[string]any{"instance": inst, "code": "local t = os.clock() while os.clock() - t < 0.5 do end return 1",
		"limits": map[string]any{"timeoutMs": 60000}})
	s.request(`"behind"`, "eval", map[string]any{"instance": inst, "code": "return 2"})
	evalResult(t, mustResponse(s, `"long"`))
	r := evalResult(t, mustResponse(s, `"behind"`))
	if r.ElapsedMicros <= 0 || r.QueuedMicros <= 0 {
		t.Errorf("an evaluation that waited for its turn: elapsedMicros %d, queuedMicros %d", r.ElapsedMicros, r.QueuedMicros)
	}
}
