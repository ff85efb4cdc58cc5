"""Exception mapping: the kind table, codes and per-kind attributes."""

import json
import pickle
import unittest

import sandboxd
from sandboxd.errors import KIND_CLASSES, error_from_rpc

from _support import WIRE

EXPECTED_CLASSES = {
    "host": sandboxd.HostError,
    "fuel_exhausted": sandboxd.FuelExhausted,
    "timeout": sandboxd.Timeout,
    "memory_limit_exceeded": sandboxd.MemoryLimitExceeded,
    "disallowed_import": sandboxd.DisallowedImport,
    "invalid_module": sandboxd.InvalidModule,
    "export": sandboxd.ExportError,
    "trap": sandboxd.Trap,
    "cancelled": sandboxd.Cancelled,
    "plugin_error": sandboxd.PluginError,
    "compile_limit_exceeded": sandboxd.CompileLimitExceeded,
    "host_function_error": sandboxd.HostFunctionError,
    "script_error": sandboxd.ScriptError,
}


class ErrorKindsFileTest(unittest.TestCase):
    """Our table against the one generated from the Go table of kinds."""

    def test_matches_error_kinds_json(self):
        # A missing file fails the test: skipping would let the mapping drift
        # from the Go table unnoticed.
        path = WIRE / "error-kinds.json"
        self.assertTrue(path.exists(), "%s is absent; it is generated from the Go table of kinds "
                        "(go test ./sandbox -run TestErrorKindsGolden -update)" % path)
        with open(path) as f:
            rows = json.load(f)
        self.assertIsInstance(rows, list)
        self.assertEqual(sorted(r["kind"] for r in rows), sorted(KIND_CLASSES),
                         "kinds differ between the Go table and the Python client")
        for row in rows:
            with self.subTest(row["kind"]):
                cls = KIND_CLASSES[row["kind"]]
                self.assertIs(cls, EXPECTED_CLASSES[row["kind"]])
                self.assertEqual(cls.exit_code, row["exitCode"])
                self.assertEqual(cls.rpc_code, row["rpcCode"])
                err = error_from_rpc({"code": row["rpcCode"], "message": row["summary"],
                                      "data": {"kind": row["kind"]}})
                self.assertIs(type(err), cls)
                self.assertEqual((err.kind, err.code, str(err)), (row["kind"], row["rpcCode"], row["summary"]))
                # and by code alone, for an error that lacks data.kind
                self.assertIs(type(error_from_rpc({"code": row["rpcCode"], "message": "m"})), cls)


class MappingTest(unittest.TestCase):
    def test_built_in_table(self):
        # The same facts as docs/protocol.md's table, independent of the file.
        codes = {"host": 1, "fuel_exhausted": 2, "timeout": 3, "memory_limit_exceeded": 4,
                 "disallowed_import": 5, "invalid_module": 6, "export": 7, "trap": 8, "cancelled": -32800,
                 "plugin_error": 10, "compile_limit_exceeded": 11, "host_function_error": 12,
                 "script_error": 13}
        self.assertEqual(set(KIND_CLASSES), set(codes))
        for kind, code in codes.items():
            cls = KIND_CLASSES[kind]
            self.assertIs(cls, EXPECTED_CLASSES[kind])
            self.assertTrue(issubclass(cls, sandboxd.SandboxError))
            self.assertFalse(issubclass(cls, sandboxd.SidecarError))
            self.assertEqual(cls.rpc_code, code)

    def test_details(self):
        usage = {"fuelConsumed": 10, "peakMemoryBytes": 65536}
        e = error_from_rpc({"code": 2, "message": "fuel_exhausted: x",
                            "data": dict(usage, kind="fuel_exhausted", budget=1000000)})
        self.assertIsInstance(e, sandboxd.FuelExhausted)
        self.assertEqual((e.budget, e.fuel_consumed, e.peak_memory_bytes), (1000000, 10, 65536))
        e = error_from_rpc({"code": 3, "message": "m", "data": dict(usage, kind="timeout", timeoutMs=50)})
        self.assertEqual(e.timeout, 0.05)
        e = error_from_rpc({"code": 4, "message": "m", "data": {
            "kind": "memory_limit_exceeded", "limit": 4194304, "requested": 6619136, "resource": "memory"}})
        self.assertEqual((e.limit, e.requested, e.resource), (4194304, 6619136, "memory"))
        e = error_from_rpc({"code": 5, "message": "m", "data": {"kind": "disallowed_import",
                                                                "module": "env", "name": "secret"}})
        self.assertEqual((e.module, e.name, e.fuel_consumed), ("env", "secret", None))
        e = error_from_rpc({"code": 7, "message": "m", "data": {"kind": "export", "function": "nope"}})
        self.assertEqual(e.function, "nope")
        frames = [{"func": "f", "funcIndex": 1, "moduleOffset": 40}]
        e = error_from_rpc({"code": 8, "message": "m", "data": {
            "kind": "trap", "trapCode": "unreachable", "frames": frames}})
        self.assertEqual((e.trap_code, e.frames, e.data["kind"]), ("unreachable", frames, "trap"))

    def test_protocol_errors_are_sidecar_errors(self):
        for code in (-32700, -32600, -32601, -32603, -32000):
            e = error_from_rpc({"code": code, "message": "nope", "data": {"queued": 1, "maxQueue": 1}},
                               stderr_tail="tail")
            self.assertIsInstance(e, sandboxd.SidecarError)
            self.assertEqual((e.kind, e.code, e.stderr_tail, e.data["maxQueue"]), ("sidecar", code, "tail", 1))

    def test_invalid_params(self):
        e = error_from_rpc({"code": -32602, "message": "limits.fuel: must be positive", "data": None})
        self.assertIs(type(e), sandboxd.InvalidParams)
        self.assertEqual((e.kind, e.code), ("invalid_params", -32602))
        # a mistake the client catches itself is the same class, and still a ValueError/TypeError
        self.assertTrue(issubclass(sandboxd.InvalidParams, (sandboxd.SandboxError)))
        self.assertTrue(issubclass(sandboxd.InvalidParams, ValueError))
        self.assertTrue(issubclass(sandboxd.InvalidParams, TypeError))
        self.assertFalse(issubclass(sandboxd.InvalidParams, sandboxd.SidecarError))

    def test_busy_is_a_sidecar_error(self):
        # The server tags busy errors with data.kind "busy" (not a run kind).
        e = error_from_rpc({"code": -32000, "message": "busy: 1 runs are queued (the maximum is 1)",
                            "data": {"kind": "busy", "queued": 1, "maxQueue": 1}})
        self.assertIs(type(e), sandboxd.SidecarError)
        self.assertEqual((e.kind, e.code, e.data["kind"], e.data["queued"]), ("sidecar", -32000, "busy", 1))

    def test_unknown_kind_is_not_misreported(self):
        e = error_from_rpc({"code": 42, "message": "new", "data": {"kind": "quantum"}})
        self.assertIs(type(e), sandboxd.SandboxError)
        self.assertEqual((e.kind, e.code), ("quantum", 42))

    def test_cancelled_code_without_kind(self):
        self.assertIsInstance(error_from_rpc({"code": -32800, "message": "cancelled"}), sandboxd.Cancelled)

    def test_malformed_error_object(self):
        self.assertIsInstance(error_from_rpc("boom"), sandboxd.SidecarError)
        e = error_from_rpc({"code": 8, "data": "weird"})
        self.assertIsInstance(e, sandboxd.Trap)
        self.assertEqual(e.data, {"value": "weird"})

    def test_pickle(self):
        e = error_from_rpc({"code": 8, "message": "trap: x", "data": {"kind": "trap", "trapCode": "unreachable"}})
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), e2.trap_code, str(e2), e2.code), (sandboxd.Trap, "unreachable", "trap: x", 8))
        s = sandboxd.SidecarError("dead", stderr_tail="panic")
        s2 = pickle.loads(pickle.dumps(s))
        self.assertEqual((s2.stderr_tail, s2.kind, str(s2)), ("panic", "sidecar", "dead"))


if __name__ == "__main__":
    unittest.main()
