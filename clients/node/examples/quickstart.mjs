// Quickstart: spawn the sidecar, run guests, handle a failure, shut down.
//
//   make build                      # in the repository root: bin/sandboxd
//   cd clients/node && npm ci       # installs and builds the package
//   node examples/quickstart.mjs
//
// The binary is $SANDBOXD_BIN, else sandboxd on PATH, else bin/sandboxd of
// the checkout this package is in.
import { FuelExhausted, SandboxError, Sidecar, i64 } from "../dist/index.js";

const sb = await Sidecar.spawn();
try {
  console.log(`${sb.info.serverInfo.name} ${sb.info.serverInfo.version}, up to ${sb.info.maxConcurrency} runs at once`);

  // 1. Call an export with arguments, under limits.
  const add = await sb.run({
    wat: `(module (func (export "add") (param i32 i32) (result i32)
            local.get 0 local.get 1 i32.add))`,
    function: "add",
    args: [2, 40],
    limits: { fuel: 1_000_000, timeoutMs: 100, memoryBytes: 4 << 20 },
  });
  console.log(`add(2, 40) = ${add.values[0]} (fuel ${add.fuelConsumed}, ${add.elapsedMs} ms)`);

  // 2. i64 values are bigints.
  const wide = await sb.run({
    wat: `(module (func (export "twice") (param i64) (result i64)
            local.get 0 i64.const 2 i64.mul))`,
    function: "twice",
    args: [i64(2n ** 61n)],
  });
  console.log(`twice(2^61) = ${wide.values[0]}n`);

  // 3. Grant host::log and receive the guest's lines.
  const logged = await sb.run({
    wat: `(module (import "host" "log" (func $log (param i32 i32)))
            (memory (export "memory") 1)
            (data (i32.const 0) "hello from the guest")
            (func (export "run") (call $log (i32.const 0) (i32.const 20))))`,
    capabilities: { log: true },
    onLog: (line) => console.log(`guest says: ${line}`),
  });
  console.log(`logged ${logged.logs.length} line(s)`);

  // 4. A guest that never stops is stopped by its fuel budget.
  try {
    await sb.run({ wat: `(module (func (export "run") (loop $l (br $l))))`, limits: { fuel: 1_000_000 } });
  } catch (err) {
    if (err instanceof FuelExhausted) {
      console.log(`${err.name}: budget ${err.budget}, consumed ${err.fuelConsumed}`);
    } else if (err instanceof SandboxError) {
      console.log(`unexpected ${err.kind}: ${err.message}`);
    } else {
      throw err;
    }
  }

  // 5. Compile once, run many times.
  const mod = await sb.compile({
    wat: `(module (func (export "sq") (param f64) (result f64) local.get 0 local.get 0 f64.mul))`,
  });
  const squares = await Promise.all([1.5, 2, 3].map((x) => sb.run({ module: mod, function: "sq", args: [x] })));
  console.log(`squares: ${squares.map((r) => r.values[0]).join(", ")}`);

  const stats = await sb.stats();
  console.log(`runs: ${JSON.stringify(stats.runs)}`);
} finally {
  await sb.close();
}
