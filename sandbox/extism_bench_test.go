package sandbox_test

// Benchmarks of a plugin's greet, in-process: a warm instance's call, and
// the one-shot run (instantiate, call, release) row 15 of make bench
// compares with it. They measure; bench/ judges.
//
//	go test -run '^$' -bench 'Plugin' -benchmem ./sandbox

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

func BenchmarkPluginGreet(b *testing.B) {
	ctx := context.Background()
	e, m := benchEngine(b, sandbox.Source{Path: filepath.Join("..", "testdata", "plugins", "wat", "plugin.wat")})
	req := sandbox.InstanceRequest{Module: m, Limits: limits.Defaults(), Capabilities: sandbox.Capabilities{Log: true}}
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
