// Where the Node client's sequential round trip goes, against raw JSON-RPC
// from Node to a second sidecar of the same binary, in alternating blocks:
// call → write(2) of the request (the client's encoding), write → first data
// event of the answer (pipe and sidecar), data → the caller resumed (the
// client's decoding and dispatch). A diagnostic for docs/performance.md, not a
// harness row: it stamps the client's child stdio by reaching into its
// private fields (sb.process.child), which may change.
//
//   node stages.mjs '{"dist": ".../clients/node/dist/index.js", "binary": ".../bin/sandboxd", "wat": ".../well_behaved.wat"}'
import { spawn } from "node:child_process";
import { pathToFileURL } from "node:url";
import { framer } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const { Sidecar } = await import(pathToFileURL(cfg.dist).href);
const bin = cfg.binary, wat = cfg.wat;
const now = () => Number(process.hrtime.bigint()) / 1000;
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };
let tW = 0, tD = 0;
function stamp(stdin, stdout) {
  const w = stdin.write.bind(stdin);
  stdin.write = (...a) => { tW = now(); return w(...a); };
  stdout.prependListener("data", () => { tD = now(); });
}
const sb = await Sidecar.spawn({ binary: bin, args: ["--log-level", "warn"] });
stamp(sb.process.child.stdin, sb.process.child.stdout);
const mod = await sb.compile({ path: wat });
const child = spawn(bin, ["serve", "--log-level", "warn"], { stdio: ["pipe", "pipe", "inherit"] });
stamp(child.stdin, child.stdout);
let waiting; child.stdout.on("data", framer((b) => waiting(JSON.parse(b.toString()))));
let id = 0;
const raw = (method, params) => new Promise((r) => { waiting = r; const body = JSON.stringify({ jsonrpc: "2.0", id: id++, method, params }); child.stdin.write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`); });
await raw("initialize", {});
const rid = (await raw("compile", { module: { path: wat } })).result.moduleId;
const P = { module: { id: rid }, function: "add", args: [1, 2] };
const res = { client: [[], [], [], []], raw: [[], [], [], []] };
for (let b = 0; b < 8; b++) {
  for (const [name, fn] of [["client", () => sb.run({ module: mod, function: "add", args: [1, 2] })], ["raw", () => raw("run", P)]]) {
    for (let i = 0; i < 700; i++) {
      const a = now(); await fn(); const d = now();
      if (i < 100) continue;
      const r = res[name]; r[0].push(tW - a); r[1].push(tD - tW); r[2].push(d - tD); r[3].push(d - a);
    }
  }
}
const out = {};
for (const [name, r] of Object.entries(res)) {
  out[name] = { call_to_write_us: med(r[0]), write_to_data_us: med(r[1]), data_to_resumed_us: med(r[2]), total_us: med(r[3]) };
}
console.log(JSON.stringify(out));
child.stdin.end(); await sb.close();
