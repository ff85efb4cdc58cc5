package sandboxd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadme builds and runs the go.mod and main.go of clients/go/README.md
// as a user would: a module of their own next to the checkout (here a
// symlink to this one), whose `replace` line points at it, run from that
// module with no $SANDBOXD_BIN and no sandboxd on PATH, so that the
// sidecar is the checkout's bin/sandboxd, found through the replace
// recorded in the build info. Needs bin/sandboxd (make binary), as the
// Examples do; builds offline, from the module cache.
func TestReadme(t *testing.T) {
	checkout, ok := findCheckout(".")
	if !ok {
		t.Fatal("not inside the sandboxd checkout")
	}
	readme, err := os.ReadFile(filepath.Join(checkout, "clients", "go", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var goMod, mainGo string
	for _, block := range fencedBlocks(string(readme)) {
		switch {
		case strings.HasPrefix(block, "module "):
			goMod = block
		case strings.Contains(block, "package main\n"):
			mainGo = block
		}
	}
	if goMod == "" || mainGo == "" || !strings.Contains(goMod, "replace github.com/sandboxd/sandboxd => ../sandboxd\n") {
		t.Fatalf("README.md has no go.mod with the replace line and main.go; go.mod:\n%s", goMod)
	}

	dir := t.TempDir()
	if err := os.Symlink(checkout, filepath.Join(dir, "sandboxd")); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(dir, "hello")
	sum, err := os.ReadFile(filepath.Join(checkout, "go.sum")) // what `go mod tidy` would write, and more
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"go.mod": goMod, "main.go": mainGo, "go.sum": string(sum)} {
		if err := os.MkdirAll(hello, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hello, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "run", ".")
	cmd.Dir = hello
	cmd.Env = append(os.Environ(),
		"SANDBOXD_BIN=",
		"PATH="+filepath.Dir(goBin), // no sandboxd on it
		"GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0", "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run of the README's program: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if got := stdout.String(); !strings.HasPrefix(got, "add(2, 40) = 42, fuel ") {
		t.Fatalf("the README's program printed %q", got)
	}
}

// fencedBlocks are the contents of the ``` blocks of a Markdown text.
func fencedBlocks(md string) []string {
	var blocks []string
	var cur []string
	in := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(line, "```") {
			if in {
				blocks = append(blocks, strings.Join(cur, ""))
				cur = nil
			}
			in = !in
			continue
		}
		if in {
			cur = append(cur, line)
		}
	}
	return blocks
}
