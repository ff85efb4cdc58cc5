"""``eval`` and sessions against the scripted fake sidecar
(tests/fake_sidecar.py, ``do_eval``): what the client puts on the wire,
how it reads the answers, output streamed before them, errors and
cancellation, and what it refuses before sending anything. The real
interpreters are tested in test_eval.py."""

import asyncio
import math
import threading
import unittest

import sandboxd

from _support import fake_sidecar_bin


class EvalFakeTest(unittest.TestCase):
    def setUp(self):
        self.sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(self.sb.close)

    def test_params_and_result_on_the_wire(self):
        r = self.sb.eval("echo", language="lua", input={"a": [1, 2.5, None, True], "s": "é"},
                         limits=sandboxd.Limits(fuel=5, memory_bytes=1 << 20), fuel=6, timeout=0.25)
        self.assertIsInstance(r, sandboxd.EvalResult)
        self.assertEqual(r.value, {"language": "lua", "code": "echo", "input": {"a": [1, 2.5, None, True], "s": "é"},
                                   "limits": {"fuel": 6, "memoryBytes": 1 << 20, "timeoutMs": 250}})
        self.assertEqual((r.language, r.fuel_consumed, r.peak_memory_bytes, r.elapsed, r.queued),
                         ("lua", 1200, 5369832, 0.001972, 0.000004))
        self.assertEqual((r.stdout, r.stderr, r.output_truncated), (b"", b"", False))
        self.assertEqual(r.raw["fuelConsumed"], 1200)
        # nothing but the language and the code when nothing else is given
        self.assertEqual(self.sb.eval("echo", language="starlark").value, {"language": "starlark", "code": "echo"})

    def test_output_is_streamed_before_the_answer(self):
        pieces = []
        r = self.sb.eval("print", language="js",
                         on_output=lambda stream, data: pieces.append((stream, data, threading.current_thread().name)))
        self.assertEqual([p[:2] for p in pieces], [("stdout", b"hello\n"), ("stderr", b"careful\n"), ("stdout", b"\xff")])
        self.assertEqual((r.stdout, r.stderr, r.output_truncated), (b"hello\n\xff", b"careful\n", True))
        caller = threading.current_thread().name
        self.assertTrue(all(p[2] == caller or p[2].startswith("sandboxd-reader") for p in pieces), pieces)

    def test_on_output_exception_is_reraised(self):
        def boom(stream, data):
            raise RuntimeError("boom in on_output")

        with self.assertRaisesRegex(RuntimeError, "boom in on_output"):
            self.sb.eval("print", language="js", on_output=boom)
        self.assertEqual(self.sb.eval("echo", language="js").value["code"], "echo")  # still serving

    def test_script_error(self):
        with self.assertRaises(sandboxd.ScriptError) as cm:
            self.sb.eval("error:script_error", language="js")
        e = cm.exception
        self.assertEqual((e.kind, e.code, e.exit_code), ("script_error", 13, 13))
        self.assertEqual((e.language, e.script_message, e.line, e.column),
                         ("js", "ReferenceError: x is not defined", 2, 5))
        self.assertIn("snippet:2:5", e.text)
        self.assertEqual((e.fuel_consumed, e.peak_memory_bytes, e.stdout), (12, 4096, b"so far"))

    def test_fence_errors(self):
        for kind, cls in (("timeout", sandboxd.Timeout), ("fuel_exhausted", sandboxd.FuelExhausted),
                          ("memory_limit_exceeded", sandboxd.MemoryLimitExceeded), ("host", sandboxd.HostError)):
            with self.assertRaises(cls):
                self.sb.eval("error:" + kind, language="lua")

    def test_malformed_result_is_a_sidecar_error(self):
        with self.assertRaisesRegex(sandboxd.SidecarError, "malformed eval result.*'value'"):
            self.sb.eval("no_value", language="js")

    def test_cancel(self):
        streamed = threading.Event()
        h = self.sb.submit_eval("hang", language="js", on_output=lambda stream, data: streamed.set())
        self.assertTrue(streamed.wait(10))
        self.assertFalse(h.done())
        self.assertTrue(h.cancel())
        with self.assertRaises(sandboxd.Cancelled):
            h.result(10)
        self.assertEqual(self.sb.stats()["cancelRequests"], [h.id])

    def test_bad_arguments_are_refused_before_sending(self):
        cases = [
            (dict(language="python"), r'language: unknown language .python.*"starlark"'),
            (dict(language="ruby"), r"language: unknown language 'ruby': give one of js, lua, starlark$"),
            (dict(language=None), r"language must be a str"),
            (dict(language="js", code=b"1"), r"code must be a str"),
            (dict(language="js", code="'\ud800'"), r"code: not valid UTF-8 at character 1"),
            (dict(language="js", input=math.nan), r"input must be a JSON value.*Out of range float"),
            (dict(language="js", input={"b": b"x"}), r"input must be a JSON value.*bytes"),
            (dict(language="js", input={1, 2}), r"input must be a JSON value.*set"),
            (dict(language="js", timeout=-1), r"timeout must be a positive"),
            (dict(language="js", limits={"fuel": 1}), r"limits= needs a sandboxd.Limits"),
            (dict(language="js", on_output="print"), r"on_output must be callable"),
        ]
        deep = []
        for _ in range(100000):
            deep = [deep]
        cases.append((dict(language="js", input=deep), r"input: nested too deeply"))
        for keywords, message in cases:
            code = keywords.pop("code", "1")
            with self.subTest(keywords=keywords):
                with self.assertRaisesRegex(sandboxd.InvalidParams, message):
                    self.sb.eval(code, **keywords)
        with self.assertRaisesRegex(sandboxd.InvalidParams, "language: unknown language 'python'"):
            self.sb.session("python")
        self.assertEqual(self.sb.stats()["evals"], [])


class SessionFakeTest(unittest.TestCase):
    def setUp(self):
        self.sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(self.sb.close)

    def test_session_on_the_wire(self):
        with self.sb.session("js", memory_bytes=32 << 20, timeout=0.5) as s:
            self.assertIsInstance(s, sandboxd.Session)
            self.assertRegex(s.id, r"^inst-fake-\d+$")
            self.assertEqual(s.language, "js")
            self.assertEqual(s.raw["params"], {"language": "js", "limits": {"memoryBytes": 32 << 20, "timeoutMs": 500}})
            self.assertEqual(s.raw["fuelConsumed"], 12000000)
            r = s.eval("echo", input=[1, "two"], fuel=10, output_bytes=64)
            self.assertEqual(r.value, {"instance": s.id, "code": "echo", "input": [1, "two"],
                                       "limits": {"fuel": 10, "outputBytes": 64}})
            self.assertEqual(r.language, "js")
            pieces = []
            r = s.eval("print", on_output=lambda stream, data: pieces.append((stream, data)))
            self.assertEqual(pieces, [("stdout", b"hello\n"), ("stderr", b"careful\n"), ("stdout", b"\xff")])
            self.assertFalse(s.closed)
        self.assertTrue(s.closed)
        stats = self.sb.stats()
        self.assertIn(s.id, stats["releases"])
        with self.assertRaises(sandboxd.InstanceClosed) as cm:
            s.eval("echo")  # refused here: nothing is sent
        self.assertEqual((cm.exception.instance, cm.exception.reason), (s.id, "released"))
        s.close()  # idempotent
        self.assertEqual(self.sb.stats()["evals"], stats["evals"])

    def test_script_error_keeps_the_session_a_fence_closes_it(self):
        s = self.sb.session("starlark")
        with self.assertRaises(sandboxd.ScriptError) as cm:
            s.eval("error:script_error")
        self.assertEqual(cm.exception.language, "starlark")
        self.assertEqual(s.eval("echo").value["instance"], s.id)
        with self.assertRaises(sandboxd.Timeout) as cm:
            s.eval("error:timeout")
        self.assertIs(cm.exception.data["instanceClosed"], True)
        with self.assertRaises(sandboxd.InstanceClosed) as cm:
            s.eval("echo")
        self.assertEqual((cm.exception.code, cm.exception.instance), (-32001, s.id))
        s.close()

    def test_only_an_evaluations_limits(self):
        with self.sb.session("lua") as s:
            with self.assertRaisesRegex(sandboxd.InvalidParams, r"^limits.memoryBytes: fixed at instantiate"):
                s.eval("echo", limits=sandboxd.Limits(memory_bytes=1 << 20))
            with self.assertRaisesRegex(TypeError, "memory_bytes"):
                s.eval("echo", memory_bytes=1 << 20)  # not a keyword of a session's eval
            with self.assertRaisesRegex(sandboxd.InvalidParams, "input must be a JSON value"):
                s.eval("echo", input=float("inf"))
        self.assertEqual(self.sb.stats()["evals"], [])

    def test_cancel_a_running_evaluation(self):
        with self.sb.session("js") as s:
            streamed = threading.Event()
            h = s.submit("hang", on_output=lambda stream, data: streamed.set())
            self.assertTrue(streamed.wait(10))
            h.cancel()
            with self.assertRaises(sandboxd.Cancelled) as cm:
                h.result(10)
            self.assertIs(cm.exception.data["instanceClosed"], True)
            with self.assertRaises(sandboxd.InstanceClosed):
                s.eval("echo")

    def test_a_session_dies_with_its_sidecar(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        s = sb.session("js")
        sb.close()
        with self.assertRaisesRegex(sandboxd.InstanceClosed, "its sidecar is gone"):
            s.eval("echo")
        self.assertTrue(s.closed)
        s.close()  # a no-op: the session died with the sidecar


class AsyncEvalFakeTest(unittest.TestCase):
    def test_async_eval_and_session(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                pieces = []
                r = await sb.eval("print", language="lua", on_output=lambda stream, data: pieces.append(stream))
                self.assertEqual((pieces, r.stdout), (["stdout", "stderr", "stdout"], b"hello\n\xff"))
                r = await sb.eval("echo", language="lua", input=7, timeout=1)
                self.assertEqual(r.value, {"language": "lua", "code": "echo", "input": 7, "limits": {"timeoutMs": 1000}})
                with self.assertRaises(sandboxd.ScriptError):
                    await sb.eval("error:script_error", language="lua")
                with self.assertRaisesRegex(sandboxd.InvalidParams, "language"):
                    sb.session("py")  # refused when called, before anything is awaited
                async with sb.session("lua", fuel=99) as s:
                    self.assertIsInstance(s, sandboxd.AsyncSession)
                    self.assertEqual(s.raw["params"], {"language": "lua", "limits": {"fuel": 99}})
                    self.assertEqual((await s.eval("echo", input="x")).value,
                                     {"instance": s.id, "code": "echo", "input": "x"})
                self.assertTrue(s.closed)
                with self.assertRaises(sandboxd.InstanceClosed):
                    await s.eval("echo")
                s2 = await sb.session("js")
                await s2.close()
                self.assertEqual((await sb.stats())["releases"], [s.id, s2.id])

        asyncio.run(main())

    def test_cancelling_the_task_cancels_the_evaluation(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                for session in (None, await sb.session("js")):
                    streamed = asyncio.Event()
                    on_output = lambda stream, data: streamed.set()  # noqa: E731
                    if session is None:
                        task = asyncio.ensure_future(sb.eval("hang", language="js", on_output=on_output))
                    else:
                        task = asyncio.ensure_future(session.eval("hang", on_output=on_output))
                    await asyncio.wait_for(streamed.wait(), 10)
                    task.cancel()
                    with self.assertRaises(asyncio.CancelledError):
                        await task
                    for _ in range(500):
                        stats = await sb.stats()
                        if len(stats["cancelRequests"]) == (1 if session is None else 2):
                            break
                        await asyncio.sleep(0.01)
                    self.assertEqual(len(stats["cancelRequests"]), 1 if session is None else 2)
                self.assertEqual((await sb.eval("echo", language="js")).value["code"], "echo")

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
