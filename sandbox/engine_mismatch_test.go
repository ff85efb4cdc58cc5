package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// A module runs only on the engine that compiled it: on another one,
// wasmtime aborts the whole process ("id from different slab"). Run,
// Instantiate and CallOnce refuse it with an error instead, and the
// module still runs on its own engine.
func TestModuleFromAnotherEngineIsRefused(t *testing.T) {
	ctx := context.Background()
	const addWAT = `(module (func (export "add") (param i32 i32) (result i32)
	  (i32.add (local.get 0) (local.get 1))))`
	other, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	m, _, err := other.Compile(ctx, sandbox.Source{WAT: addWAT})
	if err != nil {
		t.Fatal(err)
	}
	e := engine(t)
	args := []sandbox.Value{i32(2), i32(3)}
	wantRefused := func(what string, err error) {
		t.Helper()
		var se *sandbox.Error
		if !errors.As(err, &se) || se.Kind != sandbox.KindHost || !strings.Contains(se.Message, "another Engine") ||
			!strings.Contains(se.Message, m.ID) {
			t.Fatalf("%s: err = %v, want a host error saying the module %s belongs to another Engine", what, err, m.ID)
		}
	}
	_, err = e.Run(ctx, sandbox.Request{Module: m, Function: "add", Args: args, Limits: limits.Defaults()})
	wantRefused("Run", err)
	_, err = e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()})
	wantRefused("Instantiate", err)
	_, err = e.CallOnce(ctx, sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()},
		sandbox.CallRequest{Function: "add", Args: args})
	wantRefused("CallOnce", err)

	res, err := other.Run(ctx, sandbox.Request{Module: m, Function: "add", Args: args, Limits: limits.Defaults()})
	if err != nil || len(res.Values) != 1 || res.Values[0].I32() != 5 {
		t.Fatalf("on its own engine: %v, %v", res, err)
	}

	// A Module not made by Compile (the zero value) is refused too.
	_, err = e.Run(ctx, sandbox.Request{Module: &sandbox.Module{ID: "made-up"}, Function: "add", Limits: limits.Defaults()})
	var se *sandbox.Error
	if !errors.As(err, &se) || !strings.Contains(se.Message, "not compiled by an Engine") {
		t.Fatalf("zero Module: err = %v", err)
	}
}
