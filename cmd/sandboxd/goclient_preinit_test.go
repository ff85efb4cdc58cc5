package main

// The Go client's CompileWith through the real binary: Preinitialize
// gives the Go plugin pre-initialised under an id of its own that runs
// greet as the plain plugin does; a module without an initialiser is an
// *Error of kind invalid_module.

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

func TestGoClientCompilePreinitialized(t *testing.T) {
	t.Parallel()
	c := startPlugins(t)
	plain, err := c.Compile(ctxT(t, 5*time.Minute), goPlugin(t))
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	pre, err := c.CompileWith(ctxT(t, 5*time.Minute), protocol.CompileParams{Module: goPlugin(t), Preinitialize: true,
		Limits: map[string]uint64{"compileTimeoutMs": 300_000}})
	if err != nil {
		t.Fatalf("compile with preinitialize: %v", err)
	}
	if pre.ModuleID == plain.ModuleID || !strings.HasPrefix(pre.ModuleID, "sha256:") {
		t.Fatalf("pre-initialised id %q, plain %q: want an id of its own", pre.ModuleID, plain.ModuleID)
	}
	for _, e := range pre.Exports {
		if e.Name == "_initialize" {
			t.Fatal("the pre-initialised module exports _initialize")
		}
	}
	for _, id := range []string{plain.ModuleID, pre.ModuleID} {
		in := protocol.Bytes("Ada")
		res, err := c.Run(ctxT(t, 5*time.Minute), sandboxd.RunParams{Module: protocol.ModuleSpec{ID: sandboxd.Str(id)},
			Function: "greet", Input: &in, Capabilities: pluginCaps(), Limits: hangLimits(nil)}, nil)
		if err != nil || res.Output == nil || string(*res.Output) != "Hello, Ada!" || res.ModuleID != id {
			t.Fatalf("greet on %s: %+v, %v", id, res, err)
		}
	}
	_, err = c.CompileWith(ctxT(t, time.Minute), protocol.CompileParams{Module: protocol.ModuleSpec{Path: sandboxd.Str(fixture("well_behaved.wat"))},
		Preinitialize: true})
	if e := asRPCError(t, err); e.Kind() != "invalid_module" {
		t.Fatalf("a text module with preinitialize: %v", err)
	}
}
