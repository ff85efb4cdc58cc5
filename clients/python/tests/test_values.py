"""The value codec against testdata/wire/values.json and the protocol rules."""

import json
import math
import struct
import unittest

import sandboxd
from sandboxd._values import decode_value, encode_arg, encode_args, value_bits

from _support import WIRE


def golden_cases():
    with open(WIRE / "values.json") as f:
        cases = json.load(f)["cases"]
    assert len(cases) >= 20, "values.json lost its cases"
    return cases


WRAPPERS = {"i32": sandboxd.I32, "i64": sandboxd.I64, "f32": sandboxd.F32, "f64": sandboxd.F64}


class GoldenTest(unittest.TestCase):
    def test_decode_matches_golden_bits(self):
        for case in golden_cases():
            with self.subTest(case["name"]):
                t = case["wire"]["type"]
                v = decode_value(case["wire"])
                self.assertIsInstance(v, int if t[0] == "i" else float)
                self.assertEqual("0x%0*x" % (len(case["bits"]) - 2, value_bits(t, v)), case["bits"])

    def test_from_bits_encodes_golden_bits(self):
        # Each golden value, re-sent bit-exactly, is the {type, bits} form.
        for case in golden_cases():
            with self.subTest(case["name"]):
                t = case["wire"]["type"]
                arg = WRAPPERS[t].from_bits(int(case["bits"], 16))
                self.assertEqual(encode_arg(arg), {"type": t, "bits": case["bits"]})
                # and the wrapper's value is the decoded value, bit for bit
                self.assertEqual(value_bits(t, arg.value), int(case["bits"], 16))

    def test_value_wrappers_encode_golden_values(self):
        # The {type, value} form the wrappers send is the golden wire value
        # (floats: the golden value field, modulo JSON's -0 == 0).
        for case in golden_cases():
            wire = case["wire"]
            t = wire["type"]
            with self.subTest(case["name"]):
                sent = encode_arg(WRAPPERS[t](decode_value(wire)))
                self.assertEqual(sent["type"], t)
                if t in ("i32", "i64"):
                    self.assertEqual(sent["value"], wire["value"])
                elif isinstance(wire["value"], str):
                    self.assertEqual(sent["value"], wire["value"])
                elif math.copysign(1, wire["value"]) < 0 and wire["value"] == 0:
                    self.assertEqual(sent["value"], "-0")
                else:
                    self.assertEqual(sent["value"], wire["value"])

    def test_nan_payloads_survive_decoding(self):
        v = decode_value({"type": "f64", "value": "NaN", "bits": "0x7ff8000000000123"})
        self.assertTrue(math.isnan(v))
        self.assertEqual(struct.pack(">d", v), bytes.fromhex("7ff8000000000123"))
        neg = decode_value({"type": "f64", "value": 0, "bits": "0x8000000000000000"})
        self.assertEqual(math.copysign(1, neg), -1.0)


class EncodeArgTest(unittest.TestCase):
    def test_ints(self):
        self.assertEqual(encode_args([0, -1, 2 ** 53, -2 ** 53]), [0, -1, 2 ** 53, -2 ** 53])
        self.assertEqual(encode_args([2 ** 53 + 1, -2 ** 53 - 1, 2 ** 64 - 1]),
                         ["9007199254740993", "-9007199254740993", "18446744073709551615"])
        # outside every integer type: a JSON number, so the sidecar reports a range problem
        self.assertEqual(encode_args([2 ** 64, -2 ** 63 - 1]), [2 ** 64, -2 ** 63 - 1])

    def test_floats(self):
        self.assertEqual(encode_args([1.5, float("nan"), float("inf"), -float("inf"), -0.0, 0.0]),
                         [1.5, "NaN", "Infinity", "-Infinity", "-0", 0.0])
        # JSON numbers travel exactly: repr is the shortest round-trip form
        self.assertEqual(json.loads(json.dumps(encode_arg(0.1 + 0.2))), 0.1 + 0.2)

    def test_wrappers(self):
        I32, I64, F32, F64 = sandboxd.I32, sandboxd.I64, sandboxd.F32, sandboxd.F64
        self.assertEqual(encode_arg(I32(-5)), {"type": "i32", "value": -5})
        self.assertEqual(encode_arg(I32(2 ** 32 - 1)), {"type": "i32", "value": 2 ** 32 - 1})
        self.assertEqual(encode_arg(I64(3)), {"type": "i64", "value": "3"})
        self.assertEqual(encode_arg(F32(-0.0)), {"type": "f32", "value": "-0"})
        self.assertEqual(encode_arg(F64(2)), {"type": "f64", "value": 2.0})
        self.assertEqual(encode_arg(F64(float("-inf"))), {"type": "f64", "value": "-Infinity"})
        self.assertEqual(encode_arg(F64.from_bits(0x7ff8000000000123)),
                         {"type": "f64", "bits": "0x7ff8000000000123"})
        self.assertEqual(encode_arg(F32.from_bits(1)), {"type": "f32", "bits": "0x00000001"})
        self.assertEqual(encode_arg(I64.from_bits(2 ** 64 - 1)), {"type": "i64", "bits": "0xffffffffffffffff"})
        self.assertEqual(I64.from_bits(2 ** 64 - 1).value, -1)
        self.assertEqual(I32(7), I32(7))
        self.assertNotEqual(I32(7), I64(7))
        self.assertEqual(repr(F64.from_bits(0x7ff8000000000123)), "F64.from_bits(0x7ff8000000000123)")

    def test_wrapper_validation(self):
        I32, I64, F64 = sandboxd.I32, sandboxd.I64, sandboxd.F64
        for bad in (lambda: I32(2 ** 32), lambda: I32(-2 ** 31 - 1), lambda: I64(2 ** 64),
                    lambda: F64.from_bits(2 ** 64), lambda: F64.from_bits(-1)):
            with self.assertRaises(ValueError):
                bad()
        for bad in (lambda: I32(1.5), lambda: I32(True), lambda: F64("1"), lambda: I64.from_bits(1.0)):
            with self.assertRaises(TypeError):
                bad()

    def test_passthrough_and_refusals(self):
        self.assertEqual(encode_arg({"type": "i32", "value": 1}), {"type": "i32", "value": 1})
        self.assertEqual(encode_arg("123"), "123")
        with self.assertRaisesRegex(TypeError, r"args\[2\]: bool"):
            encode_args([1, 2, True])
        with self.assertRaisesRegex(TypeError, r"args\[0\]"):
            encode_args([None])
        with self.assertRaises(TypeError):
            encode_args("12")
        self.assertEqual(encode_args(None), [])


class DecodeStrictTest(unittest.TestCase):
    def test_malformed_results_are_refused(self):
        bad = [
            {"type": "i64", "value": 5},                                   # i64 must be a string
            {"type": "i32", "value": "5"},
            {"type": "i32", "value": 2 ** 31},
            {"type": "i32", "value": True},
            {"type": "i64", "value": "9223372036854775808"},
            {"type": "f64", "value": 1.0},                                 # floats need bits
            {"type": "f64", "value": 1.0, "bits": "0x3ff"},                # wrong width
            {"type": "f32", "value": 1.0, "bits": "0x3ff0000000000000"},
            {"type": "f64", "value": 2.0, "bits": "0x3ff0000000000000"},  # value and bits disagree
            {"type": "f64", "value": "NaN", "bits": "0x7ff0000000000000"},
            {"type": "v128", "value": "0"},
            [1],
        ]
        for wire in bad:
            with self.subTest(wire=wire), self.assertRaises(ValueError):
                decode_value(wire)

    def test_f32_value_may_be_printed_at_either_precision(self):
        bits = "0x%08x" % struct.unpack(">I", struct.pack(">f", 0.1))[0]
        for printed in (0.1, struct.unpack(">f", struct.pack(">f", 0.1))[0]):
            self.assertEqual(decode_value({"type": "f32", "value": printed, "bits": bits}),
                             struct.unpack(">f", struct.pack(">f", 0.1))[0])


if __name__ == "__main__":
    unittest.main()
