// Raw Node pipe floor on its own (the harness measures it inside
// client.mjs, in blocks alternating with the client): Content-Length
// ping-pong of a run-sized message with the Go echo child. Prints one JSON
// line: {"p50_us", "p99_us"}.
//
//   node floor.mjs '{"echo": "/path/to/harness", "echoEnv": "NAME", "message": "...", "warm": 500, "n": 5000}'
import { percentiles, pipeFloor, sequential } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const floor = pipeFloor(cfg);
const samples = await sequential(floor.roundTrip, cfg.warm, cfg.n);
floor.close();
console.log(JSON.stringify(percentiles(samples)));
