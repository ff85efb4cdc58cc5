package rpc_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sourcegraph/jsonrpc2"
)

// maxAnswerBytes is the documented bound of an error answer to oversized
// input (docs/protocol.md, Errors): whatever the parent sent, the error
// object quotes it cut (protocol.Quote, protocol.MaxQuotedBytes).
const maxAnswerBytes = 16 << 10

// TestOversizedInputIsEchoedBriefly: every error the sidecar answers
// quotes what the parent sent (method names, ids, member names, values,
// paths) cut: sent half a megabyte in each place of each method, the
// error object stays under 16 KiB, and the server serves on. The id of
// the answer is the request's, by value, as JSON-RPC requires; it is not
// counted.
func TestOversizedInputIsEchoedBriefly(t *testing.T) {
	// Half a megabyte of what an error message must escape or cut: a
	// two-byte rune, ESC, a bidi override, a character JSON escapes.
	text := strings.Repeat("é\x1b\u202e<x", 1<<16)
	bigJSON, _ := json.Marshal(text)
	big := string(bigJSON)
	digits := strings.Repeat("9", 1<<19)
	wat := `{"wat":"(module)"}`
	deep := strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001)
	run := func(members string) string { return `{"module":` + wat + `,"function":"run"` + members + `}` }
	logs := func(arg string) string { return `{"module":` + wat + `,"function":"logs","args":[1,` + arg + `]}` }
	path := `"/` + strings.Repeat("x", 1<<19) + `"`
	// What JSON escapes to six bytes each, the id's prefix and the path's
	// directory right.
	lts := strings.Repeat(`\u003c`, 1<<17)
	longID := `{"id":"sha256:` + lts + `"}`
	longPath := `{"path":"/tmp/` + lts + `"}`
	h := startServer(t, rpctest.NewInstances(4), rpc.Options{})
	h.request(`"inst"`, protocol.MethodInstantiate, json.RawMessage(`{"module":`+wat+`}`))
	m, _ := h.response(`"inst"`)
	var inst struct{ Instance string }
	if m.Error != nil || json.Unmarshal(m.Result, &inst) != nil {
		t.Fatalf("instantiate: %+v %s", m.Error, m.Result)
	}
	instance := strconv.Quote(inst.Instance)
	call := func(members string) string { return `{"instance":` + instance + `,"function":"run"` + members + `}` }

	type req struct{ method, params string }
	cases := []req{
		{text, `{}`},
		{"host/call", `{}`},
		{rpc.MethodRun, `{` + big + `:1}`},
		{rpc.MethodRun, `{"module":{` + big + `:1}}`},
		{rpc.MethodRun, `{"module":{"id":` + big + `}}`},
		{rpc.MethodRun, `{"module":{"wasm":` + big + `}}`},
		{rpc.MethodRun, `{"module":{"wat":"(module)","path":` + big + `}}`},
		{rpc.MethodRun, `{"module":` + wat + `,"function":` + big + `,"input":"x"}`},
		{rpc.MethodRun, run(`,"limits":{` + big + `:1}`)},
		{rpc.MethodRun, run(`,"limits":{"fuel":` + big + `}`)},
		{rpc.MethodRun, run(`,"limits":{"fuel":"` + digits + `"}`)},
		{rpc.MethodRun, run(`,"limits":{"fuel":` + digits + `}`)},
		{rpc.MethodRun, run(`,"limits":{"fuel":-` + digits + `}`)},
		{rpc.MethodRun, run(`,"limits":{"timeoutMs":1` + digits + `}`)},
		{rpc.MethodRun, logs(big)},
		{rpc.MethodRun, logs(digits)},
		{rpc.MethodRun, logs(`1.` + digits)},
		{rpc.MethodRun, logs(`-` + digits + `e-` + digits)},
		{rpc.MethodRun, logs(`"` + digits + `"`)},
		{rpc.MethodRun, logs(`{"type":` + big + `,"value":1}`)},
		{rpc.MethodRun, logs(`{"type":"i32",` + big + `:1}`)},
		{rpc.MethodRun, logs(`{"type":"i32","bits":"0x` + digits + `"}`)},
		{rpc.MethodRun, logs(`{"type":"i32","bits":` + big + `}`)},
		{rpc.MethodRun, logs(`{"type":"i32","value":` + big + `}`)},
		{rpc.MethodRun, logs(`{"type":"i32","value":` + digits + `}`)},
		{rpc.MethodRun, run(`,"capabilities":{` + big + `:1}`)},
		{rpc.MethodRun, run(`,"capabilities":{"random":{` + big + `:1}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"random":{"seed":` + big + `}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{` + big + `:1}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"env":{` + big + `:1}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"env":{` + big + `:"v"}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"env":{"=` + big[1:] + `:"v"}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"files":{"/a":"x",` + path[:len(path)-1] + `/a":"y"}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"files":{"/x":"x","/x/` + path[1:] + `:"y"}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"files":{` + path + `:"y"}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"args":[` + big + `,1]}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"files":{` + big + `:1}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"files":{` + big + `:"x"}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"stdin":{` + big + `:1}}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"dirs":[{` + big + `:1}]}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"dirs":[{"host":` + big + `,"guest":"/g"}]}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"dirs":[{"host":"/tmp","guest":` + big + `}]}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"dirs":[{"host":"/tmp","guest":` + path + `}]}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"dirs":[{"host":` + path + `,"guest":"/g"}]}}`)},
		{rpc.MethodRun, run(`,"capabilities":{"wasi":{"dirs":[{"host":"/tmp","guest":"/g"},{"host":"/tmp","guest":"/g"}],"files":{"/g/` + path[1:] + `:"y"}}}`)},
		{rpc.MethodRun, run(`,"hostFunctions":[{` + big + `:1}]`)},
		{rpc.MethodRun, run(`,"hostFunctions":[{"module":` + big + `,"name":"f"}]`)},
		{rpc.MethodRun, run(`,"hostFunctions":[{"module":"env","name":` + big + `}]`)},
		{rpc.MethodRun, run(`,"hostFunctions":[{"module":"env","name":"f","params":[` + big + `]}]`)},
		{rpc.MethodRun, run(`,"hostCall":` + big)},
		{rpc.MethodRun, run(`,"input":{` + big + `:1}`)},
		{rpc.MethodRun, run(`,"input":{"base64":` + big + `}`)},
		{rpc.MethodRun, run(`,"config":{` + big + `:1}`)},
		{rpc.MethodRun, `{"module":` + wat + `,` + big + `:` + deep + `}`},
		{rpc.MethodRun, `{"module":` + longID + `,"function":"run"}`},
		{rpc.MethodRun, `{"module":` + longPath + `,"function":"run"}`},
		{rpc.MethodCompile, `{"module":` + longID + `}`},
		{rpc.MethodCompile, `{"module":` + longPath + `}`},
		{protocol.MethodInstantiate, `{"module":` + longID + `}`},
		{protocol.MethodInstantiate, `{"module":` + longPath + `}`},
		{rpc.MethodCompile, `{` + big + `:1}`},
		{rpc.MethodCompile, `{"module":{"id":` + big + `}}`},
		{rpc.MethodCompile, `{"module":` + wat + `,"limits":{` + big + `:1}}`},
		{rpc.MethodCompile, `{"module":` + wat + `,"preinitialize":` + big + `}`},
		{protocol.MethodInstantiate, `{` + big + `:1}`},
		{protocol.MethodInstantiate, `{"module":` + wat + `,"config":{` + big + `:1}}`},
		{protocol.MethodInstantiate, `{"module":` + wat + `,"limits":{"varBytes":"` + digits + `"}}`},
		{protocol.MethodInstantiate, `{"module":` + wat + `,"language":` + big + `}`},
		{protocol.MethodInstantiate, `{"language":` + big + `}`},
		{protocol.MethodCall, `{"instance":` + big + `,"function":"run"}`},
		{protocol.MethodCall, `{"instance":"inst-` + strings.Repeat("9", 30) + `","function":"run"}`},
		{protocol.MethodCall, call(`,` + big + `:1`)},
		{protocol.MethodCall, call(`,"limits":{` + big + `:1}`)},
		{protocol.MethodCall, call(`,"limits":{"memoryBytes":1}`)},
		{protocol.MethodCall, call(`,"args":[{"type":` + big + `,"value":1}]`)},
		{protocol.MethodCall, call(`,"hostCall":` + big)},
		{protocol.MethodCall, `{"instance":` + instance + `,"function":` + big + `,"input":"x"}`}, // traps: the instance closes
		{protocol.MethodCall, call(``)},
		{protocol.MethodRelease, `{"instance":` + big + `}`},
		{protocol.MethodRelease, `{` + big + `:1}`},
		{"eval", `{"language":` + big + `,"code":"1"}`},
		{rpc.MethodStats, `{` + big + `:1}`},
		{"initialize", `{` + big + `:1}`},
	}
	for i, c := range cases {
		id := `"e` + strconv.Itoa(i) + `"`
		method, _ := json.Marshal(c.method)
		h.sendRaw(`{"jsonrpc":"2.0","id":` + id + `,"method":` + string(method) + `,"params":` + c.params + `}`)
		m, _ := h.response(id)
		if m.Error == nil {
			continue
		}
		if b, _ := json.Marshal(m.Error); len(b) >= maxAnswerBytes {
			t.Errorf("%s %.80s…: an error of %d bytes: %.300s…", c.method, c.params, len(b), b)
		}
	}

	// Envelopes: an id (echoed by value in the answer's id, not in its
	// message), a method that is not a string, a deep member named at
	// length, a second request under a long id in flight.
	for i, msg := range []string{
		`{"jsonrpc":"2.0","id":` + big + `,"method":"run","params":{"module":` + wat + `,"function":"run","limits":{"fuel":0}}}`,
		`{"jsonrpc":"2.0","id":"m1","method":{` + big + `:1}}`,
		`{"jsonrpc":"2.0","id":"m2","method":"run",` + big + `:` + deep + `}`,
		`{"jsonrpc":"2.0","id":"m3",` + big + `:` + deep + `}`,
		`{"jsonrpc":"1.0","id":"m4","method":` + big + `}`,
	} {
		h.sendRaw(msg)
		m := h.next(0)
		if !m.isResponse() || m.Error == nil {
			t.Fatalf("envelope %d: %+v", i, m)
		}
		if b, _ := json.Marshal(m.Error); len(b) >= maxAnswerBytes {
			t.Errorf("envelope %d (%.60s…): an error of %d bytes: %.300s…", i, msg, len(b), b)
		}
	}
	h.run(big, "block", nil)
	h.waitStarted()
	h.run(big, "run", nil)
	m = h.next(0)
	if b, _ := json.Marshal(m.Error); m.Error == nil || len(b) >= maxAnswerBytes || !strings.Contains(m.Error.Message, "already used") {
		t.Errorf("a second request under a long id in flight: %.300s", b)
	}
	h.notify(rpc.MethodCancel, map[string]json.RawMessage{"id": json.RawMessage(big)})
	m, _ = h.response(big)
	wantError(t, m, -32800, "")
	h.barrier()
	h.endsWithNoMore()
}

// TestErrorObjectBoundsEveryMessage: whatever error a method returns,
// however long its message (one repeating a value no check cut), the
// error answer's message is at most protocol.MaxMessageBytes and "…".
func TestErrorObjectBoundsEveryMessage(t *testing.T) {
	long := strings.Repeat("<", 1<<20)
	for _, err := range []error{
		&protocol.Error{Kind: protocol.KindInvalidModule, Message: long},
		&jsonrpc2.Error{Code: -32602, Message: long},
		errors.New(long),
	} {
		if m := rpc.ErrorObject(err).Message; len(m) > protocol.MaxMessageBytes+len("…") || !strings.HasSuffix(m, "…") {
			t.Errorf("%T: a message of %d bytes", err, len(m))
		}
	}
}
