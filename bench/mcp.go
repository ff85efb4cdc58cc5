package main

import (
	"fmt"
	"path/filepath"
)

// mcpSection is row 16: an MCP tool call's round trip from the official
// TypeScript SDK client to `sandboxd mcp`, against the same work through
// this project's Node client of the sidecar protocol, one call at a time
// (issue 23; target: at most 1.5×): run_export of a trivial export (the
// module as WAT in every call) against Sidecar.run, and run_snippet of a
// JavaScript expression against Sidecar.eval.
func mcpSection(env *Env) []Row {
	const sec = "16 mcp"
	works := []struct{ work, what string }{
		{"export", "MCP tool call (TS SDK client, run_export add) p50 vs the Node sidecar client's run"},
		{"snippet", "MCP tool call (TS SDK client, run_snippet js `1 + 2`) p50 vs the Node sidecar client's eval"},
	}
	client := filepath.Join(env.Root, "clients", "node")
	dist := filepath.Join(client, "dist", "index.js")
	sdk := filepath.Join(client, "node_modules", "@modelcontextprotocol", "sdk")
	var rows []Row
	for _, w := range works {
		switch {
		case !onPath("node"):
			rows = append(rows, naRow(sec, w.what, "node is not on PATH"))
			continue
		case !exists(dist) || !exists(sdk):
			rows = append(rows, naRow(sec, w.what, "clients/node is not built: run `npm ci && npm run build` in clients/node"))
			continue
		}
		// A one-shot snippet starts an interpreter (the spare's refill): tens of ms.
		n, warm := env.n(2000, 200), env.n(200, 50)
		if w.work == "snippet" {
			n, warm = env.n(200, 40), env.n(20, 5)
		}
		cfg := map[string]any{"work": w.work, "dist": dist, "sdk": sdk, "binary": env.Binary, "wat": env.wat("well_behaved.wat"),
			"warm": warm, "n": n, "blocks": env.floorBlocks()}
		res, err := runScript(env, nil, "node", "node/mcp.mjs", cfg)
		if err != nil {
			rows = append(rows, naRow(sec, w.what, err.Error()))
			continue
		}
		if na, ok := res["na"].(string); ok {
			rows = append(rows, naRow(sec, w.what, na))
			continue
		}
		p50, sidecarP50, r := res.num("mcp_p50_us"), res.num("sidecar_p50_us"), res.num("ratio")
		rows = append(rows, Row{Section: sec, Measurement: w.what, Value: fmtDur(usDur(p50)), Floor: "sidecar " + fmtDur(usDur(sidecarP50)),
			Ratio: r, Target: "≤ 1.5×", Verdict: judge(r <= 1.5),
			Note: fmt.Sprintf("ratio: median of per-block p50 ratios, %.0f blocks, %.2f–%.2f; p99 %s vs %s", res.num("blocks"),
				res.num("ratio_min"), res.num("ratio_max"), fmtDur(usDur(res.num("mcp_p99_us"))), fmtDur(usDur(res.num("sidecar_p99_us")))),
			Raw: map[string]float64{"mcp_p50_us": p50, "sidecar_p50_us": sidecarP50, "ratio": r}})
	}
	return rows
}
