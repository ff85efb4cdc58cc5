// Helpers shared by the Node benchmark scripts.
import { spawn } from "node:child_process";

/** Content-Length frame of a UTF-8 JSON text. */
export function frame(text) {
  const body = Buffer.from(text, "utf8");
  return Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`), body]);
}

/** A stdout 'data' listener that calls onFrame(body) per complete frame. */
export function framer(onFrame) {
  let buf = Buffer.alloc(0);
  return (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    for (;;) {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const m = /Content-Length: (\d+)/i.exec(buf.subarray(0, end).toString());
      const n = Number(m[1]);
      if (buf.length < end + 4 + n) return;
      const body = buf.subarray(end + 4, end + 4 + n);
      buf = buf.subarray(end + 4 + n);
      onFrame(body);
    }
  };
}

/** p50/p99 of microsecond samples, nearest rank. */
export function percentiles(samples) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (p) => s[Math.max(0, Math.min(s.length - 1, Math.round((p / 100) * s.length) - 1))];
  return { p50_us: at(50), p99_us: at(99), n: s.length };
}

/** Sequential latency samples (µs) of an async call. */
export async function sequential(call, warm, n) {
  const samples = [];
  for (let i = 0; i < warm + n; i++) {
    const t = process.hrtime.bigint();
    await call();
    if (i >= warm) samples.push(Number(process.hrtime.bigint() - t) / 1000);
  }
  return samples;
}

/** Calls/s of `call` kept `depth` in flight for `ms` milliseconds. */
export async function throughput(call, depth, ms) {
  let done = 0;
  const start = performance.now();
  const deadline = start + ms;
  const worker = async () => {
    while (performance.now() < deadline) {
      await call();
      done++;
    }
  };
  await Promise.all(Array.from({ length: depth }, worker));
  return done / ((performance.now() - start) / 1000);
}

/**
 * The raw Node pipe floor: Content-Length ping-pong of a run-sized message
 * with the Go echo child, using only child_process and Buffers — what a Node
 * client cannot go below. roundTrip() is one ping-pong, so that a script can
 * time blocks of it alternating with what the floor judges
 * (cfg: echo, echoEnv, message).
 */
export function pipeFloor(cfg) {
  const child = spawn(cfg.echo, [], { env: { ...process.env, [cfg.echoEnv]: "1" }, stdio: ["pipe", "pipe", "inherit"] });
  let waiting = null;
  child.stdout.on("data", framer(() => waiting()));
  const msg = frame(cfg.message);
  const roundTrip = () => new Promise((resolve) => { waiting = resolve; child.stdin.write(msg); });
  return { roundTrip, close: () => child.stdin.end() };
}

/** Median of numbers. */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}
