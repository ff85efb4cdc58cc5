package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// The WASI rows (issue 12): the Go hello-world of testdata/wasi
// (GOOS=wasip1, 2.4 MB) run by a sidecar that has it compiled, against one
// `sandboxd run --wasi` process per call; and its compile time cold and
// from the persistent cache (--cache-dir, a restarted sidecar).

func (e *Env) goGuest() string { return filepath.Join(e.Root, "testdata", "wasi", "guest_go.wasm") }

// wasiHello runs the guest's hello mode once through c.
func wasiHello(c *sandboxd.Client, m rpc.ModuleSpec) (time.Duration, error) {
	t := time.Now()
	res, err := c.Run(context.Background(), rpc.RunParams{Module: m,
		Capabilities: &protocol.CapabilitySpec{WASI: &protocol.WASISpec{Args: []string{"hello"}}}}, nil)
	if err == nil && (res.WASIResult == nil || string(res.Stdout) != "hello from Go\n") {
		err = fmt.Errorf("unexpected result %+v", res)
	}
	return time.Since(t), err
}

// wasiCLICall is one `sandboxd run FILE --wasi -- hello` process: it
// compiles the guest every time.
func wasiCLICall(env *Env) (time.Duration, error) {
	t := time.Now()
	out, err := exec.Command(env.Binary, "run", env.goGuest(), "--wasi", "--", "hello").CombinedOutput()
	if err != nil || string(out) != "hello from Go\n" {
		return 0, fmt.Errorf("sandboxd run --wasi: %v: %s", err, out)
	}
	return time.Since(t), nil
}

func wasiSection(env *Env) []Row {
	const sec = "12 wasi"
	dir := filepath.Join(env.Tmp, "wasi-cache")
	path := rpc.ModuleSpec{Path: sandboxd.Str(env.goGuest())}
	c, stderr, err := startSidecar(env, "--cache-dir", dir)
	if err != nil {
		return []Row{naRow(sec, "Go hello-world", err.Error())}
	}
	cold, err := wasiHello(c, path) // compiles, and fills the persistent cache
	if err != nil {
		c.Close()
		return []Row{naRow(sec, "Go hello-world", fmt.Sprintf("%v; stderr: %s", err, stderr))}
	}
	cached, err := repeat(env.n(200, 20), func() (time.Duration, error) { return wasiHello(c, path) })
	c.Close()
	if err != nil {
		return []Row{naRow(sec, "cached Go hello-world", err.Error())}
	}
	c2, stderr, err := startSidecar(env, "--cache-dir", dir)
	if err != nil {
		return []Row{naRow(sec, "Go hello-world after restart", err.Error())}
	}
	restart, err := wasiHello(c2, path)
	c2.Close()
	if err != nil {
		return []Row{naRow(sec, "Go hello-world after restart", fmt.Sprintf("%v; stderr: %s", err, stderr))}
	}
	cli, err := repeat(env.n(10, 3), func() (time.Duration, error) { return wasiCLICall(env) })
	if err != nil {
		return []Row{naRow(sec, "sandboxd run --wasi per call", err.Error())}
	}
	rCLI := ratio(float64(cli.P50()), float64(cached.P50()))
	rRestart := ratio(float64(cold), float64(restart))
	raw := map[string]float64{"cached_p50_us": us(cached.P50()), "cli_p50_us": us(cli.P50()), "cold_us": us(cold), "restart_us": us(restart)}
	return []Row{
		{Section: sec, Measurement: "Go hello-world (2.4 MB wasip1), compiled, sidecar run p50", Value: fmtDur(cached.P50()),
			Floor: "sandboxd run --wasi " + fmtDur(cli.P50()), Ratio: rCLI, RatioText: formatRatio(rCLI) + " faster",
			Target: "≥ 10× faster", Verdict: judge(rCLI >= 10), Raw: raw},
		{Section: sec, Measurement: "its compile: cold (first run)", Value: fmtDur(cold), Verdict: verdictInfo},
		{Section: sec, Measurement: "its compile: from --cache-dir after restart (first run)", Value: fmtDur(restart),
			Floor: "cold " + fmtDur(cold), Ratio: rRestart, RatioText: formatRatio(rRestart) + " faster", Verdict: verdictInfo},
	}
}
