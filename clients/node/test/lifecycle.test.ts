// Sidecar lifecycle against the real binary: close, dispose, stats, busy,
// a killed sidecar, a missing binary, and the quickstart example.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";

import { BUILD_HINT, Cancelled, ERROR_KINDS, FuelExhausted, Sidecar, SidecarError, findBinary, findCheckout } from "sandboxd";

import { binaryPath, packageDir, plainEnv, rejection, requireBinary, sleep, spawnSidecar, waitFor, watPath } from "./helpers.js";

const run = promisify(execFile);

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("close", () => {
  it("shuts down (status 0), is idempotent, and refuses later calls", async () => {
    const sb = await spawnSidecar();
    const pid = sb.pid!;
    await sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 2] });
    assert.equal(sb.closed, false);
    await sb.close();
    assert.equal(sb.closed, true);
    assert.equal(processAlive(pid), false);
    await sb.close(); // again: no-op
    const err = await rejection(sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 2] }));
    assert.ok(err instanceof SidecarError, String(err));
    assert.equal(err.reason, "closed");
    assert.ok((await rejection(sb.stats())) instanceof SidecarError);
  });

  it("waits for in-flight runs before the process exits", async () => {
    const sb = await spawnSidecar();
    const p = sb.run({ path: watPath("well_behaved.wat"), function: "fib_loop", args: [30, 20000] });
    await sleep(10);
    const closing = sb.close();
    const r = await p;
    assert.deepEqual(r.values, [832040]);
    await closing;
  });

  it("leaves no timer behind that would keep a script alive after close", async () => {
    const program = `
      import { Sidecar } from ${JSON.stringify(join(packageDir, "dist", "index.js"))};
      const sb = await Sidecar.spawn({ binary: ${JSON.stringify(requireBinary())} });
      await sb.run({ wat: '(module (func (export "run")))' });
      await sb.close();
      console.log(JSON.stringify(process.getActiveResourcesInfo()));`;
    const { stdout } = await run(process.execPath, ["--input-type=module", "-e", program], { env: plainEnv(), timeout: 20_000 });
    const active = JSON.parse(stdout) as string[];
    assert.ok(!active.includes("Timeout"), `still active after close: ${stdout}`);
  });

  it("supports Symbol.asyncDispose", async () => {
    const sb = await spawnSidecar();
    const pid = sb.pid!;
    await sb[Symbol.asyncDispose]();
    assert.equal(processAlive(pid), false);
    assert.equal(sb.closed, true);
  });
});

describe("stats", () => {
  it("counts runs by outcome kind", async () => {
    const sb = await spawnSidecar();
    try {
      await sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 2] });
      await sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 2] });
      await rejection(sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1000 } }));
      await rejection(sb.run({ path: watPath("traps.wat"), function: "unreachable" }));
      const s = await sb.stats();
      assert.equal(s.runs["ok"], 2);
      assert.equal(s.runs["fuel_exhausted"], 1);
      assert.equal(s.runs["trap"], 1);
      assert.equal(s.runs["timeout"], 0);
      assert.deepEqual(
        Object.keys(s.runs).sort(),
        ["ok", ...Object.keys(ERROR_KINDS)].sort(),
      );
      assert.equal(s.inFlight, 0);
      assert.equal(s.queued, 0);
      assert.ok(s.requests >= 5, `requests ${s.requests}`);
      assert.ok(s.uptimeMs >= 0);
      assert.equal(typeof s.cache.entries, "number");
    } finally {
      await sb.close();
    }
  });
});

describe("busy", () => {
  it("a full queue answers -32000 busy as SidecarError", async () => {
    const sb = await spawnSidecar({ maxConcurrency: 1, args: ["--max-queue", "1"] });
    const acs = [new AbortController(), new AbortController()];
    try {
      const spin = (ac: AbortController) =>
        sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1e15, timeoutMs: 20_000 }, signal: ac.signal });
      // one runs, then one waits: the queue is full
      const first = spin(acs[0]!);
      const firstSettled = rejection(first);
      await waitFor(async () => (await sb.stats()).inFlight === 1, "the first run to start");
      const second = spin(acs[1]!);
      const settled = Promise.all([firstSettled, rejection(second)]);
      await waitFor(async () => (await sb.stats()).queued === 1, "the second run to be queued");
      const err = await rejection(sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 2] }));
      assert.ok(err instanceof SidecarError, String(err));
      assert.equal(err.reason, "busy");
      assert.equal(err.code, -32000);
      const data = err.data as { queued?: unknown; maxQueue?: unknown };
      assert.equal(data.queued, 1);
      assert.equal(data.maxQueue, 1);
      for (const ac of acs) ac.abort();
      for (const e of await settled) assert.ok(e instanceof Cancelled, String(e));
    } finally {
      for (const ac of acs) ac.abort();
      await sb.close();
    }
  });
});

describe("a killed sidecar", () => {
  it("rejects every pending call promptly with SidecarError, and a new Sidecar works", async () => {
    const stderr: string[] = [];
    const sb = await spawnSidecar({ args: ["--log-level", "debug"], onStderr: (t) => stderr.push(t) });
    const pending = [
      sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1e15, timeoutMs: 20_000 } }),
      sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1e15, timeoutMs: 20_000 } }),
      sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1e15, timeoutMs: 20_000 } }),
    ];
    await sleep(50);
    const started = performance.now();
    process.kill(sb.pid!, "SIGKILL");
    const errors = await Promise.all(pending.map(rejection));
    const ms = performance.now() - started;
    console.log(`pending calls of a killed sidecar rejected after ${ms.toFixed(1)} ms`);
    assert.ok(ms < 15_000, `took ${ms} ms: a hang bound; the runs' deadline (20 s) would be a Timeout`);
    for (const err of errors) {
      assert.ok(err instanceof SidecarError, String(err));
      assert.equal(err.reason, "exited");
      assert.equal(err.signal, "SIGKILL");
      assert.match(err.message, /SIGKILL/);
      assert.equal(typeof err.stderrTail, "string");
      assert.ok(err.stderrTail.length <= 4096);
    }
    // with --log-level debug the sidecar logs on start; the tail is what it wrote last
    const all = stderr.join("");
    const tail = (errors[0] as SidecarError).stderrTail;
    assert.ok(tail.length > 0, "empty stderr tail");
    assert.ok(all.endsWith(tail));
    assert.equal(sb.closed, true);
    const later = await rejection(sb.run({ path: watPath("well_behaved.wat"), function: "add", args: [1, 2] }));
    assert.ok(later instanceof SidecarError && later.reason === "exited");
    await sb.close(); // resolves: nothing left to close

    const fresh = await spawnSidecar();
    try {
      const r = await fresh.run({ path: watPath("well_behaved.wat"), function: "add", args: [2, 40] });
      assert.deepEqual(r.values, [42]);
    } finally {
      await fresh.close();
    }
  });

  it("kill() during a run rejects it with SidecarError", async () => {
    const sb = await spawnSidecar();
    const p = sb.run({ path: watPath("infinite_loop.wat"), limits: { fuel: 1e15, timeoutMs: 20_000 } });
    await sleep(20);
    sb.kill();
    const err = await rejection(p);
    assert.ok(err instanceof SidecarError && err.reason === "exited", String(err));
    assert.ok(!(err instanceof FuelExhausted));
  });
});

describe("a missing binary", () => {
  it("explicit path: SidecarError saying how to build it", async () => {
    const err = await rejection(Sidecar.spawn({ binary: "/nonexistent/dir/sandboxd" }));
    assert.ok(err instanceof SidecarError, String(err));
    assert.equal(err.reason, "missing");
    assert.ok(err.message.includes(BUILD_HINT), err.message);
    assert.match(err.message, /make build/);
    assert.match(err.message, /SANDBOXD_BIN/);
    assert.match(err.message, /\/nonexistent\/dir\/sandboxd/);
  });

  it("nothing given: $SANDBOXD_BIN, then the binary the package carries, then PATH, then the checkout's bin/", async () => {
    const saved = { bin: process.env["SANDBOXD_BIN"], path: process.env["PATH"] };
    const tmp = mkdtempSync(join(tmpdir(), "sandboxd-lookup-"));
    const fakeCheckout = (name: string, module: string, binary: boolean): string => {
      const root = join(tmp, name);
      mkdirSync(join(root, "bin"), { recursive: true });
      mkdirSync(join(root, "clients", "node"), { recursive: true });
      writeFileSync(join(root, "go.mod"), `// comment\nmodule ${module}\n\ngo 1.26\n`);
      if (binary) writeFileSync(join(root, "bin", "sandboxd"), "#!/bin/sh\n", { mode: 0o755 });
      return root;
    };
    try {
      delete process.env["SANDBOXD_BIN"];
      process.env["PATH"] = "/nonexistent-a:/nonexistent-b";
      const err = await rejection(Promise.resolve().then(() => findBinary(undefined, [tmp, "/"])));
      assert.ok(err instanceof SidecarError && err.reason === "missing", String(err));
      for (const part of ["$SANDBOXD_BIN is not set", "this package carries none", "no sandboxd on PATH", "inside a sandboxd checkout", tmp, BUILD_HINT]) {
        assert.ok(err.message.includes(part), `${JSON.stringify(part)} missing from: ${err.message}`);
      }

      // the checkout above the package, then above the cwd; other modules are not checkouts
      const repo = fakeCheckout("repo", "github.com/sandboxd/sandboxd", true);
      assert.equal(findBinary(undefined, [join(repo, "clients", "node"), "/"]), join(repo, "bin", "sandboxd"));
      assert.equal(findBinary(undefined, ["/", join(repo, "clients")]), join(repo, "bin", "sandboxd"));
      const other = fakeCheckout("other", "example.com/sandboxd", true);
      assert.equal(findCheckout(join(other, "clients")), undefined);
      assert.throws(() => findBinary(undefined, [join(other, "clients")]), SidecarError);
      const unbuilt = fakeCheckout("unbuilt", "github.com/sandboxd/sandboxd", false);
      assert.throws(() => findBinary(undefined, [unbuilt]), (e: Error) =>
        e.message.includes(`the sandboxd checkout at ${unbuilt} has no bin/sandboxd`));
      // this package is inside the real checkout
      assert.equal(findCheckout(packageDir), resolve(packageDir, "../.."));

      process.env["SANDBOXD_BIN"] = "/nonexistent/sandboxd-from-env";
      const fromEnv = await rejection(Sidecar.spawn());
      assert.ok(fromEnv instanceof SidecarError && fromEnv.reason === "missing");
      assert.match(fromEnv.message, /sandboxd-from-env/);

      // the binary found on PATH is used, before any checkout
      process.env["SANDBOXD_BIN"] = "";
      process.env["PATH"] = `/nonexistent-a:${join(requireBinary(), "..")}`;
      assert.equal(findBinary(undefined, [repo]), resolve(binaryPath));
      // the binary the package carries (npm pack's bin/) comes before PATH, after $SANDBOXD_BIN
      const packed = join(fakeCheckout("packed", "example.com/none", true), "bin");
      assert.equal(findBinary(undefined, [repo], packed), join(packed, "sandboxd"));
      process.env["SANDBOXD_BIN"] = binaryPath;
      assert.equal(findBinary(undefined, [repo], packed), resolve(binaryPath));
    } finally {
      if (saved.bin === undefined) delete process.env["SANDBOXD_BIN"];
      else process.env["SANDBOXD_BIN"] = saved.bin;
      process.env["PATH"] = saved.path;
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("a file that is not executable", async () => {
    const err = await rejection(Sidecar.spawn({ binary: join(packageDir, "package.json") }));
    assert.ok(err instanceof SidecarError && err.reason === "missing", String(err));
  });

  it("a binary that exits at once: SidecarError with its stderr", async () => {
    const err = await rejection(spawnSidecar({ args: ["--no-such-flag"] }));
    assert.ok(err instanceof SidecarError, String(err));
    assert.equal(err.reason, "exited");
    assert.ok(err.stderrTail.length > 0, "stderr tail is empty");
  });
});

describe("examples/quickstart.mjs", () => {
  it("runs and prints the results", async () => {
    const { stdout } = await run(process.execPath, [join(packageDir, "examples", "quickstart.mjs")], {
      env: { ...plainEnv(), SANDBOXD_BIN: requireBinary() },
      timeout: 20_000,
    });
    assert.match(stdout, /add\(2, 40\) = 42/);
    assert.match(stdout, /hello from the guest/);
    assert.match(stdout, /FuelExhausted/);
  });
});
