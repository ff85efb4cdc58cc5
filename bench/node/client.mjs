// This project's Node client (clients/node/dist): sequential `run add` and
// 64 in flight, plus sequential calls of the trivial and the CPU-bound
// guest for the peer comparison, and `greet("Ada")` on a warm instance of
// each test plugin (cfg.plugins: {name: {path, wasi}}). Prints one JSON line.
//
// The client's own cost is its sequential round trip minus that of raw
// JSON-RPC from Node to another sidecar of the same binary (one string
// write per request, lib.mjs's framer, JSON.parse: what any Node client
// must do); the two are measured in alternating blocks so that load drift
// hits both alike.
//
//   node client.mjs '{"dist": ".../clients/node/dist/index.js", "binary": "...", "wat": ".../well_behaved.wat", ...}'
import { spawn } from "node:child_process";
import { pathToFileURL } from "node:url";
import { framer, percentiles, sequential, throughput } from "./lib.mjs";

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
  const blocks = 4;
  for (let b = 0; b < blocks; b++) {
    clientSamples.push(...(await sequential(add, b === 0 ? cfg.warm : 20, Math.ceil(cfg.n / blocks))));
    rawSamples.push(...(await sequential(rawAdd, b === 0 ? cfg.warm : 20, Math.ceil(cfg.n / blocks))));
  }
  const seq = percentiles(clientSamples);
  const out = {
    seq_p50_us: seq.p50_us,
    seq_p99_us: seq.p99_us,
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
  raw.close();
  await sb.close();
}
