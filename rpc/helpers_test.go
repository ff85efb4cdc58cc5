package rpc

import (
	"runtime"
	"testing"
	"time"
)

// waitUntil waits for cond, a state no event announces (a goroutine
// blocked in a wait, a counter), polling it: not a sleep that hopes
// something happened, and a minute is only a hang bound.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); runtime.Gosched() {
		if time.Since(start) > time.Minute {
			t.Fatalf("never: %s", what)
		}
	}
}
