// The "no sandbox" floor of row 18 (issue 22): Node's own way to run a
// snippet of JavaScript, `vm.runInNewContext` with a `timeout`, a fresh
// context each time, against the same snippet through this project's
// Node client (`Sidecar.eval`, a fresh interpreter each time), one at a
// time. `vm` is not a security boundary (Node's documentation says so):
// a snippet reaches the host through any object handed in, and there is
// no memory cap; it is what a parent pays for no fence at all. The two
// are measured in alternating blocks; prints one JSON line.
//
//   node snippet_peer.mjs '{"dist": ".../clients/node/dist/index.js", "binary": "...", "runtimes": "...", "warm": 20, "n": 200, "blocks": 10}'
import vm from "node:vm";
import { pathToFileURL } from "node:url";
import { median, percentiles, sequential } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const { Sidecar } = await import(pathToFileURL(cfg.dist).href);
const sb = await Sidecar.spawn({ binary: cfg.binary, args: ["--log-level", "warn", "--runtimes", cfg.runtimes] });
const code = "1+1";
const work = {
  sidecar: async () => {
    const r = await sb.eval({ language: "js", code });
    if (r.value !== 2) throw new Error(`sidecar: ${JSON.stringify(r)}`);
  },
  vm: async () => {
    const v = vm.runInNewContext(code, {}, { timeout: 1000 });
    if (v !== 2) throw new Error(`vm: ${v}`);
  },
};
try {
  await sequential(work.sidecar, cfg.warm, 0);
  await sequential(work.vm, cfg.warm, 0);
  const per = Math.max(1, Math.floor(cfg.n / cfg.blocks));
  const all = { sidecar: [], vm: [] };
  const ratios = [];
  for (let b = 0; b < cfg.blocks; b++) {
    const s = await sequential(work.sidecar, 0, per);
    const v = await sequential(work.vm, 0, per);
    all.sidecar.push(...s);
    all.vm.push(...v);
    ratios.push(percentiles(s).p50_us / percentiles(v).p50_us);
  }
  const s = percentiles(all.sidecar);
  const v = percentiles(all.vm);
  // Named as bench/hostcalls.go's scriptPair reads a pair: the subject,
  // then its floor.
  console.log(JSON.stringify({
    js_p50_us: s.p50_us, js_p99_us: s.p99_us, js_floor_p50_us: v.p50_us, js_floor_p99_us: v.p99_us,
    js_ratio: median(ratios), js_ratio_min: Math.min(...ratios), js_ratio_max: Math.max(...ratios), js_blocks: ratios.length,
  }));
} finally {
  await sb.close();
}
