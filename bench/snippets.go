package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// snippetSection is row 18 (issue 22), through the Go client and the
// runtimes make build compiled next to the binary: a warm one-shot
// snippet `1+1` per language (a fresh interpreter each time: the
// sidecar's spare), an evaluation in a session against a warm plugin
// call of testdata/plugins/go greet on the same sidecar, in alternating
// blocks, and the first snippet after the sidecar starts (spawn to
// answer).
func snippetSection(env *Env) []Row {
	const section = "18 snippets"
	runtimes := filepath.Join(filepath.Dir(env.Binary), "runtimes")
	c, stderr, err := startSidecar(env, "--runtimes", runtimes)
	if err != nil {
		return []Row{naRow(section, "snippets", err.Error())}
	}
	defer c.Close()
	ctx := context.Background()
	n := env.n(300, 20)
	var rows []Row

	// The floor: a warm plugin call (a Go guest, as the runtimes are).
	plugin, err := c.Instantiate(ctx, sandboxd.InstantiateParams{
		Module:       rpc.ModuleSpec{Path: sandboxd.Str(filepath.Join(env.Root, "testdata", "plugins", "go", "plugin.wasm"))},
		Capabilities: &rpc.CapabilitySpec{Log: true, WASI: &protocol.WASISpec{}},
	})
	if err != nil {
		return []Row{naRow(section, "snippets", "instantiate greet: "+err.Error())}
	}
	greet := func() (time.Duration, error) {
		t := time.Now()
		_, err := plugin.Call(ctx, "greet", sandboxd.CallOptions{Input: []byte("bench")})
		return time.Since(t), err
	}
	timed := func(f func() (time.Duration, error)) (Sample, error) {
		for range max(n/10, 5) { // warm-up
			if _, err := f(); err != nil {
				return nil, err
			}
		}
		return repeat(n, f)
	}
	callS, err := timed(greet)
	if err != nil {
		return []Row{naRow(section, "snippets", "greet: "+err.Error())}
	}
	call := callS.P50()

	targets := map[protocol.Language]time.Duration{protocol.LanguageJS: 15 * time.Millisecond,
		protocol.LanguageLua: 8 * time.Millisecond, protocol.LanguageStarlark: 8 * time.Millisecond}
	for _, lang := range protocol.Languages() {
		oneShot := func() (time.Duration, error) {
			t := time.Now()
			res, err := c.Eval(ctx, sandboxd.EvalParams{Language: lang, Code: "1+1"}, sandboxd.RunHandlers{})
			if err == nil && string(res.Value) != "2" {
				err = fmt.Errorf("1+1 = %s", res.Value)
			}
			return time.Since(t), err
		}
		s, err := timed(oneShot)
		if err != nil {
			rows = append(rows, naRow(section, fmt.Sprintf("warm snippet 1+1 (%s)", lang), err.Error()))
			continue
		}
		p50 := s.P50()
		rows = append(rows, Row{Section: section, Measurement: fmt.Sprintf("warm snippet 1+1, fresh state (%s), p50", lang),
			Value: fmtDur(p50), Floor: "plugin call " + fmtDur(call), Ratio: ratio(float64(p50), float64(call)),
			RatioText: formatRatio(ratio(float64(p50), float64(call))), Target: "≤ " + fmtDur(targets[lang]),
			Verdict: judge(p50 <= targets[lang]), Raw: map[string]float64{"p50_us": us(p50), "p99_us": us(s.P99()), "call_us": us(call)}})

		sess, err := c.NewSession(ctx, sandboxd.SessionParams{Language: lang})
		if err != nil {
			rows = append(rows, naRow(section, fmt.Sprintf("session eval (%s)", lang), err.Error()))
			continue
		}
		// In alternating blocks with the call (interleave.go): the ratio
		// is the median of the blocks'.
		pair, err := interleave(env.floorBlocks(), 20, 2, n,
			timedBlock(func() error {
				_, err := plugin.Call(ctx, "greet", sandboxd.CallOptions{Input: []byte("bench")})
				return err
			}),
			timedBlock(func() error {
				_, err := sess.Eval(ctx, "1+1", sandboxd.SessionEvalOptions{})
				return err
			}))
		_ = sess.Close(ctx)
		if err != nil {
			rows = append(rows, naRow(section, fmt.Sprintf("session eval (%s)", lang), err.Error()))
			continue
		}
		r := pair.Ratio()
		rows = append(rows, Row{Section: section, Measurement: fmt.Sprintf("eval 1+1 in a session (%s) vs a warm plugin call, p50", lang),
			Value: fmtDur(pair.Subject.P50()), Floor: "plugin call " + fmtDur(pair.Floor.P50()), Ratio: r, RatioText: formatRatio(r), Target: "≤ 2×",
			Verdict: judge(r <= 2), Note: pair.Spread(), Raw: pair.Raw()})
	}
	_ = plugin.Release(ctx)
	if len(rows) == 0 {
		rows = append(rows, naRow(section, "snippets", stderr.String()))
	}

	// The first snippet after the sidecar starts: spawn, then eval js.
	first, err := repeat(env.n(5, 2), func() (time.Duration, error) {
		t := time.Now()
		c, _, err := startSidecar(env, "--runtimes", runtimes)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_, err = c.Eval(ctx, sandboxd.EvalParams{Language: protocol.LanguageJS, Code: "1+1"}, sandboxd.RunHandlers{})
		return time.Since(t), err
	})
	if err != nil {
		return append(rows, naRow(section, "first js snippet after start", err.Error()))
	}
	p50 := first.P50()
	return append(rows, Row{Section: section, Measurement: "first js snippet after the sidecar starts (spawn to answer), p50",
		Value: fmtDur(p50), Target: "≤ 1.50 s", Verdict: judge(p50 <= 1500*time.Millisecond),
		Raw: map[string]float64{"p50_us": us(p50)}}, snippetPeerRow(env, section))
}
