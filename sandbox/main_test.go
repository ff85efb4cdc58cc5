package sandbox_test

import (
	"os"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestMain lets the test binary serve as the engine's compile child: the
// engine re-executes its own program to compile (compilechild_main.go).
func TestMain(m *testing.M) {
	if sandbox.IsCompileChild() {
		os.Exit(sandbox.CompileChildMain())
	}
	os.Exit(m.Run())
}
