// WASI preview1 runs (wasi, onOutput) against the real sidecar and the test
// guests of testdata/wasi (argv[1] picks the mode: echo, args, env, cat,
// write, exit, tick, sleep, hog; see docs/wasi.md, *Test guests*).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import {
  Cancelled,
  DisallowedImport,
  InvalidParams,
  MemoryLimitExceeded,
  Timeout,
  type OutputStream,
  type Sidecar,
} from "sandboxd";

import { rejection, spawnSidecar, testdataDir } from "./helpers.js";

const C_GUEST = join(testdataDir, "wasi", "guest_c.wasm");
const RUST_GUEST = join(testdataDir, "wasi", "guest_rust.wasm");
const GO_GUEST = join(testdataDir, "wasi", "guest_go.wasm");

const bytes = (s: string | number[]) => (typeof s === "string" ? new TextEncoder().encode(s) : new Uint8Array(s));

let sb: Sidecar;
let allowed: string;
before(async () => {
  allowed = mkdtempSync(join(tmpdir(), "sandboxd-wasi-"));
  sb = await spawnSidecar({ args: ["--allow-dir", allowed] });
});
after(async () => {
  await sb?.close();
  rmSync(allowed, { recursive: true, force: true });
});

describe("wasi", () => {
  it("echoes stdin given as bytes or as a string", async () => {
    const seen: [OutputStream, Uint8Array, number][] = [];
    const r = await sb.run({
      path: C_GUEST,
      wasi: { args: ["echo"], stdin: bytes([0x68, 0x69, 0xff, 0x00]) },
      onOutput: (stream, data, seq) => seen.push([stream, data, seq]),
    });
    assert.equal(r.exitCode, 0);
    assert.deepEqual(r.stdout, bytes([0x68, 0x69, 0xff, 0x00]));
    assert.ok(r.stdout instanceof Uint8Array);
    assert.deepEqual(r.stderr, bytes("4 bytes\n"));
    assert.equal(r.outputTruncated, false);
    assert.deepEqual(seen.map(([st, d]) => [st, Buffer.from(d).toString("latin1")]).sort(), [
      ["stderr", "4 bytes\n"],
      ["stdout", "hi\xff\x00"],
    ]);
    assert.deepEqual(seen.map(([, , seq]) => seq), [0, 1]);
    const s = await sb.run({ path: C_GUEST, wasi: { args: ["echo"], stdin: "héllo" } });
    assert.deepEqual(s.stdout, bytes("héllo"));
    assert.deepEqual(s.stderr, bytes("6 bytes\n"));
  });

  it("passes args and exactly the env given", async () => {
    const r = await sb.run({ path: C_GUEST, wasi: { args: ["args", "one", "two words", ""] } });
    assert.deepEqual(r.stdout, bytes("one\ntwo words\n\n"));
    const e = await sb.run({ path: C_GUEST, wasi: { args: ["env"], env: { B: "2", A: "x=y" } } });
    assert.deepEqual(e.stdout, bytes("A=x=y\nB=2\n"));
    const none = await sb.run({ path: C_GUEST, capabilities: { wasi: { args: ["env"] } } });
    assert.deepEqual(none.stdout, bytes(""));
  });

  it("reads files given as strings and bytes", async () => {
    const r = await sb.run({
      path: C_GUEST,
      wasi: { args: ["cat", "/data/a.txt", "/data/b.bin"], files: { "/data/a.txt": "text\n", "/data/b.bin": bytes([0, 1, 0xfe]) } },
    });
    assert.equal(r.exitCode, 0);
    assert.deepEqual(r.stdout, new Uint8Array([...bytes("text\n"), 0, 1, 0xfe]));
    const missing = await sb.run({ path: C_GUEST, wasi: { args: ["cat", "/data/missing"] } });
    assert.equal(missing.exitCode, 1);
    assert.match(Buffer.from(missing.stderr).toString(), /\/data\/missing/);
  });

  it("writes to a writable dir, and not to a read-only one", async () => {
    const work = mkdtempSync(join(allowed, "work-"));
    const r = await sb.run({
      path: C_GUEST,
      wasi: { args: ["write", "/work/out.txt", "written by the guest"], dirs: [{ host: work, guest: "/work", writable: true }] },
    });
    assert.equal(r.exitCode, 0);
    assert.equal(readFileSync(join(work, "out.txt"), "utf8"), "written by the guest");
    const ro = await sb.run({ path: C_GUEST, wasi: { args: ["write", "/ro/out.txt", "no"], dirs: [{ host: work, guest: "/ro" }] } });
    assert.equal(ro.exitCode, 1);
    assert.match(Buffer.from(ro.stderr).toString(), /\/ro\/out\.txt/);
    assert.equal(readFileSync(join(work, "out.txt"), "utf8"), "written by the guest");
    const err = await rejection(sb.run({ path: C_GUEST, wasi: { args: ["cat", "/etc/passwd"], dirs: [{ host: "/etc" }] } }));
    assert.ok(err instanceof InvalidParams, String(err));
    assert.match(err.message, /capabilities\.wasi\.dirs\[0\]\.host.*--allow-dir/);
  });

  it("returns the exit code", async () => {
    for (const code of [0, 1, 3, 42, 125]) {
      const r = await sb.run({ path: C_GUEST, wasi: { args: ["exit", String(code)] } });
      assert.equal(r.exitCode, code);
    }
    assert.equal((await sb.run({ path: C_GUEST, wasi: true })).exitCode, 2); // usage
    const plain = await sb.run({ wat: `(module (func (export "run")))` });
    assert.equal(plain.exitCode, undefined);
    assert.deepEqual([plain.stdout.length, plain.stderr.length, plain.outputTruncated], [0, 0, false]);
  });

  it("streams output in order, before the run settles", async () => {
    const events: string[] = [];
    const r = await sb.run({
      path: C_GUEST,
      wasi: { args: ["tick", "3", "30"] },
      onOutput: (stream, data) => events.push(`${stream}:${Buffer.from(data).toString()}`),
    });
    // all before the promise settled; the sidecar sends what is pending
    // before each sleep, so no piece spans two ticks (a tick may come in
    // pieces: the 5 ms timer can fire between the guest's writes)
    const atSettle = [...events];
    assert.ok(atSettle.length >= 3, JSON.stringify(atSettle));
    assert.equal(atSettle.map((e) => e.replace(/^stdout:/, "")).join(""), "tick 1\ntick 2\ntick 3\n");
    for (const e of atSettle) {
      assert.ok(e.startsWith("stdout:") && (e.match(/\n/g) ?? []).length <= 1 && (!e.includes("\n") || e.endsWith("\n")), JSON.stringify(atSettle));
    }
    assert.deepEqual(r.stdout, bytes("tick 1\ntick 2\ntick 3\n"));
  });

  it("rejects with what onOutput threw, and keeps serving", async () => {
    const err = await rejection(
      sb.run({ path: C_GUEST, wasi: { args: ["tick", "2", "1"] }, onOutput: () => { throw new Error("callback failed"); } }),
    );
    assert.match((err as Error).message, /callback failed/);
    assert.equal((await sb.run({ path: C_GUEST, wasi: { args: ["exit", "0"] } })).exitCode, 0);
  });

  it("keeps the output so far on a timeout and a cancel", async () => {
    const seen: Uint8Array[] = [];
    const err = await rejection(
      sb.run({ path: C_GUEST, wasi: { args: ["tick", "100", "50"] }, limits: { timeoutMs: 300 }, onOutput: (_s, d) => seen.push(d) }),
    );
    assert.ok(err instanceof Timeout, String(err));
    assert.ok(Buffer.from(err.stdout!).toString().startsWith("tick 1\n"));
    assert.deepEqual(Buffer.concat(seen), Buffer.from(err.stdout!));
    assert.deepEqual([err.stderr, err.outputTruncated], [bytes(""), false]);

    const ac = new AbortController();
    const cancelled = await rejection(
      sb.run({ path: C_GUEST, wasi: { args: ["tick", "2", "30000"] }, limits: { timeoutMs: 60_000 }, signal: ac.signal, onOutput: () => ac.abort() }),
    );
    assert.ok(cancelled instanceof Cancelled, String(cancelled));
    assert.deepEqual(cancelled.stdout, bytes("tick 1\n"));
  });

  it("truncates at outputBytes and reports a memory hog", async () => {
    const r = await sb.run({ path: C_GUEST, wasi: { args: ["echo"], stdin: "x".repeat(5000) }, limits: { outputBytes: 1000 } });
    assert.deepEqual([r.stdout.length, r.outputTruncated], [1000, true]);
    const err = await rejection(sb.run({ path: C_GUEST, wasi: { args: ["hog"] }, limits: { memoryBytes: 8 << 20 } }));
    assert.ok(err instanceof MemoryLimitExceeded, String(err));
    assert.match(Buffer.from(err.stderr!).toString(), /malloc failed/);
  });

  it("refuses a WASI module without the grant", async () => {
    const err = await rejection(sb.run({ path: C_GUEST, function: "_start" }));
    assert.ok(err instanceof DisallowedImport, String(err));
    assert.match(err.message, /wasi_snapshot_preview1/);
    assert.match(err.message, /fd_write/);
  });

  it("refuses bad options before sending", async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ wasi: { argz: [] } }, /wasi: unknown key\(s\) argz/],
      [{ wasi: { args: "echo" } }, /wasi\.args must be an array/],
      [{ wasi: { args: ["a", 1] } }, /wasi\.args\[1\] must be a string/],
      [{ wasi: { env: { K: 1 } } }, /wasi\.env\.K must be a string/],
      [{ wasi: { stdin: 5 } }, /wasi\.stdin must be a string or a Uint8Array/],
      [{ wasi: { dirs: [{ guest: "/x" }] } }, /wasi\.dirs\[0\]\.host must be a string/],
      [{ wasi: { dirs: [{ host: "/x", writable: "yes" }] } }, /wasi\.dirs\[0\]\.writable must be a boolean/],
      [{ wasi: true, capabilities: { wasi: true } }, /not both/],
      [{ onOutput: () => {} }, /onOutput needs wasi/],
    ];
    for (const [extra, pattern] of cases) {
      const err = await rejection(sb.run({ path: C_GUEST, ...extra } as never));
      assert.ok(err instanceof InvalidParams, `${JSON.stringify(extra)}: ${String(err)}`);
      assert.match((err as Error).message, pattern);
    }
  });

  it("runs the Rust and Go guests", async () => {
    for (const guest of [RUST_GUEST, GO_GUEST]) {
      const r = await sb.run({ path: guest, wasi: { args: ["echo"], stdin: "from stdin" }, limits: { timeoutMs: 60_000 } });
      assert.deepEqual([r.exitCode, Buffer.from(r.stdout).toString()], [0, "from stdin"], guest);
      const x = await sb.run({ path: guest, wasi: { args: ["exit", "5"] }, limits: { timeoutMs: 60_000 } });
      assert.equal(x.exitCode, 5, guest);
    }
  });
});
