// This project's Node client (clients/node/dist): sequential `run add` and
// 64 in flight, plus sequential calls of the trivial and the CPU-bound
// guest for the peer comparison. Prints one JSON line.
//
//   node client.mjs '{"dist": ".../clients/node/dist/index.js", "binary": "...", "wat": ".../well_behaved.wat", ...}'
import { pathToFileURL } from "node:url";
import { percentiles, sequential, throughput } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const { Sidecar } = await import(pathToFileURL(cfg.dist).href);

const sb = await Sidecar.spawn({ binary: cfg.binary, args: ["--log-level", "warn"] });
try {
  const mod = await sb.compile({ path: cfg.wat });
  const add = () => sb.run({ module: mod, function: "add", args: [1, 2] });
  const fib = () => sb.run({ module: mod, function: "fib_loop", args: [cfg.fibN, cfg.fibReps] });
  const seq = percentiles(await sequential(add, cfg.warm, cfg.n));
  const out = {
    seq_p50_us: seq.p50_us,
    seq_p99_us: seq.p99_us,
    pipelined_calls_per_s: await throughput(add, 64, cfg.durationMs),
    add_calls_per_s: await throughput(add, 1, cfg.durationMs),
    fib_calls_per_s: await throughput(fib, 1, cfg.durationMs),
  };
  console.log(JSON.stringify(out));
} finally {
  await sb.close();
}
