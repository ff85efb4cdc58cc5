package sandbox_test

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// vmRSS reads the resident set size from /proc/self/status, in bytes.
func vmRSS() (uint64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest) // "12345 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		return kb << 10, err == nil
	}
	return 0, false
}

// settle collects garbage (twice, so finalizers of wasmtime objects run and
// free their C memory) and gives exiting goroutines a moment.
func settle() {
	for range 2 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

// goroutinesBackTo waits, collecting garbage, until at most limit
// goroutines are left, and returns the count it saw last. Goroutines that
// are ending (a run's watchers, a timer's callback) take a while to go on a
// loaded machine; a leaked one never goes, so the one-minute bound only
// detects that, it is not a speed check.
func goroutinesBackTo(limit int) int {
	deadline := time.Now().Add(time.Minute)
	for {
		settle()
		g := runtime.NumGoroutine()
		if g <= limit || time.Now().After(deadline) {
			return g
		}
	}
}

// TestNoLeaks runs thousands of runs ending every way a run can end and
// checks goroutines and resident memory come back. It uses its own engine
// so other parallel tests' goroutines do not blur the count.
func TestNoLeaks(t *testing.T) {
	e, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	compile := func(src sandbox.Source) *sandbox.Module {
		m, _, err := e.Compile(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	wb := compile(fixture(t, "well_behaved"))
	loop := compile(fixture(t, "infinite_loop"))
	bomb := compile(fixture(t, "memory_bomb"))
	traps := compile(fixture(t, "traps"))
	logger := compile(fixture(t, "logger"))
	roller := compile(fixture(t, "random_roller"))
	imp := compile(fixture(t, "disallowed_import"))
	grow := compile(fixture(t, "grow_within_cap"))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	type mix struct {
		kind sandbox.Kind // "" = ok
		ctx  context.Context
		req  sandbox.Request
	}
	fuel := hangLimits()
	fuel.Fuel = 20_000
	spin := spinLimits(2 * time.Millisecond)
	mem := hangLimits()
	mem.MemoryBytes = fourMiB
	jobs := []mix{
		{"", ctx, sandbox.Request{Module: wb, Function: "add", Args: []sandbox.Value{i32(1), i32(2)}, Limits: hangLimits()}},
		{"", ctx, sandbox.Request{Module: wb, Function: "fib", Args: []sandbox.Value{i32(30)}, Limits: hangLimits()}},
		{"", ctx, sandbox.Request{Module: logger, Function: "run", Limits: hangLimits(), Capabilities: sandbox.Capabilities{Log: true}, Log: func(string) {}}},
		{"", ctx, sandbox.Request{Module: roller, Function: "roll", Limits: hangLimits(), Capabilities: sandbox.Capabilities{Random: true, Seed: 42}}},
		{"", ctx, sandbox.Request{Module: grow, Function: "run", Limits: hangLimits()}},
		{sandbox.KindFuelExhausted, ctx, sandbox.Request{Module: loop, Function: "run", Limits: fuel}},
		{sandbox.KindMemoryLimitExceeded, ctx, sandbox.Request{Module: bomb, Function: "run", Limits: mem}},
		{sandbox.KindTrap, ctx, sandbox.Request{Module: traps, Function: "div_by_zero", Limits: hangLimits()}},
		{sandbox.KindTrap, ctx, sandbox.Request{Module: traps, Function: "oob", Limits: hangLimits()}},
		{sandbox.KindTrap, ctx, sandbox.Request{Module: traps, Function: "stack_overflow", Limits: hangLimits()}},
		{sandbox.KindDisallowedImport, ctx, sandbox.Request{Module: imp, Function: "run", Limits: hangLimits()}},
		{sandbox.KindExport, ctx, sandbox.Request{Module: wb, Function: "nope", Limits: hangLimits()}},
		{sandbox.KindCancelled, cancelled, sandbox.Request{Module: loop, Function: "run", Limits: spin}},
	}
	// Rare, because each one spins a core for its deadline.
	timeoutJob := mix{sandbox.KindTimeout, ctx, sandbox.Request{Module: loop, Function: "run", Limits: spin}}
	// Cancelled mid-run: the cancellation lands while the guest spins, so
	// the run cannot have finished first.
	midCancel := func() error {
		c, cancel := context.WithCancel(ctx)
		defer cancel()
		time.AfterFunc(time.Millisecond, cancel)
		_, err := e.Run(c, sandbox.Request{Module: loop, Function: "run", Limits: spinLimits(10 * time.Second)})
		return err
	}

	runOnce := func(i int) {
		var err error
		want := sandbox.Kind("")
		switch {
		case i%100 == 99:
			want, err = sandbox.KindCancelled, midCancel()
		case i%100 == 49:
			_, err = e.Run(timeoutJob.ctx, timeoutJob.req)
			want = timeoutJob.kind
		default:
			j := jobs[i%len(jobs)]
			_, err = e.Run(j.ctx, j.req)
			want = j.kind
		}
		if err == nil && want != "" || err != nil && sandbox.KindOf(err) != want {
			t.Fatalf("run %d: err %v, want kind %q", i, err, want)
		}
	}

	n := 3000
	if testing.Short() {
		n = 300
	}
	// Warm up: first runs allocate pools, caches and the ticker's timer.
	for i := range 200 {
		runOnce(i)
	}
	settle()
	g0 := runtime.NumGoroutine()
	rss0, haveRSS := vmRSS()

	start := time.Now()
	for i := range n {
		runOnce(i)
	}
	elapsed := time.Since(start)

	// Goroutines: allow a little slack for the runtime and for parallel
	// tests, and wait for stragglers to exit.
	g1 := goroutinesBackTo(g0 + 5)
	t.Logf("%d runs in %v; goroutines before %d after %d", n, elapsed, g0, g1)
	if g1 > g0+5 {
		buf := make([]byte, 1<<16)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines grew from %d to %d over %d runs:\n%s", g0, g1, n, buf)
	}

	if !haveRSS {
		t.Log("no /proc/self/status: skipping the RSS check")
		return
	}
	settle()
	rss1, _ := vmRSS()
	growth := int64(rss1) - int64(rss0)
	t.Logf("VmRSS before %d KiB after %d KiB (%+d KiB)", rss0>>10, rss1>>10, growth>>10)
	if growth > 64<<20 {
		t.Errorf("RSS grew by %d MiB over %d runs", growth>>20, n)
	}
}
