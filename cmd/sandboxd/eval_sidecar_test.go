package main

// `eval` on the sidecar's wire, through the binary make build makes
// (SANDBOXD_BIN) and the runtimes it compiled: values, output
// notifications, script errors, every fence, cancel, the run queue, bad
// params, a runtime that is not installed.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// startEvalSidecar starts `sandboxd serve` of make build with its
// runtimes, reading.
func startEvalSidecar(t *testing.T, args ...string) *rawSidecar {
	t.Helper()
	bin := evalBin(t)
	s := startRaw(t, bin, append([]string{"--framing=ndjson", "--runtimes", filepath.Join(filepath.Dir(bin), "runtimes")}, args...)...)
	s.startReading()
	t.Cleanup(func() {
		if strings.Contains(s.stderr.String(), "compiling the") {
			t.Errorf("a runtime was compiled at a snippet (make build compiles them): %s", s.stderr.String())
		}
	})
	return s
}

// evalResult decodes an eval's response, failing the test on an error.
func evalResult(t *testing.T, m *message) protocol.EvalResult {
	t.Helper()
	var r protocol.EvalResult
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil {
		t.Fatalf("want an eval result, got %s", m.raw)
	}
	return r
}

func TestEvalSidecarValues(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	s.request(`"init"`, "initialize", map[string]any{})
	m, _ := s.response(`"init"`, time.Minute)
	var init protocol.InitializeResult
	if m.Error != nil || json.Unmarshal(m.Result, &init) != nil {
		t.Fatalf("initialize: %s", m.raw)
	}
	if want := protocol.Languages(); !reflect.DeepEqual(init.Capabilities.Languages, want) {
		t.Errorf("initialize: languages %v, want %v", init.Capabilities.Languages, want)
	}
	for i, c := range []struct {
		params map[string]any
		value  string
	}{
		{map[string]any{"language": "js", "code": "1+1"}, "2"},
		{map[string]any{"language": "lua", "code": "1+1"}, "2"},
		{map[string]any{"language": "starlark", "code": "1+1"}, "2"},
		{map[string]any{"language": "js", "code": "input.n.map(x => x * 10)", "input": map[string]any{"n": []int{1, 2}}}, "[10,20]"},
		{map[string]any{"language": "lua", "code": "return #input", "input": []string{"a", "b", "c"}}, "3"},
		{map[string]any{"language": "starlark", "code": "def f(x):\n    return x * 2\nf(input)\n", "input": 21}, "42"},
		{map[string]any{"language": "js", "code": "input", "input": nil}, "null"},
		{map[string]any{"language": "js", "code": "({a: 'é', b: [true, null]})", "limits": map[string]any{"memoryBytes": 128 << 20}}, `{"a":"é","b":[true,null]}`},
	} {
		id := fmt.Sprintf(`"v%d"`, i)
		s.request(id, "eval", c.params)
		m, _ := s.response(id, time.Minute)
		r := evalResult(t, m)
		if string(r.Value) != c.value || string(r.Language) != c.params["language"] {
			t.Errorf("%v: value %s (%s), want %s", c.params, r.Value, r.Language, c.value)
		}
	}
}

// TestEvalSidecarOutput: what the snippet prints streams as output
// notifications with the eval's id, before its response, and is in the
// result too.
func TestEvalSidecarOutput(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, c := range []struct{ lang, code, stdout, stderr string }{
		{"js", "console.log('hi', input.name); console.error('oops'); 7", "hi Ada\n", "oops\n"},
		{"lua", "print('hi', input.name) return 7", "hi\tAda\n", ""},
		{"starlark", "print('hi', input['name'])\n7", "hi Ada\n", ""},
	} {
		id := `"out-` + c.lang + `"`
		s.request(id, "eval", map[string]any{"language": c.lang, "code": c.code, "input": map[string]string{"name": "Ada"}})
		m, msgs := s.response(id, time.Minute)
		r := evalResult(t, m)
		if string(r.Value) != "7" || string(r.Stdout) != c.stdout || string(r.Stderr) != c.stderr || r.OutputTruncated {
			t.Errorf("%s: %s", c.lang, m.raw)
		}
		streamed := map[string]string{}
		for _, n := range msgs {
			var p protocol.OutputParams
			if n.Method != protocol.NotifyOutput || json.Unmarshal(n.Params, &p) != nil {
				continue
			}
			if b, _ := json.Marshal(p.ID); string(b) == id {
				streamed[p.Stream] += string(p.Data)
			}
		}
		if streamed["stdout"] != c.stdout || streamed["stderr"] != c.stderr {
			t.Errorf("%s: output notifications before the response carried %q", c.lang, streamed)
		}
	}
}

// TestEvalSidecarErrors: a script error, each fence, and bad params, each
// one response; the sidecar serves on.
func TestEvalSidecarErrors(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t, "--max-memory-bytes", fmt.Sprint(256<<20))
	s.request(`"syntax"`, "eval", map[string]any{"language": "js", "code": "let a = 1;\nlet b = ;\n"})
	m, _ := s.response(`"syntax"`, time.Minute)
	d := errData(t, m)
	if m.Error.Code != 13 || d["kind"] != "script_error" || d["language"] != "js" || d["line"] != float64(2) || d["column"] != float64(9) ||
		!strings.Contains(fmt.Sprint(d["text"]), "Unexpected token") {
		t.Errorf("syntax error: %s", m.raw)
	}
	s.request(`"raise"`, "eval", map[string]any{"language": "lua", "code": "print('before')\nerror('no such user')"})
	m, _ = s.response(`"raise"`, time.Minute)
	if d := errData(t, m); m.Error.Code != 13 || d["line"] != float64(2) || !strings.Contains(m.Error.Message, "no such user") || d["stdout"] == nil {
		t.Errorf("lua error: %s", m.raw)
	}

	for _, c := range []struct {
		name   string
		params map[string]any
		kind   string
	}{
		{"loop", map[string]any{"language": "js", "code": "while (true) {}", "limits": map[string]any{"timeoutMs": 200}}, "timeout"},
		{"fuel", map[string]any{"language": "starlark", "code": "x = 0\nfor i in range(100000000):\n    x += i\nx", "limits": map[string]any{"fuel": 1000000}}, "fuel_exhausted"},
		{"bomb", map[string]any{"language": "lua", "code": "local s = 'x' while true do s = s .. s end"}, "memory_limit_exceeded"},
		{"jsbomb", map[string]any{"language": "js", "code": "let s = 'x'; for (;;) s = s + s", "limits": map[string]any{"timeoutMs": 60000}}, "memory_limit_exceeded"},
	} {
		id := `"` + c.name + `"`
		s.request(id, "eval", c.params)
		m, _ := s.response(id, time.Minute)
		if m.kind() != c.kind {
			t.Errorf("%s: want %s, got %s", c.name, c.kind, m.raw)
		}
		// The guest's Go runtime, out of memory, reports its crash on fd
		// 2, the snippet's stderr: none of it reaches the caller.
		if stderr := fmt.Sprint(errData(t, m)["stderr"]); strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "github.com/") {
			t.Errorf("%s: the snippet's stderr carries the runtime's crash report: %.300s", c.name, stderr)
		}
	}

	for i, c := range []struct {
		params any
		want   string
	}{
		{map[string]any{"code": "1"}, "language: required"},
		{map[string]any{"language": "python", "code": "1"}, `language: unknown language "python"`},
		{map[string]any{"language": 7, "code": "1"}, "language: must be a string"},
		{map[string]any{"language": "js", "instance": "inst-1", "code": "1"}, "instance: give language"},
		{map[string]any{"language": "js"}, "code: required"},
		{map[string]any{"language": "js", "code": []int{1}}, "code: must be a string"},
		{map[string]any{"language": "js", "code": "1", "cod": "1"}, "cod: unknown field"},
		{map[string]any{"language": "js", "code": "1", "input": json.RawMessage(strings.Repeat("[", 1001) + strings.Repeat("]", 1001))}, "input: nested deeper than 1000 levels"},
		{map[string]any{"language": "js", "code": "1", "limits": map[string]any{"memoryBytes": 1 << 40}}, "limits.memoryBytes"},
		{map[string]any{"language": "js", "code": "1", "limits": map[string]any{"timeout": 5}}, "limits.timeout: unknown field"},
		{map[string]any{"language": "js", "code": "1", "limits": map[string]any{"fuel": -1}}, "limits.fuel: must be > 0"},
		{[]int{1}, "params: must be an object"},
	} {
		id := fmt.Sprintf(`"bad%d"`, i)
		s.request(id, "eval", c.params)
		m, _ := s.response(id, time.Minute)
		if m.Error == nil || m.Error.Code != protocol.CodeInvalidParams || !strings.Contains(m.Error.Message, c.want) {
			t.Errorf("%v: want -32602 with %q, got %s", c.params, c.want, m.raw)
		}
	}
	s.request(`"after"`, "eval", map[string]any{"language": "lua", "code": "return 'still serving'"})
	if r := evalResult(t, mustResponse(s, `"after"`)); string(r.Value) != `"still serving"` {
		t.Errorf("after the errors: %s", r.Value)
	}
	// Every request got exactly one response.
	for id, n := range s.responsesByID() {
		if n != 1 {
			t.Errorf("%d responses to %s", n, id)
		}
	}
}

func mustResponse(s *rawSidecar, id string) *message {
	s.t.Helper()
	m, _ := s.response(id, time.Minute)
	return m
}

// TestEvalSidecarCancelAndQueue: an eval takes a run slot, waits in the
// run queue like a run, counts toward --max-queue, and is cancelled by
// $/cancelRequest running or queued.
func TestEvalSidecarCancelAndQueue(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t, "--max-concurrency", "1", "--max-queue", "1")
	spin := map[string]any{"language": "js", "code": "while (true) {}", "limits": map[string]any{"timeoutMs": 600000}}
	s.request(`"spin"`, "eval", spin)
	s.waitRunning(1, 0)
	s.request(`"queued"`, "eval", map[string]any{"language": "lua", "code": "return 1"})
	s.waitRunning(1, 1)
	s.request(`"busy"`, "eval", map[string]any{"language": "lua", "code": "return 1"})
	if m := mustResponse(s, `"busy"`); m.Error == nil || m.Error.Code != protocol.CodeBusy {
		t.Errorf("a third eval with one slot and a queue of one: %s", m.raw)
	}
	s.notify("$/cancelRequest", map[string]any{"id": "queued"})
	if m := mustResponse(s, `"queued"`); m.Error == nil || m.Error.Code != protocol.CodeCancelled {
		t.Errorf("cancelled queued eval: %s", m.raw)
	}
	s.notify("$/cancelRequest", map[string]any{"id": "spin"})
	if m := mustResponse(s, `"spin"`); m.Error == nil || m.Error.Code != protocol.CodeCancelled || m.kind() != "cancelled" {
		t.Errorf("cancelled running eval: %s", m.raw)
	}
	s.request(`"after"`, "eval", map[string]any{"language": "js", "code": "'ok'"})
	if r := evalResult(t, mustResponse(s, `"after"`)); string(r.Value) != `"ok"` {
		t.Errorf("after cancelling: %s", r.Value)
	}
	st := s.statsRaw(`"stats"`)
	if st.Runs["cancelled"] != 2 || st.Runs["ok"] != 1 {
		t.Errorf("stats.runs %v: want 2 cancelled, 1 ok", st.Runs)
	}
}

// TestEvalSidecarRuntimeMissing: a sidecar without runtimes starts and
// serves; initialize lists no language, and eval is an error of kind host
// naming where the runtime was looked for.
func TestEvalSidecarRuntimeMissing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := startRaw(t, binPath, "--framing=ndjson", "--runtimes", dir)
	s.startReading()
	s.request(`"init"`, "initialize", map[string]any{})
	m := mustResponse(s, `"init"`)
	var init protocol.InitializeResult
	if m.Error != nil || json.Unmarshal(m.Result, &init) != nil || len(init.Capabilities.Languages) != 0 {
		t.Fatalf("initialize without runtimes: %s", m.raw)
	}
	s.request(`"eval"`, "eval", map[string]any{"language": "js", "code": "1"})
	m = mustResponse(s, `"eval"`)
	if m.kind() != "host" || !strings.Contains(m.Error.Message, "the js runtime is not installed") || !strings.Contains(m.Error.Message, filepath.Join(dir, "js.wasm")) {
		t.Errorf("eval without runtimes: %s", m.raw)
	}
	s.request(`"run"`, "run", runParams(fixture("well_behaved.wat"), "add", []any{1, 2}, nil, nil))
	if m := mustResponse(s, `"run"`); m.Error != nil {
		t.Errorf("a run after the failed eval: %s", m.raw)
	}
}

// TestEvalSidecarScriptErrorUnderSmallOutputBytes: outputBytes holds the
// value, not the runtime's answer: with a small outputBytes a script
// error still comes back as itself, with its message, line and column.
func TestEvalSidecarScriptErrorUnderSmallOutputBytes(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, c := range []struct {
		lang       protocol.Language
		code, want string
	}{
		{protocol.LanguageJS, "let a = ;", "SyntaxError"},
		{protocol.LanguageLua, "error('boom')", "boom"},
		{protocol.LanguageStarlark, "fail('boom')", "boom"},
	} {
		s.request(`"e"`, "eval", map[string]any{"language": c.lang, "code": c.code, "limits": map[string]any{"outputBytes": 64}})
		m := mustResponse(s, `"e"`)
		if m.Error == nil || m.Error.Code != 13 || !strings.Contains(m.Error.Message, c.want) {
			t.Errorf("%s %q with outputBytes 64: want the script error naming %q, got %s", c.lang, c.code, c.want, m.raw)
		}
	}
	// A value whose JSON is exactly outputBytes fits.
	value := `"12345678901"`
	s.request(`"v"`, "eval", map[string]any{"language": "js", "code": value, "limits": map[string]any{"outputBytes": len(value)}})
	if r := evalResult(t, mustResponse(s, `"v"`)); string(r.Value) != value {
		t.Errorf("value %s", r.Value)
	}
}

// TestEvalSidecarFollowsServeDefaults: an operator's --default-* flags
// (what initialize reports as limits.defaults) are an evaluation's
// defaults, one-shot and in a session.
func TestEvalSidecarFollowsServeDefaults(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t, "--default-timeout-ms", "100")
	s.request(`"spin"`, "eval", map[string]any{"language": "lua", "code": "while true do end"})
	m := mustResponse(s, `"spin"`)
	if d := errData(t, m); d["kind"] != "timeout" || d["timeoutMs"] != float64(100) {
		t.Errorf("one-shot spin under --default-timeout-ms 100: %s", m.raw)
	}
	inst := rawSession(t, s, `"sess"`, map[string]any{"language": "lua"}).Instance
	m = sessionEvalRaw(s, `"sspin"`, inst, "while true do end", nil)
	if d := errData(t, m); d["kind"] != "timeout" || d["timeoutMs"] != float64(100) {
		t.Errorf("session spin under --default-timeout-ms 100: %s", m.raw)
	}
}
