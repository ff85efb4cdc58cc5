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
