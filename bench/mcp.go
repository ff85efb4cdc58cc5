package main

import (
	"fmt"
	"path/filepath"
)

// mcpSection is row 16: an MCP tool call's round trip from the official
// TypeScript SDK client to `sandboxd mcp` (run_export of a trivial export,
// the module as WAT in every call), against the same run through this
// project's Node client of the sidecar protocol, one call at a time
// (issue 23; target: at most 1.5×). A JS snippet's row waits for the
// snippet tools.
func mcpSection(env *Env) []Row {
	const sec = "16 mcp"
	const what = "MCP tool call (TS SDK client, run_export add) p50 vs the Node sidecar client's run"
	client := filepath.Join(env.Root, "clients", "node")
	dist := filepath.Join(client, "dist", "index.js")
	sdk := filepath.Join(client, "node_modules", "@modelcontextprotocol", "sdk")
	switch {
	case !onPath("node"):
		return []Row{naRow(sec, what, "node is not on PATH")}
	case !exists(dist) || !exists(sdk):
		return []Row{naRow(sec, what, "clients/node is not built: run `npm ci && npm run build` in clients/node")}
	}
	cfg := map[string]any{"dist": dist, "sdk": sdk, "binary": env.Binary, "wat": env.wat("well_behaved.wat"),
		"warm": env.n(200, 50), "n": env.n(2000, 200), "blocks": env.floorBlocks()}
	res, err := runScript(env, nil, "node", "node/mcp.mjs", cfg)
	if err != nil {
		return []Row{naRow(sec, what, err.Error())}
	}
	p50, sidecarP50, r := res.num("mcp_p50_us"), res.num("sidecar_p50_us"), res.num("ratio")
	return []Row{{Section: sec, Measurement: what, Value: fmtDur(usDur(p50)), Floor: "sidecar " + fmtDur(usDur(sidecarP50)),
		Ratio: r, Target: "≤ 1.5×", Verdict: judge(r <= 1.5),
		Note: fmt.Sprintf("ratio: median of per-block p50 ratios, %.0f blocks, %.2f–%.2f; p99 %s vs %s", res.num("blocks"),
			res.num("ratio_min"), res.num("ratio_max"), fmtDur(usDur(res.num("mcp_p99_us"))), fmtDur(usDur(res.num("sidecar_p99_us")))),
		Raw: map[string]float64{"mcp_p50_us": p50, "sidecar_p50_us": sidecarP50, "ratio": r}}}
}
