package sandbox_test

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Compile a module from WebAssembly text and call one of its exports under
// the default limits.
func Example() {
	e, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	ctx := context.Background()
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: `(module
	  (func (export "add") (param i32 i32) (result i32)
	    local.get 0
	    local.get 1
	    i32.add))`})
	if err != nil {
		panic(err)
	}
	res, err := e.Run(ctx, sandbox.Request{
		Module:   m,
		Function: "add",
		Args:     []sandbox.Value{sandbox.ValueI32(2), sandbox.ValueI32(40)},
		Limits:   limits.Defaults(),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Values[0], "fuel", res.FuelConsumed)
	// Output: I32(42) fuel 4
}

// A guest that never stops is stopped by a fence; the error's Kind says
// which one.
func ExampleEngine_Run() {
	e, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	ctx := context.Background()
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: `(module (func (export "run") (loop $l (br $l))))`})
	if err != nil {
		panic(err)
	}
	l := limits.Defaults()
	l.Fuel = 1000
	_, err = e.Run(ctx, sandbox.Request{Module: m, Function: "run", Limits: l})
	fmt.Println(sandbox.KindOf(err), sandbox.KindOf(err).Info().ExitCode)
	fmt.Println(err)
	// Output:
	// fuel_exhausted 2
	// fuel_exhausted: fuel budget of 1000 exhausted
}

func ExampleParseValue() {
	for _, in := range []struct {
		ty sandbox.ValType
		s  string
	}{{sandbox.I32, "4294967295"}, {sandbox.I64, "9007199254740993"}, {sandbox.F32, "0x7fc00001"}, {sandbox.F64, "-0"}} {
		v, err := sandbox.ParseValue(in.ty, in.s)
		if err != nil {
			panic(err)
		}
		fmt.Println(v)
	}
	// Output:
	// I32(-1)
	// I64(9007199254740993)
	// F32(NaN:0x7fc00001)
	// F64(-0)
}
