"""The threaded client against the real sidecar and the guest fixtures.

Every figure asserted here (fuel 4 for add, 803958421 for seed 42, ...) is
documented in testdata/wat/README.md or docs/protocol.md.
"""

import concurrent.futures
import json
import math
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time

import sandboxd

from _support import CLIENT, WAT, WIRE, IntegrationTest, SharedSidecarTest, wat

# (module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add)),
# assembled by hand so the wasm= path is tested with real bytes.
ADD_WASM = bytes.fromhex(
    "0061736d01000000"            # magic, version
    "0107016002" "7f7f017f"       # type section: (i32 i32) -> i32
    "03020100"                    # function section: func 0 has type 0
    "070701036164640000"          # export section: "add" -> func 0
    "0a09010700200020016a0b")     # code section: local.get 0, local.get 1, i32.add, end

SHA256_ID = re.compile(r"^sha256:[0-9a-f]{64}$")


def fixture(name):
    return str(WAT / name)


class SidecarTest(SharedSidecarTest):
    """Most tests share one sidecar, as an application would."""

    @classmethod
    def sidecar_options(cls):
        return {"max_concurrency": 8}

    @classmethod
    def setUpClass(cls):
        cls.well = wat("well_behaved.wat")
        super().setUpClass()

    # -- the README example, line by line

    def test_add(self):
        r = self.sb.run(wat=self.well, function="add", args=[2, 40])
        self.assertEqual(r.values, [42])
        self.assertEqual(r.raw_values, [{"type": "i32", "value": 42}])
        self.assertEqual(r.fuel_consumed, 4)
        self.assertEqual(r.peak_memory_bytes, 0)
        self.assertEqual(r.logs, [])
        self.assertIsInstance(r.elapsed, float)
        # elapsedMicros may be 0 for a run this short; the upper bound only
        # catches nonsense (a unit mistake), never the machine being slow.
        self.assertTrue(0 <= r.elapsed < 60, r.elapsed)
        self.assertEqual(r.elapsed, r.raw["elapsedMicros"] / 1e6)
        self.assertRegex(r.module_id, SHA256_ID)
        for key in ("queuedMicros", "logLines", "logTruncated"):
            self.assertIn(key, r.raw, "the server left %s out of the run result" % key)
        self.assertEqual((r.log_lines, r.log_truncated), (0, False))

    def test_compile_then_run_by_module(self):
        mod = self.sb.compile(path=fixture("well_behaved.wat"))
        self.assertIsInstance(mod, sandboxd.Module)
        self.assertRegex(mod.id, SHA256_ID)
        self.assertEqual(mod.imports, [])
        self.assertEqual(mod.export("fib"), {"name": "fib", "kind": "func", "params": ["i32"], "results": ["i32"]})
        self.assertEqual(mod.export("multi")["results"], ["f64", "f32", "i64", "i32"])
        for n, value, fuel in ((10, 55, 182), (20, 6765, 352), (30, 832040, 522)):
            r = self.sb.run(module=mod, function="fib", args=[n])
            self.assertEqual((r.values, r.fuel_consumed, r.module_id), ([value], fuel, mod.id))
        again = self.sb.compile(path=fixture("well_behaved.wat"))
        self.assertEqual(again.id, mod.id)
        self.assertTrue(again.cached)

    def test_wasm_bytes(self):
        mod = self.sb.compile(wasm=ADD_WASM)
        self.assertEqual(mod.exports, [{"name": "add", "kind": "func", "params": ["i32", "i32"],
                                        "results": ["i32"]}])
        self.assertEqual(self.sb.run(module=mod, function="add", args=[2, 40]).values, [42])
        r = self.sb.run(wasm=ADD_WASM, function="add", args=[-2, 1])
        self.assertEqual((r.values, r.module_id), ([-1], mod.id))
        self.assertEqual(self.sb.run(module=mod.id, function="add", args=[1, 1]).values, [2])
        with self.assertRaises(sandboxd.InvalidModule):
            self.sb.run(wasm=b"\0asm\x01\0\0\0\xff garbage", function="add")

    def test_unknown_module_id(self):
        missing = "sha256:" + "0" * 64
        with self.assertRaises(sandboxd.InvalidModule) as cm:
            self.sb.run(module=sandboxd.Module(missing), function="add", args=[1, 2])
        self.assertIn(missing, str(cm.exception))

    def test_path_with_every_option(self):
        events = []
        r = self.sb.run(path=fixture("logger.wat"), function="run", fuel=1_000_000, timeout=0.5,
                        memory_bytes=4 << 20, table_elements=100, instances=1, memories=1, log_bytes=1000,
                        log=True, random_seed=42, clock=True, on_log=lambda line: events.append(line))
        events.append("returned")
        self.assertEqual(events, ["hello from the guest", "returned"])
        self.assertEqual(r.logs, ["hello from the guest"])
        self.assertEqual((r.values, r.log_lines, r.peak_memory_bytes), ([], 1, 65536))

    def test_relative_path_is_the_callers(self):
        cwd = os.getcwd()
        os.chdir(str(WAT))
        try:
            r = self.sb.run(path="well_behaved.wat", function="add", args=[1, 2])
        finally:
            os.chdir(cwd)
        self.assertEqual(r.values, [3])

    def test_stats(self):
        before = self.sb.stats()
        self.sb.run(wat=self.well, function="add", args=[1, 2])
        with self.assertRaises(sandboxd.Trap):
            self.sb.run(path=fixture("traps.wat"), function="unreachable")
        after = self.sb.stats()
        for key in ("runs", "inFlight", "queued", "queuedMicrosTotal", "cache", "uptimeMs", "requests"):
            self.assertIn(key, after)
        self.assertGreaterEqual(after["runs"]["ok"], before["runs"]["ok"] + 1)
        self.assertGreaterEqual(after["runs"]["trap"], before["runs"]["trap"] + 1)
        self.assertGreater(after["requests"], before["requests"])

    def test_initialize_reports_max_concurrency_flag(self):
        info = self.sb.initialize()
        self.assertEqual(info["serverInfo"]["name"], "sandboxd")
        self.assertEqual(info["maxConcurrency"], 8)

    def test_info_is_the_initialize_result(self):
        info = self.sb.info
        self.assertEqual(info["serverInfo"]["name"], "sandboxd")
        self.assertEqual(info["maxConcurrency"], 8)
        for key in ("defaults", "maximums"):
            self.assertIn("fuel", info["limits"][key])
        self.assertIs(self.sb.info, info)  # asked once per process

    # -- cancelling from the synchronous API

    def wait_in_flight(self, n):
        deadline = time.monotonic() + 30  # only a hang bound
        while self.sb.stats()["inFlight"] < n:
            self.assertLess(time.monotonic(), deadline, "the run never started")
            time.sleep(0.005)

    def test_submit_then_cancel_stops_an_endless_run(self):
        before = self.sb.stats()["runs"]["cancelled"]
        handle = self.sb.submit(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=60)
        self.assertFalse(handle.done())
        self.wait_in_flight(1)
        with self.assertRaises(TimeoutError):
            handle.result(timeout=0.01)  # waiting less than the run takes leaves it running
        self.assertFalse(handle.done())
        self.assertTrue(handle.cancel())
        with self.assertRaises(sandboxd.Cancelled) as cm:
            handle.result(timeout=30)
        self.assertEqual(cm.exception.code, -32800)
        self.assertTrue(handle.done())
        self.assertFalse(handle.cancel())  # finished: nothing to cancel
        self.assertEqual(self.sb.stats()["runs"]["cancelled"], before + 1)
        # a submitted run that is not cancelled gives its result
        self.assertEqual(self.sb.submit(wat=self.well, function="add", args=[2, 40]).result().values, [42])

    def test_cancel_from_another_thread(self):
        handle = self.sb.submit(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=60)
        self.wait_in_flight(1)
        threading.Thread(target=handle.cancel).start()
        with self.assertRaises(sandboxd.Cancelled):
            handle.result()

    def test_run_options_object(self):
        opts = sandboxd.RunOptions(wat=self.well, function="fib", args=[30],
                                   limits=sandboxd.Limits(fuel=1000))
        self.assertEqual(self.sb.run(opts).values, [832040])       # 522 fuel
        self.assertEqual(self.sb.run(opts, args=[10]).values, [55])
        with self.assertRaises(sandboxd.FuelExhausted):
            self.sb.run(opts, fuel=100)

    # -- capabilities

    def test_random_seed(self):
        roll = lambda seed: self.sb.run(path=fixture("random_roller.wat"), function="roll", random_seed=seed)
        self.assertEqual(roll(42).values, [803958421])
        self.assertNotEqual(roll(43).values, [803958421])
        self.assertEqual(roll(2 ** 64 - 1).values, roll(2 ** 64 - 1).values)  # sent as a decimal string
        with self.assertRaises(sandboxd.DisallowedImport) as cm:
            self.sb.run(path=fixture("random_roller.wat"), function="roll")
        self.assertEqual((cm.exception.module, cm.exception.name), ("host", "random"))

    def test_clock(self):
        self.assertGreaterEqual(self.sb.run(path=fixture("clock.wat"), clock=True).values[0], 0)
        self.assertGreater(self.sb.run(path=fixture("clock.wat"), function="now", clock=True).values[0], 0)
        with self.assertRaises(sandboxd.DisallowedImport):
            self.sb.run(path=fixture("clock.wat"))

    def test_limits_object_and_override(self):
        with self.assertRaises(sandboxd.FuelExhausted) as cm:
            self.sb.run(wat=self.well, function="fib", args=[30], limits=sandboxd.Limits(fuel=10))
        self.assertEqual((cm.exception.budget, cm.exception.fuel_consumed), (10, 10))
        r = self.sb.run(wat=self.well, function="fib", args=[30], limits=sandboxd.Limits(fuel=10), fuel=10_000)
        self.assertEqual((r.values, r.fuel_consumed), ([832040], 522))

    # -- every exception type, from a real guest

    def test_fuel_exhausted(self):
        with self.assertRaises(sandboxd.FuelExhausted) as cm:
            self.sb.run(path=fixture("infinite_loop.wat"), fuel=1_000_000)
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.budget, e.fuel_consumed), ("fuel_exhausted", 2, 1_000_000, 1_000_000))
        self.assertEqual(e.peak_memory_bytes, 0)

    def test_timeout(self):
        # 10**12 fuel would last minutes: a Timeout means the deadline fired
        with self.assertRaises(sandboxd.Timeout) as cm:
            self.sb.run(path=fixture("infinite_loop.wat"), fuel=10 ** 12, timeout=0.05)
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.timeout, e.data["timeoutMs"]), ("timeout", 3, 0.05, 50))
        self.assertIsInstance(e.fuel_consumed, int)

    def test_memory_limit(self):
        with self.assertRaises(sandboxd.MemoryLimitExceeded) as cm:
            self.sb.run(path=fixture("memory_bomb.wat"), memory_bytes=4 << 20)
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.limit, e.resource), ("memory_limit_exceeded", 4, 4 << 20, "memory"))
        self.assertLessEqual(e.peak_memory_bytes, 4 << 20)
        if e.requested is not None:
            self.assertGreater(e.requested, 4 << 20)

    def test_disallowed_import(self):
        with self.assertRaises(sandboxd.DisallowedImport) as cm:
            self.sb.run(wat=wat("disallowed_import.wat"))
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.module, e.name), ("disallowed_import", 5, "env", "secret"))
        self.assertIn(e.fuel_consumed, (None, 0))

    def test_invalid_module(self):
        with self.assertRaises(sandboxd.InvalidModule) as cm:
            self.sb.run(wat="(module")
        self.assertEqual((cm.exception.kind, cm.exception.code), ("invalid_module", 6))

    def test_export_error(self):
        with self.assertRaises(sandboxd.ExportError) as cm:
            self.sb.run(wat=self.well, function="nope")
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.function), ("export", 7, "nope"))

    def test_trap(self):
        with self.assertRaises(sandboxd.Trap) as cm:
            self.sb.run(path=fixture("traps.wat"), function="div_by_zero")
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.trap_code), ("trap", 8, "integer_divide_by_zero"))
        self.assertGreaterEqual(len(e.frames), 1)
        self.assertIsInstance(e.frames[0]["funcIndex"], int)
        self.assertIsInstance(e.frames[0]["moduleOffset"], int)

    def test_every_trap_code(self):
        # Codes as named in docs/protocol.md.
        expected = {"unreachable": "unreachable", "div_by_zero": "integer_divide_by_zero",
                    "int_overflow": "integer_overflow", "bad_conversion": "invalid_conversion_to_integer",
                    "oob": "memory_out_of_bounds", "table_oob": "table_out_of_bounds",
                    "null_call": "indirect_call_to_null", "bad_sig": "bad_signature",
                    "stack_overflow": "stack_overflow"}
        for fn, code in expected.items():
            with self.subTest(fn), self.assertRaises(sandboxd.Trap) as cm:
                self.sb.run(path=fixture("traps.wat"), function=fn)
            self.assertEqual(cm.exception.trap_code, code)

    def test_invalid_params_from_the_sidecar(self):
        with self.assertRaises(sandboxd.InvalidParams) as cm:
            self.sb.run(wat=self.well, function="add", args=["x", 1])
        self.assertEqual((cm.exception.code, cm.exception.kind), (-32602, "invalid_params"))
        self.assertIn("args[0]", str(cm.exception))
        with self.assertRaisesRegex(sandboxd.InvalidParams, "limits.fuel") as cm:
            self.sb.run(wat=self.well, function="add", args=[1, 2], fuel=0)
        self.assertEqual(cm.exception.code, -32602)
        with self.assertRaisesRegex(sandboxd.InvalidParams, "timeoutMs") as cm:
            self.sb.run(wat=self.well, function="add", args=[1, 2], timeout=10 ** 6)
        self.assertEqual(cm.exception.code, -32602)

    # -- values

    def echo(self, t, arg):
        return self.sb.run(wat=self.well, function="echo_" + t, args=[arg])

    def test_integer_edges(self):
        for v in (2 ** 63 - 1, -2 ** 63, 2 ** 53 + 1, -2 ** 53 - 1, 0):
            with self.subTest(v=v):
                r = self.echo("i64", v)
                self.assertEqual(r.values, [v])
                self.assertEqual(r.raw_values, [{"type": "i64", "value": str(v)}])
        self.assertEqual(self.echo("i64", 2 ** 64 - 1).values, [-1])     # unsigned input wraps
        self.assertEqual(self.echo("i64", sandboxd.I64(2 ** 53 + 1)).values, [2 ** 53 + 1])
        self.assertEqual(self.echo("i32", 2 ** 32 - 1).values, [-1])
        self.assertEqual(self.echo("i32", sandboxd.I32.from_bits(0x80000000)).values, [-2 ** 31])

    def test_integer_out_of_range_is_a_range_problem(self):
        for v in (2 ** 64, -2 ** 63 - 1, 10 ** 30):
            with self.subTest(v=v):
                with self.assertRaisesRegex(sandboxd.InvalidParams, r"args\[0\]: .*out of range for i64"):
                    self.echo("i64", v)
        with self.assertRaisesRegex(sandboxd.InvalidParams, "I64: 18446744073709551616 is out of range"):
            sandboxd.I64(2 ** 64)
        # the same ints are fine floats
        self.assertEqual(self.echo("f64", 2 ** 64).values, [float(2 ** 64)])

    def test_float_edges(self):
        r = self.echo("f64", -0.0)
        self.assertEqual(math.copysign(1, r.values[0]), -1.0)
        self.assertEqual(r.raw_values[0]["bits"], "0x8000000000000000")
        self.assertEqual(self.echo("f64", math.inf).values, [math.inf])
        self.assertEqual(self.echo("f64", -math.inf).values, [-math.inf])
        self.assertTrue(math.isnan(self.echo("f64", math.nan).values[0]))
        r = self.echo("f64", sandboxd.F64.from_bits(0x7ff8000000000123))
        self.assertTrue(math.isnan(r.values[0]))
        self.assertEqual(r.raw_values[0]["bits"], "0x7ff8000000000123")
        self.assertEqual(struct.pack(">d", r.values[0]).hex(), "7ff8000000000123")
        r = self.echo("f32", sandboxd.F32.from_bits(0x7fc00001))
        self.assertEqual(r.raw_values[0]["bits"], "0x7fc00001")
        self.assertEqual(struct.pack(">f", r.values[0]).hex(), "7fc00001")
        r = self.echo("f32", sandboxd.F32(-0.0))
        self.assertEqual(r.raw_values[0]["bits"], "0x80000000")
        self.assertEqual(self.echo("f32", 0.1).raw_values[0]["bits"], "0x3dcccccd")
        self.assertEqual(self.echo("f64", 5e-324).values, [5e-324])

    def test_multi_value(self):
        r = self.sb.run(wat=self.well, function="multi", args=[7, 2 ** 60, 1.5, -2.25])
        self.assertEqual(r.values, [-2.25, 1.5, 2 ** 60, 7])
        self.assertEqual([v["type"] for v in r.raw_values], ["f64", "f32", "i64", "i32"])

    def test_golden_values_through_the_server(self):
        # Each golden wire value is also a valid argument; echoing it must
        # give back exactly the golden encoding (the server's encoder) and,
        # through our decoder, exactly the golden bits.
        with open(WIRE / "values.json") as f:
            cases = json.load(f)["cases"]
        for case in cases:
            t = case["wire"]["type"]
            with self.subTest(case["name"]):
                for arg in (case["wire"], {"type": t, "bits": case["bits"]}):
                    r = self.echo(t, arg)
                    self.assertEqual(r.raw_values, [case["wire"]])
                    got = r.values[0]
                    width = len(case["bits"]) - 2
                    self.assertEqual("0x%0*x" % (width, sandboxd._values.value_bits(t, got)), case["bits"])

    # -- logs

    def test_logs_streamed_in_order_before_the_result(self):
        seen = []
        r = self.sb.run(path=fixture("log_flood.wat"), function="flood", args=[200], log=True,
                        on_log=lambda line: seen.append(line))
        self.assertEqual(len(r.logs), 200)
        self.assertEqual(seen, r.logs)  # on_log saw them all before run() returned
        self.assertTrue(all(line == "x" * 1000 for line in r.logs))
        self.assertEqual((r.log_lines, r.log_truncated), (200, False))

    def test_log_budget(self):
        r = self.sb.run(path=fixture("log_flood.wat"), function="flood", args=[50], log=True, log_bytes=10_000)
        # Each 1000-byte line costs its JSON size (1002) plus 128 bytes of envelope.
        self.assertEqual(len(r.logs), 10_000 // (1000 + 2 + 128))
        self.assertTrue(r.log_truncated)

    def test_log_routing_between_concurrent_runs(self):
        def one(n):
            lines = []
            r = self.sb.run(path=fixture("log_flood.wat"), function="flood", args=[n], log=True,
                            on_log=lines.append)
            return n, lines, r
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            for n, lines, r in pool.map(one, (5, 40, 1, 120, 17, 64)):
                self.assertEqual((len(r.logs), r.log_lines), (n, n))
                self.assertEqual(lines, r.logs)

    def test_log_invalid_utf8_and_grant(self):
        self.assertEqual(self.sb.run(path=fixture("log_invalid_utf8.wat"), log=True).logs,
                         ["ok \ufffd\ufffd bad"])
        with self.assertRaises(sandboxd.DisallowedImport) as cm:
            self.sb.run(path=fixture("logger.wat"))
        self.assertEqual((cm.exception.module, cm.exception.name), ("host", "log"))

    # -- concurrency

    def test_eight_threads(self):
        def work(k):
            out = []
            for j in range(10):
                r = self.sb.run(wat=self.well, function="add", args=[k * 1000, j])
                out.append(r.values[0])
            out.append(self.sb.run(wat=self.well, function="fib", args=[20 + k]).values[0])
            return out
        fib = [0, 1]
        while len(fib) < 30:
            fib.append(fib[-1] + fib[-2])
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(work, range(8)))
        for k, out in enumerate(results):
            self.assertEqual(out, [k * 1000 + j for j in range(10)] + [fib[20 + k]])

    def test_runs_overlap(self):
        # 8 endless guests (max_concurrency=8) are all in flight at once,
        # which they can only be if the runs overlap; then cancel them.
        handles = [self.sb.submit(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=60)
                   for _ in range(8)]
        try:
            self.wait_in_flight(8)
        finally:
            for h in handles:
                h.cancel()
        for h in handles:
            with self.assertRaises(sandboxd.Cancelled):
                h.result(timeout=30)


class LifecycleTest(IntegrationTest):
    def test_close(self):
        sb = sandboxd.Sidecar(binary=self.BIN)
        self.assertEqual(sb.run(wat=wat("well_behaved.wat"), function="add", args=[2, 40]).values, [42])
        sb.close()
        self.assertEqual(sb.returncode, 0)
        sb.close()  # idempotent
        with self.assertRaisesRegex(sandboxd.SidecarError, "closed"):
            sb.run(wat=wat("well_behaved.wat"), function="add", args=[1, 1])

    def test_close_lets_in_flight_runs_finish(self):
        sb = sandboxd.Sidecar(binary=self.BIN)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(sb.run, path=fixture("infinite_loop.wat"), fuel=10 ** 12, timeout=2)
            # Closed once the run executes (on a loaded machine the request
            # and its compile may take longer than any fixed sleep).
            deadline = time.monotonic() + 30  # only a hang bound
            while sb.stats()["inFlight"] < 1 and not fut.done():
                self.assertLess(time.monotonic(), deadline, "the run never started")
                time.sleep(0.005)
            sb.close()
            with self.assertRaises(sandboxd.Timeout):  # its own outcome, not "closed"
                fut.result(timeout=60)
        self.assertEqual(sb.returncode, 0)

    def kill_during_run(self, sb):
        errors = []

        def victim():
            try:
                sb.run(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=600)
            except BaseException as e:
                errors.append((time.monotonic(), e))

        t = threading.Thread(target=victim)
        t.start()
        time.sleep(0.3)
        killed_at = time.monotonic()
        os.kill(sb.pid, signal.SIGKILL)
        t.join(60)  # a hang bound: the run's own deadline is 600 s
        self.assertFalse(t.is_alive(), "the pending call did not fail after the sidecar died")
        at, err = errors[0]
        self.assertIsInstance(err, sandboxd.SidecarError)
        self.assertIn("SIGKILL", str(err))
        print("\n  SIGKILL -> pending call failed in %.1f ms" % ((at - killed_at) * 1000), file=sys.stderr)
        return err

    def test_killed_sidecar_restart(self):
        sb = sandboxd.Sidecar(binary=self.BIN, restart=True)
        self.addCleanup(sb.close)
        old = sb.pid
        self.kill_during_run(sb)
        r = sb.run(wat=wat("well_behaved.wat"), function="add", args=[2, 40])
        self.assertEqual(r.values, [42])
        self.assertNotEqual(sb.pid, old)

    def test_killed_sidecar_without_restart(self):
        sb = sandboxd.Sidecar(binary=self.BIN)
        self.addCleanup(sb.close)
        self.kill_during_run(sb)
        with self.assertRaisesRegex(sandboxd.SidecarError, "sidecar is not running"):
            sb.run(wat=wat("well_behaved.wat"), function="add", args=[2, 40])

    def test_sidecar_that_fails_to_start(self):
        sb = sandboxd.Sidecar(binary=self.BIN, args=["--no-such-flag"])
        self.addCleanup(sb.close)
        with self.assertRaisesRegex(sandboxd.SidecarError, "exited with status") as cm:
            sb.submit(wat=wat("well_behaved.wat"), function="add", args=[1, 2]).result(timeout=30)
        self.assertIn("no-such-flag", cm.exception.stderr_tail)
        self.assertIn("no-such-flag", str(cm.exception))

    def test_busy(self):
        # One worker, one queue slot: a spinning run, a queued one, then a
        # third that must be refused with -32000 busy.
        sb = sandboxd.Sidecar(binary=self.BIN, max_concurrency=1, args=["--max-queue", "1"])
        self.addCleanup(sb.close)
        # Each step waits for the sidecar to show the one before (a fixed
        # sleep is too short on a loaded machine, where the module's compile
        # alone may take longer); the runs' 2 s deadline outlasts the waits.
        spin = dict(path=fixture("infinite_loop.wat"), fuel=10 ** 12, timeout=2)

        def wait_stats(what, ok):
            deadline = time.monotonic() + 30  # only a hang bound
            while not ok(sb.stats()):
                self.assertLess(time.monotonic(), deadline, what)
                time.sleep(0.005)

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(sb.run, **spin)
            wait_stats("the first run never started", lambda st: st["inFlight"] == 1)
            second = pool.submit(sb.run, **spin)
            wait_stats("the second run was never queued", lambda st: st["queued"] == 1)
            with self.assertRaises(sandboxd.SidecarError) as cm:
                sb.run(**spin)
            self.assertEqual((cm.exception.code, cm.exception.data.get("maxQueue")), (-32000, 1))
            for fut in (first, second):
                with self.assertRaises(sandboxd.Timeout):
                    fut.result(timeout=60)

    def test_oversized_message(self):
        # The server answers an oversized message with "id": null; the client
        # must pin it on the right call and leave the other one alone.
        sb = sandboxd.Sidecar(binary=self.BIN, args=["--max-message-bytes", "1024"])
        self.addCleanup(sb.close)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            other = pool.submit(sb.run, path=fixture("infinite_loop.wat"), fuel=10 ** 12, timeout=0.3)
            time.sleep(0.1)
            with self.assertRaisesRegex(sandboxd.SidecarError, "exceeds") as cm:
                sb.run(wat="x" * 2000)
            self.assertEqual(cm.exception.code, -32600)
            with self.assertRaises(sandboxd.Timeout):
                other.result(timeout=5)

    def test_ctrl_c_cancels_the_run_it_interrupts(self):
        # The caller is blocked reading the sidecar's output for its own
        # answer: SIGINT interrupts that read, raises KeyboardInterrupt and
        # cancels the run; the sidecar keeps serving.
        # Python raises KeyboardInterrupt only where SIGINT has its default
        # handler: a test run started with & by a non-interactive shell (a
        # CI job, `nohup make test &`) inherits SIGINT ignored, and Python
        # then leaves it ignored. The test installs the handler it relies on.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.addCleanup(signal.signal, signal.SIGINT, previous)
        sb = sandboxd.Sidecar(binary=self.BIN)
        self.addCleanup(sb.close)
        sb.run(wat=wat("well_behaved.wat"), function="add", args=[1, 2])
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        self.addCleanup(timer.cancel)
        with self.assertRaises(KeyboardInterrupt):
            sb.run(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=30)
        deadline = time.monotonic() + 30  # only a hang bound
        while sb.stats()["runs"]["cancelled"] != 1:
            self.assertLess(time.monotonic(), deadline, "the interrupted run was not cancelled")
            time.sleep(0.01)
        self.assertEqual(sb.run(wat=wat("well_behaved.wat"), function="add", args=[2, 40]).values, [42])

    def test_quickstart_example(self):
        out = subprocess.run(
            [sys.executable, str(CLIENT / "examples" / "quickstart.py")], capture_output=True, text=True,
            timeout=30, env=dict(os.environ, SANDBOXD_BIN=self.BIN, PYTHONPATH=str(CLIENT / "src")))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("add(2, 40) = 42", out.stdout)
        self.assertIn("guest says: hello from the guest", out.stdout)
        self.assertIn("endless loop stopped: fuel_exhausted", out.stdout)

    def test_missing_binary(self):
        with self.assertRaises(sandboxd.SidecarError) as cm:
            sandboxd.Sidecar(binary="/nonexistent")
        self.assertIn("build it with `make build` in the sandboxd repository (needs Go and gcc), "
                      "then pass binary=..., set SANDBOXD_BIN, or put it on PATH", str(cm.exception))


if __name__ == "__main__":
    import unittest
    unittest.main()
