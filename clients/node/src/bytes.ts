/**
 * Bytes on the wire (docs/protocol.md, *WASI programs*): an input is a JSON
 * string (its UTF-8 bytes) or `{"base64": ...}`; an output is
 * `{"text": ...}` when the bytes are valid UTF-8, else `{"base64": ...}`.
 *
 * @module
 */

/** A byte string as the protocol carries it. */
export type WireBytes = string | { text: string } | { base64: string };

/** An input as sent: a string as itself, bytes as base64. */
export function encodeBytes(value: string | Uint8Array): WireBytes {
  if (typeof value === "string") return value;
  return { base64: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("base64") };
}

/** The bytes an output object carries, or `undefined` if it is not one. */
export function decodeBytes(wire: unknown): Uint8Array | undefined {
  if (wire === null || typeof wire !== "object") return undefined;
  const o = wire as { text?: unknown; base64?: unknown };
  if (typeof o.text === "string") return new TextEncoder().encode(o.text);
  if (typeof o.base64 === "string") return new Uint8Array(Buffer.from(o.base64, "base64"));
  return undefined;
}
