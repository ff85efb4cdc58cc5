"""The plugin/instance API without the real sidecar: the errors of the
instance methods, result parsing in the Session, the params the client
builds (and refuses), and the handles' lifecycle against the scripted fake
sidecar. The real plugins are tested in test_plugins.py."""

import asyncio
import concurrent.futures
import pickle
import time
import unittest

import sandboxd
from sandboxd import _params
from sandboxd._framing import encode_message
from sandboxd._plugin import plugin_options
from sandboxd._protocol import Session
from sandboxd._results import call_result_parser, parse_instantiated
from sandboxd.errors import error_from_rpc

from _support import fake_sidecar_bin


class InstanceErrorsTest(unittest.TestCase):
    def test_plugin_error(self):
        e = error_from_rpc({"code": 10, "message": "plugin_error: failed on purpose: x",
                            "data": {"kind": "plugin_error", "message": "failed on purpose: x", "function": "fail",
                                     "returnCode": 1, "fuelConsumed": 812, "peakMemoryBytes": 131072}})
        self.assertIs(type(e), sandboxd.PluginError)
        self.assertEqual((e.message, e.plugin_message, e.function, e.return_code),
                         ("failed on purpose: x", "failed on purpose: x", "fail", 1))
        self.assertEqual(str(e), "plugin_error: failed on purpose: x")  # the sidecar's whole message
        self.assertEqual((e.kind, e.code, e.fuel_consumed, e.peak_memory_bytes), ("plugin_error", 10, 812, 131072))
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), e2.message, str(e2), e2.function, e2.return_code),
                         (sandboxd.PluginError, e.message, str(e), "fail", 1))
        # without data.message, .message is the sidecar's
        e = error_from_rpc({"code": 10, "message": "m", "data": {"kind": "plugin_error", "returnCode": 3}})
        self.assertEqual((e.message, e.plugin_message, e.return_code), ("m", None, 3))

    def test_instance_closed_and_too_many_by_code(self):
        reason = 'closed after timeout in a call of "spin"'
        e = error_from_rpc({"code": -32001, "message": "instance inst-1 is closed: " + reason,
                            "data": {"instance": "inst-1", "reason": reason}})
        self.assertIs(type(e), sandboxd.InstanceClosed)
        self.assertEqual((e.instance, e.reason, e.code, e.kind), ("inst-1", reason, -32001, "instance_closed"))
        self.assertNotIsInstance(e, sandboxd.SidecarError)
        e = error_from_rpc({"code": -32002, "message": "too many instances: 64 are live (the maximum is 64); "
                                                       "release one", "data": {"instances": 64, "maxInstances": 64}})
        self.assertIs(type(e), sandboxd.TooManyInstances)
        self.assertEqual((e.instances, e.max_instances, e.code), (64, 64, -32002))
        e2 = pickle.loads(pickle.dumps(e))
        self.assertEqual((type(e2), e2.max_instances), (sandboxd.TooManyInstances, 64))
        # neighbours in the reserved range stay protocol errors
        self.assertIs(type(error_from_rpc({"code": -32003, "message": "m"})), sandboxd.SidecarError)
        self.assertIs(type(error_from_rpc({"code": -32000, "message": "busy", "data": {"kind": "busy"}})),
                      sandboxd.SidecarError)


class SessionPluginTest(unittest.TestCase):
    def setUp(self):
        self.session = Session()
        self.settled = {}

    def start(self, method, transform, on_log=None, on_late=None):
        call, _frame = self.session.start(
            method, {}, lambda result, exc: self.settled.__setitem__(call.id, (result, exc)), on_log, transform,
            on_late=on_late)
        return call

    def feed(self, **message):
        self.session.feed(encode_message(dict(message, jsonrpc="2.0")))

    def test_call_result_with_output_and_levelled_logs(self):
        lines = []
        call = self.start("call", call_result_parser("inst-1", "sha256:aa"), lines.append)
        self.feed(method="log", params={"id": call.id, "seq": 0, "line": "an info line", "level": "info"})
        self.feed(method="log", params={"id": call.id, "seq": 1, "line": "host::log line"})
        self.feed(id=call.id, result={"values": [], "fuelConsumed": 812, "peakMemoryBytes": 131072,
                                      "elapsedMicros": 40, "queuedMicros": 3, "logLines": 2, "logTruncated": False,
                                      "output": {"base64": "AP8="}, "outputTruncated": True})
        r, exc = self.settled[call.id]
        self.assertIsNone(exc)
        self.assertIsInstance(r, sandboxd.CallResult)
        self.assertIsInstance(r, sandboxd.RunResult)
        self.assertEqual((r.output, r.output_truncated, r.instance, r.module_id), (b"\x00\xff", True, "inst-1", "sha256:aa"))
        self.assertEqual((r.fuel_consumed, r.peak_memory_bytes, r.elapsed, r.queued), (812, 131072, 40e-6, 3e-6))
        self.assertEqual(r.logs, ["an info line", "host::log line"])
        self.assertEqual([line.level for line in r.logs], ["info", None])
        self.assertIs(lines[0], r.logs[0])
        self.assertIsInstance(lines[0], sandboxd.LogLine)

    def test_plain_function_has_no_output(self):
        call = self.start("call", call_result_parser("inst-1", "sha256:aa"))
        self.feed(id=call.id, result={"values": [{"type": "i32", "value": 2}], "fuelConsumed": 1,
                                      "peakMemoryBytes": 65536, "elapsedMicros": 4})
        r, exc = self.settled[call.id]
        self.assertEqual((r.values, r.output), ([2], None))

    def test_malformed_output_is_a_sidecar_error(self):
        call = self.start("call", call_result_parser("inst-1", "sha256:aa"))
        self.feed(id=call.id, result={"values": [], "fuelConsumed": 1, "peakMemoryBytes": 0, "elapsedMicros": 4,
                                      "output": "not an object"})
        r, exc = self.settled[call.id]
        self.assertIsInstance(exc, sandboxd.SidecarError)
        self.assertIn("output", str(exc))

    def test_instantiated(self):
        call = self.start("instantiate", parse_instantiated)
        exports = [{"name": "greet", "kind": "func", "params": [], "results": ["i32"]}]
        self.feed(id=call.id, result={"instance": "inst-7f3a9c-1", "moduleId": "sha256:bb", "plugin": True,
                                      "exports": exports, "fuelConsumed": 1234, "elapsedMicros": 310})
        info, exc = self.settled[call.id]
        self.assertIsNone(exc)
        self.assertEqual((info.id, info.module_id, info.plugin, info.exports, info.fuel_consumed),
                         ("inst-7f3a9c-1", "sha256:bb", True, exports, 1234))
        call = self.start("instantiate", parse_instantiated)
        self.feed(id=call.id, result={"instance": 7, "moduleId": "sha256:bb", "exports": []})
        self.assertIsInstance(self.settled[call.id][1], sandboxd.SidecarError)

    def test_late_result_of_an_abandoned_call(self):
        late = []
        inst = self.start("instantiate", parse_instantiated, on_late=late.append)
        run = self.start("run", parse_instantiated)
        refused = self.start("instantiate", parse_instantiated, on_late=late.append)
        for call in (inst, run, refused):
            self.assertTrue(self.session.abandon(call.id))
        self.feed(id=run.id, result={"instance": "never-mind"})
        self.feed(id=refused.id, error={"code": -32800, "message": "cancelled", "data": {"kind": "cancelled"}})
        self.feed(id=inst.id, result={"instance": "inst-late"})
        self.feed(id=inst.id, result={"instance": "inst-late"})  # a repeat is not ours any more
        self.assertEqual(late, [{"instance": "inst-late"}])
        self.assertEqual(self.settled, {})

    def test_on_late_raising_does_not_stop_the_reader(self):
        def boom(result):
            raise RuntimeError("boom")

        inst = self.start("instantiate", parse_instantiated, on_late=boom)
        self.session.abandon(inst.id)
        self.feed(id=inst.id, result={"instance": "x"})
        other = self.start("stats", lambda r, c: r)
        self.feed(id=other.id, result={"ok": 1})
        self.assertEqual(self.settled[other.id], ({"ok": 1}, None))


class PluginParamsTest(unittest.TestCase):
    def instantiate(self, **keywords):
        return _params.instantiate_params(plugin_options(keywords, "plugin()"))

    def test_instantiate_params(self):
        p = self.instantiate(path="/p/plugin.wasm", wasi=True, log=True, config={"greeting": "hi"},
                             memory_bytes=4 << 20, fuel=10 ** 6, timeout=0.5, var_bytes=1024)
        self.assertEqual(p, {"module": {"path": "/p/plugin.wasm"},
                             "capabilities": {"log": True, "wasi": True},
                             "limits": {"fuel": 10 ** 6, "memoryBytes": 4 << 20, "varBytes": 1024, "timeoutMs": 500},
                             "config": {"greeting": "hi"}})
        self.assertEqual(self.instantiate(module_id="sha256:ab"), {"module": {"id": "sha256:ab"}})
        self.assertEqual(self.instantiate(wasm=b"\0asm"), {"module": {"wasm": "AGFzbQ=="}})
        self.assertEqual(self.instantiate(wat="(module)", limits=sandboxd.Limits(instances=2), memories=1),
                         {"module": {"wat": "(module)"}, "limits": {"instances": 2, "memories": 1}})

    def test_instantiate_refusals(self):
        cases = [
            (dict(), "exactly one module source"),
            (dict(wat="(module)", module_id="sha256:ab"), "exactly one module source"),
            (dict(module="sha256:ab", module_id="sha256:ab"), "module_id="),
            (dict(module_id=3), "module_id= needs a str"),
            (dict(wat="(module)", config={"n": 3}), "config.n: must be a string"),
            (dict(wat="(module)", config=[("a", "b")]), "config needs a mapping"),
            (dict(wat="(module)", config={1: "b"}), "config: a key must be a str"),
            (dict(wat="(module)", function="greet"), r"plugin\(\) takes no function="),
            (dict(wat="(module)", args=[1]), r"plugin\(\) takes no args="),
            (dict(wat="(module)", input="x"), r"plugin\(\) takes no input="),
            (dict(wat="(module)", on_log=print), "on_log= needs log=True"),
            (dict(wat="(module)", on_output=print), "on_output= needs wasi="),
            (dict(wat="(module)", nope=1), r"plugin\(\) got unexpected keyword argument\(s\): nope"),
            (dict(wat="(module)", var_bytes="big"), "var_bytes must be an int"),
        ]
        for keywords, message in cases:
            with self.subTest(keywords=keywords):
                with self.assertRaisesRegex(sandboxd.InvalidParams, message):
                    self.instantiate(**keywords)

    def test_call_params(self):
        self.assertEqual(_params.call_params("i", "greet", "Ada", (), None, {}),
                         {"instance": "i", "function": "greet", "input": "Ada"})
        self.assertEqual(_params.call_params("i", "echo", b"\x00\xff", (), None, {}),
                         {"instance": "i", "function": "echo", "input": {"base64": "AP8="}})
        self.assertEqual(_params.call_params("i", "echo", {"text": "t"}, (), None, {})["input"], {"text": "t"})
        self.assertEqual(_params.call_params("i", "incr", None, [1, sandboxd.I64(2 ** 60)], None, {}),
                         {"instance": "i", "function": "incr", "args": [1, {"type": "i64", "value": str(2 ** 60)}]})
        self.assertEqual(_params.call_params("i", "f", None, (), sandboxd.Limits(fuel=5, log_bytes=10),
                                             {"timeout": 0.25, "output_bytes": 64, "fuel": None}),
                         {"instance": "i", "function": "f",
                          "limits": {"fuel": 5, "logBytes": 10, "outputBytes": 64, "timeoutMs": 250}})

    def test_call_refusals(self):
        cases = [
            (("i", 3, None, (), None, {}), "function must be a str"),
            (("i", "f", 3, (), None, {}), "input needs bytes or a str"),
            (("i", "f", None, "abc", None, {}), "args must be a list"),
            (("i", "f", None, (), sandboxd.Limits(memory_bytes=1), {}),
             r"limits.memoryBytes: fixed at instantiate \(only fuel, timeoutMs, logBytes, outputBytes apply"),
            (("i", "f", None, (), sandboxd.Limits(compile_timeout=1), {}), "limits.compileTimeoutMs: fixed"),
            (("i", "f", None, (), sandboxd.Limits(var_bytes=1), {}), "limits.varBytes: fixed"),
            (("i", "f", None, (), {"fuel": 1}, {}), "limits= needs a sandboxd.Limits"),
            (("i", "f", None, (), None, {"fuel": True}), "fuel must be an int"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                with self.assertRaisesRegex(sandboxd.InvalidParams, message):
                    _params.call_params(*args)

    def test_run_with_input_and_config(self):
        p = _params.run_params(sandboxd.RunOptions(path="/p.wasm", function="greet", input=b"Ada",
                                                   config={"greeting": "hi"}))
        self.assertEqual((p["input"], p["config"], p["function"]), ({"base64": "QWRh"}, {"greeting": "hi"}, "greet"))
        p = _params.run_params(sandboxd.RunOptions(path="/p.wasm", function="greet", input="Ada"))
        self.assertEqual(p["input"], "Ada")
        self.assertNotIn("input", _params.run_params(sandboxd.RunOptions(path="/p.wasm")))
        with self.assertRaisesRegex(sandboxd.InvalidParams, "config.k: must be a string"):
            _params.run_params(sandboxd.RunOptions(path="/p.wasm", config={"k": None}))


class FakePluginTest(unittest.TestCase):
    """The handles' lifecycle against the scripted fake (tests/fake_sidecar.py)."""

    def setUp(self):
        self.sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(self.sb.close)

    def test_lifecycle(self):
        with self.sb.plugin(wat="(module)") as p:
            self.assertTrue(p.id.startswith("inst-fake-"))
            self.assertEqual((p.module_id, p.is_plugin, p.exports[0]["name"]), ("sha256:" + "ef" * 32, True, "echo"))
            r = p.call("echo", "hi")
            self.assertEqual((r.output, r.instance, r.logs, r.logs[0].level), (b"hi", p.id, ["echoing"], "info"))
            self.assertEqual(r.raw["params"], {"instance": p.id, "function": "echo", "input": "hi"})
            with self.assertRaisesRegex(sandboxd.InvalidParams, "on_log= needs an instance made with log=True"):
                p.call("echo", on_log=print)
        self.assertTrue(p.released)
        self.assertEqual(self.sb.stats()["releases"], [p.id])
        p.release()  # idempotent, and sends nothing
        with self.assertRaises(sandboxd.InstanceClosed) as cm:
            p.call("echo", "again")
        self.assertEqual((cm.exception.instance, cm.exception.reason), (p.id, "released"))
        self.assertEqual(self.sb.stats()["releases"], [p.id])

    def test_block_that_raises_still_releases(self):
        with self.assertRaisesRegex(RuntimeError, "body"):
            with self.sb.plugin(wat="(module)") as p:
                raise RuntimeError("body")
        self.assertEqual(self.sb.stats()["releases"], [p.id])

    def test_instances_die_with_the_sidecar(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin(), restart=True)
        self.addCleanup(sb.close)
        p = sb.plugin(wat="(module)")
        with self.assertRaisesRegex(sandboxd.SidecarError, "exited with status 3"):
            p.call("die")  # in flight when the sidecar died
        with self.assertRaises(sandboxd.InstanceClosed) as cm:
            p.call("echo", "x")  # afterwards: the instance is gone with it
        self.assertIn("instances die with the sidecar", cm.exception.reason)
        self.assertIn("exited with status 3", cm.exception.reason)
        p.release()  # a no-op: nothing to release
        # a fresh sidecar gets fresh instances; the old handle does not reach it
        q = sb.plugin(wat="(module)")
        self.assertEqual(q.call("echo", "y").output, b"y")
        with self.assertRaises(sandboxd.InstanceClosed):
            p.call("echo", "x")

    def test_instantiate_given_up_is_released_when_it_arrives(self):
        # The fake answers an instantiate after delayMs even if cancelled
        # (as a real one may, when the cancel arrives too late): the client
        # releases the instance nobody holds.
        conn = self.sb._connection()
        opts = plugin_options({"wat": "(module)", "config": {"delayMs": "300"}}, "plugin()")
        call, fut = conn.start("instantiate", _params.instantiate_params(opts), None, parse_instantiated,
                               on_late=conn.release_late)
        with self.assertRaises(concurrent.futures.TimeoutError):
            conn.wait(call, fut, 0.05)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            stats = self.sb.stats()
            if stats["releases"]:
                break
            time.sleep(0.02)
        self.assertEqual(len(stats["cancelRequests"]), 1)
        self.assertEqual(len(stats["releases"]), 1)
        self.assertEqual(stats["instances"], [])

    def test_async_lifecycle(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                async with sb.plugin(wat="(module)") as p:
                    r = await p.call("echo", b"\x00\xff")
                    self.assertEqual((r.output, r.instance), (b"\x00\xff", p.id))
                self.assertTrue(p.released)
                self.assertEqual((await sb.stats())["releases"], [p.id])
                with self.assertRaises(sandboxd.InstanceClosed):
                    await p.call("echo", "again")
                q = await sb.plugin(wat="(module)")
                await q.release()
                await q.release()
                self.assertEqual((await sb.stats())["releases"], [p.id, q.id])
                with self.assertRaisesRegex(sandboxd.InvalidParams, "takes no function"):
                    sb.plugin(wat="(module)", function="f")  # refused before anything is awaited
                # a cancelled instantiate whose answer comes anyway is released
                task = asyncio.ensure_future(_await(sb.plugin(wat="(module)", config={"delayMs": "300"})))
                await asyncio.sleep(0.05)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                for _ in range(500):
                    stats = await sb.stats()
                    if len(stats["releases"]) == 3:
                        break
                    await asyncio.sleep(0.02)
                self.assertEqual(len(stats["releases"]), 3)
                self.assertEqual(stats["instances"], [])

        asyncio.run(main())


async def _await(awaitable):
    return await awaitable


if __name__ == "__main__":
    unittest.main()
