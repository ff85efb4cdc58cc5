package sandbox_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// initializeWAT spends about 30,000 fuel in _initialize; work spends 4.
const initializeWAT = `(module
  (global $n (mut i32) (i32.const 0))
  (func (export "_initialize")
    (loop $l (global.set $n (i32.add (global.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (global.get $n) (i32.const 5000)))))
  (func (export "work") (result i32) (global.get $n)))`

// TestInstanceStartLimits: InstanceRequest.Start fences instantiation in
// place of Limits' per-call budgets, which stay every call's defaults.
func TestInstanceStartLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t, sandbox.Config{})
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: initializeWAT})
	if err != nil {
		t.Fatal(err)
	}
	l := limits.Defaults()
	l.Fuel = 1000
	if _, err := e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: l}); err == nil {
		t.Fatal("_initialize ran on 1,000 fuel")
	} else {
		wantKind(t, err, sandbox.KindFuelExhausted)
	}
	in, err := e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: l, Start: sandbox.CallLimits{Fuel: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	if boot := in.Instantiation(); boot.FuelConsumed <= 1000 {
		t.Errorf("instantiation consumed %d fuel", boot.FuelConsumed)
	}
	res, err := in.Call(ctx, sandbox.CallRequest{Function: "work"})
	if err != nil || res.Values[0] != i32(5000) || res.FuelConsumed > 1000 {
		t.Fatalf("work: %+v %v", res, err)
	}
	if in.Limits().Fuel != 1000 {
		t.Errorf("the instance's limits %+v lost the calls' default fuel", in.Limits())
	}
	if _, err := e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: l, Start: sandbox.CallLimits{Fuel: 1 << 63}}); err == nil {
		t.Error("a start fuel past the hard maximum was taken")
	}
}
