package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestEvalDocExamples runs the console block of docs/snippets.md with sh,
// bin/ being SANDBOXD_BIN's directory, and compares what each command
// prints and its exit status where the block echoes it. The figures of
// --json, which vary, are not compared.
func TestEvalDocExamples(t *testing.T) {
	bin := evalBin(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "snippets.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples := consoleExamples(t, "docs/snippets.md", string(doc), "eval-examples")
	root := t.TempDir()
	if err := os.Symlink(filepath.Dir(bin), filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	varying := regexp.MustCompile(`"(fuelConsumed|peakMemoryBytes|elapsedMicros|queuedMicros)":[0-9]+`)
	normalize := func(s string) string { return varying.ReplaceAllString(s, `"$1":…`) }
	for _, e := range examples {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", e.command)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := exitCode(cmd.Run())
		cancel()
		echo := strings.HasSuffix(e.command, "; echo $?")
		want := e.stdout
		if echo {
			want += e.exitCode + "\n" // sh printed it
		}
		if normalize(stdout.String()) != normalize(want) || stderr.String() != e.stderr {
			t.Errorf("docs/snippets.md: %q prints\nstdout:\n%s\nstderr:\n%s\nbut the doc shows\nstdout:\n%s\nstderr:\n%s",
				e.command, stdout.String(), stderr.String(), want, e.stderr)
		}
		if (echo && e.exitCode == "") || (!echo && code != 0) {
			t.Errorf("docs/snippets.md: %q exits %d; echo $? in the doc if that is meant", e.command, code)
		}
	}
	if len(examples) < 8 {
		t.Errorf("found %d examples in docs/snippets.md, want at least 8", len(examples))
	}
}
