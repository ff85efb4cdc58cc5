/**
 * Reading `Content-Length` frames from the sidecar's stdout.
 *
 * vscode-jsonrpc's StreamMessageReader decodes each message in a later
 * macrotask (a semaphore turn per message), so the stream's end can be
 * reported while messages read before it are still undelivered, and a dying
 * sidecar's last answers would race its death. {@link FrameReader} decodes
 * synchronously in the stream's `data` handler instead: every message read
 * before the end of the stream has been delivered when `onClose` fires,
 * which is the order teardown needs, by construction. Writing uses
 * vscode-jsonrpc's StreamMessageWriter.
 *
 * @module
 */
import { AbstractMessageReader, Disposable, type DataCallback, type Message } from "vscode-jsonrpc/node";

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

  private joined(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks, this.size)];
    return this.chunks[0] ?? Buffer.alloc(0);
  }

  private keep(rest: Buffer): void {
    this.chunks = rest.length > 0 ? [rest] : [];
    this.size = rest.length;
  }

  private feed(chunk: Buffer, callback: DataCallback): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    for (;;) {
      if (this.bodyLength < 0) {
        const buf = this.joined();
        const end = buf.indexOf(HEADER_END);
        if (end < 0) {
          if (buf.length > MAX_HEADER_BYTES) throw new Error(`message header longer than ${MAX_HEADER_BYTES} bytes`);
          return;
        }
        this.bodyLength = contentLength(buf.subarray(0, end).toString("ascii"));
        this.keep(buf.subarray(end + HEADER_END.length));
      }
      if (this.size < this.bodyLength) return;
      const buf = this.joined();
      const body = buf.subarray(0, this.bodyLength);
      this.keep(buf.subarray(this.bodyLength));
      this.bodyLength = -1;
      let message: Message;
      try {
        message = JSON.parse(body.toString("utf8")) as Message;
      } catch (err) {
        throw new Error(`message body is not JSON: ${(err as Error).message}`);
      }
      callback(message);
    }
  }
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
