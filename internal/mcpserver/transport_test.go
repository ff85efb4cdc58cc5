package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The transport against what no SDK client sends: every bad line is
// answered, and the session goes on.
func TestBadLinesAreAnsweredAndTheSessionGoesOn(t *testing.T) {
	srv, err := New(newEngine(), Options{MaxMessageBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	for _, tc := range []struct{ line, says string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"` + strings.Repeat("x", 5000) + `"}}}}`, "longer than 4096 bytes"},
		{`{"jsonrpc":"2.0","id":2,"method":`, "not a JSON-RPC message"},
		{`not json at all`, "not a JSON-RPC message"},
		{`[{"jsonrpc":"2.0","id":3,"method":"tools/list"}]`, "batches are not supported"},
		{`{"jsonrpc":"1.0","id":4,"method":"tools/list"}`, "not a JSON-RPC message"},
		// ids the SDK read loosely: null made the call a notification
		// (never answered), 1.5 was answered as 1, 2^70 as -2^63
		{`{"jsonrpc":"2.0","id":null,"method":"tools/list"}`, "a string or an integer, not null"},
		{`{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`, "not an integer"},
		{`{"jsonrpc":"2.0","id":1180591620717411303424,"method":"tools/list"}`, "not an integer of at most 64 bits"},
		{`{"jsonrpc":"2.0","id":7,"ID":8,"method":"tools/list"}`, "the id appears twice"},
	} {
		c.send(tc.line)
		m := c.read()
		e, _ := m["error"].(map[string]any)
		if m["id"] != nil || e == nil || !strings.Contains(fmt.Sprint(e["message"]), tc.says) {
			t.Errorf("%.60s: answered %v, want an error with id null saying %q", tc.line, m, tc.says)
		}
	}
	for _, id := range []string{`"x"`, `-1`, `1e3`} { // what MCP allows, as the SDK reads it
		c.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)
		if m := c.read(); m["error"] != nil || fmt.Sprint(m["id"]) != map[string]string{`"x"`: "x", `-1`: "-1", `1e3`: "1000"}[id] {
			t.Errorf("id %s: answered %v", id, m)
		}
	}
	c.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"(module)"},"function":"run"}}}`)
	if m := c.read(); m["id"] != float64(5) || strings.Contains(fmt.Sprint(m), "isError") {
		t.Errorf("a call after the bad lines: %v", m)
	}
}

// Calls past --max-queue are answered busy at once, by the reader; an id
// still in flight is refused, not taken for another request's.
func TestCallsPastTheQueueAreBusy(t *testing.T) {
	eng := newEngine()
	srv, err := New(eng, Options{MaxQueue: 2, MaxConcurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	gate := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"(module)"},"function":"gate"}}}`, id)
	}
	c.send(gate(1))
	c.send(gate(2))
	<-eng.Started
	<-eng.Started // both run: the queue holds two
	c.send(gate(3))
	if m := c.read(); m["id"] != float64(3) || !strings.Contains(fmt.Sprint(m["error"]), "busy: 2 requests are unanswered (sandboxd mcp --max-queue 2)") {
		t.Errorf("the third call: %v", m)
	}
	c.send(gate(1))
	if m := c.read(); m["id"] != nil || !strings.Contains(fmt.Sprint(m["error"]), "still being answered") {
		t.Errorf("a second request with id 1: %v", m)
	}
	close(eng.Gate)
	seen := map[any]bool{}
	for range 2 {
		m := c.read()
		seen[m["id"]] = true
		if m["result"] == nil {
			t.Errorf("a gated call: %v", m)
		}
	}
	if !seen[float64(1)] || !seen[float64(2)] {
		t.Errorf("answers to %v, want 1 and 2", seen)
	}
	// the places are free again
	c.send(gate(4))
	if m := c.read(); m["id"] != float64(4) || m["result"] == nil {
		t.Errorf("a call after the queue emptied: %v", m)
	}
}

// Progress notifications precede the call's answer on the wire, and a
// token of more than maxTokenBytes gets none.
func TestProgressPrecedesTheAnswer(t *testing.T) {
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	call := func(id int, token string) {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"_meta":{"progressToken":%s},"name":"run_wasi","arguments":{"module":{"wat":"(module)"},"args":["a","b","c"],"stdin":"d"}}}`, id, token))
	}
	call(1, `7`)
	var progress []string
	for {
		m := c.read()
		if m["id"] == float64(1) {
			break
		}
		p := m["params"].(map[string]any)
		if m["method"] != "notifications/progress" || p["progressToken"] != float64(7) {
			t.Fatalf("before the answer: %v", m)
		}
		progress = append(progress, fmt.Sprintf("%v:%v", p["_meta"].(map[string]any)[StreamMetaKey], p["message"]))
	}
	if got := strings.Join(progress, " "); !strings.HasSuffix(got, "stderr:d") || !strings.HasPrefix(got, "stdout:a") {
		t.Errorf("progress %q", got)
	}
	call(2, `"`+strings.Repeat("t", maxTokenBytes)+`"`)
	if m := c.read(); m["id"] != float64(2) {
		t.Errorf("a call with a long token had %v before its answer", m)
	}
}

// A guest alternating one-byte writes between stdout and stderr made one
// notification of about 360 bytes (with a 200-byte token) per byte: the
// envelopes of a call's notifications now take at most envelopeBudget,
// past which each stream's pieces are held until they carry
// coalesceBytes; each stream still concatenates to the result's, in order.
func TestProgressEnvelopesAreBounded(t *testing.T) {
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	args := make([]string, 40000)
	for i := range args {
		args[i] = string(rune('a' + i%26))
		if i%2 == 1 {
			args[i] = "2>" + args[i]
		}
	}
	params, _ := json.Marshal(map[string]any{"_meta": map[string]any{"progressToken": strings.Repeat("t", 200)},
		"name": "run_wasi", "arguments": map[string]any{"module": map[string]any{"wat": "(module)"}, "args": args}})
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + string(params) + `}`)
	wire, data, count := 0, 0, 0
	streams := map[string]string{}
	for {
		line, err := c.r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			ID     any
			Params struct {
				Meta    map[string]string `json:"_meta"`
				Message string
			}
			Result struct{ StructuredContent map[string]any }
		}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if m.ID != nil {
			out := m.Result.StructuredContent
			if fmt.Sprint(out["stdout"]) != "map[text:"+streams["stdout"]+"]" || fmt.Sprint(out["stderr"]) != "map[text:"+streams["stderr"]+"]" {
				t.Errorf("the streams' notifications do not concatenate to the result's")
			}
			break
		}
		wire, data, count = wire+len(line), data+len(m.Params.Message), count+1
		streams[m.Params.Meta[StreamMetaKey]] += m.Params.Message
	}
	if envelopes := wire - data; envelopes > envelopeBudget+3*(envelopeBytes+202) {
		t.Errorf("%d notifications: %d bytes of envelopes for %d of output (budget %d)", count, envelopes, data, envelopeBudget)
	}
}

// The SDK queues every notification it reads, without bound, ahead of
// the calls read after it: 94 MB of notifications/progress grew the
// server to 928 MB and a ping behind them waited 36 s. Only the first
// notifications/initialized and one notifications/cancelled per call in
// flight reach it; the rest are dropped and counted, and a call after a
// flood is the next message the SDK reads.
func TestOnlyTheNotificationsTheServerUsesReachTheSDK(t *testing.T) {
	const n = 2000
	var in strings.Builder
	line := func(s string) { in.WriteString(s + "\n") }
	line(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
	line(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	line(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_export"}}`)
	for i := range n {
		line(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		line(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":` + fmt.Sprint(i) + `}}`)
		line(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
		line(`{"jsonrpc":"2.0","method":"notifications/whatever` + fmt.Sprint(i) + `"}`)
		line(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}`)
		line(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`) // passes once
	}
	line(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	tr := newTransport(strings.NewReader(in.String()), io.Discard, transportLimits{maxMessage: 1 << 20, maxQueue: 8, maxQueueBytes: 1 << 20},
		newOutputGate(1<<20), slog.New(slog.DiscardHandler), nil)
	mc, err := tr.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 5 {
		msg, err := mc.Read(context.Background())
		if err != nil {
			t.Fatalf("Read after %v: %v", got, err)
		}
		req := msg.(*jsonrpc.Request)
		got = append(got, fmt.Sprintf("%s %v", req.Method, req.ID.Raw()))
	}
	want := []string{"initialize 0", "notifications/initialized <nil>", "tools/call 1", "notifications/cancelled <nil>", "ping 2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the SDK read %q; want %q", got, want)
	}
	if dropped := tr.conn.notesDropped.Load(); dropped != 6*n-1 {
		t.Errorf("%d notifications dropped; want %d", dropped, 6*n-1)
	}
}

// A second initialize is an invalid request (-32600), not the SDK's
// error of code 0; the session goes on.
func TestASecondInitializeIsAnInvalidRequest(t *testing.T) {
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := c.read(); m["id"] != float64(1) || fmt.Sprint(m["error"]) != "map[code:-32600 message:already initialized: initialize is sent once a session]" {
		t.Errorf("a second initialize: %v", m)
	}
	c.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := c.read(); m["id"] != float64(2) || m["error"] != nil {
		t.Errorf("a ping after it: %v", m)
	}
}
