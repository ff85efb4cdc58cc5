package sandbox_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// wasiTestsuiteDir is the official WASI test suite's prebuilt preview1
// programs: $WASI_TESTSUITE, else shared/wasi-testsuite beside the
// repository (where CI puts it), else "" (tests skip).
func wasiTestsuiteDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("WASI_TESTSUITE")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "wasi-testsuite")
	}
	if _, err := os.Stat(filepath.Join(dir, "tests")); err != nil {
		if os.Getenv("WASI_TESTSUITE") != "" {
			t.Fatalf("WASI_TESTSUITE=%s: %v", dir, err)
		}
		t.Skipf("no WASI test suite at %s (set WASI_TESTSUITE=DIR)", dir)
	}
	return dir
}

// wasiSpec is one test's NAME.json (see the suite's README). Stdout is
// compared only when the spec gives it, as the upstream runner does: two
// Rust tests (path_open_preopen, poll_oneoff_stdio) print diagnostics that
// their specs do not mention, under wasmtime's own CLI too.
type wasiSpec struct {
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	Root     string            `json:"root"`
	ExitCode int               `json:"exit_code"`
	Stdout   *string           `json:"stdout"`
}

type wasiSuiteCase struct {
	name string // lang/test
	wasm string
	spec wasiSpec
}

func wasiSuiteCases(t testing.TB, dir string) []wasiSuiteCase {
	t.Helper()
	wasms, err := filepath.Glob(filepath.Join(dir, "tests", "*", "testsuite", "wasm32-wasip1", "*.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(wasms)
	var cases []wasiSuiteCase
	for _, w := range wasms {
		c := wasiSuiteCase{wasm: w}
		lang := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(w))))
		c.name = lang + "/" + strings.TrimSuffix(filepath.Base(w), ".wasm")
		if b, err := os.ReadFile(strings.TrimSuffix(w, ".wasm") + ".json"); err == nil {
			if err := json.Unmarshal(b, &c.spec); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
		cases = append(cases, c)
	}
	return cases
}

// copyTree copies src to dst (writable: the tests write into it), keeping
// symbolic links as links.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWASITestsuite replays every program of the official suite through
// the engine: its arguments, environment, a writable copy of its root
// preopened at "/", and checks the exit code and stdout.
func TestWASITestsuite(t *testing.T) {
	dir := wasiTestsuiteDir(t)
	cases := wasiSuiteCases(t, dir)
	if len(cases) == 0 {
		t.Fatalf("no tests under %s", dir)
	}
	scratch := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{scratch}, CompileTimeout: compileHangBound})
	passed := 0
	for _, c := range cases {
		ran := false
		ok := t.Run(c.name, func(t *testing.T) {
			ran = true
			wasm, err := os.ReadFile(c.wasm)
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := e.Compile(context.Background(), sandbox.Source{Wasm: wasm})
			if err != nil {
				t.Fatal(err)
			}
			g := &sandbox.WASI{Argv0: filepath.Base(c.wasm), Args: c.spec.Args, Env: c.spec.Env}
			if c.spec.Root != "" {
				root := filepath.Join(scratch, strings.ReplaceAll(c.name, "/", "_"))
				copyTree(t, filepath.Join(filepath.Dir(c.wasm), c.spec.Root), root)
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
			if res.ExitCode != c.spec.ExitCode {
				t.Errorf("exit %d, want %d\nstdout %q\nstderr %q", res.ExitCode, c.spec.ExitCode, res.Output.Stdout, res.Output.Stderr)
			}
			if c.spec.Stdout != nil && string(res.Output.Stdout) != *c.spec.Stdout {
				t.Errorf("stdout %q, want %q\nstderr %q", res.Output.Stdout, *c.spec.Stdout, res.Output.Stderr)
			}
		})
		if ok && ran {
			passed++
		}
	}
	t.Logf("%d of %d WASI testsuite programs passed", passed, len(cases))
}
