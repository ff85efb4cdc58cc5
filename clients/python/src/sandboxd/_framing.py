"""LSP-style message framing: ``Content-Length: N\\r\\n\\r\\n`` + N bytes of JSON.

The decoder is incremental and does no I/O, so the threaded client (which
reads a pipe with blocking reads) and the asyncio client (which awaits a
StreamReader) share it, and the unit tests can feed it arbitrary splits.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional

__all__ = ["FramingError", "FrameDecoder", "encode_message", "MAX_HEADER_LINE"]

#: The server refuses header lines longer than this; so do we, so that a
#: corrupted stream cannot make the client buffer without bound.
MAX_HEADER_LINE = 8 * 1024

_HEADER_END = b"\r\n\r\n"


class FramingError(Exception):
    """The byte stream from the sidecar cannot be parsed any more.

    After this the stream cannot be trusted (we do not know where the next
    message starts), so the client abandons the process.
    """


def encode_message(message: Any) -> bytes:
    """Frame one JSON-RPC message.

    ``allow_nan=False`` guarantees we never emit the non-standard ``NaN``
    literal: special floats must have been turned into strings by the value
    codec before they get here. ``ensure_ascii`` keeps lone surrogates in
    Python strings from making the UTF-8 encoding fail.
    """
    body = _ENCODER.encode(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


# One encoder for every message: json.dumps with options builds a new one
# per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_DECODER = json.JSONDecoder()


def _parse_header_block(block: bytes) -> int:
    length: Optional[int] = None
    for line in block.split(b"\r\n"):
        if len(line) > MAX_HEADER_LINE:
            raise FramingError("header line of %d bytes exceeds %d" % (len(line), MAX_HEADER_LINE))
        name, sep, value = line.partition(b":")
        if not sep:
            raise FramingError("malformed header line %r" % line[:80])
        if name.strip().lower() != b"content-length":
            continue  # Content-Type and friends are allowed and ignored
        text = value.strip()
        if not text.isdigit():
            raise FramingError("bad Content-Length %r" % text[:80])
        length = int(text)
    if length is None:
        raise FramingError("header block without Content-Length: %r" % block[:200])
    return length


def _decode(body: bytes) -> dict:
    try:
        # raw_decode: json.loads would match whitespace around the value
        # twice with a regex; the sidecar writes none, and trailing bytes
        # other than whitespace are still an error.
        text = body.decode("utf-8")
        try:
            message, end = _DECODER.raw_decode(text)
        except ValueError:
            message, end = json.loads(text), len(text)  # leading whitespace, or the error itself
        if end != len(text) and text[end:].strip(" \t\r\n"):
            raise ValueError("extra data after the JSON value at %d" % end)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FramingError("message body is not UTF-8 JSON: %s" % exc) from None
    if not isinstance(message, dict):
        raise FramingError("message is not a JSON object: %r" % body[:200])
    return message


class FrameDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the complete messages.

    Messages must be JSON objects; anything else (a batch, a bare value) is a
    protocol violation by the sidecar and raises :class:`FramingError`.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: Optional[int] = None  # body length once the header is parsed
        self._early: List[dict] = []  # messages the fast path took before handing over

    def feed(self, data: bytes) -> List[dict]:
        if not self._buf and self._need is None and data.startswith(b"Content-Length: "):
            # The common case, a chunk that starts a message with the header
            # the sidecar writes, is parsed without copying it into the buffer.
            data = self._whole_messages(data)
            if isinstance(data, list):
                return data
        self._buf += data
        out: List[dict] = self._early
        self._early = []
        while True:
            if self._need is None:
                end = self._buf.find(_HEADER_END)
                if end < 0:
                    # A header block is a few short lines; a long run of
                    # bytes without a terminator is garbage, not slowness.
                    if len(self._buf) > 4 * MAX_HEADER_LINE:
                        raise FramingError("no header terminator in %d bytes" % len(self._buf))
                    return out
                self._need = _parse_header_block(bytes(self._buf[:end]))
                del self._buf[: end + len(_HEADER_END)]
            if len(self._buf) < self._need:
                return out
            body = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            self._need = None
            out.append(_decode(body))

    def _whole_messages(self, data: bytes) -> Any:
        """The messages at the start of ``data`` in the sidecar's own header
        form (only Content-Length), as a list if they are all of ``data``;
        else the bytes from the first one it cannot take this way, for the
        general path (the messages before it are kept for that path's list)."""
        out: List[dict] = []
        pos, size = 0, len(data)
        while pos < size:
            end = data.find(_HEADER_END, pos + 16, pos + 40)
            digits = data[pos + 16:end]
            if end < 0 or not data.startswith(b"Content-Length: ", pos) or not digits.isdigit():
                break
            start = end + 4
            stop = start + int(digits)
            if stop > size:
                break
            out.append(_decode(data[start:stop]))
            pos = stop
        if pos == size:
            return out
        self._early = out
        return data[pos:]

    @property
    def mid_message(self) -> bool:
        """True if the stream stopped inside a header or body (a torn message)."""
        return bool(self._buf) or self._need is not None
