package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

const (
	deadlineTimeout = 50 * time.Millisecond
	deadlineFuel    = 1_000_000_000_000_000 // far beyond 50 ms of spinning: the deadline must fire
)

// timeoutOvershoots runs n infinite loops, `conc` at a time, on a sidecar
// with --max-concurrency conc, and returns each run's client-observed time
// minus the deadline. Timeout errors carry no elapsed time, so the client's
// clock is used; with conc in flight and conc workers nothing queues, and
// the IPC round trip (row 2, ~0.1 ms) is part of the overshoot.
func timeoutOvershoots(env *Env, n, conc int) (Sample, error) {
	c, stderr, err := startSidecar(env, "--max-concurrency", fmt.Sprint(conc))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	id, err := compileWAT(c, env.wat("infinite_loop.wat"))
	if err != nil {
		return nil, fmt.Errorf("%v; stderr: %s", err, stderr)
	}
	p := rpc.RunParams{Module: rpc.ModuleSpec{ID: sandboxd.Str(id)},
		Limits: map[string]uint64{"timeoutMs": uint64(deadlineTimeout / time.Millisecond), "fuel": deadlineFuel}}
	var mu sync.Mutex
	s := make(Sample, 0, n)
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				d, err := oneTimeout(c, p)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				s = append(s, d-deadlineTimeout)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return s, <-errs
}

func oneTimeout(c *sandboxd.Client, p rpc.RunParams) (time.Duration, error) {
	t := time.Now()
	_, err := c.Run(context.Background(), p, nil)
	d := time.Since(t)
	var se *sandboxd.Error
	if !errors.As(err, &se) || se.Kind() != "timeout" {
		return 0, fmt.Errorf("expected a timeout, got %v", err)
	}
	return d, nil
}

// deadlineSection is row 7. The floor is the engine's design bound: one
// epoch tick (1 ms, --tick) plus the pipe round trip. The 1-concurrent run
// shows what the 8-on-2-cores contention adds.
func deadlineSection(env *Env) []Row {
	const tick = time.Millisecond
	var rows []Row
	for _, conc := range []int{8, 1} {
		n := env.n(200, 24)
		if conc == 1 {
			n = env.n(40, 8)
		}
		s, err := timeoutOvershoots(env, n, conc)
		name := fmt.Sprintf("%d × 50 ms timeouts, %d concurrent: overshoot", n, conc)
		if err != nil {
			rows = append(rows, naRow("7 deadline", name, err.Error()))
			continue
		}
		row := Row{Section: "7 deadline", Measurement: name + " p99", Value: fmtDur(s.P99()) + " (p50 " + fmtDur(s.P50()) + ")",
			Floor: "tick " + fmtDur(tick), Ratio: ratio(float64(s.P99()), float64(tick)), Verdict: verdictInfo,
			Raw: map[string]float64{"p50_us": us(s.P50()), "p99_us": us(s.P99()), "concurrency": float64(conc)}}
		if conc == 8 {
			row.Target, row.Verdict = "p99 ≤ 2 ms", judge(s.P99() <= 2*time.Millisecond)
		}
		rows = append(rows, row)
	}
	return rows
}
