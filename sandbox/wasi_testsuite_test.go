package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/wasisuite"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestWASITestsuite replays every program of the official suite through
// the engine: its arguments, environment, a writable copy of its root
// preopened at "/", and checks the exit code and stdout. The same suite
// runs over the protocol in cmd/sandboxd (TestSidecarWASITestsuite).
func TestWASITestsuite(t *testing.T) {
	cases := wasisuite.Cases(t, wasisuite.Dir(t))
	scratch := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{scratch}, CompileTimeout: compileHangBound})
	passed := 0
	for _, c := range cases {
		ran := false
		ok := t.Run(c.Name, func(t *testing.T) {
			ran = true
			wasm, err := os.ReadFile(c.Wasm)
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := e.Compile(context.Background(), sandbox.Source{Wasm: wasm})
			if err != nil {
				t.Fatal(err)
			}
			g := &sandbox.WASI{Argv0: filepath.Base(c.Wasm), Args: c.Spec.Args, Env: c.Spec.Env}
			if root := c.Root(t, filepath.Join(scratch, strings.ReplaceAll(c.Name, "/", "_"))); root != "" {
				g.Dirs = []sandbox.Dir{{Host: root, Guest: "/", Writable: true}}
			}
			l := limits.Defaults()
			l.MemoryBytes = 256 << 20
			l.Timeout = 60 * time.Second
			l.Fuel = 1 << 40
			res, err := e.Run(context.Background(), sandbox.Request{Module: m, Limits: l, Capabilities: sandbox.Capabilities{WASI: g}})
			if err != nil {
				if se, ok := err.(*sandbox.Error); ok && se.Output != nil {
					t.Logf("stdout %q\nstderr %q", se.Output.Stdout, se.Output.Stderr)
				}
				t.Fatal(err)
			}
			if err := c.Check(res.ExitCode, res.Output.Stdout); err != nil {
				t.Errorf("%v\nstdout %q\nstderr %q", err, res.Output.Stdout, res.Output.Stderr)
			}
		})
		if ok && ran {
			passed++
		}
	}
	t.Logf("%d of %d WASI testsuite programs passed", passed, len(cases))
}
