package script_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

func TestNumbersAreWrittenAsJavaScriptWritesThem(t *testing.T) {
	tenth := 0.1
	for f, want := range map[float64]string{
		0: "0", math.Copysign(0, -1): "0", 1: "1", -2.5: "-2.5", 1e21: "1e+21", 1e20: "100000000000000000000",
		1e-7: "1e-7", 1.5e-7: "1.5e-7", 1e-6: "0.000001", tenth + 0.2: "0.30000000000000004", 5e-324: "5e-324",
		math.MaxFloat64: "1.7976931348623157e+308", math.Inf(1): "null", math.Inf(-1): "null", math.NaN(): "null",
	} {
		if got := string(script.AppendNumber(nil, f)); got != want {
			t.Errorf("AppendNumber(%v) = %s, want %s", f, got, want)
		}
	}
}

func TestEncoderWritesValidJSON(t *testing.T) {
	var e script.Encoder
	must(t, e.BeginObject())
	e.Key("s")
	e.String("q\"\\\n\t\x01<é>\xff\u2028")
	e.Key("a")
	must(t, e.BeginArray())
	e.Null()
	e.Bool(true)
	e.Integer("-123456789012345678901234567890")
	must(t, e.BeginObject())
	e.EndObject()
	must(t, e.BeginArray())
	e.EndArray()
	e.EndArray()
	e.Key("")
	e.Number(1.5)
	e.EndObject()
	const want = `{"s":"q\"\\\n\t\u0001<é>` + "\uFFFD\u2028" + `","a":[null,true,-123456789012345678901234567890,{},[]],"":1.5}`
	if got := string(e.Bytes()); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if !json.Valid(e.Bytes()) {
		t.Fatal("not valid JSON")
	}
	e.Reset()
	e.String("again")
	if got := string(e.Bytes()); got != `"again"` {
		t.Fatalf("after Reset: %s", got)
	}
}

func TestEncoderRefusesDeepNesting(t *testing.T) {
	var e script.Encoder
	for i := 0; i < script.MaxDepth; i++ {
		must(t, e.BeginArray())
	}
	err := e.BeginArray()
	if err == nil || !strings.Contains(err.Message, "nested deeper than 1000 levels") {
		t.Fatalf("level %d: %v, want a nesting error", script.MaxDepth+1, err)
	}
}

func TestParseInputKeepsOrderAndNumbers(t *testing.T) {
	v, err := script.ParseInput([]byte(` {"b": 1, "a": [1.5e3, -0, 12345678901234567890], "b": null} `))
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != script.Object || strings.Join(v.Keys, ",") != "b,a,b" {
		t.Fatalf("keys %q, want b,a,b in order, repeats kept", v.Keys)
	}
	nums := v.Items[1].Items
	if nums[0].Number != "1.5e3" || nums[0].IsInteger() || nums[0].Float() != 1500 {
		t.Fatalf("1.5e3 read as %+v", nums[0])
	}
	if nums[2].Number != "12345678901234567890" || !nums[2].IsInteger() {
		t.Fatalf("a big integer read as %+v", nums[2])
	}
	for _, empty := range []string{"", "  ", "null"} {
		if v, err := script.ParseInput([]byte(empty)); err != nil || v.Kind != script.Null {
			t.Fatalf("%q: %+v, %v; want null", empty, v, err)
		}
	}
}

func TestParseInputRefuses(t *testing.T) {
	for input, want := range map[string]string{
		`{"a": }`:   "input: invalid character",
		`[1, 2`:     "input: unexpected EOF",
		`1 2`:       "input: data after the JSON value",
		`{"a": 1}x`: "input: ",
		strings.Repeat("[", script.MaxDepth+1) + strings.Repeat("]", script.MaxDepth+1): "input: nested deeper than 1000 levels",
	} {
		if _, err := script.ParseInput([]byte(input)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%.20q: %v, want %q", input, err, want)
		}
	}
	deepest := strings.Repeat("[", script.MaxDepth) + strings.Repeat("]", script.MaxDepth)
	if _, err := script.ParseInput([]byte(deepest)); err != nil {
		t.Errorf("%d levels: %v", script.MaxDepth, err)
	}
}

func TestBoundCutsOnCharacters(t *testing.T) {
	if got := script.Bound("short", 10); got != "short" {
		t.Fatalf("%q", got)
	}
	got := script.Bound(strings.Repeat("é", 100), 11)
	if got != "éééé…" || len(got) > 11 {
		t.Fatalf("%q (%d bytes)", got, len(got))
	}
	if got := script.Bound("a\xffb", 10); got != "a\uFFFDb" {
		t.Fatalf("invalid UTF-8: %q", got)
	}
	e := script.NewError("first line\nsecond", -1, 3, strings.Repeat("x", 2*script.MaxTextBytes))
	if e.Message != "first line" || e.Line != 0 || e.Column != 3 || len(e.Text) > script.MaxTextBytes {
		t.Fatalf("%+v", e)
	}
}

// echo is a Session that answers with its code and input.
type echo struct{}

func (echo) EvalInput(code string, input *script.Value) (json.RawMessage, *script.Error) {
	if code == "fail" {
		return nil, script.NewError("Error: <failed>", 2, 5, "Error: <failed>\n  at line 2")
	}
	b, _ := json.Marshal([]any{code, input.Kind})
	return b, nil
}

func TestHandle(t *testing.T) {
	for req, want := range map[string]string{
		`{"code": "1+1"}`:                   `{"value":["1+1",0]}`,
		`{"code": "x", "input": {"a": 1}}`:  `{"value":["x",5]}`,
		`{"code": "x", "input": null}`:      `{"value":["x",0]}`,
		`{"code": "fail"}`:                  `{"error":{"message":"Error: <failed>","line":2,"column":5,"text":"Error: <failed>\n  at line 2"}}`,
		`{"input": 1}`:                      `error: request: "code" is missing`,
		`{"code": "x", "extra": 1}`:         `error: request: unknown field "extra"`,
		`{"code": 1}`:                       `error: request: "code" is not a string`,
		`not json`:                          `error: request: invalid character`,
		`{"code": "x"} {}`:                  `error: request: data after the JSON object`,
		`{"code": "x", "input": [[[[1]]]]}`: `{"value":["x",4]}`,
		`{"code": "x", "input": ` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`: `error: input: nested deeper than 1000 levels`,
	} {
		out, err := script.Handle(echo{}, []byte(req))
		got := string(out)
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.HasPrefix(got, want) {
			t.Errorf("%.40s:\n got %s\nwant %s", req, got, want)
		}
	}
}

func must(t *testing.T, err *script.Error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestNestingErrorTellsCyclesFromDepth(t *testing.T) {
	a, b := new(int), new(int)
	if err := script.NestingError([]*int{a, b, a}); !strings.Contains(err.Message, "cycle") {
		t.Fatalf("a repeated container: %v", err)
	}
	if err := script.NestingError([]*int{a, b}); !strings.Contains(err.Message, "nested deeper") {
		t.Fatalf("distinct containers: %v", err)
	}
	if err := script.Cycle([]*int{a, b}, a); err == nil || !strings.Contains(err.Message, "cycle") {
		t.Fatalf("Cycle on a short path: %v", err)
	}
	if err := script.Cycle([]*int{a, b}, new(int)); err != nil {
		t.Fatalf("Cycle of a new container: %v", err)
	}
}

func TestGuardEndsTheSessionAfterAPanic(t *testing.T) {
	g := script.Guard{Interpreter: "Test"}
	if v, err := g.Run(func() (json.RawMessage, *script.Error) { return json.RawMessage("1"), nil }); err != nil || string(v) != "1" {
		t.Fatalf("%s, %v", v, err)
	}
	_, err := g.Run(func() (json.RawMessage, *script.Error) { panic("boom") })
	const want = "internal error in the Test interpreter: boom"
	if err == nil || err.Message != want || !err.Fatal {
		t.Fatalf("after a panic: %+v", err)
	}
	ran := false
	if _, err := g.Run(func() (json.RawMessage, *script.Error) { ran = true; return nil, nil }); ran || err == nil || err.Message != want || !err.Fatal {
		t.Fatalf("after the panic, ran=%v err=%+v", ran, err)
	}
	if got := string(script.Response(nil, err)); !strings.Contains(got, `"fatal":true`) {
		t.Fatalf("the answer does not say the session cannot go on: %s", got)
	}
}

// A script error leaves the session; a fatal one (the runtime could not
// set up the evaluation) ends it, as a panic does.
func TestGuardEndsTheSessionAfterAFatalError(t *testing.T) {
	g := script.Guard{Interpreter: "Test"}
	if _, err := g.Run(func() (json.RawMessage, *script.Error) { return nil, script.Errorf("thrown") }); err == nil || err.Fatal {
		t.Fatalf("a script error: %+v", err)
	}
	if v, err := g.Run(func() (json.RawMessage, *script.Error) { return json.RawMessage("2"), nil }); err != nil || string(v) != "2" {
		t.Fatalf("after a script error: %s, %v", v, err)
	}
	if got := string(script.Response(nil, script.Errorf("thrown"))); strings.Contains(got, "fatal") {
		t.Fatalf("a script error's answer: %s", got)
	}
	broken := script.Fatalf("cannot set input")
	if _, err := g.Run(func() (json.RawMessage, *script.Error) { return nil, broken }); err != broken {
		t.Fatalf("a fatal error: %+v", err)
	}
	ran := false
	if _, err := g.Run(func() (json.RawMessage, *script.Error) { ran = true; return nil, nil }); ran || err != broken {
		t.Fatalf("after a fatal error, ran=%v err=%+v", ran, err)
	}
}
