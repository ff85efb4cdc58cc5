"""Host functions served by the client, against the scripted fake sidecar
(tests/fake_sidecar.py, run function "host": each argument is a host/call
it sends, in turn; the result's "answers" are the client's answers): what
goes on the wire both ways, which handler serves a call, where it runs,
and cancellation. The same against the real sidecar is in
test_host_calls.py."""

import asyncio
import contextvars
import math
import queue
import threading
import unittest

import sandboxd
from sandboxd._hostcalls import MAX_MESSAGE_BYTES, start_eagerly

from _support import fake_sidecar_bin


def step(name, *args, module="env", **extra):
    """One host call for the fake to make."""
    return dict(extra, module=module, name=name, args=list(args))


def i32(v):
    return {"type": "i32", "value": v}


def wire_bytes(b64):
    return {"type": "bytes", "value": {"base64": b64}}


class SyncHostCallsTest(unittest.TestCase):
    def setUp(self):
        self.sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(self.sb.close)

    def host_run(self, steps, functions, **keywords):
        return self.sb.run(wat="(module)", function="host", args=steps, host_functions=functions, **keywords)

    def test_values_both_ways_and_the_declarations(self):
        seen = []

        def mix(a, b, c, d, data):
            seen.append((a, b, c, d, data))
            return a + 1, b * 2, c, float("nan"), data + b"!"

        f = sandboxd.HostFunction("env", "mix", ["i32", "i64", "f32", "f64", "bytes"],
                                  ["i32", "i64", "f32", "f64", "bytes"], mix)
        r = self.host_run([step("mix", i32(-5), {"type": "i64", "value": "4611686018427387905"},
                                {"type": "f32", "value": 1.5, "bits": "0x3fc00000"},
                                {"type": "f64", "value": -0.0, "bits": "0x8000000000000000"},
                                wire_bytes("AP8="))], [f])
        self.assertEqual(seen, [(-5, 4611686018427387905, 1.5, -0.0, b"\x00\xff")])
        self.assertEqual(math.copysign(1, seen[0][3]), -1)  # the sign of -0.0, which == cannot see
        self.assertEqual(r.raw["params"]["hostFunctions"], [
            {"module": "env", "name": "mix", "params": ["i32", "i64", "f32", "f64", "bytes"],
             "results": ["i32", "i64", "f32", "f64", "bytes"]}])
        (answer,) = r.raw["answers"]
        self.assertEqual(answer["result"], {"values": [
            {"type": "i32", "value": -4}, {"type": "i64", "value": "9223372036854775810"},  # unsigned: it wraps
            {"type": "f32", "value": 1.5}, {"type": "f64", "value": "NaN"},
            {"type": "bytes", "value": {"base64": "AP8h"}}]})

    def test_results_of_each_shape(self):
        functions = [
            sandboxd.HostFunction("env", "none", [], [], lambda: None),
            sandboxd.HostFunction("env", "text", [], ["bytes"], lambda: "h\u00e9"),
            sandboxd.HostFunction("env", "pair", [], ["i32", "i32"], lambda: [1, 2]),
            sandboxd.HostFunction("env", "bits", [], ["f64"], lambda: sandboxd.F64.from_bits(0x7ff8000000000123)),
            sandboxd.HostFunction("env", "unsigned", [], ["i32"], lambda: 0xffffffff),
        ]
        r = self.host_run([step(f.name) for f in functions], functions)
        self.assertEqual([a["result"]["values"] for a in r.raw["answers"]], [
            [], [{"type": "bytes", "value": "h\u00e9"}], [i32(1), i32(2)],
            [{"type": "f64", "bits": "0x7ff8000000000123"}], [i32(0xffffffff)]])

    def test_wrong_shapes_are_error_answers_naming_the_problem(self):
        functions = [
            sandboxd.HostFunction("env", "count", [], ["i32", "i32"], lambda: 1),
            sandboxd.HostFunction("env", "type", [], ["i32"], lambda: "one"),
            sandboxd.HostFunction("env", "range", [], ["i32"], lambda: 1 << 40),
            sandboxd.HostFunction("env", "nothing", [], [], lambda: 5),
            sandboxd.HostFunction("env", "wrapper", [], ["i64"], lambda: sandboxd.I32(1)),
            sandboxd.HostFunction("env", "surrogate", [], ["bytes"], lambda: "\ud800"),
        ]
        r = self.host_run([step(f.name) for f in functions], functions)
        errors = [a["error"] for a in r.raw["answers"]]
        self.assertEqual({e["code"] for e in errors}, {-32000})
        messages = [e["message"] for e in errors]
        self.assertIn("the handler of env::count returned 1; env::count returns 2 values () -> (i32, i32)", messages[0])
        self.assertIn("returned 'one' as its result: i32 needs an int", messages[1])
        self.assertIn("out of range for i32", messages[2])
        self.assertIn("env::nothing returns nothing", messages[3])
        self.assertIn("an i32 where env::wrapper returns i64", messages[4])
        self.assertIn("not valid UTF-8", messages[5])

    def test_what_json_cannot_carry_is_an_error_answer_and_serving_goes_on(self):
        # A float result travels as a number or the protocol's "NaN" and
        # "Infinity" strings; whatever would reach the encoder as a bare NaN
        # (a wrapper whose wire form keeps the float), or cannot be a float
        # at all, is answered with an error naming the handler, and the
        # calls after it are served.
        class RawF64(sandboxd.F64):
            def _wire_value(self):
                return self.value

        functions = [
            sandboxd.HostFunction("env", "nan", [], ["f64"], lambda: RawF64(float("nan"))),
            sandboxd.HostFunction("env", "inf", [], ["f64"], lambda: RawF64(float("-inf"))),
            sandboxd.HostFunction("env", "huge", [], ["f64"], lambda: 10 ** 400),
            sandboxd.HostFunction("env", "plain", [], ["f64", "f32"], lambda: (float("nan"), float("inf"))),
            sandboxd.HostFunction("env", "after", [], ["i32"], lambda: 1),
        ]
        r = self.host_run([step(f.name) for f in functions], functions)
        nan, inf, huge, plain, after = r.raw["answers"]
        for answer, name in ((nan, "nan"), (inf, "inf")):
            self.assertEqual(answer["error"]["code"], -32000)
            self.assertIn("the handler of env::%s returned RawF64(" % name, answer["error"]["message"])
            self.assertIn("NaN/Infinity are not JSON", answer["error"]["message"])
        self.assertEqual(huge["error"]["code"], -32000)
        self.assertIn("the handler of env::huge returned 1000", huge["error"]["message"])
        self.assertIn("an int too large for f64", huge["error"]["message"])
        self.assertEqual(plain["result"]["values"], [{"type": "f64", "value": "NaN"}, {"type": "f32", "value": "Infinity"}])
        self.assertEqual(after["result"]["values"], [i32(1)])
        self.assertEqual(self.host_run([step("after")], functions[4:]).raw["answers"][0]["result"]["values"], [i32(1)])

    def test_a_handler_that_raises_sends_its_message_bounded(self):
        def fail(n):
            raise LookupError("no such key: %d" % n)

        def huge():
            raise ValueError("x" * (1 << 20))

        r = self.host_run([step("fail", i32(7)), step("huge")],
                          [sandboxd.HostFunction("env", "fail", ["i32"], [], fail),
                           sandboxd.HostFunction("env", "huge", [], [], huge)])
        first, second = (a["error"] for a in r.raw["answers"])
        self.assertEqual(first, {"code": -32000, "message": "LookupError: no such key: 7"})
        self.assertLessEqual(len(second["message"].encode()), MAX_MESSAGE_BYTES)
        self.assertTrue(second["message"].startswith("ValueError: xxx"))

    def test_what_cannot_be_served_is_answered_at_once(self):
        f = sandboxd.HostFunction("env", "f", ["i32"], [], lambda n: None)
        r = self.host_run([step("missing"), step("f", {"type": "i64", "value": "1"}), step("f"),
                           step("f", i32(1), module="other")], [f])
        codes = [(a["error"]["code"], a["error"]["message"]) for a in r.raw["answers"]]
        self.assertEqual([c for c, _ in codes], [-32601, -32602, -32602, -32601])
        self.assertIn("no handler for host function env::missing", codes[0][1])
        self.assertIn("args[0] is {'type': 'i64', 'value': '1'}; env::f takes (i32) -> ()", codes[1][1])
        self.assertIn("env::f takes (i32) -> (); the call has 0 arguments", codes[2][1])

    def test_handler_runs_on_the_callers_thread_with_its_context(self):
        seen = []

        def where():
            call = sandboxd.current_host_call()
            seen.append((threading.get_ident(), call.name, call.module, call.instance, call.cancelled))
            return 1

        r = self.host_run([step("where"), step("where")], [sandboxd.HostFunction("env", "where", [], ["i32"], where)])
        me = threading.get_ident()
        self.assertEqual(seen, [(me, "where", "env", None, False)] * 2)
        self.assertEqual(len(r.raw["answers"]), 2)
        self.assertIsNone(sandboxd.current_host_call())

    def test_requests_from_a_handler_name_its_host_call(self):
        def nested():
            inner = self.sb.run(wat="(module)", function="add", args=[1, 2])
            return inner.raw["params"].get("hostCall")

        f = sandboxd.HostFunction("env", "nested", [], ["bytes"], nested)
        r = self.host_run([step("nested", id="sbx-nested")], [f])
        self.assertEqual(r.raw["answers"][0]["result"]["values"], [{"type": "bytes", "value": "sbx-nested"}])
        self.assertNotIn("hostCall", self.sb.run(wat="(module)", function="add", args=[1, 2]).raw["params"])

    def test_the_most_specific_registration_wins(self):
        def named(who):
            return sandboxd.HostFunction("env", "who", [], ["bytes"], lambda: who)

        with sandboxd.Sidecar(binary=fake_sidecar_bin(), host_functions=[named("sidecar")]) as sb:
            def answer(r):
                return r.raw["answers"][0]["result"]["values"][0]["value"]

            r = sb.run(wat="(module)", function="host", args=[step("who")])
            self.assertEqual(answer(r), "sidecar")
            self.assertEqual(len(r.raw["params"]["hostFunctions"]), 1)
            r = sb.run(wat="(module)", function="host", args=[step("who")], host_functions=[named("run")])
            self.assertEqual((answer(r), len(r.raw["params"]["hostFunctions"])), ("run", 1))
            self.assertIn("hostFunctions", sb.run(wat="(module)", function="add", args=[1, 1]).raw["params"])
            with sb.plugin(wat="(module)") as p:
                self.assertEqual(answer(p.call("host", args=[step("who")])), "sidecar")
            with sb.plugin(wat="(module)", host_functions=[named("instance")]) as p:
                r = p.call("host", args=[step("who")])
                self.assertEqual(answer(r), "instance")
        self.assertNotIn("hostFunctions", self.sb.run(wat="(module)", function="add", args=[1, 1]).raw["params"])

    def test_an_instances_host_calls_carry_it(self):
        seen = []
        f = sandboxd.HostFunction("env", "f", [], [], lambda: seen.append(sandboxd.current_host_call().instance))
        with self.sb.plugin(wat="(module)", host_functions=[f]) as p:
            p.call("host", args=[step("f")])
            self.assertEqual(seen, [p.id])

    def test_a_cancel_reaches_the_handler_and_no_answer_follows(self):
        seen = queue.Queue()

        def wait():
            call = sandboxd.current_host_call()
            self.sb.stats()  # the fake cancels the call and times the run out
            seen.put(call.wait_cancelled(60))
            return 1

        with self.assertRaises(sandboxd.Timeout):
            self.host_run([step("wait", cancel="on_stats", id="sbx-cancelled")],
                          [sandboxd.HostFunction("env", "wait", [], ["i32"], wait)])
        # The fake answers the run before the stats call that wakes the
        # handler, so the run can end first: wait for the handler itself.
        self.assertIs(seen.get(timeout=60), True)
        self.assertNotIn("sbx-cancelled", self.sb.stats()["hostAnswers"])

    def test_a_submitted_run_nobody_waits_for_is_served_on_a_thread(self):
        threads = []
        done = threading.Event()

        def f():
            threads.append(threading.current_thread().name)
            done.set()
            return 3

        handle = self.sb.submit(wat="(module)", function="host", args=[step("f")],
                                host_functions=[sandboxd.HostFunction("env", "f", [], ["i32"], f)])
        self.assertTrue(done.wait(60))
        self.assertEqual(threads, ["sandboxd-host-call"])
        self.assertEqual(handle.result().raw["answers"][0]["result"]["values"], [i32(3)])

    def test_an_async_handler_given_to_sidecar_is_an_error_answer(self):
        async def f():
            return 1

        r = self.host_run([step("f")], [sandboxd.HostFunction("env", "f", [], ["i32"], f)])
        self.assertIn("Sidecar calls plain functions", r.raw["answers"][0]["error"]["message"])

    def test_registrations_are_checked_before_anything_is_sent(self):
        f = sandboxd.HostFunction("env", "f", [], [], lambda: None)
        for bad, message in ((["env", "f"], "host_functions[0] must be a sandboxd.HostFunction"),
                             ([f, f], "host_functions[1]: env::f is given twice"),
                             (f, "host_functions needs a list")):
            with self.assertRaises(sandboxd.InvalidParams) as cm:
                self.sb.run(wat="(module)", host_functions=bad)
            self.assertIn(message, str(cm.exception))
        for args, message in ((("env", "f", ["i128"], [], len), "params[0]: unknown type 'i128'"),
                              (("", "f", [], [], len), "module must be a non-empty str"),
                              (("env", "f", "i32", [], len), "params must be a list of types"),
                              (("env", "f", [], []), "handler must be callable")):
            with self.assertRaises(sandboxd.InvalidParams) as cm:
                sandboxd.HostFunction(*args)
            self.assertIn(message, str(cm.exception))

    def test_the_decorator(self):
        @sandboxd.host_function("env", "double", params=["i32"], results=["i32"])
        def double(n):
            return 2 * n

        self.assertIsInstance(double, sandboxd.HostFunction)
        self.assertEqual((double(4), double.signature(), str(double)), (8, "(i32) -> (i32)", "env::double"))


class AsyncHostCallsTest(unittest.TestCase):
    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 60))

    def test_async_and_plain_handlers(self):
        async def lookup(key):
            await asyncio.sleep(0)
            call = sandboxd.current_host_call()
            return key + b":" + call.name.encode()

        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                r = await sb.run(wat="(module)", function="host",
                                 args=[step("lookup", wire_bytes("azE=")), step("plain", i32(2))],
                                 host_functions=[sandboxd.HostFunction("env", "lookup", ["bytes"], ["bytes"], lookup),
                                                 sandboxd.HostFunction("env", "plain", ["i32"], ["i32"],
                                                                       lambda n: n * 21)])
                return [a["result"]["values"] for a in r.raw["answers"]]

        self.assertEqual(self.run_async(main()), [[{"type": "bytes", "value": {"base64": "azE6bG9va3Vw"}}],
                                                  [i32(42)]])

    def test_a_cancel_cancels_the_handlers_task_and_no_answer_follows(self):
        seen = []

        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                async def wait():
                    try:
                        await sb.stats()  # the fake cancels the call and times the run out
                        await asyncio.sleep(60)
                    except asyncio.CancelledError:
                        seen.append(sandboxd.current_host_call().cancelled)
                        raise
                    return 1

                with self.assertRaises(sandboxd.Timeout):
                    await sb.run(wat="(module)", function="host", args=[step("wait", cancel="on_stats", id="sbx-c")],
                                 host_functions=[sandboxd.HostFunction("env", "wait", [], ["i32"], wait)])
                return (await sb.stats())["hostAnswers"]

        answers = self.run_async(main())
        self.assertEqual(seen, [True])
        self.assertNotIn("sbx-c", answers)

    def test_what_json_cannot_carry_is_an_error_answer_and_the_reader_goes_on(self):
        class RawF64(sandboxd.F64):
            def _wire_value(self):
                return self.value

        async def later():
            await asyncio.sleep(0)
            return RawF64(float("nan"))

        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                r = await sb.run(wat="(module)", function="host", args=[step("now"), step("later"), step("after")],
                                 host_functions=[sandboxd.HostFunction("env", "now", [], ["f64"], lambda: RawF64(float("inf"))),
                                                 sandboxd.HostFunction("env", "later", [], ["f64"], later),
                                                 sandboxd.HostFunction("env", "after", [], ["i32"], lambda: 1)])
                again = await sb.run(wat="(module)", function="add", args=[1, 2])
                return r.raw["answers"], again.raw["params"]

        (now, later_, after), again = self.run_async(main())
        for answer, name in ((now, "now"), (later_, "later")):
            self.assertEqual(answer["error"]["code"], -32000)
            self.assertIn("the handler of env::%s returned RawF64(" % name, answer["error"]["message"])
            self.assertIn("NaN/Infinity are not JSON", answer["error"]["message"])
        self.assertEqual(after["result"]["values"], [i32(1)])
        self.assertEqual(again["function"], "add")

    def test_requests_from_a_handler_name_its_host_call_and_raising_answers_an_error(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                async def nested():
                    inner = await sb.run(wat="(module)", function="add", args=[1, 2])
                    return inner.raw["params"]["hostCall"]

                async def fail():
                    raise KeyError("gone")

                r = await sb.run(wat="(module)", function="host", args=[step("nested", id="sbx-a"), step("fail")],
                                 host_functions=[sandboxd.HostFunction("env", "nested", [], ["bytes"], nested),
                                                 sandboxd.HostFunction("env", "fail", [], [], fail)])
                return r.raw["answers"]

        nested, fail = self.run_async(main())
        self.assertEqual(nested["result"]["values"], [{"type": "bytes", "value": "sbx-a"}])
        self.assertEqual(fail["error"], {"code": -32000, "message": "KeyError: 'gone'"})


if __name__ == "__main__":
    unittest.main()


class StartEagerlyTest(unittest.TestCase):
    """start_eagerly, which runs an AsyncSidecar handler's answer up to its
    first wait at once: what does not wait ends there, what waits goes on
    as a task that gets what it awaits, its context and its cancel."""

    def test_what_does_not_wait_ends_at_once(self):
        ran = []

        async def answer():
            ran.append(1)

        async def main():
            self.assertIsNone(start_eagerly(asyncio.get_running_loop(), answer()))
            self.assertEqual(ran, [1])

        asyncio.run(main())

    def test_a_cancelled_error_raised_at_once_stays_inside(self):
        async def answer():
            raise asyncio.CancelledError()

        async def main():
            self.assertIsNone(start_eagerly(asyncio.get_running_loop(), answer()))

        asyncio.run(main())

    def test_what_waits_goes_on_as_a_task_in_its_context(self):
        var = contextvars.ContextVar("var", default="outside")

        async def answer(fut):
            var.set("inside")
            got = await fut
            await asyncio.sleep(0)
            return got, var.get()

        async def main():
            fut = asyncio.get_running_loop().create_future()
            task = start_eagerly(asyncio.get_running_loop(), answer(fut))
            self.assertIsNotNone(task)
            self.assertEqual(var.get(), "outside")  # its first step ran in a copy
            fut.set_result(7)
            self.assertEqual(await task, (7, "inside"))

        asyncio.run(main())

    def test_a_cancel_reaches_the_handler(self):
        seen = []

        async def answer():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        async def main():
            task = start_eagerly(asyncio.get_running_loop(), answer())
            await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        self.assertEqual(seen, ["cancelled"])
