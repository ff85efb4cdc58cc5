package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

// TestHostileGuestsLeaveTheSidecarHealthy sends every hostile fixture
// through one sidecar and checks, after each, both the kind it reported and
// that the next ordinary run still succeeds with the exact figures.
func TestHostileGuestsLeaveTheSidecarHealthy(t *testing.T) {
	c, stderr := startClient(t, binPath)
	ctx := ctxT(t, 120*time.Second)
	logCap := map[string]any{"log": true}
	cases := []struct {
		name, fixture, function string
		lim                     map[string]uint64
		caps                    map[string]any
		kind, data              string
	}{
		{"fuel", "infinite_loop.wat", "", map[string]uint64{"fuel": 1_000_000}, nil, "fuel_exhausted", `"budget":1000000`},
		{"deadline", "infinite_loop.wat", "", map[string]uint64{"fuel": hugeFuel, "timeoutMs": 50}, nil, "timeout", `"timeoutMs":50`},
		{"start spins", "start_spin.wat", "", map[string]uint64{"fuel": hugeFuel, "timeoutMs": 50}, nil, "timeout", ""},
		{"memory bomb", "memory_bomb.wat", "", map[string]uint64{"memoryBytes": 4 << 20}, nil, "memory_limit_exceeded", `"resource":"memory"`},
		{"start grows past cap", "start_grow.wat", "", nil, nil, "memory_limit_exceeded", ""},
		{"data past cap", "data_exceeds_cap.wat", "", map[string]uint64{"memoryBytes": 4 << 20}, nil, "memory_limit_exceeded", ""},
		{"hidden memory", "mem_hidden_grow.wat", "", map[string]uint64{"memoryBytes": 4 << 20}, nil, "memory_limit_exceeded", ""},
		{"deny then spin", "mem_deny_spin.wat", "", map[string]uint64{"memoryBytes": 4 << 20, "fuel": 100_000}, nil, "memory_limit_exceeded", ""},
		{"table bomb", "table_bomb.wat", "", nil, nil, "memory_limit_exceeded", `"resource":"table"`},
		{"recursion", "recursion.wat", "", nil, nil, "trap", `"trapCode":"stack_overflow"`},
		{"log out of range", "log_bad_pointer.wat", "", nil, logCap, "trap", `"trapCode":"memory_out_of_bounds"`},
		{"trap inside host::log", "log_trap_inside.wat", "", nil, logCap, "trap", `"trapCode":"memory_out_of_bounds"`},
		{"log wrong signature", "log_wrong_signature.wat", "", nil, logCap, "disallowed_import", `"name":"log"`},
		{"log flood", "log_flood.wat", "", map[string]uint64{"timeoutMs": 200}, logCap, "timeout", ""},
		{"disallowed import", "disallowed_import.wat", "", nil, nil, "disallowed_import", `"module":"env"`},
	}
	for _, trap := range []string{"unreachable", "div_by_zero", "int_overflow", "bad_conversion", "oob", "table_oob", "null_call", "bad_sig", "stack_overflow"} {
		cases = append(cases, struct {
			name, fixture, function string
			lim                     map[string]uint64
			caps                    map[string]any
			kind, data              string
		}{"trap " + trap, "traps.wat", trap, nil, nil, "trap", `"trapCode"`})
	}
	healthy := sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "fib", Args: rawArgs(20)}
	for _, tc := range cases {
		p := sandboxd.RunParams{Module: modPath(tc.fixture), Function: tc.function, Limits: tc.lim}
		if tc.caps != nil {
			p.Capabilities = &rpc.CapabilitySpec{Log: true}
		}
		_, err := c.Run(ctx, p, nil)
		e := asRPCError(t, err)
		if e.Kind() != tc.kind || !strings.Contains(string(e.Data), tc.data) {
			t.Errorf("%s: kind %q data %s, want %s with %s", tc.name, e.Kind(), e.Data, tc.kind, tc.data)
		}
		res, err := c.Run(ctx, healthy, nil)
		if err != nil || string(res.Values[0].Value) != "6765" || res.FuelConsumed != 352 {
			t.Fatalf("after %s the next run failed: %+v %v\nstderr: %s", tc.name, res, err, stderr)
		}
	}
}

// TestPathologicalModulesAreBounded: compiling a module with thousands of
// functions, or with deeply nested blocks, either succeeds or is refused,
// and the sidecar answers within a generous bound (a guard against hangs,
// not a speed assertion) and keeps serving.
func TestPathologicalModulesAreBounded(t *testing.T) {
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, 180*time.Second)
	var many strings.Builder
	many.WriteString("(module\n")
	for i := range 5000 {
		fmt.Fprintf(&many, "(func (export \"f%d\") (result i32) (i32.add (i32.const %d) (i32.const 1)))\n", i, i)
	}
	many.WriteString(")")
	depth := 5000
	nested := "(module (func (export \"run\") (result i32) " + strings.Repeat("(block (result i32) ", depth) + "(i32.const 7)" + strings.Repeat(")", depth) + "))"
	for name, wat := range map[string]string{"5000 functions": many.String(), "5000 nested blocks": nested} {
		start := time.Now()
		res, err := c.Compile(ctx, rpc.ModuleSpec{WAT: &wat})
		t.Logf("%s: compiled in %v (err %v)", name, time.Since(start), err)
		if err != nil {
			if e := asRPCError(t, err); e.Kind() != "invalid_module" {
				t.Errorf("%s: refused with kind %q, want invalid_module", name, e.Kind())
			}
		} else if len(res.Exports) == 0 {
			t.Errorf("%s: no exports", name)
		}
	}
	res, err := c.Run(ctx, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(2, 40)}, nil)
	if err != nil || string(res.Values[0].Value) != "42" {
		t.Fatalf("after the pathological modules: %+v %v", res, err)
	}
}
