package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestInstantiateUnlisted: an instance made for its caller alone takes no
// slot of MaxInstances, is not counted or found by id, outlives the idle
// period, keeps its state between calls like any instance, and is gone
// once released.
func TestInstantiateUnlisted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEngine(t, sandbox.Config{MaxInstances: 1, InstanceIdle: 5 * time.Millisecond})
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: statefulWAT})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()}
	var unlisted []*sandbox.Instance
	for range 3 {
		in, err := e.InstantiateUnlisted(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Release()
		unlisted = append(unlisted, in)
	}
	listed := instantiate(t, e, statefulWAT, nil) // MaxInstances 1: still free
	if st := e.InstanceStats(); st.Live != 1 || st.Created != 1 {
		t.Errorf("stats %+v, want the listed instance alone", st)
	}
	if _, err := e.LookupInstance(unlisted[0].ID()); err == nil {
		t.Error("an unlisted instance was found by its id")
	}
	time.Sleep(50 * time.Millisecond) // ten idle periods
	if _, err := listed.Call(ctx, sandbox.CallRequest{Function: "peek"}); !errors.Is(err, sandbox.ErrInstanceClosed) {
		t.Errorf("the listed instance was not evicted: %v", err)
	}
	for i := range 2 {
		if got := callI32(t, unlisted[0], "bump", sandbox.ValueI32(3)); got != int32(3*(i+1)) {
			t.Fatalf("bump %d = %d", i, got)
		}
	}
	unlisted[0].Release()
	if _, err := unlisted[0].Call(ctx, sandbox.CallRequest{Function: "peek"}); err == nil {
		t.Error("a released unlisted instance answered")
	} else {
		wantClosed(t, err, "released")
	}
}
