/**
 * Reading `Content-Length` frames from the sidecar's stdout, and writing
 * them to its stdin.
 *
 * vscode-jsonrpc's StreamMessageReader decodes each message in a later
 * macrotask (a semaphore turn per message), so the stream's end can be
 * reported while messages read before it are still undelivered, and a dying
 * sidecar's last answers would race its death. {@link FrameReader} decodes
 * synchronously in the stream's `data` handler instead: every message read
 * before the end of the stream has been delivered when `onClose` fires,
 * which is the order teardown needs, by construction.
 *
 * vscode-jsonrpc's StreamMessageWriter takes a semaphore turn per message,
 * and the semaphore runs each turn in a `setImmediate`: every request waits
 * for an event-loop iteration before it is written, and under load the
 * messages leave one per iteration. It also writes the header and the body
 * as two writes, the body only after the header's write completed, so the
 * sidecar reads each request in two pieces. {@link FrameWriter} writes each
 * frame as one piece, in the same turn of the event loop, and the frames of
 * one turn as one write.
 *
 * @module
 */
import {
  AbstractMessageReader,
  AbstractMessageWriter,
  Disposable,
  type DataCallback,
  type Message,
  type MessageWriter,
} from "vscode-jsonrpc/node";

/** A header block longer than this is a broken stream, not a message. */
const MAX_HEADER_BYTES = 8192;
const HEADER_END = Buffer.from("\r\n\r\n", "ascii");

/** A MessageReader of `Content-Length`-framed JSON messages (LSP base protocol). */
export class FrameReader extends AbstractMessageReader {
  private chunks: Buffer[] = [];
  private size = 0;
  /** Body length of the message being read; -1 while reading its headers. */
  private bodyLength = -1;
  private failed = false;

  constructor(private readonly stream: NodeJS.ReadableStream) {
    super();
  }

  /** Bytes of a message that has started but not ended (for "torn message" reports). */
  get midMessage(): boolean {
    return this.size > 0 || this.bodyLength >= 0;
  }

  listen(callback: DataCallback): Disposable {
    const onData = (chunk: Buffer) => {
      if (this.failed) return;
      try {
        this.feed(chunk, callback);
      } catch (err) {
        this.failed = true;
        this.fireError(err);
      }
    };
    const onEnd = () => this.fireClose();
    const onError = (err: Error) => this.fireError(err);
    this.stream.on("data", onData);
    this.stream.on("end", onEnd);
    this.stream.on("error", onError);
    return Disposable.create(() => {
      this.stream.off("data", onData);
      this.stream.off("end", onEnd);
      this.stream.off("error", onError);
    });
  }

  /**
   * Reads every whole frame of the bytes so far. Frames are decoded from
   * offsets into the chunk (no copy, no Buffer view per frame); only an
   * unfinished frame's bytes are kept, and a body that arrives in many
   * chunks is joined once, when the last one is in.
   */
  private feed(chunk: Buffer, callback: DataCallback): void {
    let buf = chunk;
    if (this.chunks.length > 0) {
      this.chunks.push(chunk);
      this.size += chunk.length;
      if (this.bodyLength >= 0 && this.size < this.bodyLength) return;
      buf = Buffer.concat(this.chunks, this.size);
    }
    let pos = 0;
    for (;;) {
      if (this.bodyLength < 0) {
        const end = buf.indexOf(HEADER_END, pos);
        if (end < 0) {
          if (buf.length - pos > MAX_HEADER_BYTES) throw new Error(`message header longer than ${MAX_HEADER_BYTES} bytes`);
          break;
        }
        this.bodyLength = soleContentLength(buf, pos, end) ?? contentLength(buf.toString("ascii", pos, end));
        pos = end + HEADER_END.length;
      }
      if (buf.length - pos < this.bodyLength) break;
      const text = buf.toString("utf8", pos, pos + this.bodyLength);
      pos += this.bodyLength;
      this.bodyLength = -1;
      let message: Message;
      try {
        message = JSON.parse(text) as Message;
      } catch (err) {
        throw new Error(`message body is not JSON: ${(err as Error).message}`);
      }
      callback(message);
    }
    if (pos < buf.length) {
      this.chunks = [pos === 0 ? buf : buf.subarray(pos)];
      this.size = buf.length - pos;
    } else {
      this.chunks = [];
      this.size = 0;
    }
  }
}

const CONTENT_LENGTH = Buffer.from("Content-Length: ", "ascii");

/**
 * The body length when the header block `buf[start:end]` is exactly
 * `Content-Length: <digits>`, the one header sandboxd writes, read from the
 * bytes without decoding the block; else `undefined` (the general parser
 * decides).
 */
function soleContentLength(buf: Buffer, start: number, end: number): number | undefined {
  const digits = start + CONTENT_LENGTH.length;
  if (end <= digits || end > digits + 15 || buf.compare(CONTENT_LENGTH, 0, CONTENT_LENGTH.length, start, digits) !== 0) return undefined;
  let n = 0;
  for (let i = digits; i < end; i++) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) return undefined;
    n = n * 10 + d;
  }
  return n;
}

function contentLength(headers: string): number {
  for (const line of headers.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon < 0) throw new Error(`malformed header line ${JSON.stringify(line)}`);
    if (line.slice(0, colon).trim().toLowerCase() !== "content-length") continue;
    const value = line.slice(colon + 1).trim();
    if (!/^\d+$/.test(value)) throw new Error(`Content-Length must be a number, got ${JSON.stringify(value)}`);
    return Number(value);
  }
  throw new Error(`message header has no Content-Length: ${JSON.stringify(headers)}`);
}

/** The frames of one turn and the promise their write settles. */
interface Batch {
  text: string;
  done: Promise<void>;
  resolve: () => void;
  reject: (error: Error) => void;
}

/**
 * A MessageWriter of `Content-Length` frames. A message is encoded at once
 * and queued; the queue is written as one `stream.write` when the current
 * turn's synchronous code and promise continuations are done
 * (`process.nextTick`), before the event loop polls again. So a lone request
 * leaves without an event-loop hop, and many requests made in one turn
 * leave in one write. `write` resolves once its batch is handed to the
 * operating system and rejects if that fails.
 */
export class FrameWriter extends AbstractMessageWriter implements MessageWriter {
  private batch: Batch | undefined;
  private readonly flush = () => this.doFlush();

  constructor(private readonly stream: NodeJS.WritableStream) {
    super();
    stream.on("error", (err: Error) => this.fireError(err));
    stream.on("close", () => this.fireClose());
  }

  write(message: Message): Promise<void> {
    const body = JSON.stringify(message);
    const frame = `Content-Length: ${Buffer.byteLength(body, "utf8")}\r\n\r\n${body}`;
    if (this.batch !== undefined) {
      this.batch.text += frame;
      return this.batch.done;
    }
    let resolve!: () => void;
    let reject!: (error: Error) => void;
    const done = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.batch = { text: frame, done, resolve, reject };
    process.nextTick(this.flush);
    return done;
  }

  end(): void {
    this.doFlush();
    this.stream.end();
  }

  private doFlush(): void {
    const batch = this.batch;
    if (batch === undefined) return;
    this.batch = undefined;
    try {
      this.stream.write(batch.text, "utf8", (err?: Error | null) => (err ? batch.reject(err) : batch.resolve()));
    } catch (err) {
      batch.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }
}
