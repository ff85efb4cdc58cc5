package rpc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// TestDecodeEval: eval's params, one-shot and in a session; every
// problem is -32602 naming the field.
func TestDecodeEval(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	deep := strings.Repeat("[", protocol.MaxEvalInputDepth+1) + strings.Repeat("]", protocol.MaxEvalInputDepth+1)
	for _, c := range []struct{ params, want string }{
		{`[]`, `params: must be an object, got an array`},
		{`{"code":"1"}`, `language: required: one of js, lua, starlark (or instance, a session)`},
		{`{"language":null,"code":"1"}`, `language: required`},
		{`{"language":"python","code":"1"}`, `language: unknown language "python": give one of js, lua, starlark (Python is not available; Starlark, a dialect of Python, is "starlark")`},
		{`{"language":"JS","code":"1"}`, `language: unknown language "JS"`},
		{`{"language":1,"code":"1"}`, `language: must be a string, got a number`},
		{`{"language":"js","instance":"inst-1","code":"1"}`, `instance: give language (a one-shot evaluation) or instance (a session, which has its language), not both`},
		{`{"instance":"","code":"1"}`, `instance: must not be empty`},
		{`{"instance":"` + strings.Repeat("x", protocol.MaxInstanceIDBytes+1) + `","code":"1"}`, `instance: not an id instantiate returned`},
		{`{"language":"js"}`, `code: required: the snippet, a string`},
		{`{"language":"js","code":{"text":"1"}}`, `code: must be a string, got an object`},
		{`{"language":"js","code":"1","input":` + deep + `}`, `input: nested deeper than 1000 levels`},
		{`{"language":"js","code":"1","Code":"2"}`, `Code: unknown field (allowed: language, instance, code, input, limits)`},
	} {
		_, err := decodeEval(json.RawMessage(c.params))
		checkParamErr(t, "eval", c.params, err, c.want)
	}

	spec, err := decodeEval(json.RawMessage(`{"language":"lua","code":"return input","input": {"a":[1,2]} ,"limits":{"fuel":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	if spec.language != protocol.LanguageLua || spec.code != "return input" || string(spec.input) != `{"a":[1,2]}` || spec.instance != "" {
		t.Fatalf("decoded %+v", spec)
	}
	l, err := spec.evalLimits(def, max)
	if err != nil || l.Fuel != 5 || l.MemoryBytes != def.MemoryBytes {
		t.Fatalf("one-shot limits %+v, %v", l, err)
	}

	for _, c := range []struct{ limits, want string }{
		{`{"memoryBytes":1}`, `limits.memoryBytes: fixed at instantiate (only fuel, timeoutMs, logBytes, outputBytes apply to a call)`},
		{`{"fuel":0}`, `limits.fuel: must be > 0`},
		{`{"deadline":5}`, `limits.deadline: unknown field (allowed: fuel, timeoutMs, logBytes, outputBytes)`},
	} {
		params := `{"instance":"inst-1","code":"x","limits":` + c.limits + `}`
		spec, err := decodeEval(json.RawMessage(params))
		if err != nil {
			t.Fatalf("%s: %v", params, err)
		}
		_, err = spec.sessionEvalLimits(def, max)
		checkParamErr(t, "session eval", params, err, c.want)
	}
	spec, err = decodeEval(json.RawMessage(`{"instance":"inst-1","code":"x","limits":{"timeoutMs":50}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := spec.sessionEvalLimits(def, max); err != nil || cl.Timeout.Milliseconds() != 50 || cl.Fuel != 0 || spec.instance != "inst-1" {
		t.Fatalf("session limits %+v, %v", cl, err)
	}
}

// TestDecodeSessionInstantiate: instantiate with a language makes a
// session, which takes no module, grant or declaration; without one the
// params are an instance's (nil, nil).
func TestDecodeSessionInstantiate(t *testing.T) {
	for _, c := range []struct{ params, want string }{
		{`{"language":"js","module":{"wat":"(module)"}}`, `module: give module (an instance of it) or language (a session), not both`},
		{`{"language":"js","capabilities":{}}`, `capabilities: not offered for a session (instantiate with language)`},
		{`{"language":"js","config":{}}`, `config: not offered for a session`},
		{`{"language":"js","hostFunctions":[]}`, `hostFunctions: not offered for a session`},
		{`{"language":"js","hostCall":"sbx-1"}`, `hostCall: not offered for a session`},
		{`{"language":"node"}`, `language: unknown language "node": give one of js, lua, starlark (JavaScript is "js")`},
		{`{"language":["js"]}`, `language: must be a string, got an array`},
	} {
		_, err := decodeSessionInstantiate(json.RawMessage(c.params))
		checkParamErr(t, "instantiate", c.params, err, c.want)
	}
	for _, params := range []string{`{"module":{"wat":"(module)"}}`, `{"language":null,"module":{"wat":"(module)"}}`, `{"language":"js","bogus":1}`, `[]`} {
		if spec, err := decodeSessionInstantiate(json.RawMessage(params)); spec != nil || err != nil {
			t.Errorf("%s: %+v, %v; want it left to decodeInstantiate", params, spec, err)
		}
	}
	spec, err := decodeSessionInstantiate(json.RawMessage(`{"language":"starlark","limits":{"memoryBytes":1048576}}`))
	if err != nil || spec.language != protocol.LanguageStarlark || string(spec.rawLimits) != `{"memoryBytes":1048576}` {
		t.Fatalf("%+v, %v", spec, err)
	}
}
