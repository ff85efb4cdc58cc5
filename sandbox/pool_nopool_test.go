package sandbox_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestRunsAwaitingTheirCallerAreBoundedWithoutAPool: without the pool
// (NoPool, or its address space could not be reserved) the runs that
// declare host functions are bounded as the pool's instances' share
// bounds them: at most MaxInstances wait for their caller at once, the
// others wait, within their deadline, before they start. Each waiting run
// holds an OS thread (the guest's, pinned inside the import): a parent
// that sent 10,500 runs whose host calls it did not answer crashed the
// sidecar ("runtime: program exceeds 10000-thread limit", red team of
// issue 20's futex wait; main before it crashed the same way).
func TestRunsAwaitingTheirCallerAreBoundedWithoutAPool(t *testing.T) {
	t.Parallel()
	const maxInstances = 3
	e := newEngine(t, sandbox.Config{NoPool: true, MaxInstances: maxInstances})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: lookupGuest})
	if err != nil {
		t.Fatal(err)
	}
	var waiting, most atomic.Int64
	release := make(chan struct{})
	host := func(ctx context.Context, _ sandbox.HostCall) ([]sandbox.HostValue, error) {
		n := waiting.Add(1)
		for {
			if m := most.Load(); n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		defer waiting.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []sandbox.HostValue{{Value: sandbox.ValueI32(1)}, {Value: sandbox.ValueF32(2)}}, nil
	}
	req := sandbox.Request{Module: m, Function: "run", Limits: hangLimits(), Host: host,
		HostFunctions: []sandbox.HostFunction{lookupDecl},
		Args:          []sandbox.Value{sandbox.ValueI64(1), sandbox.ValueF64(1)}}
	const runs = 4 * maxInstances
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for range runs {
		wg.Go(func() {
			_, err := e.Run(context.Background(), req)
			errs <- err
		})
	}
	// Wait until the bound is reached, then a little for any run that
	// would pass it (not a timing assertion: a run past the bound would
	// only be caught late, never wrongly).
	for waiting.Load() < maxInstances && len(errs) == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := most.Load(); got > maxInstances {
		t.Fatalf("%d runs waited for their caller at once; at most %d (MaxInstances) may", got, maxInstances)
	}
}

// TestConfigBoundsGuestThreads: instances and runs each may hold an OS
// thread (a guest waiting on its caller does), so together they are
// bounded under Go's 10,000 threads; NewEngine refuses more, naming the
// flags.
func TestConfigBoundsGuestThreads(t *testing.T) {
	_, err := sandbox.NewEngine(sandbox.Config{MaxInstances: sandbox.MaxGuestThreads, MaxRuns: 1})
	if err == nil || !strings.Contains(err.Error(), "--max-instances + --max-concurrency") {
		t.Fatalf("NewEngine with %d instances and 1 run: %v, want a refusal naming the flags", sandbox.MaxGuestThreads, err)
	}
}
