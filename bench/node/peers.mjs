// Peers of the sidecar in Node: @extism/extism (a plugin built to its ABI)
// and bare V8 WebAssembly with no limits, both in-process, both called
// sequentially like the sidecar row they are compared with. Prints one
// JSON line; a peer that cannot run reports {"<peer>_error": "..."}.
//
// The plugins of testdata/plugins (the WAT one and the Go PDK one) run
// under two Extism JS SDKs: 1.0.3, the latest release (in-process, no
// timeout option), and 2.0.0-rc13 (npm alias extism-next), whose
// `timeoutMs` works only with `runInWorker: true` (the plugin runs in a
// worker thread that is terminated and restarted on a timeout).
//
//   node peers.mjs '{"wasm": "well_behaved.wasm", "extismWasm": "extism_guest.wasm", "watPlugin": "plugin.wasm",
//                    "goPlugin": ".../testdata/plugins/go/plugin.wasm", "pluginTimeoutMs": 1000, "fibN": 50, "fibReps": 1000, "durationMs": 1500}'
import { readFileSync } from "node:fs";
import { percentiles, sequential, throughput } from "./lib.mjs";

const cfg = JSON.parse(process.argv[2]);
const out = {};

// syncRate is calls/s of a synchronous function over cfg.durationMs.
function syncRate(fn) {
  let done = 0;
  const start = performance.now();
  const deadline = start + cfg.durationMs;
  while (performance.now() < deadline) {
    for (let i = 0; i < 16; i++) fn();
    done += 16;
  }
  return done / ((performance.now() - start) / 1000);
}

async function bareV8() {
  const module = new WebAssembly.Module(readFileSync(cfg.wasm));
  const { exports } = new WebAssembly.Instance(module, {});
  out.v8_add_calls_per_s = syncRate(() => exports.add(1, 2));
  out.v8_fib_calls_per_s = syncRate(() => exports.fib_loop(cfg.fibN, cfg.fibReps));
  // Closer to what a sandbox does per call: a fresh instance each time.
  out.v8_instantiate_add_calls_per_s = syncRate(() => new WebAssembly.Instance(module, {}).exports.add(1, 2));
}

// extismInput packs two i32s as the 8 bytes the guest reads with input_load_u64.
function extismInput(a, b) {
  const buf = new Uint8Array(8);
  const view = new DataView(buf.buffer);
  view.setInt32(0, a, true);
  view.setInt32(4, b, true);
  return buf;
}

async function extism() {
  const { default: createPlugin } = await import("@extism/extism");
  const plugin = await createPlugin({ wasm: [{ data: readFileSync(cfg.extismWasm) }] }, { useWasi: false });
  try {
    const check = await plugin.call("add", extismInput(40, 2));
    const got = check.getInt32(0, true);
    if (got !== 42) throw new Error(`extism add(40, 2) returned ${got}`);
    // The JS SDK keeps every input/output block of every call until
    // reset(); after ~16k calls its 16-bit block index overflows and calls
    // fail. Resetting every 1024 calls (timed) is what a long-lived host must do.
    let calls = 0;
    const call = async (name, input) => {
      await plugin.call(name, input);
      if (++calls % 1024 === 0) await plugin.reset();
    };
    const add = extismInput(1, 2);
    const fib = extismInput(cfg.fibN, cfg.fibReps);
    out.extism_add_calls_per_s = await throughput(() => call("add", add), 1, cfg.durationMs);
    out.extism_fib_calls_per_s = await throughput(() => call("fib_loop", fib), 1, cfg.durationMs);
  } finally {
    await plugin.close();
  }
}

// The plugin peers: `greet` of each test plugin, sequentially, per SDK and mode.
async function extismPlugins() {
  const sdks = [
    { key: "extism1", load: () => import("@extism/extism"), opts: {} },
    { key: "extism2", load: () => import("extism-next"), opts: {} },
    { key: "extism2_timeout", load: () => import("extism-next"), opts: { runInWorker: true, timeoutMs: cfg.pluginTimeoutMs } },
  ];
  const guests = [
    { key: "wat", file: cfg.watPlugin, wasi: false, want: "Hello, Ada" },
    { key: "go", file: cfg.goPlugin, wasi: true, want: "Hello, Ada!" },
  ];
  for (const sdk of sdks) {
    const { default: createPlugin } = await sdk.load();
    for (const guest of guests) {
      const key = `${sdk.key}_${guest.key}_greet`;
      if (!guest.file) continue;
      let plugin;
      try {
        plugin = await createPlugin({ wasm: [{ data: readFileSync(guest.file) }] }, { useWasi: guest.wasi, ...sdk.opts });
        const got = (await plugin.call("greet", "Ada"))?.text();
        if (got !== guest.want) throw new Error(`greet("Ada") returned ${JSON.stringify(got)}`);
        let calls = 0;
        const greet = async () => {
          await plugin.call("greet", "Ada");
          if (++calls % 1024 === 0) await plugin.reset(); // see extism() above
        };
        out[`${key}_p50_us`] = percentiles(await sequential(greet, cfg.warm ?? 200, cfg.n ?? 2000)).p50_us;
        out[`${key}_calls_per_s`] = await throughput(greet, 1, cfg.durationMs);
      } catch (err) {
        out[`${key}_error`] = String(err?.message ?? err).split("\n")[0];
      } finally {
        await plugin?.close();
      }
    }
  }
}

for (const [name, fn] of [["v8", bareV8], ["extism", extism], ["extism_plugins", extismPlugins]]) {
  try {
    await fn();
  } catch (err) {
    out[`${name}_error`] = String(err?.message ?? err).split("\n")[0];
  }
}
console.log(JSON.stringify(out));
