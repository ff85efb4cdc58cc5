package mcpserver

import (
	"testing"
)

// BenchmarkToolCall is one run_export call's round trip through the
// server over the fake engine (the SDK's session, the transport, the
// argument reader, the result): the MCP layer's own cost, which make
// bench's row 15 measures end to end.
func BenchmarkToolCall(b *testing.B) {
	srv, err := New(newEngine(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := newRawClient(b, srv)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"(module)"},"function":"add","args":[1,2]}}}`
	b.ReportAllocs()
	for b.Loop() {
		c.send(call)
		if m := c.read(); m["result"] == nil {
			b.Fatalf("%v", m)
		}
	}
}

// BenchmarkPing is a ping's round trip: what a message costs in the SDK
// and the transport before any tool runs, BenchmarkToolCall's floor.
func BenchmarkPing(b *testing.B) {
	srv, err := New(newEngine(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	c := newRawClient(b, srv)
	call := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}`
	b.ReportAllocs()
	for b.Loop() {
		c.send(call)
		if m := c.read(); m["result"] == nil {
			b.Fatalf("%v", m)
		}
	}
}
