package sandbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// goStdPlugin is the Go PDK v1.1.3's own example for the standard Go
// compiler (example/countvowels, -tags std), built unchanged by make
// plugins: a WASI command whose main is the plugin, called as _start. Its
// main runs four functions in turn; the last output wins ("JSON
// roundtrip: a === b"), and the second reads the input as JSON, setting
// an error when it is not.
const goStdPlugin = "../testdata/plugins/go/std_countvowels.wasm"

var (
	goStdOnce sync.Once
	goStdMod  *sandbox.Module
	goStdErr  error
)

func goStdInstance(t *testing.T) *sandbox.Instance {
	t.Helper()
	goStdOnce.Do(func() {
		goStdMod, _, goStdErr = engine(t).Compile(context.Background(), sandbox.Source{Path: goStdPlugin})
	})
	if goStdErr != nil {
		t.Fatal(goStdErr)
	}
	in, err := engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: goStdMod, Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{Log: true, WASI: &sandbox.WASI{}}, Config: map[string]string{"thing": "1234"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Release)
	return in
}

// The std-Go plugin works as under Extism's Go SDK: _start takes the
// input and gives the output (Go's runtime ends main with proc_exit(0),
// which is success), and a second _start fails cleanly, naming why
// (Extism's Go SDK: "module is closed").
func TestGoStdPluginStart(t *testing.T) {
	in := goStdInstance(t)
	res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "_start", Input: []byte(`{"input": "this is a test"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.PluginOutput); got != "JSON roundtrip: a === b" {
		t.Fatalf("output %q", got)
	}
	if len(res.Values) != 0 || res.ExitCode != 0 {
		t.Fatalf("values %v, exit code %d", res.Values, res.ExitCode)
	}
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "_start", Input: []byte(`{}`)})
	wantClosed(t, err, `the guest exited with status 0 in a call of "_start"`)
}

// An error the plugin sets before main ends is a plugin_error, although
// the exit status is 0 (Extism's rule: an error set fails the call).
func TestGoStdPluginStartError(t *testing.T) {
	in := goStdInstance(t)
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "_start", Input: []byte("this is a test")})
	se := wantKind(t, err, sandbox.KindPluginError)
	if !strings.Contains(se.Message, "invalid character 'h'") || se.ReturnCode != 0 || se.Function != "_start" {
		t.Fatalf("plugin error %+v", se)
	}
}

// commandPlugin has plugin functions without a result and ones that end
// in proc_exit.
const commandPlugin = `(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  (memory (export "memory") 1)
  (global $runs (mut i32) (i32.const 0))
  (global $started (mut i32) (i32.const 0))
  (func $echo (call $output_set (call $input_offset) (call $input_length)))
  (func (export "_start") ;; traps if it ran before, e.g. at instantiation
    (if (global.get $started) (then unreachable))
    (global.set $started (i32.const 1))
    (call $echo))
  (func (export "echo_void") (call $echo)
    (global.set $runs (i32.add (global.get $runs) (i32.const 1))))
  (func (export "exit0") (result i32) (call $echo) (call $exit (i32.const 0)) (i32.const 7))
  (func (export "exit3") (call $echo) (call $exit (i32.const 3)))
  (func (export "fail_exit0") (call $error_set (call $input_offset)) (call $exit (i32.const 0)))
  (func (export "fail_void") (call $error_set (call $input_offset))))`

func commandInstance(t *testing.T) *sandbox.Instance {
	t.Helper()
	m, _, err := engine(t).Compile(context.Background(), sandbox.Source{WAT: commandPlugin})
	if err != nil {
		t.Fatal(err)
	}
	in, err := engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Release)
	return in
}

func callInput(in *sandbox.Instance, fn, input string) (*sandbox.CallResult, error) {
	return in.Call(context.Background(), sandbox.CallRequest{Function: fn, Input: []byte(input)})
}

func TestPluginFunctionWithoutResult(t *testing.T) {
	in := commandInstance(t)
	for _, input := range []string{"one", "two"} { // not _start: the instance stays open
		res, err := callInput(in, "echo_void", input)
		if err != nil {
			t.Fatal(err)
		}
		if string(res.PluginOutput) != input || len(res.Values) != 0 {
			t.Fatalf("output %q, values %v", res.PluginOutput, res.Values)
		}
	}
	_, err := callInput(in, "fail_void", "set on purpose")
	if se := wantKind(t, err, sandbox.KindPluginError); se.Message != "set on purpose" || se.ReturnCode != 0 {
		t.Fatalf("plugin error %+v", se)
	}
	if _, err := callInput(in, "echo_void", "still open"); err != nil {
		t.Fatalf("after a plugin error: %v", err)
	}
}

// _start that returns (a wasi-libc command whose main returned 0) is a
// success, and the instance is done: a command's main runs once.
// Instantiation did not run it (it would trap when run again).
func TestPluginStartRunsOnce(t *testing.T) {
	in := commandInstance(t)
	res, err := callInput(in, "_start", "hi")
	if err != nil || string(res.PluginOutput) != "hi" {
		t.Fatalf("_start: %v, output %q", err, res.PluginOutput)
	}
	_, err = callInput(in, "_start", "again")
	wantClosed(t, err, `"_start" ran`)
}

func TestPluginFunctionProcExit(t *testing.T) {
	// proc_exit(0) is success with the output set so far, whatever the
	// function would have returned; the guest ended itself, so the
	// instance closes.
	in := commandInstance(t)
	res, err := callInput(in, "exit0", "bye")
	if err != nil || string(res.PluginOutput) != "bye" || res.ExitCode != 0 {
		t.Fatalf("exit0: %v, output %q", err, res.PluginOutput)
	}
	_, err = callInput(in, "echo_void", "x")
	wantClosed(t, err, `the guest exited with status 0 in a call of "exit0"`)

	// proc_exit(n) is a plugin_error with return code n.
	in = commandInstance(t)
	_, err = callInput(in, "exit3", "x")
	if se := wantKind(t, err, sandbox.KindPluginError); se.ReturnCode != 3 || se.Message != `plugin function "exit3" exited with status 3` {
		t.Fatalf("plugin error %+v", se)
	}
	_, err = callInput(in, "echo_void", "x")
	wantClosed(t, err, `the guest exited with status 3 in a call of "exit3"`)

	// An error set before proc_exit(0) fails the call with the message.
	in = commandInstance(t)
	_, err = callInput(in, "fail_exit0", "told you")
	if se := wantKind(t, err, sandbox.KindPluginError); se.ReturnCode != 0 || se.Message != "told you" {
		t.Fatalf("plugin error %+v", se)
	}
}
