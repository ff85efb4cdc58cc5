package sandbox_test

// Benchmarks of a plugin's greet, in-process: a warm instance's call, and
// the one-shot run (instantiate, call, release) row 15 of make bench
// compares with it. They measure; bench/ judges.
//
//	go test -run '^$' -bench 'Plugin' -benchmem ./sandbox
//
// PluginGreetGoPreinit compiles the Go PDK plugin twice (the copy that
// runs the initialiser, then the snapshot): a few seconds before it
// measures, so a profile of it (-cpuprofile, perf record -D) wants
// enough iterations (-benchtime 20000x) to outweigh the compile.

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

func BenchmarkPluginGreet(b *testing.B) {
	e, m := benchEngine(b, sandbox.Source{Path: filepath.Join("..", "testdata", "plugins", "wat", "plugin.wat")})
	benchGreet(b, e, sandbox.InstanceRequest{Module: m, Limits: limits.Defaults(), Capabilities: sandbox.Capabilities{Log: true}})
}

// BenchmarkPluginGreetGoPreinit is row 15's Go PDK plugin, pre-initialised
// (docs/preinit.md), as bench/memory.go runs it: with WASI. Its warm
// instance is of the pre-initialised module too (row 15's is of the
// plain one; a warm call costs the same).
func BenchmarkPluginGreetGoPreinit(b *testing.B) {
	wasm, err := os.ReadFile(goPlugin)
	if err != nil {
		b.Fatal(err)
	}
	e, m := benchEngine(b, sandbox.Source{Wasm: wasm, Preinitialize: true})
	benchGreet(b, e, sandbox.InstanceRequest{Module: m, Limits: limits.Defaults(),
		Capabilities: sandbox.Capabilities{Log: true, WASI: &sandbox.WASI{}}})
}

func benchGreet(b *testing.B, e *sandbox.Engine, req sandbox.InstanceRequest) {
	ctx := context.Background()
	call := sandbox.CallRequest{Function: "greet", Input: []byte("bench")}
	b.Run("warm", func(b *testing.B) {
		in, err := e.Instantiate(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		defer in.Release()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := in.Call(ctx, call); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("oneshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.CallOnce(ctx, req, call); err != nil {
				b.Fatal(err)
			}
		}
	})
}
