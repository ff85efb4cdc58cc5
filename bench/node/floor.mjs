// Raw Node pipe floor: Content-Length ping-pong of a run-sized message with
// the Go echo child, using only child_process and Buffers — what the Node
// client cannot go below. Prints one JSON line: {"p50_us", "p99_us"}.
//
//   node floor.mjs '{"echo": "/path/to/harness", "echoEnv": "NAME", "message": "...", "warm": 500, "n": 5000}'
import { spawn } from "node:child_process";
import { framer, percentiles, frame } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const child = spawn(cfg.echo, [], { env: { ...process.env, [cfg.echoEnv]: "1" }, stdio: ["pipe", "pipe", "inherit"] });
let waiting = null;
child.stdout.on("data", framer(() => waiting()));

const msg = frame(cfg.message);
const roundTrip = () => new Promise((resolve) => { waiting = resolve; child.stdin.write(msg); });

const samples = [];
for (let i = 0; i < cfg.warm + cfg.n; i++) {
  const t = process.hrtime.bigint();
  await roundTrip();
  if (i >= cfg.warm) samples.push(Number(process.hrtime.bigint() - t) / 1000);
}
child.stdin.end();
console.log(JSON.stringify(percentiles(samples)));
