package main

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

// coldStart times spawn → initialize → first run result (the module is
// compiled by that run), once per fresh sidecar, and the part of it up to
// the initialize answer. Shutdown is not timed.
func coldStart(env *Env) (total, initialized time.Duration, err error) {
	t := time.Now()
	c, stderr, err := startSidecar(env)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	if err := c.Call(context.Background(), rpc.MethodInitialize, struct{}{}, nil); err != nil {
		return 0, 0, fmt.Errorf("initialize: %v; stderr: %s", err, stderr)
	}
	initialized = time.Since(t)
	p := rpc.RunParams{Module: rpc.ModuleSpec{Path: sandboxd.Str(env.wat("well_behaved.wat"))}, Function: "add", Args: argsJSON(1, 2)}
	if _, err := c.Run(context.Background(), p, nil); err != nil {
		return 0, 0, fmt.Errorf("first run: %v; stderr: %s", err, stderr)
	}
	return time.Since(t), initialized, nil
}

// cliCall is the one-process-per-run alternative: `sandboxd run FILE`.
func cliCall(env *Env) (time.Duration, error) {
	t := time.Now()
	out, err := exec.Command(env.Binary, "run", env.wat("well_behaved.wat"), "--invoke", "add", "--arg", "1", "--arg", "2").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("sandboxd run: %v: %s", err, out)
	}
	return time.Since(t), nil
}

func repeat(n int, f func() (time.Duration, error)) (Sample, error) {
	s := make(Sample, 0, n)
	for range n {
		d, err := f()
		if err != nil {
			return nil, err
		}
		s = append(s, d)
	}
	return s, nil
}

// coldStartSection is row 5. The amortised comparison charges the sidecar
// one cold start plus 99 sequential runs (row 2) against 100 CLI processes.
func coldStartSection(env *Env) []Row {
	var inits Sample
	cold, err := repeat(env.n(20, 5), func() (time.Duration, error) {
		total, initialized, err := coldStart(env)
		inits = append(inits, initialized)
		return total, err
	})
	if err != nil {
		return []Row{naRow("5 cold", "cold start", err.Error())}
	}
	cli, err := repeat(env.n(100, 20), func() (time.Duration, error) { return cliCall(env) })
	if err != nil {
		return []Row{naRow("5 cold", "one process per run", err.Error())}
	}
	rows := []Row{{Section: "5 cold", Measurement: "cold start: spawn+initialize+first run, p50", Value: fmtDur(cold.P50()),
		Floor: "CLI run " + fmtDur(cli.P50()), Ratio: ratio(float64(cold.P50()), float64(cli.P50())), Target: "≤ 10 ms",
		Verdict: judge(cold.P50() <= 10*time.Millisecond),
		Note:    fmt.Sprintf("spawn+initialize %s p50; the first run (a compile child's compile) the rest", fmtDur(inits.P50())),
		Raw:     map[string]float64{"p50_us": us(cold.P50()), "cli_p50_us": us(cli.P50()), "initialize_p50_us": us(inits.P50())}}}
	if len(env.GoSeq) == 0 {
		return append(rows, naRow("5 cold", "100 calls: CLI vs sidecar", "needs row 2 (section go)"))
	}
	sidecar := cold.P50() + 99*env.GoSeq.P50()
	r := ratio(float64(100*cli.P50()), float64(sidecar))
	return append(rows, Row{Section: "5 cold", Measurement: "100 calls: 1 cold + 99 seq runs",
		Value: fmtDur(sidecar), Floor: "100 CLI " + fmtDur(100*cli.P50()), Ratio: r, RatioText: formatRatio(r) + " cheaper",
		Target: "≥ 50× cheaper", Verdict: judge(r >= 50), Raw: map[string]float64{"sidecar_100_us": us(sidecar), "cli_100_us": us(100 * cli.P50())}})
}
