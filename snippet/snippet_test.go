package snippet_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

var (
	js       = protocol.LanguageJS
	lua      = protocol.LanguageLua
	starlark = protocol.LanguageStarlark
)

// roomy limits: the fence a test expects is the one it sets, never the
// deadline of a loaded machine.
func roomy(l limits.Limits) limits.Limits {
	if l.Timeout == 0 {
		l.Timeout = time.Minute
	}
	return l
}

func TestEvalValues(t *testing.T) {
	for _, c := range []struct {
		lang        protocol.Language
		code, input string
		want        string
	}{
		{js, "1+1", "", "2"},
		{js, "let o = {a: input.n * 2, s: 'é'}; o", `{"n": 21}`, `{"a":42,"s":"é"}`},
		{js, "[input, typeof input]", "", `[null,"object"]`},
		{lua, "1+1", "", "2"},
		{lua, "local t = {}\nfor i = 1, input.n do t[i] = i * i end\nreturn t", `{"n": 4}`, "[1,4,9,16]"},
		{starlark, "1+1", "", "2"},
		{starlark, "def f(x):\n    return {'k': x + 1}\nf(input)", "41", `{"k":42}`},
		{starlark, "x = 1", "", "null"},
	} {
		o, err := eval(t, protocol.Eval{Language: c.lang, Snippet: protocol.Snippet{Code: c.code, Input: raw(c.input)}, Limits: roomy(limits.Limits{})})
		if err != nil {
			t.Errorf("%s %q: %v", c.lang, c.code, err)
			continue
		}
		if !sameJSON(t, o.Value, c.want) {
			t.Errorf("%s %q = %s, want %s", c.lang, c.code, o.Value, c.want)
		}
		if o.FuelConsumed == 0 || o.PeakMemoryBytes == 0 {
			t.Errorf("%s %q: usage %+v", c.lang, c.code, o.Usage)
		}
	}
}

// TestEvalFreshState: a one-shot evaluation sees nothing of the one
// before it.
func TestEvalFreshState(t *testing.T) {
	for lang, c := range map[protocol.Language][2]string{
		js:       {"var leak = 1; leak", "typeof leak"},
		lua:      {"leak = 1 return leak", "return type(leak)"},
		starlark: {"leak = 1\nleak", "leak"},
	} {
		if _, err := eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: c[0]}, Limits: roomy(limits.Limits{})}); err != nil {
			t.Fatal(err)
		}
		o, err := eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: c[1]}, Limits: roomy(limits.Limits{})})
		if lang == starlark {
			if se := wantKind(t, err, sandbox.KindScriptError); se != nil && !strings.Contains(se.Message, "undefined: leak") {
				t.Errorf("starlark: %q", se.Message)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := map[protocol.Language]string{js: `"undefined"`, lua: `"nil"`}[lang]; string(o.Value) != want {
			t.Errorf("%s: %s, want %s", lang, o.Value, want)
		}
	}
}

func TestEvalOutputStreamed(t *testing.T) {
	for lang, code := range map[protocol.Language]string{
		js:       "console.log('out', 1); console.error('err'); 3",
		lua:      "print('out', 1) io.write('x\\n') return 3",
		starlark: "print('out', 1)\n3",
	} {
		var mu sync.Mutex
		streamed := map[string]string{}
		o, err := eval(t, protocol.Eval{Language: lang, Limits: roomy(limits.Limits{}), Snippet: protocol.Snippet{Code: code,
			Output: func(stream string, b []byte) { mu.Lock(); streamed[stream] += string(b); mu.Unlock() }}})
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		if string(o.Value) != "3" || o.Output == nil || !strings.HasPrefix(string(o.Output.Stdout), "out") || streamed["stdout"] != string(o.Output.Stdout) {
			t.Errorf("%s: value %s, output %+v, streamed %q", lang, o.Value, o.Output, streamed)
		}
		if lang == js && string(o.Output.Stderr) != "err\n" {
			t.Errorf("js stderr %q", o.Output.Stderr)
		}
	}
}

// TestEvalScriptErrors: a snippet's own failure is script_error with
// the language's message, its position and its text.
func TestEvalScriptErrors(t *testing.T) {
	for _, c := range []struct {
		lang            protocol.Language
		code            string
		line, column    int
		message, inText string
	}{
		{js, "let a = 1;\nlet b = ;", 2, 9, "SyntaxError", "SyntaxError"},
		{js, "1;\nnull.x", 2, 0, "TypeError", "at "},
		{lua, "x = 1\nif then", 2, 7, "snippet:2: syntax error", "line:2(column:7)"},
		{lua, "error('boom')", 1, 0, "boom", "stack traceback"},
		{starlark, "x = 1\ny = (", 2, 6, "snippet:2:6", ""},
		{starlark, "def f():\n    return 1 // 0\nf()", 2, 14, "division by zero", "Traceback"},
	} {
		_, err := eval(t, protocol.Eval{Language: c.lang, Snippet: protocol.Snippet{Code: c.code}, Limits: roomy(limits.Limits{})})
		se := wantKind(t, err, sandbox.KindScriptError)
		if se == nil || se.Script == nil {
			continue
		}
		s := se.Script
		if s.Language != c.lang || s.Line != c.line || (c.column != 0 && s.Column != c.column) ||
			!strings.Contains(se.Message, c.message) || !strings.Contains(s.Text, c.inText) {
			t.Errorf("%s %q: %q at %d:%d, text %q; want %q at %d:%d, text with %q", c.lang, c.code, se.Message, s.Line, s.Column, s.Text,
				c.message, c.line, c.column, c.inText)
		}
		if se.Usage == nil || se.Usage.FuelConsumed == 0 {
			t.Errorf("%s %q: no usage", c.lang, c.code)
		}
	}
}

// TestEvalHostile: each fence ends a hostile snippet with its own kind.
func TestEvalHostile(t *testing.T) {
	const fuel = 50_000_000
	forever := map[protocol.Language]string{js: "while(true){}", lua: "while true do end", starlark: "while True:\n    pass"}
	bomb := map[protocol.Language]string{
		js:       "var s = 'x'; for(;;) s += s",
		lua:      "local s = 'x' while true do s = s .. s end",
		starlark: "s = 'x'\nwhile True:\n    s += s",
	}
	recursion := map[protocol.Language]string{
		js:       "function r(n){ return r(n+1) + 1 }\nr(0)",
		lua:      "local function r(n) return r(n + 1) + 1 end\nreturn r(0)",
		starlark: "def r(n):\n    return r(n + 1) + 1\nr(0)",
	}
	for _, lang := range protocol.Languages() {
		_, err := eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: forever[lang]}, Limits: roomy(limits.Limits{Fuel: fuel})})
		if se := wantKind(t, err, sandbox.KindFuelExhausted); se != nil && (se.Usage == nil || se.Usage.FuelConsumed < fuel) {
			t.Errorf("%s: fuel usage %+v", lang, se.Usage)
		}
		_, err = eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: forever[lang]}, Limits: limits.Limits{Timeout: 200 * time.Millisecond}})
		wantKind(t, err, sandbox.KindTimeout)
		_, err = eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: bomb[lang]}, Limits: roomy(limits.Limits{})})
		if se := wantKind(t, err, sandbox.KindMemoryLimitExceeded); se != nil {
			if se.Limit != snippet.Defaults(lang).MemoryBytes {
				t.Errorf("%s: the cap was %d", lang, se.Limit)
			}
			wantNoCrashReport(t, lang, se.Output)
		}
		_, err = eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: recursion[lang]}, Limits: roomy(limits.Limits{})})
		if se := wantKind(t, err, sandbox.KindScriptError); se != nil {
			want := map[protocol.Language]string{js: "Maximum call stack size exceeded", lua: "stack overflow", starlark: "called recursively"}[lang]
			if !strings.Contains(se.Message, want) {
				t.Errorf("%s recursion: %q, want %q", lang, se.Message, want)
			}
		}
	}
}

// wantNoCrashReport: the guest's Go runtime, out of memory, reports its
// crash (goroutine traces, module paths and versions) on fd 2; none of
// it may reach the snippet's stderr.
func wantNoCrashReport(t *testing.T, lang protocol.Language, out *sandbox.Output) {
	t.Helper()
	if out == nil {
		return
	}
	for _, trace := range []string{"goroutine ", "fatal error", "runtime.", "github.com/", ".go:"} {
		if strings.Contains(string(out.Stderr), trace) {
			t.Errorf("%s: the snippet's stderr carries the runtime's crash report (%q): %.300q", lang, trace, out.Stderr)
			return
		}
	}
}

// TestEvalHugeOutput: printing far more than outputBytes keeps a prefix
// of outputBytes, streamed and returned, and says it was cut.
func TestEvalHugeOutput(t *testing.T) {
	const outputBytes = 64 << 10
	for lang, code := range map[protocol.Language]string{
		js:       "for (let i = 0; i < 2000; i++) console.log('x'.repeat(1000)); 1",
		lua:      "for i = 1, 2000 do print(string.rep('x', 1000)) end return 1",
		starlark: "for i in range(2000):\n    print('x' * 1000)\n1",
	} {
		streamed := 0
		o, err := eval(t, protocol.Eval{Language: lang, Limits: roomy(limits.Limits{OutputBytes: outputBytes}),
			Snippet: protocol.Snippet{Code: code, Output: func(_ string, b []byte) { streamed += len(b) }}})
		if err != nil {
			t.Fatalf("%s: %v", lang, err)
		}
		if len(o.Output.Stdout) != outputBytes || !o.Output.Truncated || streamed > outputBytes {
			t.Errorf("%s: stdout %d bytes, truncated %v, streamed %d", lang, len(o.Output.Stdout), o.Output.Truncated, streamed)
		}
	}
	// A value larger than outputBytes is refused, not cut.
	_, err := eval(t, protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "'x'.repeat(100000)"}, Limits: roomy(limits.Limits{OutputBytes: outputBytes})})
	if se := wantKind(t, err, sandbox.KindScriptError); se != nil && !strings.Contains(se.Message, "outputBytes") {
		t.Errorf("a huge value: %q", se.Message)
	}
	// outputBytes is the value's own: the runtime's answer around it is
	// not counted, so a value of exactly outputBytes passes in every
	// language, and one byte more is refused.
	for _, lang := range protocol.Languages() {
		const small = 8
		o, err := eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: "input", Input: []byte(`"123456"`)}, Limits: roomy(limits.Limits{OutputBytes: small})})
		if err != nil || string(o.Value) != `"123456"` {
			t.Errorf("%s: a value of exactly outputBytes: %s, %v", lang, o.Value, err)
		}
		_, err = eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: "input", Input: []byte(`"1234567"`)}, Limits: roomy(limits.Limits{OutputBytes: small})})
		if se := wantKind(t, err, sandbox.KindScriptError); se != nil && !strings.Contains(se.Message, "larger than limits.outputBytes (8 bytes)") {
			t.Errorf("%s: a value of outputBytes + 1: %q", lang, se.Message)
		}
	}
}

// TestEvalRefusals: what is wrong with a request is said before any
// interpreter starts.
func TestEvalRefusals(t *testing.T) {
	for _, c := range []struct {
		e    protocol.Eval
		want string
	}{
		{protocol.Eval{Language: "python", Snippet: protocol.Snippet{Code: "1"}}, "starlark"},
		{protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "1", Input: raw("{")}}, "input: not one JSON value"},
		{protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "1", Input: raw(strings.Repeat("[", 1001) + strings.Repeat("]", 1001))}}, "deeper than 1000"},
		{protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "\xff"}}, "UTF-8"},
		{protocol.Eval{Language: js, Snippet: protocol.Snippet{Code: "1"}, Limits: limits.Limits{MemoryBytes: 8 << 30}}, "memoryBytes"},
	} {
		_, err := eval(t, c.e)
		if se := wantKind(t, err, sandbox.KindHost); se != nil && !strings.Contains(se.Message, c.want) {
			t.Errorf("%+v: %q, want %q", c.e, se.Message, c.want)
		}
	}
}

func wantKind(t *testing.T, err error, kind sandbox.Kind) *sandbox.Error {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Kind != kind {
		t.Errorf("got %v, want %s", err, kind)
		return nil
	}
	return se
}

func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

func sameJSON(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Errorf("value %q: %v", got, err)
		return false
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
