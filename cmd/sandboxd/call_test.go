package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func pluginPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "testdata", "plugins", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sandboxdCall runs the real binary's call command, under hang-bound
// deadline and compile limits where args set none (hangFlags).
func sandboxdCall(t *testing.T, args ...string) (stdout []byte, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binPath, append(append([]string{"call"}, hangFlags(args)...), args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.Bytes(), errb.String(), exitCode(err)
}

func TestCLICallGoPlugin(t *testing.T) {
	t.Parallel()
	plugin := pluginPath(t, "go/plugin.wasm")
	grant := []string{"--allow-wasi", "--allow-log"}
	cases := []struct {
		name   string
		args   []string
		stdout string
		stderr string
		code   int
	}{
		{"greet", []string{"greet", "--input", "Ada"}, "Hello, Ada!", "", 0},
		{"counter persists across --loop", []string{"count", "--loop", "3"}, "1\n2\n3\n", "", 0},
		{"config", []string{"config", "--config", "greeting=hi there"}, "hi there", "", 0},
		{"logs go to stderr with levels", []string{"logs"}, "", "[guest log] warn: a warn line", 0},
		{"plugin error exits 10", []string{"fail", "--input", "x"}, "", "plugin_error: failed on purpose: x", 10},
		{"deadline", []string{"spin", "--timeout-ms", "50", "--fuel", "1000000000000"}, "", "timeout", 3},
		{"memory cap", []string{"hog", "--memory-mb", "32"}, "", "memory_limit_exceeded", 4},
		{"output budget", []string{"greet", "--input", "Ada", "--output-bytes", "5"}, "Hello", "output truncated to 5 bytes", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out, errText, code := sandboxdCall(t, append(append([]string{plugin}, c.args...), grant...)...)
			if code != c.code || string(out) != c.stdout || !strings.Contains(errText, c.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q", code, out, errText, c.code, c.stdout, c.stderr)
			}
		})
	}
}

func TestCLICallNeedsTheGrants(t *testing.T) {
	t.Parallel()
	_, errText, code := sandboxdCall(t, pluginPath(t, "go/plugin.wasm"), "greet", "--input", "x")
	if code != 5 || !strings.Contains(errText, "--allow-wasi") {
		t.Fatalf("without --allow-wasi: exit %d, stderr %q", code, errText)
	}
	// Without --allow-log a plugin that logs still runs; its lines are
	// dropped (as Extism drops them with no logger set).
	out, errText, code := sandboxdCall(t, pluginPath(t, "wat/plugin.wat"), "logs")
	if code != 0 || strings.Contains(errText, "careful") || strings.Contains(string(out), "careful") ||
		!strings.Contains(errText, "2 log lines dropped (--allow-log shows them)") {
		t.Fatalf("without --allow-log: exit %d, stdout %q, stderr %q; want the lines dropped", code, out, errText)
	}
}

func TestCLICallBinaryEcho(t *testing.T) {
	t.Parallel()
	input := make([]byte, 100_000)
	for i := range input {
		input[i] = byte(i * 13)
	}
	f := filepath.Join(t.TempDir(), "in.bin")
	if err := os.WriteFile(f, input, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, plugin := range []string{"wat/plugin.wat", "go/plugin.wasm"} {
		out, errText, code := sandboxdCall(t, pluginPath(t, plugin), "echo", "--input-file", f, "--allow-wasi", "--allow-log")
		if code != 0 || !bytes.Equal(out, input) {
			t.Fatalf("%s echo: exit %d, %d bytes out (stderr %q)", plugin, code, len(out), errText)
		}
	}
}

func TestCLICallRefusesANonPlugin(t *testing.T) {
	t.Parallel()
	_, errText, code := sandboxdCall(t, fixture("well_behaved.wat"), "add")
	if code != 1 || !strings.Contains(errText, "not an Extism plugin") {
		t.Fatalf("exit %d, stderr %q", code, errText)
	}
	_, errText, code = sandboxdCall(t, pluginPath(t, "wat/plugin.wat"), "greet", "--input", "a", "--input-file", "b", "--allow-log")
	if code != 1 || !strings.Contains(errText, "not both") {
		t.Fatalf("exit %d, stderr %q", code, errText)
	}
}

// The Go PDK's own std-Go example (a WASI command: main is the plugin,
// called as _start) as Extism's CLI runs it: `extism call
// std_countvowels.wasm _start --wasi --input … --set-config '{"thing": …}'`.
// Its main runs four functions; the last output wins, and the second
// reads the input as JSON (Extism's Go SDK gives the same output). _start
// runs once per instance, so a second turn of --loop fails, naming why.
// Not parallel: its compile (~3 MB of Go) should not crowd the compile
// deadlines of the parallel tests.
func TestCLICallGoStdPluginStart(t *testing.T) {
	out, errText, code := sandboxdCall(t, pluginPath(t, "go/std_countvowels.wasm"), "_start", "--allow-wasi", "--allow-log",
		"--input", `{"input": "this is a test"}`, "--config", "thing=1234", "--loop", "2")
	if code != 1 || string(out) != "JSON roundtrip: a === b\n" {
		t.Fatalf("exit %d, stdout %q (stderr %q); want 1, the output once", code, out, errText)
	}
	for _, want := range []string{`closed after the guest exited with status 0 in a call of "_start"`, "drop --loop"} {
		if !strings.Contains(errText, want) {
			t.Fatalf("stderr %q, want %q in it", errText, want)
		}
	}
}

func TestCLICallRefusesANonPluginFunction(t *testing.T) {
	t.Parallel()
	_, errText, code := sandboxdCall(t, pluginPath(t, "wat/plugin.wat"), "memory", "--allow-log")
	if code != 7 || !strings.Contains(errText, `"memory" is not a plugin function (plugin functions take no parameters and return an i32 or nothing; it is a memory)`) ||
		strings.Contains(errText, "input") {
		t.Fatalf("exit %d, stderr %q", code, errText)
	}
}
