// The session core and the frame reader without a process: an in-memory
// stream stands for the sidecar's stdout, a recording writer for its stdin.
import assert from "node:assert/strict";
import { PassThrough, Writable } from "node:stream";
import { describe, it } from "node:test";

import { AbstractMessageWriter, NotificationType, type Message, type MessageWriter } from "vscode-jsonrpc/node";

import { Cancelled, InvalidParams, SidecarError } from "sandboxd";

import { FrameReader, FrameWriter } from "../dist/framing.js";
import { LogNotification, OutputNotification, RunRequest, StatsRequest } from "../dist/protocol.js";
import { Session, type RunState } from "../dist/session.js";

import { rejection } from "./helpers.js";

class RecordingWriter extends AbstractMessageWriter implements MessageWriter {
  readonly written: Message[] = [];
  fail = false;
  async write(msg: Message): Promise<void> {
    if (this.fail) throw new Error("EPIPE");
    this.written.push(msg);
  }
  end(): void {}
}

function frame(message: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(message), "utf8");
  return Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, "ascii"), body]);
}

function setup(hooks: { onWriteError?: (e: Error) => void } = {}) {
  const stdout = new PassThrough();
  const reader = new FrameReader(stdout);
  const writer = new RecordingWriter();
  const session = new Session(reader, writer, { stderrTail: () => "tail", ...hooks });
  const send = (m: unknown) => stdout.write(frame(m));
  return { stdout, reader, writer, session, send };
}

const flush = () => new Promise<void>((r) => setImmediate(r));

describe("FrameReader", () => {
  it("delivers every message whatever the chunking, before the end", async () => {
    const stdout = new PassThrough();
    const reader = new FrameReader(stdout);
    const got: string[] = [];
    let endedAfter = -1;
    reader.listen((m) => got.push((m as unknown as { method: string }).method));
    reader.onClose(() => (endedAfter = got.length));
    const bytes = Buffer.concat([frame({ jsonrpc: "2.0", method: "a" }), frame({ jsonrpc: "2.0", method: "é" })]);
    for (let i = 0; i < bytes.length; i++) stdout.write(bytes.subarray(i, i + 1));
    stdout.end();
    await flush();
    assert.deepEqual(got, ["a", "é"]);
    assert.equal(endedAfter, 2);
  });

  it("reads many frames from one chunk and a large body from many", async () => {
    const stdout = new PassThrough();
    const reader = new FrameReader(stdout);
    const got: unknown[] = [];
    reader.listen((m) => got.push(m));
    const small = [0, 1, 2].map((i) => ({ jsonrpc: "2.0", id: i, result: { n: "é".repeat(i) } }));
    const big = { jsonrpc: "2.0", id: 3, result: { s: "x✓".repeat(50_000) } };
    const bigFrame = frame(big);
    // three whole frames and the start of the fourth's header in one chunk, then the big body in three pieces
    stdout.write(Buffer.concat([...small.map(frame), bigFrame.subarray(0, 5)]));
    stdout.write(bigFrame.subarray(5, 40_000));
    stdout.write(bigFrame.subarray(40_000, 90_000));
    assert.equal(reader.midMessage, true);
    stdout.write(Buffer.concat([bigFrame.subarray(90_000), frame(small[0])]));
    await flush();
    assert.deepEqual(got, [...small, big, small[0]]);
    assert.equal(reader.midMessage, false);
  });

  for (const [name, bytes, pattern] of [
    ["no Content-Length", "X-Other: 1\r\n\r\n{}", /no Content-Length/],
    ["a bad Content-Length", "Content-Length: many\r\n\r\n{}", /Content-Length must be a number/],
    ["a body that is not JSON", "Content-Length: 3\r\n\r\n{x}", /not JSON/],
    ["an endless header", "Content-Length: 1" + " ".repeat(9000), /longer than 8192/],
  ] as const) {
    it(`reports ${name}`, async () => {
      const stdout = new PassThrough();
      const reader = new FrameReader(stdout);
      const errors: Error[] = [];
      reader.listen(() => assert.fail("no message expected"));
      reader.onError((e) => errors.push(e));
      stdout.write(bytes);
      await flush();
      assert.equal(errors.length, 1);
      assert.match(errors[0]!.message, pattern);
    });
  }
});

/** A stream that records each write call's bytes. */
class RecordingStream extends Writable {
  readonly chunks: Buffer[] = [];
  fail: Error | undefined;
  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.chunks.push(Buffer.from(chunk));
    done(this.fail);
  }
}

describe("FrameWriter", () => {
  it("writes the frames of one turn as one write, before the event loop turns, and they read back", async () => {
    const stream = new RecordingStream();
    const writer = new FrameWriter(stream);
    const messages = [
      { jsonrpc: "2.0" as const, id: 0, method: "run", params: { s: "héllo ✓" } },
      { jsonrpc: "2.0" as const, id: 1, method: "stats" },
      { jsonrpc: "2.0" as const, method: "$/cancelRequest", params: { id: 0 } },
    ];
    let immediate = false;
    setImmediate(() => (immediate = true));
    const done = messages.map((m) => writer.write(m));
    assert.equal(stream.chunks.length, 0, "nothing is written until the turn's code is done");
    await Promise.resolve();
    await new Promise<void>((r) => process.nextTick(r));
    assert.equal(immediate, false, "the batch went out before an event-loop iteration");
    assert.equal(stream.chunks.length, 1);
    assert.deepEqual(stream.chunks[0], Buffer.concat(messages.map(frame)));
    await Promise.all(done);

    const got: unknown[] = [];
    const pipe = new PassThrough();
    new FrameReader(pipe).listen((m) => got.push(m));
    pipe.write(stream.chunks[0]);
    await flush();
    assert.deepEqual(got, messages);

    await writer.write({ jsonrpc: "2.0", id: 2, method: "later" } as never);
    assert.equal(stream.chunks.length, 2, "a later turn is a later write");
  });

  it("rejects the writes of a batch the stream refused", async () => {
    const stream = new RecordingStream();
    stream.on("error", () => {});
    stream.fail = new Error("EPIPE");
    const writer = new FrameWriter(stream);
    const err = await rejection(writer.write({ jsonrpc: "2.0", id: 0, method: "run" } as never));
    assert.match(String(err), /EPIPE/);
  });
});

describe("Session", () => {
  it("numbers requests itself and routes logs to the run with that id", async () => {
    const { writer, session, send } = setup();
    const lines: string[] = [];
    const state: RunState = { logs: [], onLog: (l) => lines.push(l) };
    const run = session.request(RunRequest, { module: { wat: "(module)" } }, state);
    const stats = session.request(StatsRequest);
    assert.notEqual(run.id, stats.id);
    await flush();
    assert.deepEqual(
      writer.written.map((m) => [(m as unknown as { id: unknown }).id, (m as unknown as { method: string }).method]),
      [[run.id, "run"], [stats.id, "stats"]],
    );
    send({ jsonrpc: "2.0", method: LogNotification.method, params: { id: run.id, seq: 0, line: "one" } });
    send({ jsonrpc: "2.0", method: LogNotification.method, params: { id: stats.id, seq: 0, line: "not a run" } });
    send({ jsonrpc: "2.0", id: stats.id, result: { runs: {} } });
    send({ jsonrpc: "2.0", method: LogNotification.method, params: { id: run.id, seq: 1, line: "two" } });
    send({ jsonrpc: "2.0", id: run.id, result: { values: [] } });
    assert.deepEqual(await stats.result, { runs: {} });
    assert.deepEqual(await run.result, { values: [] });
    assert.deepEqual(lines, ["one", "two"]);
    assert.deepEqual(state.logs, ["one", "two"]);
    assert.equal(session.size, 0);
  });

  it("maps error responses to typed errors, with the run's logs and abort reason", async () => {
    const { session, send, writer } = setup();
    const state: RunState = { logs: [] };
    const run = session.request(RunRequest, { module: { wat: "" } }, state);
    state.abortReason = "user";
    session.cancel(run.id);
    await flush();
    assert.deepEqual(writer.written[1], { jsonrpc: "2.0", method: "$/cancelRequest", params: { id: run.id } });
    send({ jsonrpc: "2.0", method: "log", params: { id: run.id, seq: 0, line: "before" } });
    send({ jsonrpc: "2.0", id: run.id, error: { code: -32800, message: "cancelled", data: { kind: "cancelled" } } });
    const err = await rejection(run.result);
    assert.ok(err instanceof Cancelled, String(err));
    assert.deepEqual(err.logs, ["before"]);
    assert.equal(err.cause, "user");
    const bad = session.request(RunRequest, { module: { wat: "" } });
    send({ jsonrpc: "2.0", id: bad.id, error: { code: -32602, message: "limits.fuel: must be positive" } });
    assert.ok((await rejection(bad.result)) instanceof InvalidParams);
  });

  it("dispatches notifications by method, with the run their id names", async () => {
    const { session, send } = setup();
    const seen: [unknown, RunState | undefined][] = [];
    session.onNotification(new NotificationType<{ id: number; data: string }>("output"), (params, run) =>
      seen.push([params.data, run]),
    );
    const state: RunState = { logs: [] };
    const run = session.request(RunRequest, { module: { wat: "" } }, state);
    send({ jsonrpc: "2.0", method: "output", params: { id: run.id, data: "x" } });
    send({ jsonrpc: "2.0", method: "output", params: { id: 999, data: "y" } });
    send({ jsonrpc: "2.0", method: "unknown", params: {} }); // ignored
    await flush();
    assert.deepEqual(seen, [["x", state], ["y", undefined]]);
  });

  it("close fails what is pending and refuses what comes later", async () => {
    const { session } = setup();
    const a = session.request(StatsRequest);
    session.close(() => new SidecarError("gone", { reason: "exited" }));
    const later = session.request(StatsRequest);
    for (const p of [a.result, later.result]) {
      const err = await rejection(p);
      assert.ok(err instanceof SidecarError && err.message === "gone", String(err));
    }
  });

  it("a failed write keeps the request pending and tells the owner", async () => {
    const failures: Error[] = [];
    const { session, writer } = setup({ onWriteError: (e) => failures.push(e) });
    writer.fail = true;
    const a = session.request(StatsRequest);
    await flush();
    assert.equal(failures.length, 1);
    assert.equal(session.size, 1);
    session.close(() => new SidecarError("the sidecar died", { reason: "exited" }));
    assert.match(String(await rejection(a.result)), /the sidecar died/);
  });
});

describe("Session output", () => {
  it("passes each piece to onOutput as bytes, in order, and notes a gap or bad data", async () => {
    const { session, send } = setup();
    const pieces: [string, number[], number][] = [];
    const state: RunState = { logs: [], onOutput: (stream, data, seq) => pieces.push([stream, [...data], seq]) };
    const run = session.request(RunRequest, { module: { wat: "" } }, state);
    const out = (params: Record<string, unknown>) =>
      send({ jsonrpc: "2.0", method: OutputNotification.method, params: { id: run.id, ...params } });
    out({ seq: 0, stream: "stdout", data: { text: "hé" } });
    out({ seq: 1, stream: "stderr", data: { base64: "/wA=" } });
    send({ jsonrpc: "2.0", id: run.id, result: { values: [] } });
    await run.result;
    assert.deepEqual(pieces, [
      ["stdout", [0x68, 0xc3, 0xa9], 0],
      ["stderr", [0xff, 0x00], 1],
    ]);
    assert.equal(state.seqProblem, undefined);

    for (const [params, problem] of [
      [[{ seq: 0, stream: "stdout", data: { text: "a" } }, { seq: 2, stream: "stdout", data: { text: "c" } }], /seq 2 where 1/],
      [[{ seq: 0, stream: "stdin", data: { text: "a" } }], /malformed output notification/],
      [[{ seq: 0, stream: "stdout", data: "a" }], /malformed output notification/],
    ] as const) {
      const seen: number[] = [];
      const st: RunState = { logs: [], onOutput: (_s, _d, seq) => seen.push(seq) };
      const r = session.request(RunRequest, { module: { wat: "" } }, st);
      for (const p of params) send({ jsonrpc: "2.0", method: "output", params: { id: r.id, ...p } });
      send({ jsonrpc: "2.0", id: r.id, result: { values: [] } });
      await r.result;
      assert.match(st.seqProblem ?? "", problem);
      assert.ok(seen.length < params.length, "no callback for the bad piece");
    }
  });
});
