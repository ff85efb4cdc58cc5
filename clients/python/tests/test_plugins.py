"""Instances and plugins against the real sidecar (bin/sandboxd): the Go PDK
plugin (testdata/plugins/go), the WAT plugin (testdata/plugins/wat) and a
stateful plain module, through Sidecar.plugin / AsyncSidecar.plugin and
sb.run(input=...)."""

import asyncio
import os
import signal
import threading
import unittest

import sandboxd

from _support import REPO, IntegrationTest, SharedSidecarTest, wait_running

GO_PLUGIN = REPO / "testdata" / "plugins" / "go" / "plugin.wasm"
WAT_PLUGIN = REPO / "testdata" / "plugins" / "wat" / "plugin.wat"

# Hang bounds, not timing assertions: the Go plugin's compile passed 30 s on
# a loaded machine, and a call that never answers must fail, not hang.
COMPILE = sandboxd.Limits(compile_timeout=300)
WAIT = 120

#: A plain module (no ABI) whose state lives in a global and in memory.
STATEFUL = """(module
  (memory (export "memory") 1)
  (global $total (mut i64) (i64.const 0))
  (func (export "incr") (param $n i64) (result i64)
    (global.set $total (i64.add (global.get $total) (local.get $n)))
    (i64.store (i32.const 8) (i64.add (i64.load (i32.const 8)) (i64.const 1)))
    (global.get $total))
  (func (export "calls") (result i64) (i64.load (i32.const 8)))
  (func (export "busy") (param $n i32) (result i32)
    (loop $l (local.set $n (i32.sub (local.get $n) (i32.const 1))) (br_if $l (local.get $n)))
    (i32.const 7))
  (func (export "spin") (loop $l (br $l))))
"""


class PluginTestCase(SharedSidecarTest):
    """One sidecar per class, the modules compiled once (the Go plugin takes
    seconds to compile)."""

    @classmethod
    def sidecar_options(cls):
        return {"max_concurrency": 2}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.go = cls.sb.compile(path=GO_PLUGIN, limits=COMPILE)
            cls.wat = cls.sb.compile(wat=WAT_PLUGIN.read_text(), limits=COMPILE)
            cls.max_fuel = cls.sb.info["limits"]["maximums"]["fuel"]
        except BaseException:
            cls.sb.close()
            raise

    def go_plugin(self, **keywords):
        return self.sb.plugin(module=self.go, wasi=True, log=True, **keywords)

    def wat_plugin(self, **keywords):
        return self.sb.plugin(module=self.wat, log=True, **keywords)


class GoPluginTest(PluginTestCase):
    def test_greet(self):
        with self.go_plugin() as p:
            self.assertTrue(p.is_plugin)
            self.assertEqual(p.module_id, self.go.id)
            self.assertIn("greet", [e["name"] for e in p.exports])
            r = p.call("greet", "Ada")
            self.assertIsInstance(r, sandboxd.CallResult)
            self.assertEqual(r.output, b"Hello, Ada!")
            # values: the plugin function's i32 return code (docs/protocol.md)
            self.assertEqual((r.instance, r.values, r.output_truncated), (p.id, [0], False))
            self.assertGreater(r.fuel_consumed, 0)
            self.assertGreater(r.peak_memory_bytes, 0)
            self.assertGreaterEqual(r.elapsed, 0)
            self.assertGreaterEqual(r.queued, 0)
            self.assertEqual(p.call("greet", "Ada".encode()).output, b"Hello, Ada!")
            self.assertEqual(p.call("greet").output, b"Hello, !")  # no input: empty
            self.assertEqual(p.call("greet", "Zoë").output, "Hello, Zoë!".encode())

    def test_count_persists_per_instance(self):
        with self.go_plugin() as p, self.go_plugin() as q:
            self.assertNotEqual(p.id, q.id)
            self.assertEqual([p.call("count").output for _ in range(3)], [b"1", b"2", b"3"])
            self.assertEqual(q.call("count").output, b"1")  # its own vars
            self.assertEqual(p.call("count").output, b"4")
        with self.go_plugin() as p:
            self.assertEqual(p.call("count").output, b"1")  # a new instance starts again

    def test_config(self):
        with self.go_plugin(config={"greeting": "Bonjour"}) as p:
            self.assertEqual(p.call("config").output, b"Bonjour")
        with self.go_plugin() as p:
            with self.assertRaises(sandboxd.PluginError) as cm:
                p.call("config")
            self.assertEqual(cm.exception.message, "no greeting in the config")

    def test_logs_with_levels(self):
        seen = []
        with self.go_plugin() as p:
            r = p.call("logs", on_log=seen.append)
        want = [("a debug line", "debug"), ("an info line", "info"), ("a warn line", "warn"),
                ("an error line", "error")]
        self.assertEqual([(str(line), line.level) for line in r.logs], want)
        self.assertEqual(seen, r.logs)
        self.assertTrue(all(isinstance(line, sandboxd.LogLine) for line in seen))
        self.assertEqual(r.log_lines, 4)

    def test_fail_keeps_the_instance(self):
        with self.go_plugin() as p:
            self.assertEqual(p.call("count").output, b"1")
            with self.assertRaises(sandboxd.PluginError) as cm:
                p.call("fail", "the input")
            e = cm.exception
            self.assertEqual((e.message, e.function, e.return_code, e.code, e.kind),
                             ("failed on purpose: the input", "fail", 1, 10, "plugin_error"))
            self.assertIn("failed on purpose: the input", str(e))
            self.assertIsNotNone(e.fuel_consumed)
            self.assertEqual(p.call("count").output, b"2")  # same instance, state intact

    def test_echo_binary(self):
        data = bytes(range(256)) * 64 + b"\xff\xfe\x00"
        with self.go_plugin() as p:
            self.assertEqual(p.call("echo", data).output, data)
            self.assertEqual(p.call("echo", b"").output, b"")
            text = "plain text \u2603"
            self.assertEqual(p.call("echo", text).output, text.encode())
            r = p.call("echo", data, output_bytes=100)
            self.assertTrue(r.output_truncated)
            self.assertLessEqual(len(r.output), 100)
            self.assertEqual(r.output, data[:len(r.output)])

    def test_spin_times_out_then_instance_closed(self):
        with self.go_plugin() as p:
            self.assertEqual(p.call("count").output, b"1")
            with self.assertRaises(sandboxd.Timeout) as cm:
                p.call("spin", timeout=0.2, fuel=self.max_fuel)
            self.assertIs(cm.exception.data.get("instanceClosed"), True)
            with self.assertRaises(sandboxd.InstanceClosed) as cm:
                p.call("count")
            e = cm.exception
            self.assertEqual(e.instance, p.id)
            self.assertIn("timeout", e.reason)
            self.assertIn("spin", e.reason)
            self.assertIn(p.id, str(e))

    def test_hog_stopped_by_the_cap(self):
        with self.go_plugin(memory_bytes=32 << 20) as p:
            with self.assertRaises(sandboxd.MemoryLimitExceeded) as cm:
                p.call("hog", timeout=WAIT, fuel=self.max_fuel)
            self.assertEqual(cm.exception.limit, 32 << 20)
            self.assertIs(cm.exception.data.get("instanceClosed"), True)
            with self.assertRaises(sandboxd.InstanceClosed) as cm:
                p.call("greet", "x")
            self.assertIn("memory_limit_exceeded", cm.exception.reason)

    def test_one_shot_run(self):
        r = self.sb.run(module=self.go, function="greet", input="Ada", wasi=True, log=True)
        self.assertEqual(r.output, b"Hello, Ada!")
        self.assertIsInstance(r, sandboxd.RunResult)
        r = self.sb.run(module=self.go, function="config", config={"greeting": "Hi"}, wasi=True, log=True)
        self.assertEqual(r.output, b"Hi")
        # each run is a fresh instance
        runs = [self.sb.run(module=self.go, function="count", wasi=True, log=True).output for _ in range(2)]
        self.assertEqual(runs, [b"1", b"1"])
        with self.assertRaises(sandboxd.PluginError) as cm:
            self.sb.run(module=self.go, function="fail", input="one-shot", wasi=True, log=True)
        self.assertEqual(cm.exception.message, "failed on purpose: one-shot")

    def test_grants_are_enforced(self):
        with self.assertRaises(sandboxd.DisallowedImport) as cm:
            self.sb.plugin(module=self.go, log=True)  # WASI not granted
        self.assertEqual(cm.exception.module, "wasi_snapshot_preview1")
        # Extism links log_* for every plugin: without the grant the plugin
        # runs and its lines are dropped
        with self.sb.plugin(module=self.go, wasi=True) as p:
            self.assertEqual(p.call("logs").logs, [])


class WatPluginTest(PluginTestCase):
    def test_functions(self):
        lines = []
        with self.wat_plugin(config={"greeting": "hey"}) as p:
            self.assertTrue(p.is_plugin)
            self.assertEqual(p.call("greet", "WAT").output, b"Hello, WAT")
            data = bytes(range(255, -1, -1))
            self.assertEqual(p.call("echo", data).output, data)
            counts = [int.from_bytes(p.call("count").output, "little") for _ in range(3)]
            self.assertEqual(counts, [1, 2, 3])
            self.assertEqual(p.call("config").output, b"hey")
            r = p.call("logs", on_log=lines.append)
            self.assertEqual([(str(line), line.level) for line in r.logs],
                             [("hello from info", "info"), ("careful: warn", "warn")])
            self.assertEqual(lines, r.logs)
            with self.assertRaises(sandboxd.PluginError) as cm:
                p.call("fail")
            self.assertEqual((cm.exception.message, cm.exception.return_code), ("it failed on purpose", 1))
            with self.assertRaises(sandboxd.PluginError) as cm:
                p.call("rc")
            self.assertEqual(cm.exception.return_code, 3)
            self.assertIn("rc", cm.exception.message)
            self.assertEqual(int.from_bytes(p.call("count").output, "little"), 4)
        with self.wat_plugin() as p:
            self.assertEqual(p.call("config").output, b"(none)")
            self.assertEqual(int.from_bytes(p.call("count").output, "little"), 1)

    def test_memory_fences(self):
        for fn in ("hog", "grow"):
            with self.subTest(fn):
                with self.wat_plugin(memory_bytes=4 << 20) as p:
                    with self.assertRaises(sandboxd.MemoryLimitExceeded):
                        p.call(fn)
                    with self.assertRaises(sandboxd.InstanceClosed):
                        p.call("greet")

    def test_spin_and_isolation(self):
        with self.wat_plugin() as a, self.wat_plugin() as b:
            self.assertEqual(int.from_bytes(b.call("count").output, "little"), 1)
            with self.assertRaises(sandboxd.Timeout):
                a.call("spin", timeout=0.1, fuel=self.max_fuel)
            with self.assertRaises(sandboxd.InstanceClosed):
                a.call("count")
            # the other instance's state is untouched
            self.assertEqual(int.from_bytes(b.call("count").output, "little"), 2)

    def test_fuel_per_call(self):
        with self.wat_plugin() as p:
            with self.assertRaises(sandboxd.FuelExhausted) as cm:
                p.call("spin", fuel=10000, timeout=WAIT)
            self.assertEqual(cm.exception.budget, 10000)
            with self.assertRaises(sandboxd.InstanceClosed) as cm:
                p.call("greet")
            self.assertIn("fuel_exhausted", cm.exception.reason)

    def test_missing_function_keeps_the_instance(self):
        with self.wat_plugin() as p:
            with self.assertRaises(sandboxd.ExportError):
                p.call("nope")
            with self.assertRaises(sandboxd.InvalidParams) as cm:  # refused before it is sent
                p.call("greet", "x", timeout=-1)
            self.assertIn("timeout must be a positive, finite number of seconds, got -1", str(cm.exception))
            self.assertNotIn("timeoutMs", str(cm.exception))
            self.assertEqual(p.call("greet", "again").output, b"Hello, again")


class InstanceTest(PluginTestCase):
    def test_stateful_plain_module(self):
        with self.sb.instantiate(wat=STATEFUL) as p:  # plugin() by the protocol's name
            self.assertFalse(p.is_plugin)
            self.assertEqual(p.call("incr", args=[5]).values, [5])
            r = p.call("incr", args=[sandboxd.I64(7)])
            self.assertEqual(r.values, [12])
            self.assertIsNone(r.output)
            self.assertEqual(p.call("calls").values, [2])  # memory writes persist too
            with self.assertRaises(sandboxd.InvalidParams) as cm:
                p.call("calls", b"input")  # not a plugin function
            self.assertIn("input", str(cm.exception))
            self.assertEqual(p.call("calls").values, [2])
        with self.sb.plugin(wat=STATEFUL) as p:
            self.assertEqual(p.call("incr", args=[1]).values, [1])

    def test_release(self):
        p = self.sb.plugin(wat=STATEFUL)
        live = self.sb.stats()["instances"]["live"]
        p.release()
        p.release()  # idempotent
        self.assertEqual(self.sb.stats()["instances"]["live"], live - 1)
        with self.assertRaises(sandboxd.InstanceClosed) as cm:
            p.call("calls")
        self.assertEqual(cm.exception.reason, "released")
        # the sidecar's own answer for it, sent past the client's check
        with self.assertRaises(sandboxd.InstanceClosed) as cm:
            self.sb._connection().call("call", {"instance": p.id, "function": "calls"})
        self.assertEqual(cm.exception.code, -32001)
        self.assertEqual(cm.exception.instance, p.id)
        # releasing what the sidecar does not know is fine too
        self.assertIsNone(self.sb._connection().call("release", {"instance": "inst-never"}))

    def test_block_that_raises_releases(self):
        live = self.sb.stats()["instances"]["live"]
        with self.assertRaisesRegex(KeyError, "body"):
            with self.sb.plugin(wat=STATEFUL) as p:
                p.call("incr", args=[1])
                raise KeyError("body")
        self.assertTrue(p.released)
        self.assertEqual(self.sb.stats()["instances"]["live"], live)

    def test_calls_to_one_instance_run_in_order(self):
        with self.sb.plugin(wat=STATEFUL) as p:
            handles = [p.submit("incr", args=[i]) for i in range(1, 21)]
            totals = [h.result(WAIT).values[0] for h in handles]
            self.assertEqual(totals, [sum(range(1, i + 1)) for i in range(1, 21)])

    def test_threads_share_one_instance(self):
        with self.sb.plugin(wat=STATEFUL) as p:
            errors = []

            def work():
                try:
                    for _ in range(25):
                        p.call("incr", args=[1])
                except BaseException as e:  # reported below
                    errors.append(e)

            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
            self.assertEqual(errors, [])
            self.assertEqual(p.call("calls").values, [100])

    def test_cancel_running_call_closes_the_instance(self):
        with self.sb.plugin(wat=STATEFUL) as p:
            h = p.submit("spin", timeout=WAIT, fuel=self.max_fuel)
            wait_running(self.sb, WAIT)
            self.assertTrue(h.cancel())
            with self.assertRaises(sandboxd.Cancelled):
                h.result(WAIT)
            with self.assertRaises(sandboxd.InstanceClosed) as cm:
                p.call("calls")
            self.assertIn("cancelled", cm.exception.reason)

    def test_cancel_queued_call_keeps_the_instance(self):
        with self.sb.plugin(wat=STATEFUL) as p:
            busy = p.submit("busy", args=[300_000_000], timeout=WAIT, fuel=self.max_fuel)
            wait_running(self.sb, WAIT)
            queued = p.submit("incr", args=[1])
            self.assertTrue(queued.cancel())
            with self.assertRaises(sandboxd.Cancelled):
                queued.result(WAIT)
            self.assertEqual(busy.result(WAIT).values, [7])
            self.assertEqual(p.call("calls").values, [0])  # the cancelled incr never ran

    def test_release_stops_running_and_queued_calls(self):
        p = self.sb.plugin(wat=STATEFUL)
        running = p.submit("spin", timeout=WAIT, fuel=self.max_fuel)
        wait_running(self.sb, WAIT)
        queued = p.submit("calls")
        p.release()
        with self.assertRaises(sandboxd.Cancelled):
            running.result(WAIT)
        with self.assertRaises(sandboxd.InstanceClosed) as cm:
            queued.result(WAIT)
        self.assertEqual(cm.exception.reason, "released")


class LimitsTest(IntegrationTest):
    def test_too_many_instances(self):
        with sandboxd.Sidecar(binary=self.BIN, args=["--max-instances", "2"]) as sb:
            self.assertEqual(sb.info["maxInstances"], 2)
            a, b = sb.plugin(wat=STATEFUL), sb.plugin(wat=STATEFUL)
            with self.assertRaises(sandboxd.TooManyInstances) as cm:
                sb.plugin(wat=STATEFUL)
            self.assertEqual((cm.exception.instances, cm.exception.max_instances, cm.exception.code), (2, 2, -32002))
            self.assertIn("release one", str(cm.exception))
            a.release()
            with sb.plugin(wat=STATEFUL) as c:
                self.assertEqual(c.call("incr", args=[3]).values, [3])
            self.assertEqual(b.call("incr", args=[4]).values, [4])
            stats = sb.stats()["instances"]
            self.assertEqual((stats["live"], stats["max"], stats["created"]), (1, 2, 3))

    def test_bad_params_named_by_the_sidecar(self):
        with sandboxd.Sidecar(binary=self.BIN) as sb:
            with self.assertRaises(sandboxd.InvalidParams) as cm:
                sb.run(wat=STATEFUL, function="calls", input="x")  # not a plugin
            self.assertIn("input", str(cm.exception))
            with self.assertRaises(sandboxd.InvalidParams) as cm:
                sb.plugin(wat=STATEFUL, var_bytes=1 << 40)
            self.assertIn("varBytes", str(cm.exception))

    def test_instances_die_with_the_sidecar(self):
        sb = sandboxd.Sidecar(binary=self.BIN, restart=True)
        try:
            p = sb.plugin(wat=STATEFUL)
            self.assertEqual(p.call("incr", args=[1]).values, [1])
            running = p.submit("spin", timeout=WAIT, fuel=10 ** 15)
            os.kill(sb.pid, signal.SIGKILL)
            with self.assertRaises(sandboxd.SidecarError) as cm:
                running.result(WAIT)
            self.assertIn("SIGKILL", str(cm.exception))
            with self.assertRaises(sandboxd.InstanceClosed) as cm:
                p.call("incr", args=[1])
            self.assertIn("die with the sidecar", cm.exception.reason)
            p.release()  # nothing left to release: no error
            with sb.plugin(wat=STATEFUL) as q:  # the restarted sidecar
                self.assertEqual(q.call("incr", args=[2]).values, [2])
        finally:
            sb.close()


class AsyncPluginTest(IntegrationTest):
    def test_async(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN, max_concurrency=2) as sb:
                wat = await sb.compile(wat=WAT_PLUGIN.read_text(), limits=COMPILE)
                max_fuel = sb.info["limits"]["maximums"]["fuel"]
                async with sb.plugin(module=wat, log=True, config={"greeting": "salut"}) as p:
                    r = await p.call("greet", "async")
                    self.assertEqual(r.output, b"Hello, async")
                    self.assertEqual((await p.call("config")).output, b"salut")
                    with self.assertRaises(sandboxd.PluginError):
                        await p.call("fail")
                self.assertTrue(p.released)

                # many instances at once, calls to each in the order sent
                plugins = [await sb.plugin(module=wat, log=True) for _ in range(6)]
                try:
                    rounds = await asyncio.gather(*(asyncio.gather(*(q.call("count") for _ in range(5)))
                                                    for q in plugins))
                    for outputs in rounds:
                        self.assertEqual([int.from_bytes(o.output, "little") for o in outputs], [1, 2, 3, 4, 5])
                    self.assertEqual(len({q.id for q in plugins}), 6)
                finally:
                    for q in plugins:
                        await q.release()

                # cancelling the awaiting task stops a running call and closes the instance
                async with sb.instantiate(wat=STATEFUL) as s:
                    task = asyncio.ensure_future(s.call("spin", timeout=WAIT, fuel=max_fuel))
                    for _ in range(WAIT * 100):
                        if (await sb.stats())["inFlight"] >= 1:
                            break
                        await asyncio.sleep(0.01)
                    task.cancel()
                    with self.assertRaises(asyncio.CancelledError):
                        await task
                    with self.assertRaises(sandboxd.InstanceClosed):
                        await s.call("calls")

                # a timeout in one instance leaves the others alone
                a, b = await sb.plugin(module=wat, log=True), await sb.plugin(module=wat, log=True)
                try:
                    results = await asyncio.gather(a.call("spin", timeout=0.1, fuel=max_fuel), b.call("count"),
                                                   return_exceptions=True)
                    self.assertIsInstance(results[0], sandboxd.Timeout)
                    self.assertEqual(int.from_bytes(results[1].output, "little"), 1)
                    self.assertEqual(int.from_bytes((await b.call("count")).output, "little"), 2)
                finally:
                    await a.release()
                    await b.release()

                r = await sb.run(module=wat, function="greet", input=b"one-shot", log=True)
                self.assertEqual(r.output, b"Hello, one-shot")
                self.assertEqual((await sb.stats())["instances"]["live"], 0)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
