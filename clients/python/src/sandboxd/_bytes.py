"""Bytes on the wire (docs/protocol.md, *WASI programs*): an output is
``{"text": ...}`` when the bytes are valid UTF-8, else ``{"base64": ...}``."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Optional


def bytes_from_wire(obj: Any) -> Optional[bytes]:
    """The bytes an output object carries; None if it is not one."""
    if not isinstance(obj, dict):
        return None
    text = obj.get("text")
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    b64 = obj.get("base64")
    if isinstance(b64, str):
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return None
    return None
