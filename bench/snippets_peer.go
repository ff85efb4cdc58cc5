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
	f := scriptPair(res, "js")
	return Row{Section: section, Measurement: what, Value: fmtDur(usDur(f["p50_us"])), Floor: "vm " + fmtDur(usDur(f["floor_p50_us"])),
		Ratio: f["ratio_median"], Verdict: verdictInfo,
		Note: fmt.Sprintf("%s; p99 %s vs %s", f.spread(), fmtDur(usDur(f["p99_us"])), fmtDur(usDur(f["floor_p99_us"]))), Raw: f}
}
