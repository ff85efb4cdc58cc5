package sandbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// FuzzCompile feeds arbitrary bytes to module loading, as wasm and as WAT:
// loading must never panic and must fail only with invalid_module. Bytes
// that do compile must then run (or fail with a run error) without a host
// error.
func FuzzCompile(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"), false)
	f.Add([]byte("(module (func (export \"run\")))"), true)
	f.Add([]byte("(module (memory 1) (func (export \"run\") (drop (memory.grow (i32.const 1)))))"), true)
	f.Add([]byte("(module (func (export \"run\") (loop br 0)))"), true)
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00"), false)
	f.Add([]byte("(module"), true)
	f.Fuzz(func(t *testing.T, data []byte, asText bool) {
		e := fuzzEngine(t)
		src := sandbox.Source{Wasm: data}
		if asText {
			src = sandbox.Source{WAT: string(data)}
		}
		if len(data) == 0 {
			return
		}
		m, _, err := e.Compile(context.Background(), src)
		if err != nil {
			if k := sandbox.KindOf(err); k != sandbox.KindInvalidModule {
				t.Fatalf("compile error of kind %s: %v", k, err)
			}
			return
		}
		exp, ok := m.Export("run")
		if !ok || len(exp.Params) != 0 {
			return
		}
		l := tinyLimits()
		_, err = e.Run(context.Background(), sandbox.Request{Module: m, Function: "run", Limits: l})
		var se *sandbox.Error
		if err != nil && (!errors.As(err, &se) || se.Kind == sandbox.KindHost) {
			t.Fatalf("run of a compiled module failed with a host error: %v", err)
		}
	})
}

var (
	fuzzEngineOnce sync.Once
	fuzzEng        *sandbox.Engine
)

// fuzzEngine compiles in this process: the compile child's own code
// without a process per input (TestCompileInChildMatchesInProcess checks
// both paths agree).
func fuzzEngine(t testing.TB) *sandbox.Engine {
	fuzzEngineOnce.Do(func() {
		e, err := sandbox.NewInProcessEngine(sandbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		fuzzEng = e
	})
	return fuzzEng
}

// tinyLimits keeps fuzzed runs fast.
func tinyLimits() limits.Limits {
	l := limits.Defaults()
	l.Fuel = 100_000
	l.Timeout = 50 * time.Millisecond
	l.MemoryBytes = 1 << 20
	return l
}
