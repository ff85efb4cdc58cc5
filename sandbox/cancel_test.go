package sandbox_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// compileFixture compiles testdata/wat/NAME.wat on the shared engine.
func compileFixture(t testing.TB, name string) *sandbox.Module {
	t.Helper()
	m, _, err := engine(t).Compile(context.Background(), fixture(t, name))
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return m
}

// spinLimits are limits under which infinite_loop can only be stopped by
// the clock (or a cancellation): fuel is the maximum.
func spinLimits(timeout time.Duration) limits.Limits {
	l := limits.Defaults()
	l.Fuel = 1 << 50
	l.Timeout = timeout
	return l
}

// hangLimits are the default limits with the deadline raised to
// hangBound, for runs whose deadline is not what the test is about: on a
// loaded machine the 1 s default would be a hidden speed check.
func hangLimits() limits.Limits {
	l := limits.Defaults()
	l.Timeout = hangBound
	return l
}

// wantKind fails unless err is a *sandbox.Error of kind k, matched both by
// errors.As and by errors.Is against the Kind sentinel.
func wantKind(t testing.TB, err error, k sandbox.Kind) *sandbox.Error {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want a *sandbox.Error of kind %s", err, err, k)
	}
	if se.Kind != k || !errors.Is(err, k) || sandbox.KindOf(err) != k {
		t.Fatalf("kind = %s (%v), want %s", se.Kind, se, k)
	}
	return se
}

func TestCancelRunningLoop(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, fixture string
	}{
		{"export", "infinite_loop"},
		{"start function", "start_spin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := engine(t)
			m := compileFixture(t, tc.fixture)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cancelledAt time.Time
			timer := time.AfterFunc(50*time.Millisecond, func() {
				cancelledAt = time.Now()
				cancel()
			})
			defer timer.Stop()
			start := time.Now()
			res, err := e.Run(ctx, sandbox.Request{Module: m, Function: "run", Limits: spinLimits(10 * time.Second)})
			end := time.Now()
			if err == nil {
				t.Fatalf("run returned %v, want cancelled", res.Values)
			}
			se := wantKind(t, err, sandbox.KindCancelled)
			if cancelledAt.IsZero() {
				t.Fatalf("run ended after %v, before it was cancelled: %v", end.Sub(start), se)
			}
			latency := end.Sub(cancelledAt)
			t.Logf("cancel latency %v (run took %v)", latency, end.Sub(start))
			if latency > time.Second {
				t.Errorf("run returned %v after cancellation, want < 1s", latency)
			}
			if se.Usage == nil {
				t.Errorf("a cancelled run that had a store should report usage")
			}
			if strings.Contains(se.Message, "sandboxd:") || strings.Contains(se.Message, "backtrace") {
				t.Errorf("message leaks the fence's internals: %q", se.Message)
			}
		})
	}
}

func TestCancelBeforeRun(t *testing.T) {
	t.Parallel()
	e := engine(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name, fixture, function string
		caps                    sandbox.Capabilities
		args                    []sandbox.Value
	}{
		{"loop", "infinite_loop", "run", sandbox.Capabilities{}, nil},
		{"add", "well_behaved", "add", sandbox.Capabilities{}, []sandbox.Value{i32(1), i32(2)}},
		// Not granted and wrong export: cancellation is reported first,
		// since nothing at all was attempted.
		{"logger without grant", "logger", "run", sandbox.Capabilities{}, nil},
		{"missing export", "well_behaved", "nope", sandbox.Capabilities{}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := compileFixture(t, tc.fixture)
			start := time.Now()
			_, err := e.Run(ctx, sandbox.Request{Module: m, Function: tc.function, Args: tc.args, Limits: spinLimits(10 * time.Second), Capabilities: tc.caps})
			se := wantKind(t, err, sandbox.KindCancelled)
			if se.Usage != nil {
				t.Errorf("usage = %+v, want nil: the guest must not have run", *se.Usage)
			}
			if d := time.Since(start); d > hangBound {
				t.Errorf("pre-cancelled run took %v", d)
			}
		})
	}
	// Compile honours a cancelled context too.
	_, _, err := e.Compile(ctx, sandbox.Source{WAT: `(module (func (export "pre_cancelled_compile")))`})
	wantKind(t, err, sandbox.KindCancelled)
}

// TestCancelOneOfMany cancels one of four concurrent spinning runs: only
// that one is cancelled, the others run into their own deadline.
func TestCancelOneOfMany(t *testing.T) {
	t.Parallel()
	e := engine(t)
	m := compileFixture(t, "infinite_loop")
	const n, victim = 4, 2
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if i == victim {
			time.AfterFunc(50*time.Millisecond, cancel)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			// The victim's deadline is a hang bound: only the cancel
			// ends it, however late its timer fires on a loaded machine.
			timeout := 300 * time.Millisecond
			if i == victim {
				timeout = hangBound
			}
			_, errs[i] = e.Run(ctx, sandbox.Request{Module: m, Function: "run", Limits: spinLimits(timeout)})
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		t.Logf("run %d: %v after %v", i, err, took[i])
		want := sandbox.KindTimeout
		if i == victim {
			want = sandbox.KindCancelled
		}
		if k := sandbox.KindOf(err); k != want {
			t.Errorf("run %d: kind %s (%v), want %s", i, k, err, want)
		}
		if want == sandbox.KindTimeout {
			var se *sandbox.Error
			if errors.As(err, &se) && se.TimeoutMs != 300 {
				t.Errorf("run %d: timeoutMs = %d, want 300", i, se.TimeoutMs)
			}
			if took[i] < 300*time.Millisecond {
				t.Errorf("run %d timed out after %v, before its 300ms deadline", i, took[i])
			}
		}
	}
}

// TestTimeoutOvershoot measures how far past its deadline a spinning guest
// is stopped. Only generous bounds are asserted; the figures are logged.
func TestTimeoutOvershoot(t *testing.T) {
	t.Parallel()
	e := engine(t)
	m := compileFixture(t, "infinite_loop")
	const timeout = 50 * time.Millisecond
	runs := 20
	if testing.Short() {
		runs = 5
	}
	var over []time.Duration
	for range runs {
		start := time.Now()
		_, err := e.Run(context.Background(), sandbox.Request{Module: m, Function: "run", Limits: spinLimits(timeout)})
		took := time.Since(start)
		se := wantKind(t, err, sandbox.KindTimeout)
		if se.TimeoutMs != 50 {
			t.Errorf("timeoutMs = %d", se.TimeoutMs)
		}
		if took >= hangBound {
			t.Errorf("a 50ms deadline took %v to fire", took)
		}
		if took < timeout {
			t.Errorf("deadline fired early, after %v", took)
		}
		over = append(over, took-timeout)
	}
	slices.Sort(over)
	t.Logf("overshoot over %d runs: min %v p50 %v max %v", runs, over[0], over[len(over)/2], over[len(over)-1])
}

// TestCancelRacingCompletion cancels contexts at the moment their runs
// complete. Cancelling must never touch a run's fence after the run freed
// it. The hammering runs in a child process, because the failure mode is a
// crash (SIGSEGV in sbx_fence_cancel) that would take the whole test binary
// down with it.
func TestCancelRacingCompletion(t *testing.T) {
	if os.Getenv("SANDBOXD_CANCEL_RACE_CHILD") == "1" {
		hammerCancelRace(t)
		return
	}
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns a child test process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCancelRacingCompletion$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SANDBOXD_CANCEL_RACE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := string(out)
		if i := strings.Index(msg, "goroutine "); i > 0 {
			// Keep the crash header and the crashing goroutine only.
			end := i + 1200
			if end > len(msg) {
				end = len(msg)
			}
			msg = msg[:end]
		}
		t.Fatalf("child process failed (%v): cancelling a context while its run completes "+
			"crashed or failed:\n%s", err, msg)
	}
}

func hammerCancelRace(t *testing.T) {
	e := engine(t)
	m := compileFixture(t, "well_behaved")
	for i := range 20000 {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		res, err := e.Run(ctx, sandbox.Request{Module: m, Function: "add", Args: []sandbox.Value{i32(1), i32(2)}, Limits: hangLimits()})
		switch {
		case err == nil:
			if len(res.Values) != 1 || res.Values[0] != i32(3) {
				t.Fatalf("iteration %d: add = %v", i, res.Values)
			}
		case sandbox.KindOf(err) != sandbox.KindCancelled:
			t.Fatalf("iteration %d: %v", i, err)
		}
		cancel()
	}
}
