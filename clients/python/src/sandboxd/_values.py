"""The wasm value codec (docs/protocol.md, "Values").

Arguments: the server decodes each argument against the export's declared
parameter type, so plain Python numbers can travel as JSON numbers. Two
things do not survive a JSON number and are sent as strings instead:
integers beyond 2**53 (JavaScript peers would round them) and the floats
JSON cannot spell (NaN, +-Infinity) or that JSON parsers commonly flatten
(-0.0). The typed wrappers :class:`I32`, :class:`I64`, :class:`F32`,
:class:`F64` pin the type (the server checks it against the parameter), and
``from_bits`` sends raw IEEE/two's-complement bits for bit-exact values
such as NaN payloads.

Results always come in the object form. Floats are decoded from ``bits``,
never from ``value``: only the bits carry -0.0 and NaN payloads exactly.
"""

from __future__ import annotations

import math
import struct
from typing import Any, ClassVar, Dict, List, Optional, Type, TypeVar, Union

from .errors import InvalidParams

__all__ = [
    "WasmValue", "I32", "I64", "F32", "F64",
    "encode_arg", "encode_args", "encode_float", "decode_value", "value_bits",
]

#: Largest magnitude a JSON number carries exactly in every JSON parser.
MAX_SAFE_INTEGER = 2 ** 53


def encode_float(x: float) -> Union[float, str]:
    """A float as the server accepts it: a JSON number, or a special string."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0.0 and math.copysign(1.0, x) < 0:
        return "-0"
    return x


def _encode_int(v: int) -> Union[int, str]:
    """Safe integers as JSON numbers; beyond 2**53 as decimal strings, exact
    for an i64 and decimal text for a float. An int outside -2**63..2**64-1
    fits no integer parameter: it goes as a JSON number (Python writes every
    digit), so the sidecar reports an integer parameter's problem as a range
    problem ("... is out of range for i64") and a float takes its nearest
    value."""
    if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
        return v
    if -(1 << 63) <= v < 1 << 64:
        return str(v)
    return v


_W = TypeVar("_W", bound="WasmValue")


class WasmValue:
    """Base of the typed argument wrappers; see :class:`I32` and friends.

    ``value`` is the Python value; ``bits`` is set when the wrapper was made
    with :meth:`from_bits`, and then the bits are what goes on the wire.
    """

    __slots__ = ("value", "bits")
    type: ClassVar[str] = ""
    width: ClassVar[int] = 0  # bits

    value: Any
    bits: Optional[int]

    def __init__(self, value: Any) -> None:
        self.value = self._check(value)
        self.bits = None

    @classmethod
    def from_bits(cls: Type[_W], bits: int) -> _W:
        """A value given by its raw bits (two's complement for integers).

        ``F64.from_bits(0x7ff8000000000123)`` is a NaN with payload 0x123;
        it is sent as ``{"type": "f64", "bits": "0x7ff8000000000123"}`` so
        the guest receives exactly those bits.
        """
        if isinstance(bits, bool) or not isinstance(bits, int):
            raise InvalidParams("%s.from_bits: bits must be an int, got %r" % (cls.__name__, bits))
        if not 0 <= bits < 1 << cls.width:
            raise InvalidParams("%s.from_bits: %#x does not fit in %d bits" % (cls.__name__, bits, cls.width))
        obj = cls.__new__(cls)
        obj.value = _from_bits(cls.type, bits)
        obj.bits = bits
        return obj

    @classmethod
    def _check(cls, value: Any) -> Any:  # overridden
        return value

    def _wire_value(self) -> Any:  # overridden
        return self.value

    def to_wire(self) -> Dict[str, Any]:
        """The ``{"type": T, "value"|"bits": ...}`` argument object."""
        if self.bits is not None:
            return {"type": self.type, "bits": "0x%0*x" % (self.width // 4, self.bits)}
        return {"type": self.type, "value": self._wire_value()}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_wire() == other.to_wire()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.type, str(self.to_wire())))

    def __repr__(self) -> str:
        if self.bits is not None:
            return "%s.from_bits(%#0*x)" % (type(self).__name__, self.width // 4 + 2, self.bits)
        return "%s(%r)" % (type(self).__name__, self.value)


class _Int(WasmValue):
    __slots__ = ()

    @classmethod
    def _check(cls, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidParams("%s needs an int, got %r" % (cls.__name__, value))
        # Like the server: signed range, plus unsigned values that wrap.
        if not -(1 << (cls.width - 1)) <= value < 1 << cls.width:
            raise InvalidParams("%s: %d is out of range" % (cls.__name__, value))
        return value


class I32(_Int):
    """An i32 argument. Accepts -2**31 .. 2**32-1 (unsigned values wrap)."""

    __slots__ = ()
    type = "i32"
    width = 32


class I64(_Int):
    """An i64 argument, always sent as a decimal string (exact in any parser)."""

    __slots__ = ()
    type = "i64"
    width = 64

    def _wire_value(self) -> str:
        return str(self.value)


class _Float(WasmValue):
    __slots__ = ()

    @classmethod
    def _check(cls, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidParams("%s needs a float, got %r" % (cls.__name__, value))
        return float(value)

    def _wire_value(self) -> Union[float, str]:
        return encode_float(self.value)


class F32(_Float):
    """An f32 argument. The server rounds the value to single precision."""

    __slots__ = ()
    type = "f32"
    width = 32


class F64(_Float):
    """An f64 argument. Use ``F64.from_bits`` for NaN payloads."""

    __slots__ = ()
    type = "f64"
    width = 64


#: Bit width of each value type, as the wrappers declare it.
_WIDTH = {cls.type: cls.width for cls in (I32, I64, F32, F64)}


def _from_bits(type_: str, bits: int) -> Union[int, float]:
    if type_ == "f64":
        return struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    if type_ == "f32":
        return struct.unpack(">f", bits.to_bytes(4, "big"))[0]
    width = _WIDTH[type_]
    return bits - (1 << width) if bits >> (width - 1) else bits


def value_bits(type_: str, value: Union[int, float]) -> int:
    """The raw bits of a decoded value (two's complement for integers).

    The inverse of decoding; the tests use it to compare against the golden
    ``bits`` in testdata/wire/values.json.
    """
    if type_ == "f64":
        return int.from_bytes(struct.pack(">d", value), "big")
    if type_ == "f32":
        return int.from_bytes(struct.pack(">f", value), "big")
    return int(value) & ((1 << _WIDTH[type_]) - 1)


def encode_arg(arg: Any, index: int = 0) -> Any:
    """One argument as it goes on the wire.

    int -> JSON number (decimal string beyond 2**53); float -> JSON number
    or "NaN"/"Infinity"/"-Infinity"/"-0"; a :class:`WasmValue` -> its object
    form; a ``dict`` or ``str`` is passed through unchanged (the protocol's
    own object and decimal-string forms, for callers who build them).
    """
    if isinstance(arg, WasmValue):
        return arg.to_wire()
    if isinstance(arg, bool):
        # bool is an int subclass; True is almost certainly a mistake here.
        raise InvalidParams("args[%d]: bool is not a wasm value (use 0/1 or I32(...))" % index)
    if isinstance(arg, int):
        return _encode_int(arg)
    if isinstance(arg, float):
        return encode_float(arg)
    if isinstance(arg, (dict, str)):
        return arg
    raise InvalidParams("args[%d]: cannot send %s %r as a wasm value" % (index, type(arg).__name__, arg))


def encode_args(args: Any) -> List[Any]:
    """Encode an argument sequence (``None`` means no arguments)."""
    if args is None:
        return []
    if isinstance(args, (str, bytes, dict)):
        raise InvalidParams("args must be a list of values, got %s" % type(args).__name__)
    return [encode_arg(a, i) for i, a in enumerate(args)]


_SPECIAL = {"NaN", "Infinity", "-Infinity"}


def decode_value(wire: Any) -> Union[int, float]:
    """A result value (object form) as a Python int or float.

    Strict on purpose: a malformed value is a server bug and is reported,
    not guessed around. Raises ValueError.
    """
    if not isinstance(wire, dict) or "type" not in wire:
        raise ValueError("value is not a {type, ...} object: %r" % (wire,))
    t = wire["type"]
    v = wire.get("value")
    if t == "i32":
        if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 31) <= v < 1 << 31:
            raise ValueError("i32 value must be a signed 32-bit JSON integer: %r" % (wire,))
        return v
    if t == "i64":
        if not isinstance(v, str):
            raise ValueError("i64 value must be a decimal string: %r" % (wire,))
        try:
            n = int(v, 10)
        except ValueError:
            raise ValueError("i64 value is not a decimal integer: %r" % (wire,)) from None
        if not -(1 << 63) <= n < 1 << 63:
            raise ValueError("i64 value out of range: %r" % (wire,))
        return n
    if t in ("f32", "f64"):
        bits_text = wire.get("bits")
        digits = _WIDTH[t] // 4
        if not (isinstance(bits_text, str) and len(bits_text) == digits + 2 and bits_text.startswith("0x")):
            raise ValueError("%s bits must be 0x + %d hex digits: %r" % (t, digits, wire))
        try:
            x = _from_bits(t, int(bits_text[2:], 16))
        except ValueError:
            raise ValueError("%s bits are not hex: %r" % (t, wire)) from None
        _check_float_consistent(t, x, v, wire)
        return x
    raise ValueError("unknown value type %r" % (t,))


def _check_float_consistent(t: str, x: float, v: Any, wire: Any) -> None:
    """``value`` is informative only, but if it disagrees with ``bits`` the
    server has a bug, and we say so rather than pick one silently."""
    if isinstance(v, str):
        ok = v in _SPECIAL and (
            (v == "NaN" and math.isnan(x)) or (v == "Infinity" and x == math.inf)
            or (v == "-Infinity" and x == -math.inf))
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        as_float = float(v)
        if t == "f32":
            try:
                as_float = struct.unpack(">f", struct.pack(">f", as_float))[0]
            except OverflowError:
                as_float = math.copysign(math.inf, as_float)
        ok = as_float == x  # -0 == 0.0 is fine: JSON parsers lose the sign
    else:
        ok = False
    if not ok:
        raise ValueError("%s value and bits disagree: %r" % (t, wire))
