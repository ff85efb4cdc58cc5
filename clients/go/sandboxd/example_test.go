package sandboxd_test

// Examples, run by `go test` against the real sidecar that Start finds
// (sandboxd.FindBinary: $SANDBOXD_BIN, sandboxd on PATH, then this
// checkout's bin/sandboxd; `make binary` builds it). The snippet examples
// have no Output and are only compiled: they need the interpreter runtimes
// (`make build`), and an Example cannot skip.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
)

// Start a sidecar and run an export of a WAT module.
func Example() {
	ctx := context.Background()
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{}) // "": found as FindBinary says
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	info, err := c.Initialize(ctx) // optional: what the sidecar is
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("server:", info.ServerInfo.Name)

	res, err := c.Run(ctx, sandboxd.RunParams{
		Module: sandboxd.ModuleSpec{WAT: sandboxd.Str(`(module
			(func (export "add") (param i32 i32) (result i32)
				(i32.add (local.get 0) (local.get 1))))`)},
		Function: "add",
		Args:     []json.RawMessage{json.RawMessage("2"), json.RawMessage("40")},
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("add(2, 40) = %s (%s)\n", res.Values[0].Value, res.Values[0].Type)
	// Output:
	// server: sandboxd
	// add(2, 40) = 42 (i32)
}

// A run's log lines reach onLog, in order, before Run returns; the guest
// may log only with the log capability granted.
func ExampleClient_Run_log() {
	ctx := context.Background()
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	res, err := c.Run(ctx, sandboxd.RunParams{
		Module: sandboxd.ModuleSpec{WAT: sandboxd.Str(`(module
			(import "host" "log" (func $log (param i32 i32)))
			(memory (export "memory") 1)
			(data (i32.const 0) "hello from the guest")
			(func (export "run") (call $log (i32.const 0) (i32.const 20))))`)},
		Capabilities: &sandboxd.CapabilitySpec{Log: true},
	}, func(seq int, line string) { fmt.Printf("log %d: %s\n", seq, line) })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("log lines:", res.LogLines)
	// Output:
	// log 0: hello from the guest
	// log lines: 1
}

// A run that exhausts its fuel fails with an *Error of kind
// fuel_exhausted.
func ExampleError_Kind() {
	ctx := context.Background()
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	_, err = c.Run(ctx, sandboxd.RunParams{
		Module: sandboxd.ModuleSpec{WAT: sandboxd.Str(`(module
			(func (export "run") (loop $forever (br $forever))))`)},
		Limits: map[string]uint64{"fuel": 1_000_000},
	}, nil)
	var e *sandboxd.Error
	if errors.As(err, &e) {
		fmt.Println("kind:", e.Kind())
	}
	// Output:
	// kind: fuel_exhausted
}

// A guest calls env::lookup, a host function this program serves: the
// run declares it (HostFunctions) and its handler answers each call.
func ExampleClient_RunWith_hostFunction() {
	ctx := context.Background()
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	lookup := func(_ context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		k := call.Args[0].I64()
		return []sandboxd.HostValue{sandboxd.HostI32(int32(k) * 10)}, nil
	}
	res, err := c.RunWith(ctx, sandboxd.RunParams{
		Module: sandboxd.ModuleSpec{WAT: sandboxd.Str(`(module
			(import "env" "lookup" (func $lookup (param i64) (result i32)))
			(func (export "twice") (param $k i64) (result i32)
				(i32.add (call $lookup (local.get $k)) (call $lookup (local.get $k)))))`)},
		Function:      "twice",
		Args:          []json.RawMessage{json.RawMessage("4")},
		HostFunctions: []sandboxd.HostFunction{{Module: "env", Name: "lookup", Params: []string{"i64"}, Results: []string{"i32"}}},
	}, sandboxd.RunHandlers{Host: lookup})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("lookup(4) + lookup(4) =", string(res.Values[0].Value))
	// Output:
	// lookup(4) + lookup(4) = 80
}

// An instance keeps its state (here a global counter) from one call to
// the next until it is released.
func ExampleClient_Instantiate() {
	ctx := context.Background()
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	in, err := c.Instantiate(ctx, sandboxd.InstantiateParams{
		Module: sandboxd.ModuleSpec{WAT: sandboxd.Str(`(module
			(global $n (mut i32) (i32.const 0))
			(func (export "next") (result i32)
				(global.set $n (i32.add (global.get $n) (i32.const 1)))
				(global.get $n)))`)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		res, err := in.Call(ctx, "next", sandboxd.CallOptions{})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("next:", string(res.Values[0].Value))
	}
	if err := in.Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_, err = in.Call(ctx, "next", sandboxd.CallOptions{})
	var closed *sandboxd.InstanceClosedError
	if errors.As(err, &closed) {
		fmt.Println("after release:", closed.Reason)
	}
	// Output:
	// next: 1
	// next: 2
	// next: 3
	// after release: released
}

// A snippet evaluated once (needs the interpreter runtimes: `make build`).
func ExampleClient_Eval() {
	ctx := context.Background()
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	res, err := c.Eval(ctx, sandboxd.EvalParams{
		Language: sandboxd.LanguageJS,
		Code:     "input.map(x => x * x)",
		Input:    json.RawMessage("[1, 2, 3]"),
	}, sandboxd.RunHandlers{})
	var se *sandboxd.ScriptError
	switch {
	case errors.As(err, &se):
		fmt.Println("the snippet failed:", se)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(string(res.Value)) // [1,4,9]
	}
}

// A session keeps a snippet interpreter's variables between evaluations
// (needs the interpreter runtimes: `make build`).
func ExampleClient_NewSession() {
	ctx := context.Background()
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	s, err := c.NewSession(ctx, sandboxd.SessionParams{Language: sandboxd.LanguageLua})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	for _, code := range []string{"n = 20", "return n + 22"} {
		res, err := s.Eval(ctx, code, sandboxd.SessionEvalOptions{})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(string(res.Value)) // null, then 42
	}
}
