package sandboxd

// Finding the sidecar binary (FindBinary, Start with an empty binary):
// the order explicit, $SANDBOXD_BIN, PATH, checkout, over fake binaries
// and fake checkouts in temporary directories.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// fakeBinary writes an executable script at path that prints its own
// path on stderr and exits.
func fakeBinary(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho \"$0\" >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeCheckout makes a directory whose go.mod declares the sandboxd
// module, with bin/sandboxd if withBinary.
func fakeCheckout(t *testing.T, withBinary bool) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module github.com/sandboxd/sandboxd\n\ngo 1.26.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if withBinary {
		fakeBinary(t, filepath.Join(root, "bin", "sandboxd"))
	}
	return root
}

// isolate clears $SANDBOXD_BIN and gives PATH one empty directory, which
// it returns (put a sandboxd there to have one on PATH).
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("SANDBOXD_BIN", "")
	t.Setenv("PATH", dir)
	return dir
}

func TestFindBinaryOrder(t *testing.T) {
	pathDir := isolate(t)
	checkout := fakeCheckout(t, true)
	sub := filepath.Join(checkout, "clients", "go")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	inCheckout := filepath.Join(checkout, "bin", "sandboxd")

	got, err := FindBinary("")
	if err != nil || got != inCheckout {
		t.Fatalf("checkout above the current directory: got %q, %v; want %q", got, err, inCheckout)
	}

	onPath := fakeBinary(t, filepath.Join(pathDir, "sandboxd"))
	if got, err := FindBinary(""); err != nil || got != onPath {
		t.Fatalf("sandboxd on PATH before the checkout: got %q, %v; want %q", got, err, onPath)
	}

	fromEnv := fakeBinary(t, filepath.Join(t.TempDir(), "sandboxd-env"))
	t.Setenv("SANDBOXD_BIN", fromEnv)
	if got, err := FindBinary(""); err != nil || got != fromEnv {
		t.Fatalf("$SANDBOXD_BIN before PATH: got %q, %v; want %q", got, err, fromEnv)
	}

	explicit := fakeBinary(t, filepath.Join(t.TempDir(), "sandboxd-explicit"))
	if got, err := FindBinary(explicit); err != nil || got != explicit {
		t.Fatalf("explicit path first: got %q, %v; want %q", got, err, explicit)
	}
	// A relative path is relative to the current directory, and made absolute.
	fakeBinary(t, filepath.Join(sub, "rel", "sandboxd"))
	if got, err := FindBinary("rel/sandboxd"); err != nil || got != filepath.Join(sub, "rel", "sandboxd") {
		t.Fatalf("relative explicit path: got %q, %v", got, err)
	}
	// A bare name is looked up on PATH.
	named := fakeBinary(t, filepath.Join(pathDir, "sandboxd-named"))
	if got, err := FindBinary("sandboxd-named"); err != nil || got != named {
		t.Fatalf("bare name on PATH: got %q, %v; want %q", got, err, named)
	}
}

// A configured binary that is missing is an error naming it and where it
// came from, never a fall-through to PATH or the checkout.
func TestFindBinaryConfiguredButMissing(t *testing.T) {
	pathDir := isolate(t)
	fakeBinary(t, filepath.Join(pathDir, "sandboxd"))
	t.Chdir(fakeCheckout(t, true))
	missing := filepath.Join(t.TempDir(), "nope", "sandboxd")
	notExec := filepath.Join(t.TempDir(), "sandboxd")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, explicit, env string
		want                []string
	}{
		{"explicit missing", missing, "", []string{missing, "from the binary argument"}},
		{"explicit not executable", notExec, "", []string{notExec, "is not an executable file"}},
		{"explicit name not on PATH", "sandboxd-nope", "", []string{`no executable "sandboxd-nope" on PATH`, "from the binary argument"}},
		{"env missing", "", missing, []string{missing, "from $SANDBOXD_BIN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SANDBOXD_BIN", tc.env)
			got, err := FindBinary(tc.explicit)
			if !errors.Is(err, ErrBinaryNotFound) {
				t.Fatalf("got %q, %v; want ErrBinaryNotFound", got, err)
			}
			for _, w := range append(tc.want, "make binary") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Nothing anywhere: the error names every place tried.
func TestFindBinaryNothingFound(t *testing.T) {
	isolate(t)
	outside := t.TempDir()
	t.Chdir(outside)
	_, err := FindBinary("")
	if !errors.Is(err, ErrBinaryNotFound) {
		t.Fatalf("got %v, want ErrBinaryNotFound", err)
	}
	for _, w := range []string{"$SANDBOXD_BIN is not set", "no sandboxd on PATH", "no sandboxd checkout holds " + outside, "make binary"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}

	// A checkout without a binary is named as such.
	checkout := fakeCheckout(t, false)
	t.Chdir(checkout)
	_, err = FindBinary("")
	if want := "the sandboxd checkout at " + checkout + " has no bin/sandboxd"; !errors.Is(err, ErrBinaryNotFound) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v; want an error saying %q", err, want)
	}
}

// The checkout a program's go.mod replaces the module with is found from
// the build info: an absolute replacement as is, a relative one against
// the directory of the program's go.mod above the current directory.
func TestCheckoutStartsFromReplace(t *testing.T) {
	checkout := fakeCheckout(t, true)
	user := t.TempDir()
	if err := os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/user\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(user, "cmd", "tool")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(user, checkout)
	if err != nil {
		t.Fatal(err)
	}
	info := func(replace string) *debug.BuildInfo {
		return &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/user"},
			Deps: []*debug.Module{
				{Path: "golang.org/x/sys", Version: "v0.41.0"},
				{Path: goModule, Version: "v0.0.0", Replace: &debug.Module{Path: replace, Version: "(devel)"}}, // as go version -m shows it
			},
		}
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want []string
	}{
		{"absolute", info(checkout), []string{checkout, cwd}},
		{"relative", info(rel), []string{checkout, cwd}},
		{"no build info", nil, []string{cwd}},
		{"no replace", &debug.BuildInfo{Main: debug.Module{Path: "example.com/user"}, Deps: []*debug.Module{{Path: goModule, Version: "v1.0.0"}}}, []string{cwd}},
		{"replaced by a module version", &debug.BuildInfo{Deps: []*debug.Module{{Path: goModule, Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}}}}, []string{cwd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkoutStarts(tc.bi, cwd)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}

	// And with the current directory outside every checkout, the replaced
	// one's binary is the one found.
	isolate(t)
	got, err := findBinary("", "", checkoutStarts(info(rel), cwd))
	if want := filepath.Join(checkout, "bin", "sandboxd"); err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

// Start with an empty binary runs the one FindBinary finds, and says what
// it tried when there is none.
func TestStartEmptyBinaryLooksUp(t *testing.T) {
	isolate(t)
	checkout := fakeCheckout(t, true)
	t.Chdir(checkout)
	var stderr bytes.Buffer
	c, err := Start(context.Background(), "", Options{Stderr: &stderr})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	_ = c.Close() // the fake exits at once: the handshake fails
	if got, want := strings.TrimSpace(stderr.String()), filepath.Join(checkout, "bin", "sandboxd"); got != want {
		t.Fatalf("ran %q, want %q", got, want)
	}

	t.Chdir(t.TempDir())
	if _, err := Start(context.Background(), "", Options{}); !errors.Is(err, ErrBinaryNotFound) || !strings.Contains(err.Error(), "$SANDBOXD_BIN is not set") {
		t.Fatalf("Start with nothing to find: %v; want ErrBinaryNotFound naming what was tried", err)
	}
}
