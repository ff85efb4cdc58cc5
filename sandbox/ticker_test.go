package sandbox

import (
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// TestEpochTickerDisarmsAfterTheLastRun: the last run out leaves the
// timer armed (stopping and re-arming it per run woke a thread per run);
// its next tick disarms it, so an idle engine stops ticking. A run after
// that arms it again, and it ticks while runs are in flight.
func TestEpochTickerDisarmsAfterTheLastRun(t *testing.T) {
	cfg := wasmtime.NewConfig()
	cfg.SetEpochInterruption(true)
	ticker := newEpochTicker(wasmtime.NewEngineWithConfig(cfg), time.Millisecond)
	defer ticker.close()
	armed := func() bool {
		ticker.mu.Lock()
		defer ticker.mu.Unlock()
		return ticker.armed
	}
	waitDisarmed := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for armed() {
			if time.Now().After(deadline) {
				t.Fatal("the ticker is still armed 30 s after the last run")
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range 1000 {
		ticker.acquire()
		ticker.release()
	}
	waitDisarmed()
	idle := ticker.ticks.Load()
	time.Sleep(20 * time.Millisecond)
	if n := ticker.ticks.Load(); n != idle {
		t.Fatalf("an idle ticker ticked %d times in 20 ms", n-idle)
	}

	ticker.acquire()
	deadline := time.Now().Add(30 * time.Second)
	for ticker.ticks.Load() < idle+3 {
		if time.Now().After(deadline) {
			t.Fatal("no ticks while a run is in flight")
		}
		time.Sleep(time.Millisecond)
	}
	ticker.release()
	waitDisarmed()
}
