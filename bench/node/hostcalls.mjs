// Row 17 for this project's Node client (clients/node/dist): host calls on a
// warm instance of testdata/plugins/wat/host_relay.wat, served by an async
// handler.
//
// - A host call's round trip: the time between two calls of the handler
//   inside one `relay` call (16 bytes each way), against a `call` of `echo`
//   (16 bytes in and out), in alternating blocks.
// - A call making one host call (`relay` answered empty at once) against
//   the same `echo` call (info: the whole extra cost).
// - 1 MiB into the plugin as the host function's answer (`fetch`) against
//   the same MiB as a call's input (`sink`), in alternating blocks.
//
// The verdicts read the median of the blocks' ratios of p50s. Prints one JSON line.
//
//   node hostcalls.mjs '{"dist": ".../clients/node/dist/index.js", "binary": "...", "plugin": ".../host_relay.wat", "warm": 50, "perCall": 10, "n": 4000, "nOne": 1000, "nMiB": 200, "blocks": 40}'
import { randomBytes } from "node:crypto";
import { pathToFileURL } from "node:url";
import { median, percentiles, sequential } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const { Sidecar } = await import(pathToFileURL(cfg.dist).href);

const mib = randomBytes(1 << 20);
const small = mib.subarray(0, 16);

// The instance's handler of extism:host/user::relay: relay `stop` calls
// then answer empty (recording when each call came), or answer `answer`.
const relay = { stamps: [], stop: 0, answer: null };
const handler = ([data]) => {
  if (relay.answer !== null) return relay.answer;
  relay.stamps.push(process.hrtime.bigint());
  return relay.stamps.length <= relay.stop ? data : new Uint8Array(0);
};
const expect = (calls) => Object.assign(relay, { stamps: [], stop: calls, answer: null });
const gaps = (warm) => relay.stamps.slice(warm).slice(1).map((t, i) => Number(t - relay.stamps[warm + i]) / 1000);

/** The figures of subject blocks alternating with floor blocks (as benchlib.paired). */
async function measure(prefix, n, firstWarm, floorCall, subjectBlock, subjectWarm = 5) {
  const per = Math.max(Math.floor(n / cfg.blocks), 1);
  const fl = [];
  const sub = [];
  const ratios = [];
  for (let b = 0; b < cfg.blocks; b++) {
    const warm = b === 0 ? firstWarm : subjectWarm;
    const f = await sequential(floorCall, warm, per);
    const s = await subjectBlock(warm, per);
    fl.push(...f);
    sub.push(...s);
    ratios.push(percentiles(s).p50_us / percentiles(f).p50_us);
  }
  const s = percentiles(sub);
  const f = percentiles(fl);
  return {
    [`${prefix}_p50_us`]: s.p50_us, [`${prefix}_p99_us`]: s.p99_us,
    [`${prefix}_floor_p50_us`]: f.p50_us, [`${prefix}_floor_p99_us`]: f.p99_us,
    [`${prefix}_ratio`]: median(ratios), [`${prefix}_ratio_min`]: Math.min(...ratios), [`${prefix}_ratio_max`]: Math.max(...ratios),
    [`${prefix}_blocks`]: ratios.length,
  };
}

const sb = await Sidecar.spawn({ binary: cfg.binary, args: ["--log-level", "warn"] });
const out = {};
try {
  const p = await sb.plugin({
    path: cfg.plugin,
    hostFunctions: [{ module: "extism:host/user", name: "relay", params: ["bytes"], results: ["bytes"], handler }],
    limits: { memoryBytes: 64 << 20, outputBytes: 4 << 20, timeoutMs: 60_000 },
  });
  try {
    const echo = async () => {
      if ((await p.call("echo", small)).output.length !== 16) throw new Error("echo lost its bytes");
    };
    // Round trips timed in relay calls of cfg.perCall host calls each (the first
    // makes warm more): a relay of hundreds was seen to slow the calls
    // right after it, which would inflate the floor blocks (hostcalls.go).
    const trips = async (warm, n) => {
      const samples = [];
      while (samples.length < n) {
        const skip = samples.length === 0 ? warm : 0;
        const count = Math.min(cfg.perCall, n - samples.length);
        expect(skip + count);
        if ((await p.call("relay", small)).output.length !== 16) throw new Error("relay lost its bytes");
        if (relay.stamps.length !== skip + count + 1) throw new Error(`relay made ${relay.stamps.length} host calls`);
        samples.push(...gaps(skip));
      }
      return samples;
    };
    Object.assign(out, await measure("seq", cfg.n, 50, echo, trips, cfg.warm));
    const once = () => { expect(0); return p.call("relay", small); };
    Object.assign(out, await measure("one", cfg.nOne, 50, echo, (warm, n) => sequential(once, warm, n)));
    const sink = () => p.call("sink", mib);
    const fetch = () => p.call("fetch", small);
    const fetchBlock = (warm, n) => { relay.answer = mib; return sequential(fetch, warm, n); };
    Object.assign(out, await measure("mib", cfg.nMiB, 3, sink, fetchBlock, 1));
  } finally {
    await p.release();
  }
} catch (err) {
  out.error = String(err?.message ?? err).split("\n")[0];
} finally {
  await sb.close();
}
console.log(JSON.stringify(out));
