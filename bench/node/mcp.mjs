// An MCP tool call's round trip from the official TypeScript SDK client
// (@modelcontextprotocol/sdk, clients/node's dev dependency) to
// `sandboxd mcp`, against the same work through this project's Node client
// of the sidecar protocol, one call at a time; cfg.work says which work:
// "export", run_export of add(1, 2) with the module as WAT text in every
// call on both sides (the engine's cache compiles it once) against
// Sidecar.run; "snippet", run_snippet of the JavaScript `1 + 2` against
// Sidecar.eval. The tools are listed first, as an agent does (the SDK then
// validates every structured output against the tool's output schema).
// The two are measured in alternating blocks so that load drift hits
// them alike; the ratio is the median of the blocks' ratios of p50s.
// Prints one JSON line ({"na": why} when the Node client has no eval).
//
//   node mcp.mjs '{"work": "export", "dist": ".../clients/node/dist/index.js", "sdk": ".../clients/node/node_modules/@modelcontextprotocol/sdk", "binary": "...", "wat": "...", ...}'
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { median, percentiles, sequential } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const { Sidecar } = await import(pathToFileURL(cfg.dist).href);
const { Client } = await import(pathToFileURL(`${cfg.sdk}/dist/esm/client/index.js`).href);
const { StdioClientTransport } = await import(pathToFileURL(`${cfg.sdk}/dist/esm/client/stdio.js`).href);

const wat = readFileSync(cfg.wat, "utf8");
const sb = await Sidecar.spawn({ binary: cfg.binary, args: ["--log-level", "warn"] });
if (cfg.work === "snippet" && typeof sb.eval !== "function") {
  await sb.close();
  console.log(JSON.stringify({ na: "the Node client has no eval yet (issue 22's clients)" }));
  process.exit(0);
}
const client = new Client({ name: "sandboxd-bench", version: "1" });
await client.connect(new StdioClientTransport({ command: cfg.binary, args: ["mcp", "--log-level", "warn"], stderr: "inherit" }));
await client.listTools();
const work = {
  export: {
    sidecar: async () => {
      const r = await sb.run({ wat, function: "add", args: [1, 2] });
      if (r.values[0] !== 3) throw new Error(`sidecar: ${JSON.stringify(r.values)}`);
    },
    mcp: async () => {
      const r = await client.callTool({ name: "run_export", arguments: { module: { wat }, function: "add", args: [1, 2] } });
      if (r.isError || r.structuredContent.values[0].value !== 3) throw new Error(`mcp: ${JSON.stringify(r)}`);
    },
  },
  snippet: {
    sidecar: async () => {
      const r = await sb.eval({ language: "js", code: "1 + 2" });
      if (r.value !== 3) throw new Error(`sidecar: ${JSON.stringify(r)}`);
    },
    mcp: async () => {
      const r = await client.callTool({ name: "run_snippet", arguments: { language: "js", code: "1 + 2" } });
      if (r.isError || r.structuredContent.value !== 3) throw new Error(`mcp: ${JSON.stringify(r)}`);
    },
  },
}[cfg.work];
try {
  const mcpSamples = [];
  const sidecarSamples = [];
  const ratios = [];
  for (let b = 0; b < cfg.blocks; b++) {
    const warm = b === 0 ? cfg.warm : 5;
    const per = Math.ceil(cfg.n / cfg.blocks);
    const s = await sequential(work.sidecar, warm, per);
    const m = await sequential(work.mcp, warm, per);
    sidecarSamples.push(...s);
    mcpSamples.push(...m);
    ratios.push(percentiles(m).p50_us / percentiles(s).p50_us);
  }
  const m = percentiles(mcpSamples);
  const s = percentiles(sidecarSamples);
  console.log(JSON.stringify({
    mcp_p50_us: m.p50_us, mcp_p99_us: m.p99_us, sidecar_p50_us: s.p50_us, sidecar_p99_us: s.p99_us,
    ratio: median(ratios), ratio_min: Math.min(...ratios), ratio_max: Math.max(...ratios), blocks: cfg.blocks,
  }));
} finally {
  await client.close();
  await sb.close();
}
