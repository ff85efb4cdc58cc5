package rpc_test

import (
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
