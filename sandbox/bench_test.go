package sandbox_test

// Benchmarks of the engine's hot paths. They measure; they never assert
// timings (the harness in bench/ compares against floors instead).

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// benchModule compiles testdata/wat/well_behaved.wat on a fresh engine.
func benchModule(b *testing.B) (*sandbox.Engine, *sandbox.Module, []byte) {
	b.Helper()
	text, err := os.ReadFile(filepath.Join("..", "testdata", "wat", "well_behaved.wat"))
	if err != nil {
		b.Fatal(err)
	}
	wasm, err := wasmtime.Wat2Wasm(string(text))
	if err != nil {
		b.Fatal(err)
	}
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	m, _, err := eng.Compile(context.Background(), sandbox.Source{Wasm: wasm})
	if err != nil {
		b.Fatal(err)
	}
	return eng, m, wasm
}

// BenchmarkRunAdd is one in-process run: fresh store, fences armed,
// instantiate, call add(1, 2). Run with -cpu 1,2 to see parallel scaling.
func BenchmarkRunAdd(b *testing.B) {
	eng, m, _ := benchModule(b)
	req := sandbox.Request{Module: m, Function: "add", Args: []sandbox.Value{sandbox.ValueI32(1), sandbox.ValueI32(2)}, Limits: limits.Defaults()}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := eng.Run(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCompileCacheHit is Compile of bytes already compiled: hashing
// plus the cache lookup, no Cranelift.
func BenchmarkCompileCacheHit(b *testing.B) {
	eng, _, wasm := benchModule(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(wasm)))
	for b.Loop() {
		_, info, err := eng.Compile(context.Background(), sandbox.Source{Wasm: wasm})
		if err != nil {
			b.Fatal(err)
		}
		if !info.Cached {
			b.Fatal("expected a cache hit")
		}
	}
}

// BenchmarkParseValue parses CLI argument text of each type.
func BenchmarkParseValue(b *testing.B) {
	cases := []struct {
		ty   sandbox.ValType
		text string
	}{
		{sandbox.I32, "-2147483648"},
		{sandbox.I64, "18446744073709551615"},
		{sandbox.F32, "3.4028235e38"},
		{sandbox.F64, "0x7ff8000000000001"},
	}
	for _, c := range cases {
		b.Run(string(c.ty), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sandbox.ParseValue(c.ty, c.text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCompileNew compiles a small module the engine has not seen
// (the cache is off), in a compile child and in process: the difference is
// the compile fence's cost per new module.
func BenchmarkCompileNew(b *testing.B) {
	text, err := os.ReadFile(filepath.Join("..", "testdata", "wat", "well_behaved.wat"))
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		new  func(sandbox.Config) (*sandbox.Engine, error)
	}{{"child", sandbox.NewEngine}, {"inprocess", sandbox.NewInProcessEngine}} {
		b.Run(mode.name, func(b *testing.B) {
			eng, err := mode.new(sandbox.Config{CacheEntries: sandbox.CacheOff})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			src := sandbox.Source{WAT: string(text)}
			for b.Loop() {
				if _, _, err := eng.Compile(context.Background(), src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCallWarm is one call of add(1, 2) on a long-lived instance:
// the per-call fences re-armed on the instance's store, no instantiation.
func BenchmarkCallWarm(b *testing.B) {
	eng, m, _ := benchModule(b)
	in, err := eng.Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()})
	if err != nil {
		b.Fatal(err)
	}
	defer in.Release()
	req := sandbox.CallRequest{Function: "add", Args: []sandbox.Value{sandbox.ValueI32(1), sandbox.ValueI32(2)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Call(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// benchCompiledWAT is benchModule's engine after a compile of
// well_behaved.wat's text too, and that text as a Source.
func benchCompiledWAT(b *testing.B) (*sandbox.Engine, sandbox.Source) {
	b.Helper()
	eng, _, _ := benchModule(b)
	text, err := os.ReadFile(filepath.Join("..", "testdata", "wat", "well_behaved.wat"))
	if err != nil {
		b.Fatal(err)
	}
	src := sandbox.Source{WAT: string(text)}
	if _, _, err := eng.Compile(context.Background(), src); err != nil {
		b.Fatal(err)
	}
	return eng, src
}

// BenchmarkCompileCacheHitWAT is Compile of a WAT text already compiled:
// the text's alias leads to the module without parsing it.
func BenchmarkCompileCacheHitWAT(b *testing.B) {
	eng, src := benchCompiledWAT(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(src.WAT)))
	for b.Loop() {
		if _, info, err := eng.Compile(context.Background(), src); err != nil || !info.Cached {
			b.Fatal(err, info.Cached)
		}
	}
}

// BenchmarkCheckWASIGrantWAT is the grant check the sidecar makes before
// compiling a run's WAT text (cmd/sandboxd/engine.go), for a text
// already compiled: "raw" asks CheckWASIGrant with the text (it converts
// it to read the imports); "cached" first finds the module by the text's
// bytes (Engine.Cached) and checks it by id, as the sidecar does.
func BenchmarkCheckWASIGrantWAT(b *testing.B) {
	eng, src := benchCompiledWAT(b)
	b.Run("raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := eng.CheckWASIGrant(src, sandbox.Capabilities{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, ok := eng.Cached(src)
			if !ok {
				b.Fatal("not cached")
			}
			if err := eng.CheckWASIGrant(sandbox.Source{ID: m.ID}, sandbox.Capabilities{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRunHostImports is BenchmarkRunAdd for a module that imports
// the three host functions (granted, not called): the cost of building a
// run's imports.
func BenchmarkRunHostImports(b *testing.B) {
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	m, _, err := eng.Compile(context.Background(), sandbox.Source{WAT: `(module
	  (import "host" "log" (func (param i32 i32)))
	  (import "host" "random" (func (result i64)))
	  (import "host" "now_ns" (func (result i64)))
	  (memory 1)
	  (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1))))`})
	if err != nil {
		b.Fatal(err)
	}
	req := sandbox.Request{Module: m, Function: "add", Args: []sandbox.Value{sandbox.ValueI32(1), sandbox.ValueI32(2)},
		Limits: limits.Defaults(), Capabilities: sandbox.Capabilities{Log: true, Random: true, Clock: true}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := eng.Run(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
