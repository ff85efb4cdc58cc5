package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// lookupGuest imports env::lookup (i64, f64) -> (i32, f32) and returns
// what it answers, and env::twice (i32) -> (i32), which it calls twice.
const lookupGuest = `(module
  (import "env" "lookup" (func $lookup (param i64 f64) (result i32 f32)))
  (func (export "run") (param i64 f64) (result i32 f32)
    (call $lookup (local.get 0) (local.get 1))))`

var lookupDecl = sandbox.HostFunction{Module: "env", Name: "lookup", Params: []string{"i64", "f64"}, Results: []string{"i32", "f32"}}

// TestHostFunctionsServedByTheCaller: a declared import links and its
// calls reach the caller, values (every bit of them) both ways.
func TestHostFunctionsServedByTheCaller(t *testing.T) {
	m := compileWAT(t, lookupGuest)
	req := sandbox.Request{Module: m, Function: "run", Limits: hangLimits(),
		Args:          []sandbox.Value{sandbox.ValueI64(math.MaxInt64 - 1), sandbox.ValueF64(math.Copysign(0, -1))},
		HostFunctions: []sandbox.HostFunction{lookupDecl}}
	var got sandbox.HostCall
	req.Host = func(ctx context.Context, call sandbox.HostCall) ([]sandbox.HostValue, error) {
		got = call
		return []sandbox.HostValue{{Value: sandbox.ValueI32(-7)}, {Value: sandbox.ValueF32(float32(math.NaN()))}}, nil
	}
	res, err := engine(t).Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Module != "env" || got.Name != "lookup" || len(got.Args) != 2 || got.Args[0].Value != sandbox.ValueI64(math.MaxInt64-1) ||
		got.Args[1].Value != sandbox.ValueF64(math.Copysign(0, -1)) {
		t.Errorf("the call the caller saw: %+v", got)
	}
	if res.Values[0] != sandbox.ValueI32(-7) || res.Values[1] != sandbox.ValueF32(float32(math.NaN())) {
		t.Errorf("results %v", res.Values)
	}
	if res.FuelConsumed < 10_000 {
		t.Errorf("a host call consumed %d fuel, want at least its price (10,000)", res.FuelConsumed)
	}
}

// TestHostFunctionDeclarationsAreChecked: an import whose signature is
// not its declaration's is refused naming both, and nothing declared
// changes nothing; a bytes declaration is for plugins only; a malformed
// declaration is the caller's mistake naming the entry.
func TestHostFunctionDeclarationsAreChecked(t *testing.T) {
	m := compileWAT(t, lookupGuest)
	run := func(decls ...sandbox.HostFunction) error {
		_, err := engine(t).Run(context.Background(), sandbox.Request{Module: m, Function: "run", Limits: hangLimits(),
			Args: []sandbox.Value{sandbox.ValueI64(1), sandbox.ValueF64(1)}, HostFunctions: decls,
			Host: func(context.Context, sandbox.HostCall) ([]sandbox.HostValue, error) {
				return nil, errors.New("not called")
			}})
		return err
	}
	other := lookupDecl
	other.Params = []string{"i32", "f64"}
	se := wantKind(t, run(other), sandbox.KindDisallowedImport)
	if want := "import env::lookup has signature (i64, f64) -> (i32, f32); hostFunctions declares (i32, f64) -> (i32, f32)"; se.Message != want {
		t.Errorf("message %q, want %q", se.Message, want)
	}
	wantKind(t, run(), sandbox.KindDisallowedImport)
	withBytes := lookupDecl
	withBytes.Params = []string{"bytes", "f64"}
	if se := wantKind(t, run(withBytes), sandbox.KindDisallowedImport); !strings.Contains(se.Message, "only a plugin") {
		t.Errorf("bytes for a module that is not a plugin: %v", se)
	}
	var ge *sandbox.GrantError
	if err := run(lookupDecl, lookupDecl); !errors.As(err, &ge) || ge.Field != "hostFunctions[1]" {
		t.Errorf("a duplicate declaration: %v", err)
	}
}

// TestHostFunctionFailures: the caller's error answer, and an answer
// that does not fit the declaration, end the run with kind
// host_function_error naming the function (and carrying the caller's
// message, cut and escaped).
func TestHostFunctionFailures(t *testing.T) {
	m := compileWAT(t, lookupGuest)
	for _, c := range []struct {
		answer  []sandbox.HostValue
		err     error
		message string
	}{
		{nil, &sandbox.HostCallError{Code: 1, Message: "no such key\x1b[31m"}, `host function "env::lookup": the parent answered with an error: "no such key\x1b[31m"`},
		{[]sandbox.HostValue{{Value: sandbox.ValueI32(1)}}, nil, `host function "env::lookup": the parent answered with 1 values; it returns (i32, f32)`},
		{[]sandbox.HostValue{{Value: sandbox.ValueI64(1)}, {Value: sandbox.ValueF32(1)}}, nil, `host function "env::lookup": the parent's value 0 is "i64"; it returns i32 there`},
	} {
		_, err := engine(t).Run(context.Background(), sandbox.Request{Module: m, Function: "run", Limits: hangLimits(),
			Args: []sandbox.Value{sandbox.ValueI64(1), sandbox.ValueF64(1)}, HostFunctions: []sandbox.HostFunction{lookupDecl},
			Host: func(context.Context, sandbox.HostCall) ([]sandbox.HostValue, error) { return c.answer, c.err }})
		se := wantKind(t, err, sandbox.KindHostFunctionError)
		if se.Function != "env::lookup" || !strings.HasPrefix(se.Message, strings.Split(c.message, `"no such`)[0]) {
			t.Errorf("error %+v, want a message like %q", se, c.message)
		}
		if c.err != nil && (se.HostMessage != "no such key\x1b[31m" || strings.ContainsRune(se.Message, 0x1b)) {
			t.Errorf("the parent's message: %q in %q (escaped there)", se.HostMessage, se.Message)
		}
	}
}

// TestHostFunctionWaitMeetsTheFences: the time the guest waits for its
// caller counts against its deadline, and a cancel reaches it: the
// caller's context is done at once and the run ends timeout or cancelled.
func TestHostFunctionWaitMeetsTheFences(t *testing.T) {
	m := compileWAT(t, lookupGuest)
	waiting := make(chan struct{}, 1)
	hold := func(ctx context.Context, _ sandbox.HostCall) ([]sandbox.HostValue, error) {
		waiting <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	req := sandbox.Request{Module: m, Function: "run", Limits: hangLimits(), Host: hold,
		Args: []sandbox.Value{sandbox.ValueI64(1), sandbox.ValueF64(1)}, HostFunctions: []sandbox.HostFunction{lookupDecl}}
	req.Limits.Timeout = 200 * time.Millisecond
	_, err := engine(t).Run(context.Background(), req)
	wantKind(t, err, sandbox.KindTimeout)
	<-waiting

	req.Limits.Timeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-waiting; cancel() }()
	_, err = engine(t).Run(ctx, req)
	wantKind(t, err, sandbox.KindCancelled)
}

// hostPlugin passes its input block to extism:host/user::transform and
// outputs the block it gets back; it logs "hi" first (log_info, linked
// with or without the log capability).
const hostPlugin = `(module
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (import "extism:host/user" "transform" (func $transform (param i64) (result i64)))
  (memory (export "memory") 1)
  (func (export "run") (result i32) (local $h i64) (local $l i64)
    (local.set $l (call $alloc (i64.const 2)))
    (call $store_u8 (local.get $l) (i32.const 104))
    (call $store_u8 (i64.add (local.get $l) (i64.const 1)) (i32.const 105))
    (call $log_info (local.get $l))
    (local.set $h (call $transform (call $input_offset)))
    (call $output_set (local.get $h) (call $length (local.get $h)))
    (i32.const 0)))`

var transformDecl = sandbox.HostFunction{Module: "extism:host/user", Name: "transform", Params: []string{"bytes"}, Results: []string{"bytes"}}

// TestPluginHostFunctionsPassBytes: a plugin's extism:host/user function,
// served by the caller, takes and returns memory handles: the bytes behind
// them cross both ways, text and binary, one byte to several MiB. The
// plugin's log_info links without the log capability (its line dropped
// and counted, as Extism drops lines when no logger is set).
func TestPluginHostFunctionsPassBytes(t *testing.T) {
	m := compileWAT(t, hostPlugin)
	reverse := func(_ context.Context, call sandbox.HostCall) ([]sandbox.HostValue, error) {
		b := append([]byte(nil), call.Args[0].Bytes...)
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
		return []sandbox.HostValue{{Value: sandbox.Value{Type: sandbox.TypeBytes}, Bytes: b}}, nil
	}
	big := make([]byte, 5<<20)
	for i := range big {
		big[i] = byte(i * 31)
	}
	for _, input := range [][]byte{[]byte("x"), []byte("héllo"), {0, 255, 0, 1}, big} {
		l := hangLimits()
		l.MemoryBytes = 64 << 20
		l.OutputBytes = 16 << 20
		res, err := engine(t).CallOnce(context.Background(),
			sandbox.InstanceRequest{Module: m, Limits: l, HostFunctions: []sandbox.HostFunction{transformDecl}},
			sandbox.CallRequest{Function: "run", Input: input, Host: reverse})
		if err != nil {
			t.Fatalf("%d bytes: %v", len(input), err)
		}
		want, _ := reverse(nil, sandbox.HostCall{Args: []sandbox.HostValue{{Bytes: input}}})
		if !bytes.Equal(res.PluginOutput, want[0].Bytes) {
			t.Errorf("%d bytes: the output is not the input reversed", len(input))
		}
		if res.LogDropped != 1 || res.LogLines != 0 {
			t.Errorf("%d bytes: %d lines dropped, %d sent; want the one line dropped", len(input), res.LogDropped, res.LogLines)
		}
	}
}

// TestInstanceHostCallsAndRelease: an instance's host calls, in its
// instantiation and in its calls, reach the caller of each; a Release
// while a call waits for its caller ends the wait and the call.
func TestInstanceHostCallsAndRelease(t *testing.T) {
	m := compileWAT(t, `(module
  (import "env" "tick" (func $tick (param i32) (result i32)))
  (global $n (mut i32) (i32.const 0))
  (func (export "_initialize") (global.set $n (call $tick (i32.const 100))))
  (func (export "run") (result i32) (call $tick (global.get $n))))`)
	decl := sandbox.HostFunction{Module: "env", Name: "tick", Params: []string{"i32"}, Results: []string{"i32"}}
	plusOne := func(_ context.Context, c sandbox.HostCall) ([]sandbox.HostValue, error) {
		return []sandbox.HostValue{{Value: sandbox.ValueI32(c.Args[0].Value.I32() + 1)}}, nil
	}
	in, err := engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits(),
		HostFunctions: []sandbox.HostFunction{decl}, Host: plusOne})
	if err != nil {
		t.Fatal(err)
	}
	res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "run", Host: plusOne})
	if err != nil || res.Values[0].I32() != 102 {
		t.Fatalf("call: %v, %+v; want 102 (100 + 1 at instantiation, + 1 now)", err, res)
	}
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "run",
			Host: func(ctx context.Context, _ sandbox.HostCall) ([]sandbox.HostValue, error) {
				close(waiting)
				<-ctx.Done()
				return nil, ctx.Err()
			}})
		done <- err
	}()
	<-waiting
	in.Release()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a call released while it waited for its caller succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("a Release did not end a call waiting for its caller")
	}
}

// TestPluginHostFunctionForgedHandle: a handle that is no live block,
// passed to a parent's function, stops the plugin (trap, code host) with
// a message naming the function once, by its own module (it named
// extism:host/env::extism:host/user::transform: rt20 item 6), and the
// caller is never asked.
func TestPluginHostFunctionForgedHandle(t *testing.T) {
	m := compileWAT(t, `(module
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/user" "transform" (func $transform (param i64) (result i64)))
  (memory (export "memory") 1)
  (func (export "run") (result i32)
    (drop (call $transform (i64.const 12345)))
    (i32.const 0)))`)
	asked := false
	_, err := engine(t).CallOnce(context.Background(),
		sandbox.InstanceRequest{Module: m, Limits: hangLimits(), HostFunctions: []sandbox.HostFunction{transformDecl}},
		sandbox.CallRequest{Function: "run", Host: func(context.Context, sandbox.HostCall) ([]sandbox.HostValue, error) {
			asked = true
			return nil, nil
		}})
	var e *sandbox.Error
	if !errors.As(err, &e) || e.Kind != sandbox.KindTrap || asked ||
		e.Message != "extism:host/user::transform: argument 0's handle 12345 is not a live kernel block" {
		t.Fatalf("a forged handle: %v (asked %v)", err, asked)
	}
}
