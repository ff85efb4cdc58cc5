package sandbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestFirstRunsOfAFreshEngineAtOnce: the engine shares one wasmtime
// function type per host function (and per WASI shadow) among all its
// runs. wasmtime's C API fills a type's parameter and result lists lazily,
// in a cell that is not safe to fill from two threads: two runs that
// defined their first host function at the same moment aborted the process
// ("reentrant init", seen in CI). Each round makes a fresh engine and starts
// its first runs together, host imports and WASI shadows both.
func TestFirstRunsOfAFreshEngineAtOnce(t *testing.T) {
	rounds := 400
	if testing.Short() {
		rounds = 40
	}
	const hostWAT = `(module
	  (import "host" "log" (func $log (param i32 i32)))
	  (import "host" "random" (func $random (result i64)))
	  (import "host" "now_ns" (func $now (result i64)))
	  (memory (export "memory") 1)
	  (func (export "run") (result i64)
	    (call $log (i32.const 0) (i32.const 1))
	    (i64.add (call $random) (call $now))))`
	const wasiWAT = `(module
	  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "args_sizes_get" (func $a (param i32 i32) (result i32)))
	  (memory (export "memory") 1)
	  (func (export "_start")
	    (drop (call $a (i32.const 0) (i32.const 4)))
	    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 8)))))`
	ctx := context.Background()
	for round := range rounds {
		e, err := sandbox.NewEngine(sandbox.Config{CompileTimeout: compileHangBound})
		if err != nil {
			t.Fatal(err)
		}
		host, _, err := e.Compile(ctx, sandbox.Source{WAT: hostWAT})
		if err != nil {
			t.Fatal(err)
		}
		wasi, _, err := e.Compile(ctx, sandbox.Source{WAT: wasiWAT})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Go(func() {
				<-start
				req := sandbox.Request{Module: host, Function: "run", Limits: hangLimits(),
					Capabilities: sandbox.Capabilities{Log: true, Random: true, Clock: true}, Log: func(string) {}}
				if g%2 == 1 {
					req = sandbox.Request{Module: wasi, Function: "_start", Limits: hangLimits(),
						Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Args: []string{strings.Repeat("a", 2048)}}}}
				}
				if _, err := e.Run(ctx, req); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		e.Close()
	}
}
