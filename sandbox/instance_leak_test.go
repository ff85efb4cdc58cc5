package sandbox_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestInstancesDoNotLeak creates and ends hundreds of instances every way
// an instance can end (released, closed by a timeout, by fuel, by a
// memory denial, kept through a plugin error, evicted) and checks that
// goroutines and resident memory come back and no instance stays live.
func TestInstancesDoNotLeak(t *testing.T) {
	e, err := sandbox.NewEngine(sandbox.Config{InstanceIdle: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	plain, _, err := e.Compile(ctx, sandbox.Source{WAT: statefulWAT})
	if err != nil {
		t.Fatal(err)
	}
	plugin, _, err := e.Compile(ctx, sandbox.Source{Path: watPlugin})
	if err != nil {
		t.Fatal(err)
	}
	round := func(i int) {
		l := limits.Defaults()
		l.MemoryBytes = 4 << 20
		m, caps := plain, sandbox.Capabilities{}
		if i%2 == 1 {
			m, caps = plugin, sandbox.Capabilities{Log: true}
		}
		in, err := e.Instantiate(ctx, sandbox.InstanceRequest{Module: m, Limits: l, Capabilities: caps})
		if err != nil {
			t.Fatal(err)
		}
		calls := map[int]sandbox.CallRequest{
			0: {Function: "bump", Args: []sandbox.Value{sandbox.ValueI32(1)}},
			1: {Function: "greet", Input: []byte("leak")},
			2: {Function: "spin", Limits: sandbox.CallLimits{Timeout: time.Millisecond, Fuel: 1 << 40}},
			3: {Function: "fail"},
			4: {Function: "spin", Limits: sandbox.CallLimits{Fuel: 5000}},
			5: {Function: "hog"},
		}
		for k := 0; k < 3; k++ {
			in.Call(ctx, calls[i%6])
		}
		if i%5 != 0 { // the rest are left to the idle eviction
			in.Release()
		}
	}
	for i := 0; i < 60; i++ {
		round(i)
	}
	settle()
	goroutines := runtime.NumGoroutine()
	rss, rssOK := vmRSS()
	for i := 0; i < 600; i++ {
		round(i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.InstanceStats().Live > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.InstanceStats(); st.Live != 0 || st.Evicted == 0 {
		t.Fatalf("stats %+v: want no live instance and some evicted", st)
	}
	if g := goroutinesBackTo(goroutines + 5); g > goroutines+5 {
		t.Errorf("goroutines %d after, %d before", g, goroutines)
	}
	if after, ok := vmRSS(); ok && rssOK && after > rss+64<<20 {
		t.Errorf("RSS grew from %d to %d MiB over 600 instances", rss>>20, after>>20)
	}
}
