package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
)

// bigModuleBytes is the size of code the compile-cache rows compile.
const bigModuleBytes = 1 << 20

// timedRun times one run of the big module's "run" export.
func timedRun(c *sandboxd.Client, m rpc.ModuleSpec) (time.Duration, error) {
	t := time.Now()
	_, err := c.Run(context.Background(), rpc.RunParams{Module: m, Function: "run"}, nil)
	return time.Since(t), err
}

// cacheTimes are the three phases of row 6.
type cacheTimes struct {
	first, cachedPath, cachedID, restart time.Duration
	size                                 int
}

// measureCache: first run compiles (and fills the persistent cache), the
// same bytes again hit the in-memory cache (by path: read + hash; by id:
// lookup only), and a restarted sidecar on the same --cache-dir loads
// wasmtime's artefact from disk instead of running Cranelift.
func measureCache(env *Env) (cacheTimes, error) {
	var ct cacheTimes
	wasm := bigModule(bigModuleBytes)
	ct.size = len(wasm)
	path := filepath.Join(env.Tmp, "big.wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		return ct, err
	}
	dir := filepath.Join(env.Tmp, "wasmtime-cache")
	byPath := rpc.ModuleSpec{Path: sandboxd.Str(path)}

	c, stderr, err := startSidecar(env, "--cache-dir", dir)
	if err != nil {
		return ct, err
	}
	if ct.first, err = timedRun(c, byPath); err != nil {
		c.Close()
		return ct, fmt.Errorf("first run: %v; stderr: %s", err, stderr)
	}
	pathS, err := repeat(env.n(50, 10), func() (time.Duration, error) { return timedRun(c, byPath) })
	if err != nil {
		c.Close()
		return ct, err
	}
	id := rpc.ModuleSpec{ID: sandboxd.Str(sandbox.ModuleID(wasm))}
	idS, err := repeat(env.n(200, 20), func() (time.Duration, error) { return timedRun(c, id) })
	c.Close()
	if err != nil {
		return ct, err
	}
	ct.cachedPath, ct.cachedID = pathS.P50(), idS.P50()

	c2, stderr, err := startSidecar(env, "--cache-dir", dir)
	if err != nil {
		return ct, err
	}
	defer c2.Close()
	if ct.restart, err = timedRun(c2, byPath); err != nil {
		return ct, fmt.Errorf("run after restart: %v; stderr: %s", err, stderr)
	}
	return ct, nil
}

// compileCacheSection is row 6.
func compileCacheSection(env *Env) []Row {
	ct, err := measureCache(env)
	if err != nil {
		return []Row{naRow("6 cache", "compile cache", err.Error())}
	}
	first := "first run " + fmtDur(ct.first)
	rPath := ratio(float64(ct.first), float64(ct.cachedPath))
	rRestart := ratio(float64(ct.first), float64(ct.restart))
	raw := map[string]float64{"module_bytes": float64(ct.size), "first_us": us(ct.first), "cached_path_us": us(ct.cachedPath),
		"cached_id_us": us(ct.cachedID), "restart_us": us(ct.restart)}
	return []Row{
		{Section: "6 cache", Measurement: fmt.Sprintf("%.2f MiB module: cached run, same bytes (path), p50", float64(ct.size)/(1<<20)),
			Value: fmtDur(ct.cachedPath), Floor: first, Ratio: rPath, RatioText: formatRatio(rPath) + " faster",
			Target: "≥ 100× faster", Verdict: judge(rPath >= 100), Raw: raw},
		{Section: "6 cache", Measurement: "cached run by {id}, p50", Value: fmtDur(ct.cachedID), Floor: first,
			Ratio: ratio(float64(ct.first), float64(ct.cachedID)), RatioText: formatRatio(ratio(float64(ct.first), float64(ct.cachedID))) + " faster",
			Verdict: verdictInfo},
		{Section: "6 cache", Measurement: "first run after restart, --cache-dir", Value: fmtDur(ct.restart), Floor: first,
			Ratio: rRestart, RatioText: formatRatio(rRestart) + " faster", Target: "≥ 10× faster", Verdict: judge(rRestart >= 10)},
	}
}
