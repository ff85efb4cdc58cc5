package sandbox_test

// Benchmarks of the pooling allocator: what a linear memory costs a run, and one-shot
// runs of real guests, in-process. They measure; bench/ judges.
//
//	go test -run '^$' -bench 'RunMemory|OneShot' ./sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// BenchmarkRunMemory is Run of add without a memory and of the same add
// storing its result in a (memory 1) and a (memory 17) first.
func BenchmarkRunMemory(b *testing.B) {
	for _, pages := range []int{0, 1, 17} {
		b.Run(fmt.Sprintf("pages=%d", pages), func(b *testing.B) {
			wat := `(module (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1))))`
			if pages > 0 {
				wat = fmt.Sprintf(`(module (memory %d) (func (export "add") (param i32 i32) (result i32)
				  (i32.store (i32.const 0) (i32.add (local.get 0) (local.get 1))) (i32.load (i32.const 0))))`, pages)
			}
			e, m := benchEngine(b, sandbox.Source{WAT: wat})
			req := sandbox.Request{Module: m, Function: "add", Args: []sandbox.Value{sandbox.ValueI32(1), sandbox.ValueI32(2)}, Limits: limits.Defaults()}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := e.Run(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkOneShot is a run of the C WASI guest printing a line, and a
// one-shot run (instantiate, call, release) of the WAT plugin's greet.
func BenchmarkOneShot(b *testing.B) {
	ctx := context.Background()
	b.Run("guest_c", func(b *testing.B) {
		e, m := benchEngine(b, sandbox.Source{Path: filepath.Join("..", "testdata", "wasi", "guest_c.wasm")})
		req := sandbox.Request{Module: m, Limits: limits.Defaults(), Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Args: []string{"args", "hello"}}}}
		b.ReportAllocs()
		for b.Loop() {
			if res, err := e.Run(ctx, req); err != nil || string(res.Output.Stdout) != "hello\n" {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("plugin_wat", func(b *testing.B) {
		e, m := benchEngine(b, sandbox.Source{Path: filepath.Join("..", "testdata", "plugins", "wat", "plugin.wat")})
		req := sandbox.InstanceRequest{Module: m, Limits: limits.Defaults(), Capabilities: sandbox.Capabilities{Log: true}}
		call := sandbox.CallRequest{Function: "greet", Input: []byte("bench")}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.CallOnce(ctx, req, call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchEngine(b *testing.B, src sandbox.Source) (*sandbox.Engine, *sandbox.Module) {
	b.Helper()
	e, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	m, _, err := e.Compile(context.Background(), src)
	if err != nil {
		b.Fatal(err)
	}
	return e, m
}
