package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// instanceSection is row 11: a call on a warm instance against a fresh
// instance per call (Engine.Run, or Instantiate+Call+Release for a
// plugin) of the same export, in-process. The wire rows wait for the
// instantiate/call methods.
func instanceSection(env *Env) []Row {
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		return []Row{naRow("11 instances", "warm instance call", err.Error())}
	}
	defer eng.Close()
	ctx := context.Background()
	var rows []Row
	compare := func(what string, fresh, warm func() error) {
		n := env.n(2000, 100)
		if err := warm(); err != nil { // warm-up, and a check that it works
			rows = append(rows, naRow("11 instances", what, err.Error()))
			return
		}
		timeIt := func(f func() error, n int) (time.Duration, error) {
			s, err := repeat(n, func() (time.Duration, error) {
				t := time.Now()
				err := f()
				return time.Since(t), err
			})
			return s.P50(), err
		}
		w, err := timeIt(warm, n)
		if err != nil {
			rows = append(rows, naRow("11 instances", what, err.Error()))
			return
		}
		f, err := timeIt(fresh, max(n/20, 10))
		if err != nil {
			rows = append(rows, naRow("11 instances", what, err.Error()))
			return
		}
		r := ratio(float64(f), float64(w))
		rows = append(rows, Row{Section: "11 instances", Measurement: what + ", p50", Value: fmtDur(w),
			Floor: "fresh instance " + fmtDur(f), Ratio: r, RatioText: formatRatio(r) + " faster", Verdict: verdictInfo,
			Raw: map[string]float64{"warm_us": us(w), "fresh_us": us(f)}})
	}

	add, _, err := eng.Compile(ctx, sandbox.Source{Path: env.wat("well_behaved.wat")})
	if err != nil {
		return []Row{naRow("11 instances", "warm instance call", err.Error())}
	}
	args := []sandbox.Value{sandbox.ValueI32(1), sandbox.ValueI32(2)}
	inst, err := eng.Instantiate(ctx, sandbox.InstanceRequest{Module: add, Limits: limits.Defaults()})
	if err != nil {
		return []Row{naRow("11 instances", "warm instance call", err.Error())}
	}
	defer inst.Release()
	compare("call add(1,2) on a warm instance vs Engine.Run",
		func() error {
			_, err := eng.Run(ctx, sandbox.Request{Module: add, Function: "add", Args: args, Limits: limits.Defaults()})
			return err
		},
		func() error {
			_, err := inst.Call(ctx, sandbox.CallRequest{Function: "add", Args: args})
			return err
		})

	plugin := func(path string, caps sandbox.Capabilities) {
		m, _, err := eng.Compile(ctx, sandbox.Source{Path: path})
		if err != nil {
			rows = append(rows, naRow("11 instances", filepath.Base(path), err.Error()))
			return
		}
		req := sandbox.InstanceRequest{Module: m, Limits: limits.Defaults(), Capabilities: caps}
		p, err := eng.Instantiate(ctx, req)
		if err != nil {
			rows = append(rows, naRow("11 instances", filepath.Base(path), err.Error()))
			return
		}
		defer p.Release()
		call := sandbox.CallRequest{Function: "greet", Input: []byte("bench")}
		compare(fmt.Sprintf("plugin greet (%s) on a warm instance vs instantiate+call+release", filepath.Base(filepath.Dir(path))),
			func() error {
				q, err := eng.Instantiate(ctx, req)
				if err != nil {
					return err
				}
				defer q.Release()
				_, err = q.Call(ctx, call)
				return err
			},
			func() error {
				_, err := p.Call(ctx, call)
				return err
			})
	}
	plugin(filepath.Join(env.Root, "testdata", "plugins", "wat", "plugin.wat"), sandbox.Capabilities{Log: true})
	plugin(filepath.Join(env.Root, "testdata", "plugins", "go", "plugin.wasm"), sandbox.Capabilities{Log: true, WASI: &sandbox.WASI{}})
	return rows
}
