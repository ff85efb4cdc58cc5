package rpc_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// TestHostCallAnswersThatCannotBeRead: an answer the reader cannot read as
// one (nested deeper than the limit, or carrying a method as well) whose
// id says which host call it answers ends that call host_function_error
// saying so, and is answered nothing. They waited for the run's deadline
// while the sidecar answered the parent's response (-32600, -32601 unknown
// method; rt20 item 4).
func TestHostCallAnswersThatCannotBeRead(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{})
	deep := strings.Repeat(`[`, 20_000) + strings.Repeat(`]`, 20_000)
	cases := []struct{ answer, message string }{
		{`"result":{"values":` + deep + `}`, "nested deeper than"},
		{`"method":"host/call","result":{"values":[1]}`, `also has a "method" member`},
		{`"method":"x","error":{"code":1,"message":"m"}`, `also has a "method" member`},
	}
	for i, c := range cases {
		id := strconv.Itoa(i + 1)
		h.run(id, "host:1", map[string]any{"hostFunctions": lookup, "limits": map[string]any{"timeoutMs": 600_000}})
		req, _ := h.hostCall()
		h.sendRaw(`{"jsonrpc":"2.0","id":"` + req.id + `",` + c.answer + `}`)
		m, _ := h.response(id)
		wantError(t, m, 12, `host function "env::lookup": the parent's answer to host call `+req.id+` `)
		if d := errorData(t, m); d["kind"] != string(protocol.KindHostFunctionError) || !strings.Contains(m.Error.Message, c.message) {
			t.Errorf("answer %.60s: %s, data %v", c.answer, m.Error.Message, d)
		}
	}
	// Not an answer to a host call in flight: handled as before.
	h.sendRaw(`{"jsonrpc":"2.0","id":"sbx-999","method":"host/call","result":{}}`)
	m, _ := h.response(`"sbx-999"`)
	wantError(t, m, protocol.CodeMethodNotFound, "unknown method")
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: uint64(len(cases)), Failed: uint64(len(cases))})
	h.endsWithNoMore()
}

// TestHostCallAnswerNotJSONEndsTheCall: an answer that is not JSON (a
// parent's encoder writing NaN or Infinity, a cut or doubled object)
// whose leading members say which host call it answers (its id, then a
// result or an error, no method) ends that call at once,
// host_function_error saying the answer was not JSON and where, and is
// answered nothing. Anything else that is not JSON is -32700 with id null
// as before, and the call goes on waiting: a request (its method), an id
// after the fault, a broken id, an answer naming no call in flight. The
// runs' deadline is ten minutes, beyond every hang bound of the harness:
// a call left waiting fails the test.
func TestHostCallAnswerNotJSONEndsTheCall(t *testing.T) {
	for _, f := range []rpc.Framing{rpc.FramingContentLength, rpc.FramingNDJSON} {
		t.Run(string(f), func(t *testing.T) {
			h := startServer(t, rpctest.NewEngine(), rpc.Options{Framing: f})
			long := map[string]any{"hostFunctions": lookup, "limits": map[string]any{"timeoutMs": 600_000}}
			cases := []struct{ answer, at, excerpt string }{
				{`{"jsonrpc":"2.0","id":"ID","result":NaN}`, "NaN", `"NaN}"`},
				{`{"id":"ID","jsonrpc":"2.0","result":{"values":[{"type":"f64","value":Infinity}]}}`, "Infinity", `"Infinity}]}}"`},
				{` {"jsonrpc":"2.0","id":"ID","error":{"code":-1,"message":"x"}}}`, "}}}", `"}"`},
				{`{"jsonrpc":"2.0","id":"ID","result":{"values":[1],"pad":"` + strings.Repeat("\x01", 200) + `"}}`, "\x01", `"\x01\x01`},
				{`{"jsonrpc":"2.0","id":"ID","result":{"values":[1]},"x":-}`, "-}", `"}"`},
				{`{"jsonrpc":"2.0","id":"ID","result":{"values":[1`, "", ""}, // cut short
			}
			for i, c := range cases {
				id := strconv.Itoa(i + 1)
				h.run(id, "host:1", long)
				req, _ := h.hostCall()
				answer := strings.Replace(c.answer, "ID", req.id, 1)
				h.sendRaw(answer)
				m, _ := h.response(id)
				at := strings.Index(answer, c.at)
				switch c.at {
				case "}}}":
					at += 2 // the third
				case "-}":
					at++
				}
				want := fmt.Sprintf(`host function "env::lookup": the parent's answer to host call %s is not JSON: `, req.id)
				wantError(t, m, 12, want)
				where := fmt.Sprintf("at byte %d (%s", at, c.excerpt)
				if c.at == "" {
					where = "unexpected end of JSON input at its end"
				}
				if !strings.Contains(m.Error.Message, where) || len(m.Error.Message) > 1024 {
					t.Errorf("%.60q: %q, want the byte offset %d and an excerpt %s, bounded", answer, m.Error.Message, at, c.excerpt)
				}
				if d := errorData(t, m); d["kind"] != string(protocol.KindHostFunctionError) {
					t.Errorf("%.60q: data %v", answer, d)
				}
			}

			// Not an answer the sidecar can match: -32700 with id null, and
			// the call waits on, for the answer that ends it.
			h.run(`"w"`, "host:1", long)
			req, _ := h.hostCall()
			for _, msg := range []string{
				`{"jsonrpc":"2.0","id":"ID","method":"run","params":NaN}`,
				`{"jsonrpc":"2.0","id":"ID","method":"x","result":NaN}`,
				`{"jsonrpc":"2.0","id":"ID","result":1,"method":NaN}`,
				`{"jsonrpc":"2.0","result":NaN,"id":"ID"}`,
				`{"jsonrpc":"2.0","id":"ID","params":NaN}`,
				`{"jsonrpc":"2.0","id":"ID","result":1,"id":NaN}`,
				`{"jsonrpc":"2.0","id":"sbx-999","result":NaN}`,
				`{"jsonrpc":"2.0","id":"ID"` + "\v" + `,"result":1}`,
			} {
				h.sendRaw(strings.Replace(msg, "ID", req.id, 1))
				m, _ := h.response("null")
				wantError(t, m, rpc.CodeParseError, "parse error: ")
			}
			h.answerHost(req.id, `{"values":[5]}`)
			m, _ := h.response(`"w"`)
			if m.Error != nil {
				t.Fatalf("the call that waited on: %+v", m.Error)
			}
			wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: uint64(len(cases)) + 1, Failed: uint64(len(cases)), Answered: 1})
			h.endsWithNoMore()
		})
	}
}

// TestHostCallAnswersOfWrongShapeEndTheCall: a message without a method
// whose id is a waiting host call's ends that call, whatever else is
// wrong with it, host_function_error naming the problem, and is answered
// nothing (no -32600 under the sidecar's own id): one with neither a
// result nor an error, one that does not say "jsonrpc": "2.0" (as a
// request must), answers in a batch (each call one names ends; answers
// are read one per message). A batch that answers no waiting call is
// refused -32600 as before. The runs' deadline is ten minutes, beyond
// every hang bound of the harness: a call left waiting fails the test.
func TestHostCallAnswersOfWrongShapeEndTheCall(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{})
	long := map[string]any{"hostFunctions": lookup, "limits": map[string]any{"timeoutMs": 600_000}}
	cases := []struct{ answer, message string }{
		{`{"jsonrpc":"2.0","id":"ID"}`, `has neither a "result" nor an "error" member`},
		{`{"jsonrpc":"2.0","id":"ID","params":{"values":[1]}}`, `has neither a "result" nor an "error" member`},
		{`{"jsonrpc":"1.0","id":"ID","result":{"values":[1]}}`, `does not say "jsonrpc": "2.0"`},
		{`{"id":"ID","result":{"values":[1]}}`, `does not say "jsonrpc": "2.0"`},
		{`[{"jsonrpc":"2.0","id":"ID","result":{"values":[1]}}]`, `came in a batch; send each answer as a message of its own`},
	}
	for i, c := range cases {
		id := strconv.Itoa(i + 1)
		h.run(id, "host:1", long)
		req, _ := h.hostCall()
		h.sendRaw(strings.ReplaceAll(c.answer, "ID", req.id))
		m, _ := h.response(id)
		wantError(t, m, 12, `host function "env::lookup": the parent's answer to host call `+req.id+` `+c.message)
	}
	// Two calls answered in one batch, with a request: both end, and the
	// batch is refused for the request in it (-32600, id null).
	h.run(`"a"`, "host:1", long)
	a, _ := h.hostCall()
	h.run(`"b"`, "host:1", long)
	b, _ := h.hostCall()
	h.sendRaw(`[{"jsonrpc":"2.0","id":"` + a.id + `","result":{"values":[1]}},{"jsonrpc":"2.0","id":"` + b.id + `","error":{"code":1,"message":"m"}},{"jsonrpc":"2.0","id":9,"method":"stats"}]`)
	for _, m := range h.responses(`"a"`, `"b"`, `null`) {
		if m.Error != nil && m.Error.Code == rpc.CodeInvalidRequest {
			wantError(t, m, rpc.CodeInvalidRequest, "batch requests are not supported")
			continue
		}
		wantError(t, m, 12, "came in a batch")
	}
	h.sendRaw(`[{"jsonrpc":"2.0","id":"sbx-999","result":{}}]`)
	m, _ := h.response(`null`)
	wantError(t, m, rpc.CodeInvalidRequest, "batch requests are not supported")
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: uint64(len(cases)) + 2, Failed: uint64(len(cases)) + 2})
	h.endsWithNoMore()
}
