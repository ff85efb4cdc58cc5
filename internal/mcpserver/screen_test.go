package mcpserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// maxEchoBytes bounds an answer to oversized input (docs/threat-model.md,
// Against a hostile agent): what it repeats of the input is cut.
const maxEchoBytes = 16 << 10

// big is 1 MiB of what JSON escapes most (a quote, a NUL, a '<': 2, 6
// and 6 bytes; 3.75 MiB as JSON), for a name an error might quote;
// bigValue 32 KiB of it (twice the bound, 120 KiB as JSON). The
// binary's test (cmd/sandboxd) sends 4 MiB.
var (
	big      = strings.Repeat("\"\x00<a", 1<<18)
	bigValue = big[:32<<10]
)

func quoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The SDK's errors quoted the client's input whole: a 4 MB tool name,
// method or params array came back as a 12, 4 or 20 MB answer. Each is
// answered briefly now, by the transport's screen or the cut of every
// error as it is written, and the session goes on.
func TestErrorsQuoteTheInputBriefly(t *testing.T) {
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	pad := strings.Repeat("x", maxParamsBytes-100) // params the SDK decodes and fails on, under maxParamsBytes
	for i, tc := range []struct {
		name, method, params string
		code                 float64
		says                 string
	}{
		{"tool name", "tools/call", `{"name":` + quoted(big) + `,"arguments":{}}`, -32602, "unknown tool"},
		{"tool name not a string", "tools/call", `{"name":5,"arguments":{"x":` + quoted(big) + `}}`, -32602, "name must be a string"},
		{"_meta not an object", "tools/call", `{"name":"run_export","_meta":[1],"arguments":{"x":` + quoted(big) + `}}`, -32602, "_meta must be an object"},
		{"inputResponses", "tools/call", `{"name":"run_export","inputResponses":{"a":1},"arguments":{"x":` + quoted(big) + `}}`, -32602, "asks for no input"},
		{"arguments too deep for the SDK", "tools/call", `{"name":"run_export","arguments":{"x":` + strings.Repeat("[", 1000) + quoted(big) + strings.Repeat("]", 1000) + `}}`, -32602, "nested deeper than 1000"},
		{"method", big, `{}`, -32601, "method not found"},
		{"params array", "tools/list", `[` + quoted(big) + `]`, -32602, "params must be an object"},
		{"params string", "tools/call", quoted(big), -32602, "params must be an object"},
		{"params too long", "ping", `{"x":` + quoted(big) + `}`, -32602, "more than " + fmt.Sprint(maxParamsBytes)},
		{"params the SDK cannot decode", "logging/setLevel", `{"level":5,"x":"` + pad + `"}`, -32602, "cut: "},
		{"params the SDK cannot decode (tools/list)", "tools/list", `{"cursor":5,"x":"` + pad + `"}`, -32602, "cut: "},
	} {
		c.send(`{"jsonrpc":"2.0","id":` + fmt.Sprint(i+1) + `,"method":` + quoted(tc.method) + `,"params":` + tc.params + `}`)
		line := c.readLine()
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %.200q", tc.name, line)
		}
		e, _ := m["error"].(map[string]any)
		switch {
		case m["id"] != float64(i+1) || e == nil || e["code"] != tc.code || !strings.Contains(fmt.Sprint(e["message"]), tc.says):
			t.Errorf("%s: %.400s; want error %v saying %q", tc.name, line, tc.code, tc.says)
		case len(line) > maxEchoBytes:
			t.Errorf("%s: an answer of %d bytes", tc.name, len(line))
		}
	}
	// A notification that fails the screen is dropped, as the SDK drops
	// one it cannot decode; the session goes on.
	c.send(`{"jsonrpc":"2.0","method":` + quoted(big) + `}`)
	c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":[` + quoted(big) + `]}`)
	c.send(`{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"(module)"},"function":"run"}}}`)
	if m := c.read(); m["id"] != float64(100) || m["result"] == nil {
		t.Errorf("a call after the refusals: %v", m)
	}
}

// Every argument of every tool, given a value of megabytes of what
// escapes most (as a string, an object key, an array, nested), is
// answered in less than maxEchoBytes: what a refusal quotes of it is cut,
// and so is what the engine says of it.
func TestOversizedArgumentValuesAreAnsweredBriefly(t *testing.T) {
	eng := newSnippetEngine()
	srv, err := New(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"session_create","arguments":{"language":"js"}}}`)
	session := c.read()["result"].(map[string]any)["structuredContent"].(map[string]any)["session"]
	mod := map[string]any{"wat": "(module)"}
	bases := map[string]map[string]any{
		"run_wasi":       {"module": mod},
		"run_export":     {"module": mod, "function": "run"},
		"call_plugin":    {"module": map[string]any{"wat": "plugin"}, "function": "count"},
		"run_snippet":    {"language": "js", "code": "1"},
		"session_create": {"language": "js"},
		"session_eval":   {"session": session, "code": "1"},
		"session_close":  {"session": session},
	}
	values := map[string]any{
		"string":     bigValue,
		"object key": map[string]any{bigValue: 1},
		"nested":     []any{[]any{bigValue, map[string]any{"text": bigValue, "base64": bigValue}}},
		"number":     json.RawMessage(strings.Repeat("9", 32<<10)),
	}
	id := 10
	for _, tl := range srv.tools() {
		fields := append(append([]string(nil), tl.fields...), bigValue) // and an unknown one
		for _, field := range fields {
			for vname, v := range values {
				args := map[string]any{}
				for k, bv := range bases[tl.def.Name] {
					args[k] = bv
				}
				args[field] = v
				id++
				line, m := answerOf(t, c, id, tl.def.Name, args)
				res, _ := m["result"].(map[string]any)
				switch {
				case res == nil:
					t.Errorf("%s %.20q %s: %.300s", tl.def.Name, field, vname, line)
				case res["isError"] != true:
					// accepted (stdin, input): the guest's output, bounded as output
				case len(line) > maxEchoBytes:
					t.Errorf("%s %.20q %s: an answer of %d bytes: %.300s", tl.def.Name, field, vname, len(line), line)
				}
			}
		}
	}
}

// The params the SDK decodes into maps and interfaces (a tools/call's
// _meta, every other method's params) took up to a hundred times their
// text while the call ran: 14 MB of _meta held 1.45 GB, 900 KB of
// logging/setLevel's level was accepted. Each is bounded and refused
// past its bound, under its name as the SDK decodes it (escapes and
// all), and the session goes on.
func TestParamsTheSDKDecodesAreBounded(t *testing.T) {
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	meta := `{"x":[` + strings.Repeat(`{"":0},`, 1000) + `{"":0}]}` // 7,014 bytes
	pad := strings.Repeat("x", maxParamsBytes)
	for i, tc := range []struct {
		name, method, params string
		says                 string
	}{
		{"_meta", "tools/call", `{"name":"run_export","_meta":` + meta + `,"arguments":{"module":{"wat":"(module)"},"function":"run"}}`, "_meta: 7014 bytes, more than 4096"},
		{"_meta under an escaped name", "tools/call", `{"name":"run_export","_m\u0065ta":` + meta + `,"arguments":{}}`, "_meta: 7014 bytes"},
		{"name under an escaped name", "tools/call", `{"n\u0061me":` + quoted(big) + `,"arguments":{}}`, "unknown tool"},
		{"logging/setLevel's level", "logging/setLevel", `{"level":"` + pad + `"}`, "more than " + fmt.Sprint(maxParamsBytes)},
		{"ping's params", "ping", `{"x":"` + pad + `"}`, "more than " + fmt.Sprint(maxParamsBytes)},
		{"initialize's clientInfo", "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"` + pad + `","version":"1"}}`, "more than " + fmt.Sprint(maxParamsBytes)},
	} {
		c.send(`{"jsonrpc":"2.0","id":` + fmt.Sprint(i+1) + `,"method":` + quoted(tc.method) + `,"params":` + tc.params + `}`)
		line := c.readLine()
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %.200q", tc.name, line)
		}
		e, _ := m["error"].(map[string]any)
		if m["id"] != float64(i+1) || e == nil || e["code"] != float64(-32602) || !strings.Contains(fmt.Sprint(e["message"]), tc.says) || len(line) > maxEchoBytes {
			t.Errorf("%s: %.400s; want error -32602 saying %q", tc.name, line, tc.says)
		}
	}
	small := `{"progressToken":"p1","x":[` + strings.Repeat(`{"":0},`, 400) + `{"":0}]}` // 2.8 KB
	c.send(`{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"run_export","_meta":` + small + `,"arguments":{"module":{"wat":"(module)"},"function":"run"}}}`)
	for {
		m := c.read()
		if m["method"] == "notifications/progress" {
			continue
		}
		if m["id"] != float64(100) || m["result"] == nil {
			t.Errorf("a call with a _meta under the bound: %v", m)
		}
		break
	}
}
