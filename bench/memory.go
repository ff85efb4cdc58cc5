package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// The rows of issue 24: what a linear memory costs a run (row 14), what a
// realistic guest's one-shot run costs against a warm instance doing the
// same (row 15). Row 8 has the CPU-bound guest with a memory.

// The modules of row 14: add, and the same add writing its result to a
// (memory 1) or a (memory 17) first (17 pages: clang's and rustc's 1 MiB
// stack and a page of data).
const (
	addNoMemoryWAT = `(module (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1))))`
	addMemoryWAT   = `(module (memory %d)
  (func (export "add") (param i32 i32) (result i32)
    (i32.store (i32.const 0) (i32.add (local.get 0) (local.get 1)))
    (i32.load (i32.const 0))))`
)

// memorySection is rows 14 and 15.
func memorySection(env *Env) []Row {
	c, stderr, err := startSidecar(env)
	if err != nil {
		return []Row{naRow("14 memory", "runs with a memory", err.Error())}
	}
	defer c.Close()
	ctx := context.Background()
	compile := func(wat string) (protocolRun, error) {
		res, err := c.Compile(ctx, protocol.ModuleSpec{WAT: sandboxd.Str(wat)})
		if err != nil {
			return protocolRun{}, fmt.Errorf("%v; stderr: %s", err, stderr)
		}
		return protocolRun{c: c, p: addParams(res.ModuleID)}, nil
	}
	none, err := compile(addNoMemoryWAT)
	if err != nil {
		return []Row{naRow("14 memory", "runs with a memory", err.Error())}
	}
	var rows []Row
	for _, pages := range []int{17, 1} {
		withMem, err := compile(fmt.Sprintf(addMemoryWAT, pages))
		if err != nil {
			return append(rows, naRow("14 memory", fmt.Sprintf("(memory %d)", pages), err.Error()))
		}
		rows = append(rows, memorySequentialRow(env, pages, none, withMem), memoryPipelinedRow(env, pages, none, withMem))
	}
	return append(rows, realGuestRows(env, c, none)...)
}

// protocolRun is one run request on one client.
type protocolRun struct {
	c *sandboxd.Client
	p protocol.RunParams
}

func (r protocolRun) call() error { _, err := r.c.Run(context.Background(), r.p, nil); return err }

// memorySequentialRow: sequential p50 of the add with a memory against
// the memory-less add, in alternating blocks; the ratio is the median of
// the blocks' ratios.
func memorySequentialRow(env *Env, pages int, none, withMem protocolRun) Row {
	what := fmt.Sprintf("run add with (memory %d) by id, sequential, p50", pages)
	pr, err := interleave(env.floorBlocks(), env.n(500, 50), 10, env.n(5000, 400), timedBlock(none.call), timedBlock(withMem.call))
	if err != nil {
		return naRow("14 memory", what, err.Error())
	}
	r := pr.Ratio()
	return Row{Section: "14 memory", Measurement: what, Value: fmtDur(pr.Subject.P50()),
		Floor: "no memory " + fmtDur(pr.Floor.P50()) + " (interleaved)", Ratio: r, Target: "≤ 1.3×", Verdict: judge(r <= 1.3),
		Note: "ratio: median of per-block p50 ratios, " + pr.Spread(), Raw: pr.Raw()}
}

// memoryPipelinedRow: calls/s with pipelineDepth in flight, the add with
// a memory against the memory-less add in alternating windows; the ratio
// is the median of the windows' ratios.
func memoryPipelinedRow(env *Env, pages int, none, withMem protocolRun) Row {
	what := fmt.Sprintf("run add with (memory %d) by id, 64 in flight, throughput", pages)
	d := env.dur(500*time.Millisecond, 200*time.Millisecond)
	var ratios []float64
	var sumNone, sumMem float64
	for range env.n(6, 2) {
		a, err := throughput(pipelineDepth, d, none.call)
		if err != nil {
			return naRow("14 memory", what, err.Error())
		}
		b, err := throughput(pipelineDepth, d, withMem.call)
		if err != nil {
			return naRow("14 memory", what, err.Error())
		}
		sumNone, sumMem = sumNone+a, sumMem+b
		ratios = append(ratios, ratio(b, a))
	}
	r := median(ratios)
	n := float64(len(ratios))
	return Row{Section: "14 memory", Measurement: what, Value: fmtRate(sumMem / n), Floor: "no memory " + fmtRate(sumNone/n) + " (alternating)",
		Ratio: r, Target: "≥ 0.75×", Verdict: judge(r >= 0.75), Note: fmt.Sprintf("ratio: median of %d alternating %v windows", len(ratios), d),
		Raw: map[string]float64{"calls_per_s": sumMem / n, "no_memory_calls_per_s": sumNone / n, "ratio_median": r}}
}

// realGuestRows is row 15: one-shot runs of real guests against a warm
// instance doing the same, in alternating blocks: the Extism plugins'
// greet (a plugin run against a call on an instance of the plugin), and
// the C WASI guest printing a line, which has no warm form (a command's
// _start ends its instance): its floor is the cheapest run there is, the
// memory-less add by id.
func realGuestRows(env *Env, c *sandboxd.Client, none protocolRun) []Row {
	const section = "15 guests"
	ctx := context.Background()
	var rows []Row
	compare := func(what, floorName string, floor, oneShot func() error, n int, target float64) {
		pr, err := interleave(env.n(10, 4), 5, 3, n, timedBlock(floor), timedBlock(oneShot))
		if err != nil {
			rows = append(rows, naRow(section, what, err.Error()))
			return
		}
		r := pr.Ratio()
		rows = append(rows, Row{Section: section, Measurement: what, Value: fmtDur(pr.Subject.P50()),
			Floor: floorName + " " + fmtDur(pr.Floor.P50()) + " (interleaved)", Ratio: r, Target: fmt.Sprintf("≤ %g×", target),
			Verdict: judge(r <= target), Note: "ratio: median of per-block p50 ratios, " + pr.Spread(), Raw: pr.Raw()})
	}
	// The Go plugin compiles for seconds, and on a loaded machine a one-shot
	// run can take longer than the default second: these rows measure, the
	// deadline is only a hang bound.
	long := map[string]uint64{"compileTimeoutMs": 300_000, "timeoutMs": 60_000}
	for _, p := range []struct {
		dir, file string
		caps      *protocol.CapabilitySpec
		n         int
		preinit   bool // the one-shot runs the module compiled with preinitialize (docs/preinit.md)
	}{
		{"wat", "plugin.wat", &protocol.CapabilitySpec{Log: true}, env.n(2000, 100), false},
		{"go", "plugin.wasm", &protocol.CapabilitySpec{Log: true, WASI: &protocol.WASISpec{}}, env.n(300, 30), false},
		{"go", "plugin.wasm", &protocol.CapabilitySpec{Log: true, WASI: &protocol.WASISpec{}}, env.n(300, 30), true},
	} {
		what := fmt.Sprintf("plugin greet (%s): plugin run vs a warm instance's call, p50", p.dir)
		if p.preinit {
			what = fmt.Sprintf("plugin greet (%s, pre-initialised): plugin run vs a warm instance's call, p50", p.dir)
		}
		mod := protocol.ModuleSpec{Path: sandboxd.Str(filepath.Join(env.Root, "testdata", "plugins", p.dir, p.file))}
		in, err := c.Instantiate(ctx, sandboxd.InstantiateParams{Module: mod, Capabilities: p.caps, Limits: long})
		if err != nil {
			rows = append(rows, naRow(section, what, err.Error()))
			continue
		}
		runID := in.Result.ModuleID
		if p.preinit {
			var cr protocol.CompileResult
			err := c.Call(ctx, protocol.MethodCompile, protocol.CompileParams{Module: mod, Preinitialize: true,
				Limits: map[string]uint64{"compileTimeoutMs": long["compileTimeoutMs"]}}, &cr)
			if err != nil {
				rows = append(rows, naRow(section, what, err.Error()))
				in.Release(ctx)
				continue
			}
			runID = cr.ModuleID
		}
		input := protocol.Bytes("bench")
		run := protocol.RunParams{Module: protocol.ModuleSpec{ID: sandboxd.Str(runID)}, Function: "greet",
			Input: &input, Capabilities: p.caps, Limits: long}
		compare(what, "warm call",
			func() error { _, err := in.Call(ctx, "greet", sandboxd.CallOptions{Input: input}); return err },
			func() error { _, err := c.Run(ctx, run, nil); return err }, p.n, 2)
		in.Release(ctx)
	}
	guest := protocol.ModuleSpec{Path: sandboxd.Str(filepath.Join(env.Root, "testdata", "wasi", "guest_c.wasm"))}
	line := protocol.RunParams{Module: guest, Capabilities: &protocol.CapabilitySpec{WASI: &protocol.WASISpec{Args: []string{"args", "hello"}}},
		Limits: long}
	res, err := c.Run(ctx, line, nil)
	if err != nil || res.WASIResult == nil || string(res.Stdout) != "hello\n" {
		return append(rows, naRow(section, "guest_c.wasm printing a line", fmt.Sprintf("%+v %v", res, err)))
	}
	line.Module = protocol.ModuleSpec{ID: sandboxd.Str(res.ModuleID)}
	compare("guest_c.wasm (WASI, C) printing a line, run by id, p50", "run add (no memory) by id", none.call,
		func() error { _, err := c.Run(ctx, line, nil); return err }, env.n(2000, 100), 3)
	return rows
}

// churnWAT is a CPU-bound guest with a memory: reps rounds of a loop that
// stores and loads a word in each page of its first 64 KiB (its working
// set within the bytes a pooled memory keeps resident, as a small guest's
// stack and heap would be).
const churnWAT = `(module (memory 17)
  (func (export "churn") (param $reps i32) (result i32)
    (local $i i32) (local $acc i32) (local $p i32)
    (loop $round
      (local.set $p (i32.const 0))
      (loop $word
        (i32.store (local.get $p) (i32.add (local.get $acc) (local.get $p)))
        (local.set $acc (i32.xor (local.get $acc) (i32.load (i32.sub (i32.const 65532) (local.get $p)))))
        (local.set $p (i32.add (local.get $p) (i32.const 64)))
        (br_if $word (i32.lt_u (local.get $p) (i32.const 65536))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $round (i32.lt_u (local.get $i) (local.get $reps))))
    (local.get $acc)))`

// memoryScalingRows are row 8's CPU-bound guest with a memory: churn
// calibrated to ~1 ms in the engine, calls/s at concurrency 1 and 2 over
// the wire, and the in-process engine's own c2/c1 for the same guest.
func memoryScalingRows(env *Env, d time.Duration) []Row {
	const section = "8 scaling"
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		return []Row{naRow(section, "churn with (memory 17)", err.Error())}
	}
	defer eng.Close()
	m, _, err := eng.Compile(context.Background(), sandbox.Source{WAT: churnWAT})
	if err != nil {
		return []Row{naRow(section, "churn with (memory 17)", err.Error())}
	}
	req := func(reps int) sandbox.Request {
		return sandbox.Request{Module: m, Function: "churn", Args: []sandbox.Value{sandbox.ValueI32(int32(reps))}, Limits: limits.Defaults()}
	}
	reps := 1
	for {
		s, err := repeat(7, func() (time.Duration, error) {
			res, err := eng.Run(context.Background(), req(reps))
			if err != nil {
				return 0, err
			}
			return res.Elapsed, nil
		})
		if err != nil {
			return []Row{naRow(section, "churn calibration", err.Error())}
		}
		if s.P50() >= 250*time.Microsecond || reps > 1<<20 {
			reps = max(1, int(float64(reps)*float64(time.Millisecond)/float64(s.P50())))
			break
		}
		reps *= 2
	}
	what := fmt.Sprintf("churn(%d) with (memory 17) ≈1 ms", reps)
	rates := map[int]float64{}
	var rows []Row
	for _, n := range []int{1, 2} {
		c, stderr, err := startSidecar(env, "--max-concurrency", fmt.Sprint(n))
		if err != nil {
			return append(rows, naRow(section, what, err.Error()))
		}
		res, err := c.Compile(context.Background(), protocol.ModuleSpec{WAT: sandboxd.Str(churnWAT)})
		if err != nil {
			c.Close()
			return append(rows, naRow(section, what, fmt.Sprintf("%v; stderr: %s", err, stderr)))
		}
		p := protocol.RunParams{Module: protocol.ModuleSpec{ID: sandboxd.Str(res.ModuleID)}, Function: "churn", Args: argsJSON(reps)}
		r, err := throughput(n, d, func() error { _, err := c.Run(context.Background(), p, nil); return err })
		c.Close()
		if err != nil {
			return append(rows, naRow(section, what, err.Error()))
		}
		rates[n] = r
		row := Row{Section: section, Measurement: fmt.Sprintf("%s, concurrency %d", what, n), Value: fmtRate(r), Verdict: verdictInfo,
			Raw: map[string]float64{"calls_per_s": r, "reps": float64(reps)}}
		if n == 2 {
			row.Floor, row.Ratio, row.Target = "c1 "+fmtRate(rates[1]), ratio(r, rates[1]), "c2/c1 ≥ 1.7"
			row.Verdict = judge(row.Ratio >= 1.7)
		}
		rows = append(rows, row)
	}
	call := func() error { _, err := eng.Run(context.Background(), req(reps)); return err }
	c1, err1 := throughput(1, d, call)
	c2, err2 := throughput(2, d, call)
	if err1 != nil || err2 != nil {
		return append(rows, naRow(section, "in-process engine c2/c1 (churn)", fmt.Sprint(err1, err2)))
	}
	inProcess := ratio(c2, c1)
	// Issue 24: "the in-process engine's own figure in the same run is the
	// limit to compare against": no sidecar scales better than the engine
	// it wraps, so on a machine where the engine itself stays under 1.7
	// (two cores shared with other work) the target is the engine's figure.
	if last := &rows[len(rows)-1]; len(rows) == 2 && inProcess < 1.7 {
		last.Target = fmt.Sprintf("c2/c1 ≥ 1.7, or ≥ the in-process engine's %.2f (the limit)", inProcess)
		last.Verdict = judge(last.Ratio >= inProcess)
	}
	return append(rows, Row{Section: section, Measurement: "in-process engine c2/c1 (same churn, no IPC)", Value: fmtRate(c2),
		Floor: "c1 " + fmtRate(c1), Ratio: inProcess, Verdict: verdictInfo,
		Raw: map[string]float64{"c1_calls_per_s": c1, "c2_calls_per_s": c2}})
}
