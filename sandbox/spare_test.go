package sandbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// A compile that comes before the spare started when the engine opened
// has been exec'd (the first run of a cold start, the CLI's compile) uses
// that spare instead of starting a second child. A one-shot engine then
// starts no spare; a long-lived one starts the next spare after the
// compile (spareRefillDelay later) and keeps it ready.
func TestSpareChildren(t *testing.T) {
	for _, oneShot := range []bool{true, false} {
		eng, err := sandbox.NewEngine(sandbox.Config{OneShot: oneShot})
		if err != nil {
			t.Fatal(err)
		}
		sandbox.SetSpareRefillDelay(eng, time.Hour) // counted below, before any refill
		// At once, as the CLI does: the spare is usually still starting.
		mod, _, err := eng.Compile(context.Background(), sandbox.Source{WAT: `(module (func (export "f")))`})
		if err != nil {
			eng.Close()
			t.Fatal(err)
		}
		if got := sandbox.ChildStarts(eng); got != 1 {
			t.Errorf("oneShot=%v: the first compile started %d compile children, want 1 (the spare)", oneShot, got)
		}
		if _, err := eng.Run(context.Background(), sandbox.Request{Module: mod, Function: "f", Limits: limits.Defaults()}); err != nil {
			t.Errorf("oneShot=%v: run: %v", oneShot, err)
		}
		if !oneShot {
			// The next compile of a new module refills after its delay.
			sandbox.SetSpareRefillDelay(eng, time.Millisecond)
			if _, _, err := eng.Compile(context.Background(), sandbox.Source{WAT: `(module (func (export "g")))`}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); !sandbox.SpareReady(eng); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) { // a hang bound, not a timing assertion
					t.Fatal("oneShot=false: no spare child a minute after a compile")
				}
			}
		}
		eng.Close()
		want := int64(1) // one-shot: the spare, used by the first compile
		if !oneShot {
			want = 3 // the spare, the second compile's own child, the refill
		}
		if got := sandbox.ChildStarts(eng); got != want {
			t.Errorf("oneShot=%v: %d compile children started, want %d", oneShot, got, want)
		}
	}
}
