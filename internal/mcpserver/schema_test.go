package mcpserver

import (
	"encoding/json"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
)

// The input schemas and the argument reader say the same thing: every
// argument object of the table is accepted by both, or refused by both,
// or (the last column) refused by the reader for what a JSON Schema does
// not express (a NUL in an argument, a relative path, bad base64), which
// the schema's descriptions say in words. The schema is never the
// stricter: a client that validates its calls never holds back one the
// server would serve.
func TestSchemasAgreeWithTheReader(t *testing.T) {
	max := limits.DefaultMaximums()
	max.Fuel = 1000
	eng := newSnippetEngine()
	srv, err := New(eng, Options{Maximums: max, ModuleDirs: []string{"/srv"}})
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]any{}
	for _, tl := range srv.tools() {
		schemas[tl.def.Name] = tl.def.InputSchema
	}
	cs := session(t, eng, Options{Maximums: max, ModuleDirs: []string{"/srv"}}, nil)
	callTool(t, cs, "session_create", map[string]any{"language": "js"}) // inst-1
	const (
		both     = iota // accepted by both
		neither         // refused by both
		onlyRead        // refused by the reader only
	)
	wat := `"module": {"wat": "(module)"}`
	for _, tc := range []struct {
		tool, args string
		want       int
	}{
		{"run_export", `{` + wat + `, "function": "run"}`, both},
		{"run_export", `{` + wat + `, "function": "echo", "args": [1, "2", 1.5, {"type": "f64", "bits": "0x0"}], "capabilities": {"log": true, "clock": false, "random": true, "seed": 7}, "limits": {"fuel": 1000, "timeoutMs": 5}}`, both},
		{"run_export", `{"module": {"base64": "AGFzbQEAAAA="}, "function": "run"}`, both},
		{"run_export", `{"module": {"path": "/srv/m.wasm"}, "function": "run"}`, both},
		{"run_export", `{` + wat + `}`, neither},
		{"run_export", `{"function": "run"}`, neither},
		{"run_export", `{` + wat + `, "function": ""}`, neither},
		{"run_export", `{` + wat + `, "function": 5}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "extra": 1}`, neither},
		{"run_export", `{"module": {"wat": "(module)", "base64": "AA=="}, "function": "run"}`, neither},
		{"run_export", `{"module": {}, "function": "run"}`, neither},
		{"run_export", `{"module": {"wat": ""}, "function": "run"}`, neither},
		{"run_export", `{"module": {"wasm": "AA=="}, "function": "run"}`, neither},
		{"run_export", `{"module": "(module)", "function": "run"}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "args": [true]}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "args": 5}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "capabilities": {"wasi": true}}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "capabilities": {"seed": -1}}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "limits": {"fuel": 1001}}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "limits": {"fuel": 0}}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "limits": {"fuel": 2.5}}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "limits": {"varBytes": 5}}`, neither},
		{"run_export", `{` + wat + `, "function": "run", "limits": []}`, neither},
		{"run_export", `{"module": {"base64": "***"}, "function": "run"}`, onlyRead},
		{"run_export", `{"module": {"path": "m.wasm"}, "function": "run"}`, onlyRead},

		{"run_wasi", `{` + wat + `, "args": ["a"], "env": {"K": "v"}, "stdin": "x", "files": {"/a": "t", "/b": {"text": "t"}, "/c": {"base64": "AA=="}}, "dirs": [{"host": "/srv", "guest": "/d"}, {"host": "/srv", "guest": "/e", "writable": true}]}`, both},
		{"run_wasi", `{` + wat + `, "stdin": {"base64": "AA=="}}`, both},
		{"run_wasi", `{"args": []}`, neither},
		{"run_wasi", `{` + wat + `, "args": [1]}`, neither},
		{"run_wasi", `{` + wat + `, "args": "a b"}`, neither},
		{"run_wasi", `{` + wat + `, "env": {"K": 1}}`, neither},
		{"run_wasi", `{` + wat + `, "env": []}`, neither},
		{"run_wasi", `{` + wat + `, "stdin": 5}`, neither},
		{"run_wasi", `{` + wat + `, "stdin": {"text": "a", "base64": "AA=="}}`, neither},
		{"run_wasi", `{` + wat + `, "stdin": {"hex": "00"}}`, neither},
		{"run_wasi", `{` + wat + `, "files": {"/a": 5}}`, neither},
		{"run_wasi", `{` + wat + `, "dirs": [{"host": "/srv"}]}`, neither},
		{"run_wasi", `{` + wat + `, "dirs": [{"host": "/srv", "guest": "/d", "mode": "rw"}]}`, neither},
		{"run_wasi", `{` + wat + `, "dirs": [{"host": "/srv", "guest": "/d", "writable": "yes"}]}`, neither},
		{"run_wasi", `{` + wat + `, "dirs": {"host": "/srv", "guest": "/d"}}`, neither},
		{"run_wasi", `{` + wat + `, "function": "_start"}`, neither},
		{"run_wasi", `{` + wat + `, "args": ["a\u0000b"]}`, onlyRead},
		{"run_wasi", `{` + wat + `, "env": {"A=B": "v"}}`, onlyRead},
		{"run_wasi", `{` + wat + `, "files": {"rel": "x"}}`, onlyRead},
		{"run_wasi", `{` + wat + `, "dirs": [{"host": "", "guest": "/d"}]}`, onlyRead},
		{"run_wasi", `{` + wat + `, "stdin": {"base64": "%%"}}`, onlyRead},

		{"call_plugin", `{"module": {"wat": "plugin"}, "function": "count", "input": "x", "config": {"a": "b"}, "wasi": false, "log": true, "limits": {"varBytes": 10, "outputBytes": 10}}`, both},
		{"call_plugin", `{"module": {"wat": "plugin"}, "function": "count", "input": {"base64": "AA=="}}`, both},
		{"call_plugin", `{"module": {"wat": "plugin"}}`, neither},
		{"call_plugin", `{"module": {"wat": "plugin"}, "function": "count", "input": 5}`, neither},
		{"call_plugin", `{"module": {"wat": "plugin"}, "function": "count", "config": {"a": 1}}`, neither},
		{"call_plugin", `{"module": {"wat": "plugin"}, "function": "count", "wasi": "yes"}`, neither},
		{"call_plugin", `{"module": {"wat": "plugin"}, "function": "count", "limits": {"varBytes": 0}}`, neither},
		{"call_plugin", `{"module": {"wat": "plugin"}, "function": "count", "args": [1]}`, neither},

		{"run_snippet", `{"language": "js", "code": "1"}`, both},
		{"run_snippet", `{"language": "lua", "code": "1", "input": {"a": [1, null]}, "limits": {"timeoutMs": 5, "memoryBytes": 1000, "fuel": 1000}}`, both},
		{"run_snippet", `{"language": "js", "code": "", "input": null}`, both},
		{"run_snippet", `{"code": "1"}`, neither},
		{"run_snippet", `{"language": "js"}`, neither},
		{"run_snippet", `{"language": "ruby", "code": "1"}`, neither},
		{"run_snippet", `{"language": "starlark", "code": "1"}`, neither},
		{"run_snippet", `{"language": "js", "code": 5}`, neither},
		{"run_snippet", `{"language": "js", "code": "1", "limits": {"fuel": 1001}}`, neither},
		{"run_snippet", `{"language": "js", "code": "1", "limits": {"varBytes": 5}}`, neither},
		{"run_snippet", `{"language": "js", "code": "1", "module": {"wat": "(module)"}}`, neither},

		{"session_create", `{"language": "js", "limits": {"memoryBytes": 1000, "fuel": 1000}}`, both},
		{"session_create", `{"language": "js", "code": "1"}`, neither},
		{"session_create", `{"limits": {}}`, neither},
		{"session_eval", `{"session": "inst-1", "code": "1", "input": [1], "limits": {"fuel": 1000, "timeoutMs": 5, "logBytes": 1, "outputBytes": 1}}`, both},
		{"session_eval", `{"session": "inst-1", "code": "1", "limits": {"memoryBytes": 1000}}`, neither},
		{"session_eval", `{"session": "inst-1"}`, neither},
		{"session_eval", `{"code": "1"}`, neither},
		{"session_eval", `{"session": 1, "code": "1"}`, neither},
		{"session_close", `{"session": 1}`, neither},
		{"session_close", `{}`, neither},
	} {
		var args map[string]any
		if err := json.Unmarshal([]byte(tc.args), &args); err != nil {
			t.Fatalf("%s %s: %v", tc.tool, tc.args, err)
		}
		schemaOK := validates(t, schemas[tc.tool], args) == nil
		res, out := callTool(t, cs, tc.tool, json.RawMessage(tc.args))
		readerOK := errorKind(t, res, out) != KindInvalidParams
		want := map[int][2]bool{both: {true, true}, neither: {false, false}, onlyRead: {true, false}}[tc.want]
		if schemaOK != want[0] || readerOK != want[1] {
			t.Errorf("%s %s: the schema accepts it: %v, the reader: %v (%v); want %v, %v", tc.tool, tc.args, schemaOK, readerOK, out["error"], want[0], want[1])
		}
	}
}

// Every schema resolves (validates fails the test otherwise); no input
// schema accepts a call without its module, and no output schema an
// output with neither a result nor an error.
func TestSchemasResolve(t *testing.T) {
	srv, err := New(newSnippetEngine(), Options{ModuleDirs: []string{"/srv"}, WASIDirs: []string{"/data"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range srv.tools() {
		for _, s := range []any{tl.def.InputSchema, tl.def.OutputSchema} {
			if validates(t, s, map[string]any{}) == nil {
				t.Errorf("%s: a schema accepts {}", tl.def.Name)
			}
		}
		if validates(t, tl.def.OutputSchema, map[string]any{"error": map[string]any{"kind": "timeout", "message": "m"}}) != nil {
			t.Errorf("%s: the output schema refuses an error", tl.def.Name)
		}
	}
}
