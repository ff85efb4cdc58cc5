package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// statefulWAT keeps state in a global and in memory: bump adds to both and
// returns the global; peek reads memory; swap stores x and returns what was
// there before (the order of calls shows in the results); spin never ends;
// grow adds a page per call.
const statefulWAT = `(module
  (memory (export "memory") 1)
  (global $g (mut i32) (i32.const 0))
  (func (export "bump") (param i32) (result i32)
    (global.set $g (i32.add (global.get $g) (local.get 0)))
    (i32.store (i32.const 100) (i32.add (i32.load (i32.const 100)) (i32.const 1)))
    (global.get $g))
  (func (export "peek") (result i32) (i32.load (i32.const 100)))
  (func (export "swap") (param i32) (result i32)
    (i32.load (i32.const 200))
    (i32.store (i32.const 200) (local.get 0)))
  (func (export "spin") (loop $l (br $l)))
  (func (export "grow") (result i32) (memory.grow (i32.const 1)))
  (func (export "growtrap")
    (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))))`

func instantiate(t testing.TB, e *sandbox.Engine, wat string, mutate func(*sandbox.InstanceRequest)) *sandbox.Instance {
	t.Helper()
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()}
	if mutate != nil {
		mutate(&req)
	}
	in, err := e.Instantiate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Release)
	return in
}

func callI32(t testing.TB, in *sandbox.Instance, fn string, args ...sandbox.Value) int32 {
	t.Helper()
	res, err := in.Call(context.Background(), sandbox.CallRequest{Function: fn, Args: args})
	if err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
	if len(res.Values) != 1 {
		t.Fatalf("%s: values %v", fn, res.Values)
	}
	return res.Values[0].I32()
}

func wantClosed(t testing.TB, err error, reason string) {
	t.Helper()
	var ce *sandbox.InstanceClosedError
	if !errors.As(err, &ce) || !errors.Is(err, sandbox.ErrInstanceClosed) {
		t.Fatalf("err = %v (%T), want an InstanceClosedError", err, err)
	}
	if !strings.Contains(ce.Reason, reason) || !strings.Contains(err.Error(), ce.Instance) || ce.Instance == "" {
		t.Fatalf("closed error %q does not name the instance and %q", err, reason)
	}
}

func TestInstanceKeepsStateBetweenCalls(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, nil)
	if got := callI32(t, in, "bump", sandbox.ValueI32(5)); got != 5 {
		t.Fatalf("first bump = %d, want 5", got)
	}
	if got := callI32(t, in, "bump", sandbox.ValueI32(7)); got != 12 {
		t.Fatalf("second bump = %d, want 12 (the global kept the first call's write)", got)
	}
	if got := callI32(t, in, "peek"); got != 2 {
		t.Fatalf("peek = %d, want 2 (memory kept both calls' writes)", got)
	}
	// A fresh instance starts over.
	other := instantiate(t, engine(t), statefulWAT, nil)
	if got := callI32(t, other, "bump", sandbox.ValueI32(1)); got != 1 {
		t.Fatalf("a new instance's bump = %d, want 1", got)
	}
}

func TestInstanceCallHasItsOwnFuel(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, nil)
	var first uint64
	for i := 0; i < 3; i++ {
		res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "bump", Args: []sandbox.Value{sandbox.ValueI32(1)},
			Limits: sandbox.CallLimits{Fuel: 1000}})
		if err != nil {
			t.Fatalf("call %d with 1000 fuel: %v", i, err)
		}
		if i == 0 {
			first = res.FuelConsumed
		} else if res.FuelConsumed != first {
			t.Fatalf("call %d consumed %d fuel, the first %d: fuel is per call", i, res.FuelConsumed, first)
		}
	}
}

func TestInstanceTimeoutClosesIt(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, nil)
	callI32(t, in, "bump", sandbox.ValueI32(1))
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "spin", Limits: sandbox.CallLimits{Timeout: 20 * time.Millisecond}})
	wantKind(t, err, sandbox.KindTimeout)
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, `closed after timeout in a call of "spin"`)
	if _, lerr := engine(t).LookupInstance(in.ID()); lerr == nil {
		t.Fatal("a closed instance is still registered")
	}
}

func TestInstanceFuelExhaustionClosesIt(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, nil)
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "spin", Limits: sandbox.CallLimits{Fuel: 10_000}})
	wantKind(t, err, sandbox.KindFuelExhausted)
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, "closed after fuel_exhausted")
}

func TestInstanceMemoryCapHoldsForItsLife(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, func(r *sandbox.InstanceRequest) { r.Limits.MemoryBytes = 3 * limits.WasmPageSize })
	// Each call grows by one page; the cap of three pages counts what
	// earlier calls grew.
	if got := callI32(t, in, "grow"); got != 1 {
		t.Fatalf("first grow = %d, want 1", got)
	}
	if got := callI32(t, in, "grow"); got != 2 {
		t.Fatalf("second grow = %d, want 2", got)
	}
	if got := callI32(t, in, "grow"); got != -1 {
		t.Fatalf("third grow = %d, want -1 (refused: the cap holds across calls)", got)
	}
	// A refusal the guest copes with is not a failure and keeps the
	// instance; the next call starts with no denial on record.
	if got := callI32(t, in, "peek"); got != 0 {
		t.Fatalf("peek = %d", got)
	}
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "growtrap"})
	se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	if se.Usage == nil || se.Usage.PeakMemoryBytes != 3*limits.WasmPageSize {
		t.Fatalf("usage %+v, want a peak of 3 pages", se.Usage)
	}
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, "closed after memory_limit_exceeded")
}

// spinWAT logs "spinning" and then loops forever: the log line tells a
// test the call is inside the guest, where sleeping would only guess.
const spinWAT = `(module
  (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "spinning")
  (func (export "spin") (call $log (i32.const 0) (i32.const 8)) (loop $l (br $l)))
  (func (export "peek") (result i32) (i32.const 0)))`

// spinning makes call (a call of a spinWAT instance) with a spin request on
// a goroutine and returns once the guest is spinning, with the channel the
// call's error arrives on.
func spinning(t *testing.T, call func(sandbox.CallRequest) error) <-chan error {
	t.Helper()
	inGuest := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- call(sandbox.CallRequest{
			Function: "spin",
			Limits:   sandbox.CallLimits{Timeout: time.Minute},
			Log:      func(sandbox.LogLevel, string) { once.Do(func() { close(inGuest) }) },
		})
	}()
	select {
	case <-inGuest:
	case err := <-done:
		t.Fatalf("spin ended before it began spinning: %v", err)
	}
	return done
}

func TestInstanceCancelClosesIt(t *testing.T) {
	in := instantiate(t, engine(t), spinWAT, func(r *sandbox.InstanceRequest) { r.Capabilities.Log = true })
	ctx, cancel := context.WithCancel(context.Background())
	done := spinning(t, func(req sandbox.CallRequest) error {
		_, err := in.Call(ctx, req)
		return err
	})
	cancel()
	select {
	case err := <-done:
		wantKind(t, err, sandbox.KindCancelled)
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled call did not stop")
	}
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, "closed after cancelled")
}

func TestInstanceReactorInitializeOnce(t *testing.T) {
	const reactor = `(module
	  (global $inits (mut i32) (i32.const 0))
	  (func (export "_initialize") (global.set $inits (i32.add (global.get $inits) (i32.const 1))))
	  (func (export "inits") (result i32) (global.get $inits)))`
	in := instantiate(t, engine(t), reactor, nil)
	for i := 0; i < 2; i++ {
		if got := callI32(t, in, "inits"); got != 1 {
			t.Fatalf("_initialize ran %d times, want once", got)
		}
	}
}

func TestInstanceInitializeIsFenced(t *testing.T) {
	const reactor = `(module (func (export "_initialize") (loop $l (br $l))) (func (export "f")))`
	m, _, err := engine(t).Compile(context.Background(), sandbox.Source{WAT: reactor})
	if err != nil {
		t.Fatal(err)
	}
	l := limits.Defaults()
	l.Timeout = 20 * time.Millisecond
	before := engine(t).InstanceStats().Live
	_, err = engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: l})
	wantKind(t, err, sandbox.KindTimeout)
	if after := engine(t).InstanceStats().Live; after > before {
		t.Fatalf("a failed instantiation left an instance behind (%d live, %d before)", after, before)
	}
}

func TestInstanceCallsRunInArrivalOrder(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, nil)
	const n = 40
	turns := make([]*sandbox.Turn, n)
	for i := range turns {
		turns[i] = in.Enqueue()
	}
	// Run the turns from goroutines started in reverse: each call must
	// still see the value the call before it (by arrival) stored.
	results := make([]int32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := n - 1; i >= 0; i-- {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := turns[i].Call(context.Background(), sandbox.CallRequest{Function: "swap", Args: []sandbox.Value{sandbox.ValueI32(int32(i + 1))}})
			if err != nil {
				errs[i] = err
				return
			}
			results[i] = res.Values[0].I32()
		}()
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if results[i] != int32(i) {
			t.Fatalf("call %d saw %d, want %d: calls ran out of arrival order", i, results[i], i)
		}
	}
}

func TestInstanceAbandonedTurnPassesOn(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, nil)
	first := in.Enqueue()
	second := in.Enqueue()
	third := in.Enqueue()
	second.Abandon()
	first.Abandon() // granted at once; abandoning hands it to the third
	if _, err := third.Call(context.Background(), sandbox.CallRequest{Function: "peek"}); err != nil {
		t.Fatal(err)
	}
	if got := callI32(t, in, "peek"); got != 0 {
		t.Fatalf("peek = %d", got)
	}
}

func TestInstanceReleaseFailsQueuedCalls(t *testing.T) {
	in := instantiate(t, engine(t), statefulWAT, nil)
	running := in.Enqueue()
	queued := in.Enqueue()
	done := make(chan error, 1)
	go func() {
		_, err := queued.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
		done <- err
	}()
	in.Release()
	wantClosed(t, <-done, "released")
	_, err := running.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, "released")
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, "released")
	in.Release() // idempotent
}

func TestInstanceReleaseCancelsTheRunningCall(t *testing.T) {
	in := instantiate(t, engine(t), spinWAT, func(r *sandbox.InstanceRequest) { r.Capabilities.Log = true })
	done := spinning(t, func(req sandbox.CallRequest) error {
		_, err := in.Call(context.Background(), req)
		return err
	})
	in.Release()
	select {
	case err := <-done:
		wantKind(t, err, sandbox.KindCancelled)
	case <-time.After(30 * time.Second):
		t.Fatal("release did not stop the running call")
	}
}

func TestInstanceIdleEviction(t *testing.T) {
	e := newEngine(t, sandbox.Config{InstanceIdle: 20 * time.Millisecond})
	in := instantiate(t, e, statefulWAT, nil)
	callI32(t, in, "bump", sandbox.ValueI32(1))
	deadline := time.Now().Add(30 * time.Second)
	for e.InstanceStats().Evicted == 0 {
		if time.Now().After(deadline) {
			t.Fatal("an idle instance was never evicted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, "evicted after")
	if st := e.InstanceStats(); st.Live != 0 || st.Created != 1 || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// An idle timer whose goroutine runs only after a call began and ended
// (it fired as the call began) must not evict the instance just used.
func TestInstanceLateIdleTimerKeepsAUsedInstance(t *testing.T) {
	e := newEngine(t, sandbox.Config{InstanceIdle: time.Minute})
	in := instantiate(t, e, statefulWAT, nil)
	callI32(t, in, "bump", sandbox.ValueI32(1))
	sandbox.EvictNow(in)
	if _, err := in.Call(context.Background(), sandbox.CallRequest{Function: "peek"}); err != nil {
		t.Fatalf("a late idle timer evicted an instance called just now: %v", err)
	}
	if st := e.InstanceStats(); st.Evicted != 0 || st.Live != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Calls neither stop nor re-arm the idle timer: it fires once per idle
// period and re-arms itself for the rest of the period after the last
// call. An instance called again and again for several periods stays
// open; once the calls stop, it is evicted.
func TestInstanceIdleTimerFollowsTheLastCall(t *testing.T) {
	const idle = time.Second // no two calls below are near that far apart, even on a loaded machine
	e := newEngine(t, sandbox.Config{InstanceIdle: idle})
	in := instantiate(t, e, statefulWAT, nil)
	for start := time.Now(); time.Since(start) < 5*idle/2; { // back to back, over two periods
		callI32(t, in, "bump", sandbox.ValueI32(1))
	}
	if st := e.InstanceStats(); st.Evicted != 0 || st.Live != 1 {
		t.Fatalf("an instance called all along was evicted: stats %+v", st)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.InstanceStats().Evicted == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the instance was never evicted after its calls stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, "evicted after")
}

func TestInstanceMaximum(t *testing.T) {
	e := newEngine(t, sandbox.Config{MaxInstances: 2})
	a := instantiate(t, e, statefulWAT, nil)
	instantiate(t, e, statefulWAT, nil)
	m, _, _ := e.Compile(context.Background(), sandbox.Source{WAT: statefulWAT})
	_, err := e.Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()})
	if !errors.Is(err, sandbox.ErrTooManyInstances) || !strings.Contains(err.Error(), "maximum is 2") {
		t.Fatalf("third instance: %v, want ErrTooManyInstances naming the maximum", err)
	}
	a.Release()
	if _, err := e.Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()}); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}

func TestInstancesAreIsolated(t *testing.T) {
	e := engine(t)
	const n = 12
	ins := make([]*sandbox.Instance, n)
	for i := range ins {
		ins[i] = instantiate(t, e, statefulWAT, nil)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k <= 20; k++ {
				res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "bump", Args: []sandbox.Value{sandbox.ValueI32(int32(i))}})
				if err != nil {
					errs <- err
					return
				}
				if got := res.Values[0].I32(); got != int32(i*k) {
					errs <- fmt.Errorf("instance %d call %d: %d, want %d", i, k, got, i*k)
					return
				}
				if i == 0 && k == 10 { // one instance times out mid-way
					_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "spin", Limits: sandbox.CallLimits{Timeout: 5 * time.Millisecond}})
					if sandbox.KindOf(err) != sandbox.KindTimeout {
						errs <- fmt.Errorf("spin: %v", err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, in := range ins[1:] {
		if got := callI32(t, in, "peek"); got != 20 {
			t.Errorf("instance %d: peek %d, want 20: another instance's timeout touched it", i+1, got)
		}
	}
}

func TestInstanceRefusesWhatRunRefuses(t *testing.T) {
	m, _, err := engine(t).Compile(context.Background(), sandbox.Source{WAT: `(module (import "host" "log" (func (param i32 i32))) (memory (export "memory") 1))`})
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()})
	wantKind(t, err, sandbox.KindDisallowedImport)
	in := instantiate(t, engine(t), statefulWAT, nil)
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "nope"})
	wantKind(t, err, sandbox.KindExport)
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "peek", Input: []byte("x")})
	wantKind(t, err, sandbox.KindExport)
	if got := callI32(t, in, "peek"); got != 0 { // refusals before the call keep the instance
		t.Fatalf("peek = %d", got)
	}
}

// exitingReactor exits with status CODE from _initialize after it has set
// its state half way (the global is 1, not yet 2), or from its start
// function with START.
const exitingReactor = `(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (global $state (mut i32) (i32.const 0))
  (func $start (if (i32.ge_s (i32.const START) (i32.const 0)) (then (call $exit (i32.const START)))))
  (start $start)
  (func (export "_initialize")
    (global.set $state (i32.const 1))
    (call $exit (i32.const CODE))
    (global.set $state (i32.const 2)))
  (func (export "state") (result i32) (global.get $state)))`

// TestInstantiationThatExitsMakesNoInstance: a guest that calls proc_exit
// while being instantiated (in _initialize or its start function), with
// any status, fails instantiate with trap "exit" and the status, and
// leaves no instance behind. Before, the exit was a success: a live
// instance whose calls saw half-initialised state.
func TestInstantiationThatExitsMakesNoInstance(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	for _, c := range []struct{ code, start, where string }{
		{"7", "-1", `"_initialize"`},
		{"0", "-1", `"_initialize"`},
		{"0", "3", "the start function"},
	} {
		wat := strings.NewReplacer("CODE", c.code, "START", c.start).Replace(exitingReactor)
		m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
		if err != nil {
			t.Fatal(err)
		}
		req := sandbox.InstanceRequest{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{}}}
		in, err := e.Instantiate(context.Background(), req)
		if err == nil {
			in.Release()
			t.Fatalf("exit %s in %s: instantiate succeeded", c.code, c.where)
		}
		se := wantKind(t, err, sandbox.KindTrap)
		want := c.code
		if c.start != "-1" {
			want = c.start
		}
		if se.TrapCode != sandbox.TrapCodeExit || fmt.Sprint(se.ExitCode) != want || !strings.Contains(se.Message, c.where) {
			t.Errorf("exit in %s: %+v, want trap exit with status %s naming %s", c.where, se, want, c.where)
		}
		if d := se.Outcome().Data; d.ExitCode == nil || fmt.Sprint(*d.ExitCode) != want {
			t.Errorf("exit in %s: data.exitCode = %v, want %s", c.where, d.ExitCode, want)
		}
		if st := e.InstanceStats(); st.Live != 0 {
			t.Errorf("exit in %s: %d instances live", c.where, st.Live)
		}
	}
}
