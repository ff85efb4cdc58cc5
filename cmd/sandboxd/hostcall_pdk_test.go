package main

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

// TestHostCallGoPDKPlugin: a plugin built with Extism's Go PDK
// (testdata/plugins/go/host) whose //go:wasmimport extism:host/user
// function is served by the parent runs unchanged, as a run and as an
// instance, bytes both ways from 1 byte to MiBs: run passes its input
// through transform twice, so each call asks the parent twice.
func TestHostCallGoPDKPlugin(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, time.Minute)
	plugin := protocol.ModuleSpec{Path: sandboxd.Str(pluginPath(t, "go/host_user.wasm"))}
	decl := []sandboxd.HostFunction{{Module: "extism:host/user", Name: "transform", Params: []string{"bytes"}, Results: []string{"bytes"}}}
	var asked atomic.Int64
	// upper-cases ASCII and appends one byte: twice is visible in the output.
	transform := func(_ context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		asked.Add(1)
		return []sandboxd.HostValue{sandboxd.HostBytes(append(bytes.ToUpper(call.Args[0].Bytes), '!'))}, nil
	}
	caps := &protocol.CapabilitySpec{WASI: &protocol.WASISpec{}} // the Go PDK's runtime imports WASI
	big := bytes.Repeat([]byte("ab\x00\xff"), 1<<20)             // 4 MiB, binary
	for _, input := range [][]byte{[]byte("x"), []byte("héllo"), big} {
		in := protocol.Bytes(input)
		before := asked.Load()
		res, err := c.RunWith(ctx, sandboxd.RunParams{Module: plugin, Function: "run", Input: &in, HostFunctions: decl, Capabilities: caps,
			Limits: map[string]uint64{"memoryBytes": 256 << 20, "outputBytes": 16 << 20, "timeoutMs": 30_000}},
			sandboxd.RunHandlers{Host: transform})
		if err != nil {
			t.Fatalf("%d bytes: %v", len(input), err)
		}
		want := append(bytes.ToUpper(input), '!', '!')
		if res.Output == nil || !bytes.Equal(*res.Output, want) {
			t.Errorf("%d bytes: the output is not the input transformed twice", len(input))
		}
		if n := asked.Load() - before; n != 2 {
			t.Errorf("%d bytes: the parent was asked %d times, want 2", len(input), n)
		}
	}
	inst, err := c.InstantiateWith(ctx, sandboxd.InstantiateParams{Module: plugin, HostFunctions: decl, Capabilities: caps},
		sandboxd.RunHandlers{Host: transform})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Release(ctx)
	for range 3 {
		out, err := inst.Call(ctx, "run", sandboxd.CallOptions{Input: []byte("go")})
		if err != nil || out.Output == nil || string(*out.Output) != "GO!!" {
			t.Fatalf("an instance's call: %+v %v", out, err)
		}
	}
	// Undeclared, the import is refused before the plugin runs.
	in := protocol.Bytes("x")
	_, err = c.RunWith(ctx, sandboxd.RunParams{Module: plugin, Function: "run", Input: &in, Capabilities: caps}, sandboxd.RunHandlers{Host: transform})
	if e := asRPCError(t, err); e.Kind() != string(protocol.KindDisallowedImport) {
		t.Errorf("undeclared: %v, want disallowed_import", err)
	}
}
