package sandbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestIdleEvictionBeforeTheTableKnowsTheInstance: Instantiate armed the
// idle timer before it put the instance in the engine's table. An idle
// period that ended in between (a short --instance-idle on a loaded
// machine) evicted the instance first, which took its reserved slot out
// of the table, and then the closed instance was added: live for ever,
// holding one of MaxInstances (TestInstancesDoNotLeak saw Live:1 30 s
// after the last call at load 20). A 1 µs idle period makes that order
// common.
func TestIdleEvictionBeforeTheTableKnowsTheInstance(t *testing.T) {
	e, err := sandbox.NewEngine(sandbox.Config{InstanceIdle: time.Microsecond, MaxInstances: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: statefulWAT})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 250 {
				if _, err := e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second) // a hang bound: the evictions are due within microseconds
	for e.InstanceStats().Live > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := e.InstanceStats(); st.Live != 0 {
		t.Fatalf("stats %+v: %d instances stay live after their idle period", st, st.Live)
	}
}
