package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHelpSaysWhatLimitsAndLoopMean: serve --help tells the per-store
// instances limit from --max-instances, and call --help says what --loop
// does with newlines, which is what call does.
func TestHelpSaysWhatLimitsAndLoopMean(t *testing.T) {
	t.Parallel()
	help := func(cmd string) string {
		out, _ := exec.Command(binPath, cmd, "--help").CombinedOutput()
		return strings.Join(strings.Fields(string(out)), " ")
	}
	serve := help("serve")
	for _, want := range []string{
		"-default-instances uint default wasm instances per store (limits.instances) (default 1)",
		"-max-store-instances uint maximum wasm instances per store (limits.instances) (default 16)",
	} {
		if !strings.Contains(serve, want) {
			t.Errorf("serve --help does not say %q", want)
		}
	}
	if call := help("call"); !strings.Contains(call, "when N > 1 each output is followed by a newline") {
		t.Errorf("call --help does not say when a newline follows an output:\n%s", call)
	}
	plugin := pluginPath(t, "wat/plugin.wat")
	run := func(args ...string) string {
		out, err := exec.Command(binPath, append([]string{"call", plugin, "greet", "--input", "Ada", "--allow-log"}, args...)...).Output()
		if err != nil {
			t.Fatalf("call %v: %v", args, err)
		}
		return string(out)
	}
	if a, b, c := run(), run("--loop", "1"), run("--loop", "2"); a != "Hello, Ada" || b != a || c != "Hello, Ada\nHello, Ada\n" {
		t.Errorf("call: %q, --loop 1: %q, --loop 2: %q", a, b, c)
	}
}
