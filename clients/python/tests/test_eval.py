"""``eval`` and sessions against the real sidecar and its interpreter
runtimes (bin/runtimes, which ``make build`` makes): values, input and
output in each language, script errors with their positions, the fences,
cancellation, and sessions keeping their state until a fence closes them.
What the client puts on the wire is tested in test_eval_fake.py."""

import asyncio
import unittest

import sandboxd

from _support import IntegrationTest, wait_running

WAIT = 60  # seconds: a hang bound, never a timing assertion


class EvalTest(IntegrationTest):
    def setUp(self):
        self.sb = sandboxd.Sidecar(binary=self.BIN)
        self.addCleanup(self.sb.close)

    def test_a_value_in_each_language(self):
        self.assertEqual(self.sb.info["capabilities"]["languages"], ["js", "lua", "starlark"])  # what make build installed
        cases = [
            ("js", "[1, 2, 3].map(x => x * input.k)", {"k": 2}, [2, 4, 6]),
            ("js", "({a: input.name.length, b: [null, true, 'é']})", {"name": "Ada"}, {"a": 3, "b": [None, True, "é"]}),
            ("lua", "local t = {} for i = 1, input do t[i] = i * i end return t", 3, [1, 4, 9]),
            ("lua", "return {name = input.name, n = #input.list}", {"name": "x", "list": [1, 2]}, {"name": "x", "n": 2}),
            ("starlark", "sorted(input)", [3, 1, 2], [1, 2, 3]),
            ("starlark", "def double(n):\n    return n * 2\n\ndouble(input)", 2 ** 70, 2 ** 71),
            ("js", "let x = 1", None, None),
        ]
        for language, code, input, want in cases:
            with self.subTest(language=language, code=code):
                r = self.sb.eval(code, language=language, input=input)
                self.assertEqual((r.value, r.language), (want, language))
                self.assertGreater(r.fuel_consumed, 0)
                self.assertGreater(r.peak_memory_bytes, 0)
                self.assertEqual((r.stdout, r.stderr, r.output_truncated), (b"", b"", False))

    def test_a_fresh_interpreter_each_time(self):
        self.sb.eval("globalThis.leak = 1", language="js")
        self.assertEqual(self.sb.eval("typeof leak", language="js").value, "undefined")

    def test_output_is_streamed_and_kept(self):
        for language, code in (("js", 'console.log("hello", input); console.error("careful"); 7'),
                               ("lua", 'print("hello", input) io.write("more") return 7'),
                               ("starlark", 'print("hello", input)\n7')):
            with self.subTest(language=language):
                pieces = []
                r = self.sb.eval(code, language=language, input="Ada",
                                 on_output=lambda stream, data: pieces.append((stream, data)))
                self.assertEqual(r.value, 7)
                self.assertTrue(pieces)
                self.assertEqual(b"".join(d for s, d in pieces if s == "stdout"), r.stdout)
                self.assertEqual(b"".join(d for s, d in pieces if s == "stderr"), r.stderr)
                self.assertTrue(r.stdout.startswith(b"hello"), r.stdout)
                self.assertIn(b"Ada", r.stdout)
        self.assertEqual(self.sb.eval('console.error("careful"); 1', language="js").stderr, b"careful\n")

    def test_output_bytes_cuts_the_output(self):
        r = self.sb.eval('for (let i = 0; i < 100; i++) console.log("0123456789"); 1', language="js", output_bytes=64)
        self.assertEqual((len(r.stdout), r.output_truncated, r.value), (64, True, 1))

    def test_script_errors_carry_the_position(self):
        cases = [
            ("js", "let a = 1;\nlet b = ;\n", 2, 9, "SyntaxError"),
            ("js", "\n\nnope()", 3, None, "ReferenceError"),
            ("lua", 'error("no such user")', 1, None, "no such user"),
            ("starlark", "def f(n):\n    return f(n + 1)\n\nf(0)\n", 2, 12, "called recursively"),
        ]
        for language, code, line, column, message in cases:
            with self.subTest(language=language, code=code):
                with self.assertRaises(sandboxd.ScriptError) as cm:
                    self.sb.eval(code, language=language)
                e = cm.exception
                self.assertEqual((e.kind, e.code, e.language, e.line), ("script_error", 13, language, line))
                if column is not None:
                    self.assertEqual(e.column, column)
                self.assertIn(message, e.script_message)
                self.assertIn(message, e.text)
        self.assertEqual(self.sb.eval("1 + 1", language="js").value, 2)  # still serving

    def test_fences(self):
        with self.assertRaises(sandboxd.Timeout) as cm:
            self.sb.eval("while (true) {}", language="js", timeout=0.1)
        self.assertEqual(cm.exception.timeout, 0.1)
        with self.assertRaises(sandboxd.FuelExhausted) as cm:
            self.sb.eval("while true do end", language="lua", fuel=10_000_000, timeout=60)
        self.assertEqual(cm.exception.budget, 10_000_000)
        with self.assertRaises(sandboxd.MemoryLimitExceeded):
            self.sb.eval('local s = "x" while true do s = s .. s end', language="lua", timeout=60)
        self.assertEqual(self.sb.eval("1 + 1", language="starlark").value, 2)

    def test_cancel(self):
        h = self.sb.submit_eval("while (true) {}", language="js", timeout=WAIT)
        wait_running(self.sb, WAIT)
        self.assertTrue(h.cancel())
        with self.assertRaises(sandboxd.Cancelled):
            h.result(WAIT)
        self.assertEqual(self.sb.eval("2 * 21", language="js").value, 42)

    def test_refused_by_the_sidecar_naming_the_field(self):
        with self.assertRaisesRegex(sandboxd.InvalidParams, "memoryBytes"):
            self.sb.eval("1", language="js", memory_bytes=1 << 62)


class SessionTest(IntegrationTest):
    def setUp(self):
        self.sb = sandboxd.Sidecar(binary=self.BIN)
        self.addCleanup(self.sb.close)

    def test_state_is_kept_in_each_language(self):
        cases = [
            ("js", ["let n = 40", "function bump(k) { return n += k }", "bump(1)", "bump(input)"]),
            ("lua", ["n = 40", "function bump(k) n = n + k return n end", "bump(1)", "bump(input)"]),
            ("starlark", ["n = [40]", "def bump(k):\n    n[0] += k\n    return n[0]", "bump(1)", "bump(input)"]),
        ]
        for language, steps in cases:
            with self.subTest(language=language):
                with self.sb.session(language) as s:
                    self.assertEqual(s.language, language)
                    self.assertGreater(s.raw["peakMemoryBytes"], 0)  # the runtimes are pre-initialised: a start runs no guest code
                    for code in steps[:-2]:
                        s.eval(code)
                    self.assertEqual(s.eval(steps[-2]).value, 41)
                    self.assertEqual(s.eval(steps[-1], input=1).value, 42)
                # a session is an instance: closing it releases it
                self.assertEqual(self.sb.stats()["instances"]["live"], 0)

    def test_a_script_error_keeps_it_a_fence_closes_it(self):
        with self.sb.session("js") as s:
            s.eval("let kept = 'yes'")
            with self.assertRaises(sandboxd.ScriptError):
                s.eval("throw new Error('mine')")
            self.assertEqual(s.eval("kept").value, "yes")
            with self.assertRaises(sandboxd.Timeout) as cm:
                s.eval("while (true) {}", timeout=0.1)
            self.assertIs(cm.exception.data.get("instanceClosed"), True)
            with self.assertRaises(sandboxd.InstanceClosed) as cm:
                s.eval("kept")
            self.assertEqual(cm.exception.instance, s.id)
            self.assertIn("timeout", cm.exception.reason)
        self.assertEqual(self.sb.eval("1", language="js").value, 1)

    def test_memory_cap_holds_for_the_session(self):
        with self.sb.session("lua", memory_bytes=48 << 20) as s:
            s.eval("t = {}")
            with self.assertRaises(sandboxd.MemoryLimitExceeded):
                s.eval('local s = "x" while true do s = s .. s end', timeout=60)
            with self.assertRaises(sandboxd.InstanceClosed):
                s.eval("return 1")

    def test_only_an_evaluations_limits(self):
        with self.sb.session("starlark") as s:
            with self.assertRaisesRegex(sandboxd.InvalidParams, "limits.memoryBytes"):
                s.eval("1", limits=sandboxd.Limits(memory_bytes=1 << 20))
            self.assertEqual(s.eval("1", fuel=10 ** 9, timeout=5, output_bytes=64).value, 1)

    def test_output_in_a_session(self):
        with self.sb.session("starlark") as s:
            pieces = []
            r = s.eval('print("one")\nprint("two")\n3', on_output=lambda stream, data: pieces.append(data))
            self.assertEqual((r.value, r.stdout, b"".join(pieces)), (3, b"one\ntwo\n", b"one\ntwo\n"))

    def test_evaluations_run_in_the_order_sent(self):
        with self.sb.session("js") as s:
            s.eval("var log = []")
            handles = [s.submit("log.push(input); log.length", input=i) for i in range(20)]
            self.assertEqual([h.result(WAIT).value for h in handles], list(range(1, 21)))
            self.assertEqual(s.eval("log").value, list(range(20)))

    def test_cancel_a_running_evaluation_closes_the_session(self):
        with self.sb.session("js", timeout=WAIT) as s:
            h = s.submit("while (true) {}")
            wait_running(self.sb, WAIT)
            self.assertTrue(h.cancel())
            with self.assertRaises(sandboxd.Cancelled):
                h.result(WAIT)
            with self.assertRaises(sandboxd.InstanceClosed) as cm:
                s.eval("1")
            self.assertIn("cancelled", cm.exception.reason)

    def test_cancel_a_queued_evaluation_keeps_the_session(self):
        with self.sb.session("js", timeout=WAIT) as s:
            s.eval("var ran = []")
            busy = s.submit("let i = 0; while (i < 5e6) i++; ran.push('busy'); 7")
            wait_running(self.sb, WAIT)
            queued = s.submit("ran.push('queued')")
            self.assertTrue(queued.cancel())
            with self.assertRaises(sandboxd.Cancelled):
                queued.result(WAIT)
            self.assertEqual(busy.result(WAIT).value, 7)
            self.assertEqual(s.eval("ran").value, ["busy"])  # the cancelled one never ran

    def test_too_many_instances(self):
        with sandboxd.Sidecar(binary=self.BIN, args=["--max-instances", "1"]) as sb:
            with sb.session("lua"):
                with self.assertRaises(sandboxd.TooManyInstances):
                    sb.session("lua")
            with sb.session("lua") as s:  # the first was released
                self.assertEqual(s.eval("return 1").value, 1)

    def test_sessions_die_with_the_sidecar(self):
        sb = sandboxd.Sidecar(binary=self.BIN)
        s = sb.session("js")
        sb.close()
        with self.assertRaisesRegex(sandboxd.InstanceClosed, "its sidecar is gone"):
            s.eval("1")


class AsyncEvalTest(IntegrationTest):
    def test_async(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN) as sb:
                results = await asyncio.gather(*(sb.eval("input * 2", language="starlark", input=i) for i in range(8)))
                self.assertEqual([r.value for r in results], [i * 2 for i in range(8)])
                async with sb.session("lua") as s:
                    await s.eval("acc = 0")
                    self.assertEqual([(await s.eval("acc = acc + input return acc", input=i)).value
                                      for i in (1, 2, 3)], [1, 3, 6])
                with self.assertRaises(sandboxd.ScriptError):
                    await sb.eval("error('x')", language="lua")
                task = asyncio.ensure_future(sb.eval("while (true) {}", language="js", timeout=WAIT))
                for _ in range(WAIT * 100):  # a hang bound
                    if (await sb.stats())["inFlight"] >= 1:
                        break
                    await asyncio.sleep(0.01)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                self.assertEqual((await sb.eval("[input]", language="js", input=1)).value, [1])
                self.assertEqual((await sb.stats())["instances"]["live"], 0)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
