package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

// instanceWireSection is row 13: over the wire with the Go client, a
// `call` on a warm instance against a fresh-instance `run` of the same
// export (add; the WAT and Go PDK plugins' greet, whose run is a plugin
// run: instantiate, call, release in the sidecar), sequential p50, each
// as a ratio against the pipe floor measured in blocks alternating with
// the warm calls (interleave.go).
func instanceWireSection(env *Env) []Row {
	const section = "13 inst wire"
	c, stderr, err := startSidecar(env)
	if err != nil {
		return []Row{naRow(section, "warm call over the wire", err.Error())}
	}
	defer c.Close()
	ctx := context.Background()
	n := env.n(2000, 100)
	var rows []Row
	// run is given the module by the id the instance reports: both sides
	// then find it compiled.
	compare := func(what string, inst sandboxd.InstantiateParams, fn string, opts sandboxd.CallOptions, run sandboxd.RunParams, target float64) {
		in, err := c.Instantiate(ctx, inst)
		if err != nil {
			rows = append(rows, naRow(section, what, fmt.Sprintf("%v; stderr: %s", err, stderr)))
			return
		}
		defer in.Release(ctx)
		run.Module = protocol.ModuleSpec{ID: sandboxd.Str(in.Result.ModuleID)}
		pr, err := env.interleaveGo(5, 5, n,
			timedBlock(func() error { _, err := in.Call(ctx, fn, opts); return err }))
		if err != nil {
			rows = append(rows, naRow(section, what, err.Error()))
			return
		}
		fresh, err := timeEach(max(n/10, 20), func() error { _, err := c.Run(ctx, run, nil); return err })
		if err != nil {
			rows = append(rows, naRow(section, what, err.Error()))
			return
		}
		w, f, floor := pr.Subject.P50(), fresh.P50(), pr.Floor.P50()
		r := pr.Ratio()
		raw := pr.Raw()
		raw["warm_us"], raw["fresh_us"], raw["floor_us"] = us(w), us(f), us(floor)
		row := Row{Section: section, Measurement: what + ", p50", Value: fmtDur(w),
			Floor: fmt.Sprintf("floor %s (interleaved); fresh run %s (%s floor)", fmtDur(floor), fmtDur(f), formatRatio(ratio(float64(f), float64(floor)))),
			Ratio: r, RatioText: formatRatio(r) + " floor", Verdict: verdictInfo, Raw: raw}
		if target > 0 { // issue 14: a warm call of add within 3× the pipe floor
			row.Target, row.Verdict = fmt.Sprintf("≤ %g×", target), judge(r <= target)
			row.Note = "ratio: median of per-block p50 ratios, " + pr.Spread() + env.floorWarning(floor)
		}
		rows = append(rows, row)
	}

	add, err := compileWAT(c, env.wat("well_behaved.wat"))
	if err != nil {
		return []Row{naRow(section, "warm call over the wire", fmt.Sprintf("%v; stderr: %s", err, stderr))}
	}
	addMod := protocol.ModuleSpec{ID: sandboxd.Str(add)}
	compare("call add(1,2) on a warm instance vs run", sandboxd.InstantiateParams{Module: addMod}, "add",
		sandboxd.CallOptions{Args: argsJSON(1, 2)}, addParams(add), 3)

	long := map[string]uint64{"compileTimeoutMs": 300_000} // the Go plugin compiles for seconds
	for _, p := range []struct {
		dir  string
		file string
		caps *protocol.CapabilitySpec
	}{
		{"wat", "plugin.wat", &protocol.CapabilitySpec{Log: true}},
		{"go", "plugin.wasm", &protocol.CapabilitySpec{Log: true, WASI: &protocol.WASISpec{}}},
	} {
		mod := protocol.ModuleSpec{Path: sandboxd.Str(filepath.Join(env.Root, "testdata", "plugins", p.dir, p.file))}
		input := protocol.Bytes("bench")
		compare(fmt.Sprintf("plugin greet (%s) on a warm instance vs plugin run", p.dir),
			sandboxd.InstantiateParams{Module: mod, Capabilities: p.caps, Limits: long}, "greet",
			sandboxd.CallOptions{Input: input},
			sandboxd.RunParams{Function: "greet", Input: &input, Capabilities: p.caps, Limits: long}, 0)
	}
	return rows
}

// timeEach times n calls of f one after another, after a few warm-up calls.
func timeEach(n int, f func() error) (Sample, error) {
	for range 5 {
		if err := f(); err != nil {
			return nil, err
		}
	}
	s := make(Sample, 0, n)
	for range n {
		t := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		s = append(s, time.Since(t))
	}
	return s, nil
}
