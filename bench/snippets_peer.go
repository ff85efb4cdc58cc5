package main

import (
	"fmt"
	"path/filepath"
)

// snippetPeerRow is row 18's peer (issue 22: "measure a peer in the same
// run where one installs"): a JavaScript snippet `1+1` one-shot through
// the Node client against Node's vm.runInNewContext with a timeout, a
// fresh context each time, in alternating blocks (bench/node
// snippet_peer.mjs). vm is not a boundary; the row says what a fenced
// interpreter costs over none. Information, no target.
func snippetPeerRow(env *Env, section string) Row {
	const what = "js snippet 1+1 one-shot from the Node client vs Node vm.runInNewContext (no boundary), p50"
	dist := filepath.Join(env.Root, "clients", "node", "dist", "index.js")
	switch {
	case !onPath("node"):
		return naRow(section, what, "node is not on PATH")
	case !exists(dist):
		return naRow(section, what, "clients/node is not built: run `npm ci && npm run build` in clients/node")
	}
	cfg := map[string]any{"dist": dist, "binary": env.Binary, "runtimes": filepath.Join(filepath.Dir(env.Binary), "runtimes"),
		"warm": env.n(20, 5), "n": env.n(200, 40), "blocks": env.floorBlocks()}
	res, err := runScript(env, nil, "node", "node/snippet_peer.mjs", cfg)
	if err != nil {
		return naRow(section, what, err.Error())
	}
	p50, vmP50, r := res.num("sidecar_p50_us"), res.num("vm_p50_us"), res.num("ratio")
	return Row{Section: section, Measurement: what, Value: fmtDur(usDur(p50)), Floor: "vm " + fmtDur(usDur(vmP50)),
		Ratio: r, Verdict: verdictInfo,
		Note: fmt.Sprintf("ratio: median of per-block p50 ratios, %.0f blocks, %.2f–%.2f; p99 %s vs %s", res.num("blocks"),
			res.num("ratio_min"), res.num("ratio_max"), fmtDur(usDur(res.num("sidecar_p99_us"))), fmtDur(usDur(res.num("vm_p99_us")))),
		Raw: map[string]float64{"sidecar_p50_us": p50, "vm_p50_us": vmP50, "ratio": r}}
}
