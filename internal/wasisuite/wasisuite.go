// Package wasisuite reads the official WASI test suite's prebuilt
// preview1 programs and their specs, for the tests that replay them
// through the engine (sandbox) and over the protocol (cmd/sandboxd). It is
// test support: it imports testing and fails the test on a broken suite.
package wasisuite

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Dir is the suite: $WASI_TESTSUITE, else shared/wasi-testsuite beside the
// repository holding the calling test's directory (where CI puts it). A
// missing suite skips the test, unless $WASI_TESTSUITE names it.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("WASI_TESTSUITE")
	if dir == "" {
		dir = filepath.Join(repoRoot(tb), "..", "shared", "wasi-testsuite")
	}
	if _, err := os.Stat(filepath.Join(dir, "tests")); err != nil {
		if os.Getenv("WASI_TESTSUITE") != "" {
			tb.Fatalf("WASI_TESTSUITE=%s: %v", dir, err)
		}
		tb.Skipf("no WASI test suite at %s (set WASI_TESTSUITE=DIR)", dir)
	}
	return dir
}

// repoRoot is the nearest directory above the working directory (a test's
// package directory) that holds go.mod.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			tb.Fatalf("no go.mod above %s", dir)
		}
	}
}

// Spec is one test's NAME.json (see the suite's README); every field is
// optional. Stdout is compared only when the spec gives it, as the
// upstream runner does: two Rust tests (path_open_preopen,
// poll_oneoff_stdio) print diagnostics their specs do not mention, under
// wasmtime's own CLI too.
type Spec struct {
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	Root     string            `json:"root"`
	ExitCode int               `json:"exit_code"`
	Stdout   *string           `json:"stdout"`
}

// Case is one program of the suite.
type Case struct {
	Name string // lang/test
	Wasm string // its path
	Spec Spec
}

// Cases are every wasm32-wasip1 program under dir, sorted by path. An
// empty suite fails the test.
func Cases(tb testing.TB, dir string) []Case {
	tb.Helper()
	wasms, err := filepath.Glob(filepath.Join(dir, "tests", "*", "testsuite", "wasm32-wasip1", "*.wasm"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(wasms) == 0 {
		tb.Fatalf("no tests under %s", dir)
	}
	sort.Strings(wasms)
	cases := make([]Case, 0, len(wasms))
	for _, w := range wasms {
		c := Case{Wasm: w}
		lang := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(w))))
		c.Name = lang + "/" + strings.TrimSuffix(filepath.Base(w), ".wasm")
		if b, err := os.ReadFile(strings.TrimSuffix(w, ".wasm") + ".json"); err == nil {
			if err := json.Unmarshal(b, &c.Spec); err != nil {
				tb.Fatalf("%s: %v", c.Name, err)
			}
		} else if !os.IsNotExist(err) {
			tb.Fatal(err)
		}
		cases = append(cases, c)
	}
	return cases
}

// Root copies the case's root directory to dst, writable (the tests write
// into it), keeping symbolic links as links, and returns dst; "" when the
// case has no root.
func (c Case) Root(tb testing.TB, dst string) string {
	tb.Helper()
	if c.Spec.Root == "" {
		return ""
	}
	src := filepath.Join(filepath.Dir(c.Wasm), c.Spec.Root)
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
		tb.Fatal(err)
	}
	return dst
}

// Check compares what a run of the case ended with to its spec.
func (c Case) Check(exitCode int, stdout []byte) error {
	if exitCode != c.Spec.ExitCode {
		return fmt.Errorf("exit %d, want %d", exitCode, c.Spec.ExitCode)
	}
	if c.Spec.Stdout != nil && string(stdout) != *c.Spec.Stdout {
		return fmt.Errorf("stdout %q, want %q", stdout, *c.Spec.Stdout)
	}
	return nil
}
