"""Host functions served by the client, against the real sidecar: a guest
calling a declared import answered by a Python handler, in Sidecar
(threads) and AsyncSidecar. Guests: testdata/wat/host_calls.wat (env::lookup
(i64) -> (i32), env::wait) and testdata/plugins/wat/host_user.wat (an
Extism plugin calling extism:host/user::transform, bytes both ways). The
wire shapes are in test_host_calls_fake.py."""

import asyncio
import threading
import unittest

import sandboxd

from _support import REPO, IntegrationTest, SharedSidecarTest, wat

HOST_USER = (REPO / "testdata" / "plugins" / "wat" / "host_user.wat").read_text()


def lookup(handler):
    return sandboxd.HostFunction("env", "lookup", ["i64"], ["i32"], handler)


def wait(handler):
    return sandboxd.HostFunction("env", "wait", [], [], handler)


def transform(handler):
    return sandboxd.HostFunction("extism:host/user", "transform", ["bytes"], ["bytes"], handler)


async def plus(key):
    await asyncio.sleep(0.01)  # the parent takes a while: the runs wait at once
    return key + 100


def never_called():
    raise AssertionError("env::wait is not called by this export")


class SyncHostCallsTest(SharedSidecarTest):
    @classmethod
    def sidecar_options(cls):
        return {"max_concurrency": 2}

    @classmethod
    def setUpClass(cls):
        cls.guest = wat("host_calls.wat")
        super().setUpClass()

    def run_guest(self, function, *args, functions, **keywords):
        return self.sb.run(wat=self.guest, function=function, args=list(args),
                           host_functions=functions + [wait(never_called)], **keywords)

    def test_a_guest_calls_a_handler_on_the_callers_thread(self):
        table = {7: 700, 8: 80}
        threads = []

        def get(key):
            threads.append(threading.current_thread())
            return table[key]

        r = self.run_guest("lookup_sum", 7, functions=[lookup(get)])
        self.assertEqual(r.values, [780])
        self.assertEqual(threads, [threading.current_thread()] * 2)

    def test_undeclared_the_import_is_refused(self):
        with self.assertRaises(sandboxd.DisallowedImport) as cm:
            self.sb.run(wat=self.guest, function="lookup", args=[1])
        self.assertIn("env::lookup", str(cm.exception))

    def test_bytes_both_ways_through_an_extism_plugin(self):
        big = bytes(i * 31 % 256 for i in range(3 << 20))
        for data in (b"x", "h\u00e9llo".encode(), b"\x00\xff\x00\x01", big):
            with self.subTest(size=len(data)):
                r = self.sb.run(wat=HOST_USER, function="run", input=data, memory_bytes=64 << 20, output_bytes=16 << 20, timeout=60,  # a hang bound
                                host_functions=[transform(lambda b: bytes(reversed(b)))])
                self.assertEqual(r.output, bytes(reversed(data)))
                self.assertEqual((r.log_dropped, r.logs), (1, []))  # its log_info line, without the log grant
        r = self.sb.run(wat=HOST_USER, function="run", input="abc",
                        host_functions=[transform(lambda b: b.decode().upper())])  # a str is sent as its UTF-8
        self.assertEqual(r.output, b"ABC")

    def test_a_handler_that_raises_ends_the_run_with_host_function_error(self):
        def get(key):
            raise KeyError("no key %d" % key)

        with self.assertRaises(sandboxd.HostFunctionError) as cm:
            self.run_guest("lookup", 5, functions=[lookup(get)])
        self.assertIn("env::lookup", str(cm.exception))
        self.assertIn("KeyError: 'no key 5'", str(cm.exception))
        self.assertEqual(self.run_guest("lookup", 5, functions=[lookup(lambda k: k)]).values, [5])  # it keeps serving

    def test_the_deadline_ends_a_handler_that_never_answers(self):
        seen = []

        def hold():
            call = sandboxd.current_host_call()
            seen.append(call.wait_cancelled(60))  # a thread cannot be interrupted: it is told

        with self.assertRaises(sandboxd.Timeout):
            self.sb.run(wat=self.guest, function="wait", timeout=0.3,
                        host_functions=[lookup(never_called), wait(hold)])
        self.assertEqual(seen, [True])
        self.assertEqual(self.run_guest("lookup", 2, functions=[lookup(lambda k: k * 2)]).values, [4])

    def test_a_handler_runs_another_module(self):
        def get(key):
            return self.sb.run(wat=wat("well_behaved.wat"), function="add", args=[key, 1]).values[0]

        self.assertEqual(self.run_guest("lookup_sum", 10, functions=[lookup(get)]).values, [11 + 12])

    def test_a_handler_runs_another_module_with_one_slot(self):
        # Issue 20 item 4: the run gives its --max-concurrency slot back while
        # it waits, and its store comes from the pool's instances' share, so
        # the nested run gets a slot and a store.
        with sandboxd.Sidecar(binary=self.BIN, max_concurrency=1) as sb:
            def get(key):
                return sb.run(wat=wat("well_behaved.wat"), function="add", args=[key, 1]).values[0]

            r = sb.run(wat=self.guest, function="lookup", args=[10], timeout=0.5,
                       host_functions=[lookup(get), wait(never_called)])
            self.assertEqual(r.values, [11])

    def test_a_handler_evaluates_snippets_one_shot_and_in_a_session_with_one_slot(self):
        # What a handler sends names its host call (hostCall), eval and a
        # session's instantiate included; the sidecar takes it there too.
        with sandboxd.Sidecar(binary=self.BIN, max_concurrency=1) as sb, \
                sb.session("lua") as counter:
            def get(key):
                counter.eval("n = (n or 0) + input", input=key)
                return sb.eval("input * 2", language="js", input=key).value + counter.eval("n").value

            r = sb.run(wat=self.guest, function="lookup_sum", args=[10], timeout=5,
                       host_functions=[lookup(get), wait(never_called)])
            self.assertEqual(r.values, [(20 + 10) + (22 + 21)])

            def start_session(key):
                with sb.session("starlark") as s:
                    return s.eval("input + 1", input=key).value

            r = sb.run(wat=self.guest, function="lookup", args=[4], timeout=5,
                       host_functions=[lookup(start_session), wait(never_called)])
            self.assertEqual(r.values, [5])

    def test_a_handler_calling_its_own_instance_gets_an_error_not_a_hang(self):
        errors = []

        def get(key):
            try:
                p.call("lookup", args=[key])
            except sandboxd.SandboxError as e:
                errors.append(e)
            return 1

        with self.sb.plugin(wat=self.guest, host_functions=[lookup(get), wait(never_called)]) as p:
            self.assertEqual(p.call("lookup", args=[3]).values, [1])
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("waiting", str(errors[0]))


class AsyncHostCallsTest(IntegrationTest):
    def arun(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 60))

    def test_async_handlers_bytes_errors_deadline_and_nesting(self):
        guest = wat("host_calls.wat")
        cancelled = []

        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN, max_concurrency=2) as sb:
                async def get(key):
                    inner = await sb.run(wat=wat("well_behaved.wat"), function="add", args=[key, 100])
                    return inner.values[0]

                async def hold():
                    try:
                        await asyncio.sleep(60)
                    except asyncio.CancelledError:
                        cancelled.append(sandboxd.current_host_call().cancelled)
                        raise

                async def fail(key):
                    raise ValueError("bad key %d" % key)

                async def upper(data):
                    await asyncio.sleep(0)
                    return data.upper()

                r = await sb.run(wat=guest, function="lookup_sum", args=[1],
                                 host_functions=[lookup(get), wait(hold)])
                self.assertEqual(r.values, [101 + 102])
                with self.assertRaises(sandboxd.Timeout):
                    await sb.run(wat=guest, function="wait", timeout=0.3, host_functions=[lookup(get), wait(hold)])
                with self.assertRaises(sandboxd.HostFunctionError) as cm:
                    await sb.run(wat=guest, function="lookup", args=[4], host_functions=[lookup(fail), wait(hold)])
                self.assertIn("ValueError: bad key 4", str(cm.exception))
                r = await sb.run(wat=HOST_USER, function="run", input=b"\x00abc\xff",
                                 host_functions=[transform(upper)])
                self.assertEqual(r.output, b"\x00ABC\xff")
                results = await asyncio.gather(*(  # runs wait on the parent at once
                    sb.run(wat=guest, function="lookup", args=[k], host_functions=[lookup(plus), wait(hold)])
                    for k in range(2)))
                self.assertEqual([r.values[0] for r in results], [100, 101])

        self.arun(main())
        self.assertEqual(cancelled, [True])

    def test_more_runs_wait_on_the_parent_than_there_are_slots(self):
        # Issue 20 item 4: runs waiting for the parent gave their slots back
        # and hold stores from the pool's instances' share; answered, they
        # come back to a slot ahead of queued runs.
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN, max_concurrency=2) as sb:
                results = await asyncio.gather(*(
                    sb.run(wat=wat("host_calls.wat"), function="lookup", args=[k], timeout=0.5,
                           host_functions=[lookup(plus), wait(never_called)])
                    for k in range(6)))
                return [r.values[0] for r in results]

        self.assertEqual(self.arun(main()), [100, 101, 102, 103, 104, 105])
