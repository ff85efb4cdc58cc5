package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// secretWAT's "scan" grows its memory and table to the sizes given, counts
// the 8-byte words and elements that are not zero, then writes a secret
// over all of both for the next store that gets its slots; tag makes
// modules of different bytes.
func secretWAT(tag int) string {
	return fmt.Sprintf(`(module
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (elem declare func $f)
  (func $f)
  (func (export "tag") (result i32) i32.const %d)
  (func (export "scan") (param $pages i32) (param $elems i32) (result i32)
    (local $p i32) (local $end i32) (local $i i32) (local $dirty i32)
    (drop (memory.grow (i32.sub (local.get $pages) (memory.size))))
    (drop (table.grow $t (ref.null func) (i32.sub (local.get $elems) (table.size $t))))
    (local.set $end (i32.shl (memory.size) (i32.const 16)))
    (block $done (loop $words
      (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
      (if (i64.ne (i64.load (local.get $p)) (i64.const 0))
        (then (local.set $dirty (i32.add (local.get $dirty) (i32.const 1)))))
      (local.set $p (i32.add (local.get $p) (i32.const 8)))
      (br $words)))
    (block $done (loop $elems
      (br_if $done (i32.ge_u (local.get $i) (table.size $t)))
      (if (i32.eqz (ref.is_null (table.get $t (local.get $i))))
        (then (local.set $dirty (i32.add (local.get $dirty) (i32.const 1)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $elems)))
    (memory.fill (i32.const 0) (i32.const 0xa5) (local.get $end))
    (table.fill $t (i32.const 0) (ref.func $f) (table.size $t))
    (local.get $dirty)))`, tag)
}

// TestPoolSlotCarriesNothing: every run finds its memory (40 pages: past
// the bytes kept resident and zeroed in place, into those given back to
// the kernel) and its table (5,000 elements) all zeros, then leaves a
// secret in both. The runs are of one module, which gets its memory slot
// back by affinity, and of 24 new modules: with six memory slots in the
// pool, each new one after the first five takes the least recently used
// slot, another module's. Table slots come back from a free list at once.
func TestPoolSlotCarriesNothing(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{MaxRuns: 1, MaxInstances: 1, Maximums: maximumsWith(func(l *limits.Limits) { l.Memories = 1 })})
	if info := e.PoolInfo(); !info.Enabled || info.Memories != 6 {
		t.Fatalf("pool %+v, want enabled with 6 memory slots", info)
	}
	ctx := context.Background()
	l := limits.Defaults()
	l.Fuel = 1 << 40
	l.Timeout = time.Minute // a hang bound
	args := []sandbox.Value{i32(40), i32(5000)}
	run := func(tag int) {
		t.Helper()
		m, _, err := e.Compile(ctx, sandbox.Source{WAT: secretWAT(tag)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Run(ctx, sandbox.Request{Module: m, Function: "scan", Args: args, Limits: l})
		if err != nil {
			t.Fatalf("module %d: %v", tag, err)
		}
		if res.Values[0].I32() != 0 {
			t.Fatalf("module %d found %d words or elements of an earlier run's secret", tag, res.Values[0].I32())
		}
		if res.PeakMemoryBytes != 40*65536+5000*8 {
			t.Fatalf("module %d: peak %d, want 40 pages and 5,000 elements", tag, res.PeakMemoryBytes)
		}
	}
	for tag := 1; tag <= 24; tag++ {
		run(0)
		run(0)
		run(tag)
	}
}

// memoriesWAT defines n memories of a page and exports f, returning 1.
func memoriesWAT(n int) string {
	return "(module" + strings.Repeat(" (memory 1)", n) + ` (func (export "f") (result i32) i32.const 1))`
}

func maximumsWith(change func(*limits.Limits)) limits.Limits {
	m := limits.DefaultMaximums()
	change(&m)
	return m
}

// TestPoolRunsWait: a run that finds the runs' share of the pool taken
// waits for it, and runs once the run holding it ends; a waiting run
// whose context ends gives up with kind cancelled.
func TestPoolRunsWait(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{MaxRuns: 1, Maximums: maximumsWith(func(l *limits.Limits) { l.Memories = 1 })})
	ctx := context.Background()
	spin, _, err := e.Compile(ctx, fixture(t, "infinite_loop"))
	if err != nil {
		t.Fatal(err)
	}
	add, _, err := e.Compile(ctx, sandbox.Source{WAT: `(module (memory 1) (func (export "f") (result i32) i32.const 7))`})
	if err != nil {
		t.Fatal(err)
	}
	l := limits.Defaults()
	l.Fuel, l.Timeout = 1<<50, 10*time.Minute
	holdCtx, stopHolder := context.WithCancel(ctx)
	held := make(chan error, 1)
	go func() {
		_, err := e.Run(holdCtx, sandbox.Request{Module: spin, Limits: l})
		held <- err
	}()
	waitFor(t, "the spinning run to take the runs' share", func() bool { return e.PoolInfo().RunsInUse > 0 })

	giveUp, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := e.Run(giveUp, sandbox.Request{Module: add, Function: "f", Limits: limits.Defaults()})
		gaveUp <- err
	}()
	waitFor(t, "a run to wait", func() bool { return e.PoolInfo().RunsWaiting == 1 })
	cancel()
	wantKind(t, <-gaveUp, sandbox.KindCancelled)

	ran := make(chan error, 1)
	go func() {
		res, err := e.Run(ctx, sandbox.Request{Module: add, Function: "f", Limits: limits.Defaults()})
		if err == nil && res.Values[0].I32() != 7 {
			err = fmt.Errorf("f returned %v", res.Values)
		}
		ran <- err
	}()
	waitFor(t, "a run to wait", func() bool { return e.PoolInfo().RunsWaiting == 1 })
	select {
	case err := <-ran:
		t.Fatalf("a run went ahead while the share was taken: %v", err)
	default:
	}
	stopHolder()
	wantKind(t, <-held, sandbox.KindCancelled)
	if err := <-ran; err != nil {
		t.Fatalf("the waiting run: %v", err)
	}
	if info := e.PoolInfo(); info.RunsInUse != 0 || info.RunsWaiting != 0 {
		t.Fatalf("after the runs: %+v", info)
	}
}

// waitFor polls cond until it holds; a minute is a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// TestPoolInstancesRefused: instances that would take more of the pool
// than the instances' share has left are refused as too many instances,
// before MaxInstances are live; releasing one makes room.
func TestPoolInstancesRefused(t *testing.T) {
	t.Parallel()
	// Two instances' share: one typical (3 memories) and the largest (18).
	e := newEngine(t, sandbox.Config{MaxInstances: 2, Maximums: limits.DefaultMaximums()})
	ctx := context.Background()
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: memoriesWAT(16)})
	if err != nil {
		t.Fatal(err)
	}
	l := limits.Defaults()
	l.Memories = 16
	first, err := e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: l})
	se := wantKind(t, err, sandbox.KindHost)
	if !errors.Is(err, sandbox.ErrTooManyInstances) || !errors.Is(err, sandbox.ErrInstancePoolShort) || !strings.Contains(se.Message, "pool") {
		t.Fatalf("second instance: %v, want too many instances, naming the pool", err)
	}
	if st := e.InstanceStats(); st.Live != 1 {
		t.Fatalf("%d live instances, want 1", st.Live)
	}
	// Runs have their own share.
	if _, err := e.Run(ctx, sandbox.Request{Module: m, Function: "f", Limits: l}); err != nil {
		t.Fatalf("a run while the instances' share is short: %v", err)
	}
	first.Release()
	second, err := e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: l})
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	second.Release()
}

// TestPoolRefusesWhatItCannotHold: a run asking for more than the engine's
// maximums sized the pool for is refused at once, with the reason.
func TestPoolRefusesWhatItCannotHold(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{MaxRuns: 1, Maximums: limits.DefaultMaximums()})
	ctx := context.Background()
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: memoriesWAT(20)})
	if err != nil {
		t.Fatal(err)
	}
	l := limits.Defaults()
	l.Memories = 20 // within the hard maximums Run checks, past the engine's 16
	_, err = e.Run(ctx, sandbox.Request{Module: m, Function: "f", Limits: l})
	if se := wantKind(t, err, sandbox.KindHost); !strings.Contains(se.Message, "more than the engine's pool holds") {
		t.Fatalf("message %q", se.Message)
	}
	small, _, err := e.Compile(ctx, sandbox.Source{WAT: `(module (func (export "f") (result i32) i32.const 1))`})
	if err != nil {
		t.Fatal(err)
	}
	l = limits.Defaults()
	l.TableElements = 20_000_000
	_, err = e.Run(ctx, sandbox.Request{Module: small, Function: "f", Limits: l})
	if se := wantKind(t, err, sandbox.KindHost); !strings.Contains(se.Message, "limits.tableElements") {
		t.Fatalf("message %q", se.Message)
	}
}

// TestPoolFallsBack: without a pool (a one-shot engine, NoPool, or a pool
// too large to reserve) stores allocate for themselves and runs work as
// before; PoolInfo says why.
func TestPoolFallsBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  sandbox.Config
		why  string
		pool bool
	}{
		{sandbox.Config{}, "", true},
		{sandbox.Config{OneShot: true}, "one-shot", false},
		{sandbox.Config{NoPool: true}, "NoPool", false},
		{sandbox.Config{MaxInstances: 6000}, "address space", false},
	} {
		e := newEngine(t, tc.cfg)
		info := e.PoolInfo()
		if info.Enabled != tc.pool || !strings.Contains(info.Reason, tc.why) {
			t.Errorf("%+v: pool %+v, want enabled %v, a reason naming %q", tc.cfg, info, tc.pool, tc.why)
		}
		m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: secretWAT(0)})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Run(context.Background(), sandbox.Request{Module: m, Function: "scan", Args: []sandbox.Value{i32(2), i32(10)}, Limits: limits.Defaults()})
		if err != nil || res.Values[0].I32() != 0 {
			t.Errorf("%+v: scan %v %v", tc.cfg, res, err)
		}
	}
}

// TestPoolRunWaitingForItsCaller: with MaxRuns 1, a run that waits for its
// caller's answer to a host call does not hold the runs' share: the run
// the caller's handler makes to answer it runs (before, it waited for the
// first run's store until the first run's deadline).
func TestPoolRunWaitingForItsCaller(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{MaxRuns: 1, Maximums: maximumsWith(func(l *limits.Limits) { l.Memories = 1 })})
	ctx := context.Background()
	guest, _, err := e.Compile(ctx, sandbox.Source{WAT: lookupGuest})
	if err != nil {
		t.Fatal(err)
	}
	add, _, err := e.Compile(ctx, sandbox.Source{WAT: `(module (memory 1) (func (export "f") (result i32) i32.const 7))`})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.Request{Module: guest, Function: "run", Limits: hangLimits(), HostFunctions: []sandbox.HostFunction{lookupDecl},
		Args: []sandbox.Value{sandbox.ValueI64(1), sandbox.ValueF64(1)}}
	req.Host = func(ctx context.Context, _ sandbox.HostCall) ([]sandbox.HostValue, error) {
		if info := e.PoolInfo(); info.RunsInUse != 0 {
			return nil, fmt.Errorf("the waiting run holds the runs' share: %+v", info)
		}
		res, err := e.Run(ctx, sandbox.Request{Module: add, Function: "f", Limits: limits.Defaults()})
		if err != nil {
			return nil, err
		}
		return []sandbox.HostValue{{Value: res.Values[0]}, {Value: sandbox.ValueF32(0)}}, nil
	}
	res, err := e.Run(ctx, req)
	if err != nil || res.Values[0] != sandbox.ValueI32(7) {
		t.Fatalf("%+v %v", res, err)
	}
	if info := e.PoolInfo(); info.RunsInUse != 0 || info.InstancesInUse != 0 {
		t.Fatalf("after the runs: %+v", info)
	}
}
