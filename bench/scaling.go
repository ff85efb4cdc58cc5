package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
)

// fibN is the fib argument of the CPU-bound guest; reps is calibrated.
const fibN = 50

// calibrateFibLoop finds reps so fib_loop(fibN, reps) runs ~target in the
// engine, so the scaling rows measure guests, not IPC, on any machine.
func calibrateFibLoop(env *Env, target time.Duration) (int, error) {
	eng, m, err := inProcessEngine(env)
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	timeOf := func(reps int) (time.Duration, error) {
		s, err := repeat(7, func() (time.Duration, error) {
			res, err := eng.Run(context.Background(), sandbox.Request{Module: m, Function: "fib_loop",
				Args: []sandbox.Value{sandbox.ValueI32(fibN), sandbox.ValueI32(int32(reps))}, Limits: limits.Defaults()})
			if err != nil {
				return 0, err
			}
			return res.Elapsed, nil
		})
		return s.P50(), err
	}
	reps := 16
	for {
		d, err := timeOf(reps)
		if err != nil {
			return 0, err
		}
		if d >= target/4 || reps > 1<<24 {
			return max(1, int(float64(reps)*float64(target)/float64(d))), nil
		}
		reps *= 2
	}
}

// scalingThroughput runs fib_loop from n goroutines against a sidecar with
// n workers.
func scalingThroughput(env *Env, n, reps int, d time.Duration) (float64, error) {
	c, stderr, err := startSidecar(env, "--max-concurrency", fmt.Sprint(n))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	id, err := compileWAT(c, env.wat("well_behaved.wat"))
	if err != nil {
		return 0, fmt.Errorf("%v; stderr: %s", err, stderr)
	}
	p := fibParams(id, reps)
	call := func() error { _, err := c.Run(context.Background(), p, nil); return err }
	for range 20 {
		if err := call(); err != nil {
			return 0, err
		}
	}
	return throughput(n, d, call)
}

func fibParams(id string, reps int) rpc.RunParams {
	return rpc.RunParams{Module: rpc.ModuleSpec{ID: &id}, Function: "fib_loop", Args: argsJSON(fibN, reps)}
}

// scalingSection is row 8.
func scalingSection(env *Env) []Row {
	reps, err := calibrateFibLoop(env, time.Millisecond)
	if err != nil {
		return []Row{naRow("8 scaling", "fib_loop calibration", err.Error())}
	}
	env.FibReps = reps
	d := env.dur(2*time.Second, 400*time.Millisecond)
	rates := map[int]float64{}
	var rows []Row
	for _, n := range []int{1, 2, 4} {
		r, err := scalingThroughput(env, n, reps, d)
		if err != nil {
			return append(rows, naRow("8 scaling", fmt.Sprintf("concurrency %d", n), err.Error()))
		}
		rates[n] = r
		row := Row{Section: "8 scaling", Measurement: fmt.Sprintf("fib_loop(%d, %d) ≈1 ms, concurrency %d", fibN, reps, n),
			Value: fmtRate(r), Verdict: verdictInfo, Raw: map[string]float64{"calls_per_s": r, "reps": float64(reps)}}
		if n > 1 {
			row.Floor, row.Ratio = "c1 "+fmtRate(rates[1]), ratio(r, rates[1])
		}
		if n == 2 {
			row.Target, row.Verdict = "c2/c1 ≥ 1.8", judge(row.Ratio >= 1.8)
		}
		if n == 4 {
			row.Note = "only 2 cores: c4/c1 cannot exceed ~2"
		}
		rows = append(rows, row)
	}
	rows = append(rows, inProcessScalingRow(env, reps, d))
	return append(rows, memoryScalingRows(env, d)...)
}

// inProcessScalingRow is the machine's own c2/c1 for the same guest with
// no sidecar: the peer that tells a sidecar bottleneck from a machine that
// cannot run two guests at full speed (shared or throttled cores).
func inProcessScalingRow(env *Env, reps int, d time.Duration) Row {
	const name = "in-process engine c2/c1 (same guest, no IPC)"
	eng, m, err := inProcessEngine(env)
	if err != nil {
		return naRow("8 scaling", name, err.Error())
	}
	defer eng.Close()
	req := sandbox.Request{Module: m, Function: "fib_loop", Limits: limits.Defaults(),
		Args: []sandbox.Value{sandbox.ValueI32(fibN), sandbox.ValueI32(int32(reps))}}
	call := func() error { _, err := eng.Run(context.Background(), req); return err }
	c1, err1 := throughput(1, d, call)
	c2, err2 := throughput(2, d, call)
	if err1 != nil || err2 != nil {
		return naRow("8 scaling", name, fmt.Sprint(err1, err2))
	}
	return Row{Section: "8 scaling", Measurement: name, Value: fmtRate(c2), Floor: "c1 " + fmtRate(c1), Ratio: ratio(c2, c1),
		Verdict: verdictInfo, Raw: map[string]float64{"c1_calls_per_s": c1, "c2_calls_per_s": c2}}
}
