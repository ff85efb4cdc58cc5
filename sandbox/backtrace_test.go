package sandbox

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// TestWasmtimePanicPrintsNoRustBacktrace: a panic inside wasmtime aborts
// the process and prints to stderr, which is the parent's. With
// RUST_BACKTRACE=1 in the environment (as on our machines) Rust would add
// the host's stack; once an engine exists it must not. The child makes an
// engine, then a deterministic wasmtime panic: a function type first used
// with one engine used with another.
func TestWasmtimePanicPrintsNoRustBacktrace(t *testing.T) {
	if os.Getenv("SANDBOXD_TEST_WASMTIME_PANIC") == "1" {
		e, err := NewEngine(Config{})
		if err != nil {
			t.Fatal(err)
		}
		other := wasmtime.NewEngine()
		ft := wasmtime.NewFuncType(nil, nil)
		noop := func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) { return nil, nil }
		wasmtime.NewFunc(wasmtime.NewStore(e.wt), ft, noop)
		wasmtime.NewFunc(wasmtime.NewStore(other), ft, noop) // aborts
		t.Fatal("wasmtime did not panic")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWasmtimePanicPrintsNoRustBacktrace$")
	cmd.Env = append(os.Environ(), "SANDBOXD_TEST_WASMTIME_PANIC=1", "RUST_BACKTRACE=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child did not abort:\n%s", out)
	}
	if !strings.Contains(string(out), "comes_from_same_engine") {
		t.Fatalf("the child did not die of the wasmtime panic:\n%s", out)
	}
	if strings.Contains(string(out), "stack backtrace") {
		t.Fatalf("a Rust backtrace reached stderr:\n%s", out)
	}
}
