package main

// Regression tests for the red-team pass on Extism plugins
// (helpers/redteam/redguest_README.md §3): each is the attack through the
// real binary, and each failed on the code before its fix.

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// copyLoopPlugin loops config_get(alloc(n)): every iteration hands the
// host an n-byte kernel block, which config_get copies out and frees (a
// nested call of the kernel's free, inside the host function).
func copyLoopPlugin(t *testing.T, n int) string {
	return writeGuest(t, fmt.Sprintf("copy_loop_%d.wat", n), fmt.Sprintf(`(module
	  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
	  (import "extism:host/env" "config_get" (func $cfg (param i64) (result i64)))
	  (memory (export "memory") 1)
	  (func (export "run") (result i32)
	    (loop $l
	      (drop (call $cfg (call $alloc (i64.const %d))))
	      (br $l))
	    (i32.const 0)))`, n))
}

// TestPluginDeadlineInsideNestedFreeIsATimeout: the deadline fired inside
// the kernel's free, called by take() inside config_get; take() dropped the
// nested call's trap and config_get reported its key as a bad handle, so
// the run exited 8 "trap: ... key 80 is not a live kernel block" instead
// of 3 timeout. (8 MB keys: nearly all the time is the host's copy, so the
// deadline is noticed at the next wasm entry, the nested free.)
func TestPluginDeadlineInsideNestedFreeIsATimeout(t *testing.T) {
	t.Parallel()
	guest := copyLoopPlugin(t, 8_000_000)
	_, stderr, code := sandboxdCall(t, guest, "run", "--fuel", "100000000000", "--timeout-ms", "300")
	if code != 3 || !strings.Contains(stderr, "timeout: deadline of 300 ms exceeded") {
		t.Fatalf("exit %d, stderr %q; want 3 and a timeout", code, stderr)
	}
}

// TestPluginFuelOutInsideNestedKernelCallIsFuelExhausted: a fuel budget
// that runs out inside the nested free (any of about a third of the
// budgets of one iteration did) was reported as a trap for a bad handle.
// Every budget across more than one iteration must end fuel_exhausted.
func TestPluginFuelOutInsideNestedKernelCallIsFuelExhausted(t *testing.T) {
	t.Parallel()
	guest := copyLoopPlugin(t, 8)
	const from, to = 1000, 1250 // an iteration costs ~100-150 fuel
	budgets := make(chan int)
	var mu sync.Mutex
	var wrong []string
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for fuel := range budgets {
				_, stderr, code := sandboxdCall(t, guest, "run", "--fuel", fmt.Sprint(fuel))
				if code != 2 || !strings.Contains(stderr, "fuel_exhausted") {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("--fuel %d: exit %d, %s", fuel, code, strings.TrimSpace(stderr)))
					mu.Unlock()
				}
			}
		})
	}
	for fuel := from; fuel < to; fuel++ {
		budgets <- fuel
	}
	close(budgets)
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d of %d budgets did not end fuel_exhausted (exit 2), e.g.\n%s", len(wrong), to-from, strings.Join(wrong[:min(len(wrong), 5)], "\n"))
	}
}

// TestPluginHostCopiesCostFuel: the host copied whatever a plugin handed
// it (config_get and var_get keys, var_set keys and values, var_get
// values, log lines) for a few hundred fuel per call, so a loop of
// config_get(alloc(8 MB)) ran 9.4 s of memcpy under --fuel 200000. Each
// copy now costs memory.copy's rate (30 per whole KiB), charged before
// the copy. Each plugin below does one bounded piece of work whose wasm
// costs a small part of the budget and whose copies cost more than all of
// it: exit 0 before the fix, fuel_exhausted now.
func TestPluginHostCopiesCostFuel(t *testing.T) {
	t.Parallel()
	const imports = `
	  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
	  (import "extism:host/env" "config_get" (func $cfg (param i64) (result i64)))
	  (import "extism:host/env" "var_get" (func $vget (param i64) (result i64)))
	  (import "extism:host/env" "var_set" (func $vset (param i64 i64)))
	  (import "extism:host/env" "log_info" (func $log (param i64)))
	  (memory (export "memory") 1)`
	repeat := func(n int, body string) string {
		return fmt.Sprintf(`(loop $l %s
		  (local.set $i (i32.add (local.get $i) (i32.const 1)))
		  (br_if $l (i32.lt_u (local.get $i) (i32.const %d))))`, body, n)
	}
	cases := []struct {
		name, body, fuel string
	}{
		// an 8 MB key: 7,812 whole KiB, 234,360 fuel
		{"config_get key", `(drop (call $cfg (call $alloc (i64.const 8000000))))`, "200000"},
		// a 1 MB value: 976 whole KiB, 29,280 fuel
		{"var_set value", `(call $vset (call $alloc (i64.const 8)) (call $alloc (i64.const 1000000)))`, "20000"},
		// the 1 MB value read back 10 times: 322,080 fuel
		{"var_get value", `(call $vset (call $alloc (i64.const 8)) (call $alloc (i64.const 1000000)))` +
			repeat(10, `(drop (call $vget (call $alloc (i64.const 8))))`), "200000"},
		// 100 lines of 16 KiB: 48,000 fuel
		{"log lines", repeat(100, `(call $log (call $alloc (i64.const 16384)))`), "20000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			guest := writeGuest(t, "copies.wat", `(module `+imports+`
			  (func (export "run") (result i32) (local $i i32) `+tc.body+` (i32.const 0)))`)
			_, stderr, code := sandboxdCall(t, guest, "run", "--allow-log", "--log-bytes", "8388608", "--fuel", tc.fuel)
			if code != 2 || !strings.Contains(stderr, "fuel_exhausted: fuel budget of "+tc.fuel+" exhausted") {
				t.Fatalf("--fuel %s: exit %d, stderr %.200q; want 2 fuel_exhausted", tc.fuel, code, stderr)
			}
			// with enough fuel the same plugin succeeds: the charge is a price, not a refusal
			if _, stderr, code := sandboxdCall(t, guest, "run", "--allow-log", "--log-bytes", "8388608", "--fuel", "10000000"); code != 0 {
				t.Fatalf("--fuel 10000000: exit %d, stderr %.200q; want 0", code, stderr)
			}
		})
	}
}
