package rpc_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/rpc"
)

// TestEvalWithoutSnippetEngine: an engine that runs no snippets answers
// eval -32601 saying so, and serves on.
func TestEvalWithoutSnippetEngine(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.request("1", "eval", map[string]any{"language": "js", "code": "1"})
	m, _ := h.response("1")
	wantError(t, m, rpc.CodeMethodNotFound, `unknown method "eval": this engine runs no snippets`)
	h.run("2", "run", nil)
	if m, _ := h.response("2"); m.Error != nil {
		t.Fatalf("a run after eval: %s", m.Error.Message)
	}
}
