// This project's Node client (clients/node/dist): sequential `run add` and
// 64 in flight, plus sequential calls of the trivial and the CPU-bound
// guest for the peer comparison, and `greet("Ada")` on a warm instance of
// each test plugin (cfg.plugins: {name: {path, wasi}}). Prints one JSON line.
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
  for (const [name, guest] of Object.entries(cfg.plugins ?? {})) {
    const key = `plugin_${name}_greet`;
    try {
      const mod = await sb.compile({ path: guest.path, limits: { compileTimeoutMs: 300_000 } });
      const p = await sb.plugin({ module: mod, wasi: guest.wasi, capabilities: { log: true }, limits: { timeoutMs: cfg.pluginTimeoutMs } });
      try {
        const got = new TextDecoder().decode((await p.call("greet", "Ada")).output);
        if (!got.startsWith("Hello, Ada")) throw new Error(`greet("Ada") returned ${JSON.stringify(got)}`);
        const greet = () => p.call("greet", "Ada");
        const lat = percentiles(await sequential(greet, cfg.warm, cfg.n));
        out[`${key}_p50_us`] = lat.p50_us;
        out[`${key}_calls_per_s`] = await throughput(greet, 1, cfg.durationMs);
      } finally {
        await p.release();
      }
    } catch (err) {
      out[`${key}_error`] = String(err?.message ?? err).split("\n")[0];
    }
  }
  console.log(JSON.stringify(out));
} finally {
  await sb.close();
}
