// This project's Node client (clients/node/dist): sequential `run add` and
// 64 in flight, plus sequential calls of the trivial and the CPU-bound
// guest for the peer comparison, and `greet("Ada")` on a warm instance of
// each test plugin (cfg.plugins: {name: {path, wasi}}). Prints one JSON line.
//
// The client's own cost is its sequential round trip minus that of raw
// JSON-RPC from Node to another sidecar of the same binary (one string
// write per request, lib.mjs's framer, JSON.parse: what any Node client
// must do). The client, raw JSON-RPC and the Node pipe floor (lib.mjs's
// pipeFloor, against the Go echo child) are measured in alternating blocks
// so that load drift hits them alike; the verdict's ratio is the median of
// the blocks' ratios of the client's p50 to the floor's.
//
//   node client.mjs '{"dist": ".../clients/node/dist/index.js", "binary": "...", "wat": ".../well_behaved.wat", ...}'
import { spawn } from "node:child_process";
import { pathToFileURL } from "node:url";
import { framer, median, percentiles, pipeFloor, sequential, throughput } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const { Sidecar } = await import(pathToFileURL(cfg.dist).href);

/** A sidecar spoken to by hand: call(method, params) resolves with the response message. */
function rawSidecar() {
  const child = spawn(cfg.binary, ["serve", "--log-level", "warn"], { stdio: ["pipe", "pipe", "inherit"] });
  let waiting = null;
  child.stdout.on("data", framer((body) => waiting(JSON.parse(body.toString("utf8")))));
  let id = 0;
  const call = (method, params) =>
    new Promise((resolve) => {
      waiting = resolve;
      const body = JSON.stringify({ jsonrpc: "2.0", id: id++, method, params });
      child.stdin.write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
  return { call, close: () => child.stdin.end() };
}

const sb = await Sidecar.spawn({ binary: cfg.binary, args: ["--log-level", "warn"] });
const raw = rawSidecar();
const floor = pipeFloor(cfg);
try {
  const mod = await sb.compile({ path: cfg.wat });
  const add = () => sb.run({ module: mod, function: "add", args: [1, 2] });
  const fib = () => sb.run({ module: mod, function: "fib_loop", args: [cfg.fibN, cfg.fibReps] });
  await raw.call("initialize", {});
  const rawId = (await raw.call("compile", { module: { path: cfg.wat } })).result.moduleId;
  const rawParams = { module: { id: rawId }, function: "add", args: [1, 2] };
  const rawAdd = () => raw.call("run", rawParams);
  const clientSamples = [];
  const rawSamples = [];
  const floorSamples = [];
  const ratios = [];
  const blocks = cfg.blocks;
  for (let b = 0; b < blocks; b++) {
    const warm = b === 0 ? cfg.warm : 5;
    const f = await sequential(floor.roundTrip, warm, Math.ceil(cfg.n / blocks));
    const c = await sequential(add, warm, Math.ceil(cfg.n / blocks));
    rawSamples.push(...(await sequential(rawAdd, warm, Math.ceil(cfg.n / blocks))));
    floorSamples.push(...f);
    clientSamples.push(...c);
    ratios.push(percentiles(c).p50_us / percentiles(f).p50_us);
  }
  const seq = percentiles(clientSamples);
  const fl = percentiles(floorSamples);
  const out = {
    seq_p50_us: seq.p50_us,
    seq_p99_us: seq.p99_us,
    seq_floor_p50_us: fl.p50_us,
    seq_floor_p99_us: fl.p99_us,
    seq_ratio: median(ratios),
    seq_ratio_min: Math.min(...ratios),
    seq_ratio_max: Math.max(...ratios),
    seq_blocks: blocks,
    raw_seq_p50_us: percentiles(rawSamples).p50_us,
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
  floor.close();
  raw.close();
  await sb.close();
}
