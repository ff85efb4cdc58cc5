"""Client behaviour against a scripted fake sidecar (tests/fake_sidecar.py).

These cover what a real guest cannot provoke on demand: malformed or torn
output, orphan errors, out-of-order logs, a crash at a chosen moment. The
same behaviours that the real server can produce are also tested against it
in test_integration*.py.
"""

import asyncio
import concurrent.futures
import os
import signal
import threading
import time
import unittest

import sandboxd
from sandboxd import _params

from _support import fake_sidecar_bin


class FakeSidecarTest(unittest.TestCase):
    def setUp(self):
        self.sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(self.sb.close)

    def test_result_fields(self):
        r = self.sb.run(wat="(module)", function="add", args=[2, 40])
        self.assertEqual(r.values, [42])
        self.assertEqual(r.raw_values, [{"type": "i32", "value": 42}])
        self.assertEqual((r.fuel_consumed, r.peak_memory_bytes, r.logs), (7, 65536, []))
        self.assertEqual((r.elapsed, r.queued), (0.0015, 0.00002))
        self.assertEqual(r.module_id, "sha256:" + "ab" * 32)
        self.assertEqual((r.log_lines, r.log_truncated), (0, False))

    def test_params_on_the_wire(self):
        r = self.sb.run(path="/g.wasm", function="echo", args=[1, -0.0, 2 ** 63 - 1, sandboxd.F32(1.5)],
                        limits=sandboxd.Limits(fuel=5, memory_bytes=1 << 20), fuel=6, timeout=0.1,
                        log=True, random_seed=42, clock=True, on_log=lambda line: None)
        self.assertEqual(r.raw["params"], {
            "module": {"path": "/g.wasm"}, "function": "echo",
            "args": [1, "-0", "9223372036854775807", {"type": "f32", "value": 1.5}],
            "limits": {"fuel": 6, "memoryBytes": 1 << 20, "timeoutMs": 100},
            "capabilities": {"log": True, "random": {"seed": 42}, "clock": True}})

    def test_logs_in_order_before_return(self):
        events = []
        r = self.sb.run(wat="", function="logs", args=[50], log=True,
                        on_log=lambda line: events.append((line, threading.current_thread().name)))
        events.append(("returned", threading.current_thread().name))
        self.assertEqual(r.logs, ["line %d" % i for i in range(50)])
        self.assertEqual([e[0] for e in events], r.logs + ["returned"])
        # on the thread that read them: the caller itself (which reads for
        # its own answer), or the background reader if it stepped in
        caller = threading.current_thread().name
        self.assertTrue(all(e[1] == caller or e[1].startswith("sandboxd-reader") for e in events[:-1]), events)
        self.assertEqual(r.log_lines, 50)

    def test_out_of_order_logs_are_an_error(self):
        with self.assertRaisesRegex(sandboxd.SidecarError, "expected seq 1, got 2"):
            self.sb.run(wat="", function="bad_seq", log=True)

    def test_on_log_exception_is_reraised(self):
        class Boom(Exception):
            pass

        def on_log(line):
            raise Boom(line)

        with self.assertRaises(Boom):
            self.sb.run(wat="", function="logs", args=[3], log=True, on_log=on_log)
        self.assertEqual(self.sb.run(wat="", function="add", args=[1]).values, [1])

    def test_error_kinds(self):
        with self.assertRaises(sandboxd.Trap) as cm:
            self.sb.run(wat="", function="error:trap")
        self.assertEqual((cm.exception.kind, cm.exception.code), ("trap", 8))
        with self.assertRaises(sandboxd.HostError):
            self.sb.run(wat="", function="error:host")
        with self.assertRaises(sandboxd.SidecarError) as cm:
            self.sb.run(wat="", function="protocol_error", args=[-32000])
        self.assertEqual(cm.exception.code, -32000)

    def test_pipelined_not_serialised(self):
        # The fake answers none of these 8 calls until all 8 are outstanding
        # at once, which only a pipelining client achieves.
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: self.sb.run(wat="", function="rendezvous", args=[8, 1]), range(8)))
        self.assertEqual([r.values[0] for r in results], [8] * 8)

    def test_malformed_result_is_reported_and_connection_survives(self):
        with self.assertRaisesRegex(sandboxd.SidecarError, "malformed run result.*decimal string"):
            self.sb.run(wat="", function="bad_value")
        with self.assertRaisesRegex(sandboxd.SidecarError, "neither result nor error"):
            self.sb.run(wat="", function="no_result")
        self.assertEqual(self.sb.run(wat="", function="add", args=[3]).values, [3])

    def test_orphan_error_with_one_call_pending(self):
        with self.assertRaises(sandboxd.SidecarError) as cm:
            self.sb.run(wat="", function="null_id")
        self.assertEqual(cm.exception.code, -32600)

    def test_timed_out_wait_sends_cancel(self):
        conn = self.sb._connection()
        params = _params.run_params(sandboxd.RunOptions(wat="", function="hang"))
        with self.assertRaises(concurrent.futures.TimeoutError):
            conn.call("run", params, wait=0.2)
        self.assertEqual(len(conn.session), 0)  # abandoned, its -32800 reply will be dropped
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            stats = self.sb.stats()
            if stats["cancelRequests"]:
                break
            time.sleep(0.02)
        self.assertEqual(len(stats["cancelRequests"]), 1)
        self.assertFalse(stats["hasParams"], "stats must be sent without params")
        self.assertEqual(self.sb.run(wat="", function="add", args=[4]).values, [4])

    def test_initialize_compile(self):
        info = self.sb.initialize()
        self.assertEqual(info["argv"], ["serve"])
        self.assertEqual(info["params"], {})
        mod = self.sb.compile(wasm=b"\0asm\1\0\0\0")
        self.assertEqual(mod.id, "sha256:" + "cd" * 32)
        self.assertEqual(mod.export("add")["params"], ["i32", "i32"])
        self.assertIsNone(mod.export("nope"))
        self.assertEqual(mod.compile_time, 0.0025)
        self.assertEqual(hash(mod), hash(mod.id))

    def test_close_is_graceful_and_idempotent(self):
        self.sb.close()
        self.assertEqual(self.sb.returncode, 0, "exit after shutdown must exit 0")
        self.sb.close()
        with self.assertRaisesRegex(sandboxd.SidecarError, "closed"):
            self.sb.run(wat="", function="add", args=[1])


class FakeSidecarLifecycleTest(unittest.TestCase):
    def test_args_env_and_max_concurrency(self):
        with sandboxd.Sidecar(binary=fake_sidecar_bin(), args=["--log-level", "debug"], max_concurrency=3,
                              env={"FAKE_ENV": "yes"}) as sb:
            info = sb.initialize()
        self.assertEqual(info["argv"], ["serve", "--max-concurrency", "3", "--log-level", "debug"])
        self.assertEqual(info["env"], "yes")

    def test_crash_fails_every_pending_call(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(sb.close)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            hangs = [pool.submit(sb.run, wat="", function="hang") for _ in range(3)]
            time.sleep(0.3)  # let them reach the fake
            with self.assertRaises(sandboxd.SidecarError) as cm:
                sb.run(wat="", function="die")
            for f in hangs:
                with self.assertRaises(sandboxd.SidecarError) as cm2:
                    f.result(timeout=5)
                self.assertIn("exited with status 3", str(cm2.exception))

        err = cm.exception
        self.assertIn("exited with status 3", str(err))
        self.assertIn("fatal: scripted crash", err.stderr_tail)
        self.assertIn("fatal: scripted crash", str(err))
        self.assertEqual(err.kind, "sidecar")
        with self.assertRaisesRegex(sandboxd.SidecarError, "sidecar is not running .*restart=True"):
            sb.run(wat="", function="add", args=[1])

    def test_restart(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin(), restart=True)
        self.addCleanup(sb.close)
        pid = sb.pid
        with self.assertRaises(sandboxd.SidecarError):
            sb.run(wat="", function="die")
        self.assertEqual(sb.run(wat="", function="add", args=[5]).values, [5])
        self.assertNotEqual(sb.pid, pid)

    def test_death_while_idle_is_noticed(self):
        # Nobody is reading when the sidecar dies: the end of its stderr
        # makes the background reader read stdout to the end, so the client
        # knows before the next call (which then restarts, or says why not).
        for restart in (True, False):
            with self.subTest(restart=restart):
                sb = sandboxd.Sidecar(binary=fake_sidecar_bin(), restart=restart)
                self.addCleanup(sb.close)
                self.assertEqual(sb.run(wat="", function="add", args=[1]).values, [1])
                pid = sb.pid
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while not sb._conn.dead and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.assertTrue(sb._conn.dead)
                if restart:
                    self.assertEqual(sb.run(wat="", function="add", args=[2]).values, [2])
                    self.assertNotEqual(sb.pid, pid)
                else:
                    with self.assertRaisesRegex(sandboxd.SidecarError, "not running .*killed by SIGKILL"):
                        sb.run(wat="", function="add", args=[2])

    def test_requests_nobody_waits_for_are_read(self):
        # submit() and never result(): the background reader reads the
        # answers (and runs the callbacks), so done() turns true by itself.
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(sb.close)
        lines = []
        handles = [sb.submit(wat="", function="logs", args=[3], log=True, on_log=lines.append)
                   for _ in range(4)]
        deadline = time.monotonic() + 10
        while not all(h.done() for h in handles) and time.monotonic() < deadline:
            time.sleep(0.005)
        self.assertTrue(all(h.done() for h in handles))
        self.assertEqual(len(lines), 12)
        self.assertEqual([h.result().log_lines for h in handles], [3] * 4)

    def test_many_threads_waiting_in_every_way(self):
        # Callers that read for themselves, callers that wait with a timeout
        # (the background reader serves them) and slow calls, all at once:
        # every call gets its own answer, none is stranded.
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(sb.close)

        def work(i):
            out = []
            for j in range(30):
                n = i * 1000 + j
                if j % 3 == 0:
                    out.append(sb.submit(wat="", function="add", args=[n]).result(timeout=30).values[0])
                elif j % 7 == 0:
                    out.append(sb.run(wat="", function="slow", args=[5]).values[0] and n)
                else:
                    out.append(sb.run(wat="", function="add", args=[n]).values[0])
            return out

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(work, range(8)))
        self.assertEqual(results, [[i * 1000 + j for j in range(30)] for i in range(8)])

    def test_stderr_is_drained_and_tail_kept(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(sb.close)
        # 1 MiB of stderr: a client that did not drain it would deadlock here.
        sb.run(wat="", function="stderr_flood")
        with self.assertRaises(sandboxd.SidecarError) as cm:
            sb.run(wat="", function="die")
        tail = cm.exception.stderr_tail
        self.assertLessEqual(len(tail.encode()), 4096)
        self.assertGreater(len(tail), 1000)
        self.assertTrue(tail.endswith("END OF FLOOD\nfatal: scripted crash\n"), tail[-60:])

    def test_broken_framing_kills_the_sidecar(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(sb.close)
        with self.assertRaisesRegex(sandboxd.SidecarError, "broke the message framing"):
            sb.run(wat="", function="garbage")
        self.assertIsNotNone(sb.returncode)

    def test_torn_message(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin())
        self.addCleanup(sb.close)
        with self.assertRaisesRegex(sandboxd.SidecarError, "middle of a message"):
            sb.run(wat="", function="torn")

    def test_oversized_message_error_finds_its_call(self):
        sb = sandboxd.Sidecar(binary=fake_sidecar_bin(), env={"FAKE_MAX_MESSAGE": "1000"})
        self.addCleanup(sb.close)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            other = pool.submit(sb.run, wat="", function="slow", args=[500])
            time.sleep(0.1)
            with self.assertRaises(sandboxd.SidecarError) as cm:
                sb.run(wat="x" * 2000, function="add")
            self.assertEqual(cm.exception.code, -32600)
            self.assertIn("exceeds", str(cm.exception))
            # the unrelated call is untouched
            self.assertEqual(other.result(timeout=5).values, [500])


class FakeAsyncSidecarTest(unittest.TestCase):
    def test_async_api(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                r = await sb.run(wat="", function="add", args=[2, 40])
                self.assertEqual(r.values, [42])
                seen = []
                r = await sb.run(wat="", function="logs", args=[5], log=True, on_log=seen.append)
                self.assertEqual(seen, r.logs)
                self.assertEqual(r.logs, ["line %d" % i for i in range(5)])
                mod = await sb.compile(wat="(module)")
                self.assertEqual(mod.id, "sha256:" + "cd" * 32)
                self.assertEqual((await sb.initialize())["argv"], ["serve"])
                # none of the 16 is answered until all 16 are outstanding
                rs = await asyncio.gather(*(sb.run(wat="", function="rendezvous", args=[16, 2]) for i in range(16)))
                self.assertEqual([r.values[0] for r in rs], [16] * 16)
                with self.assertRaises(sandboxd.ExportError):
                    await sb.run(wat="", function="nope")
            self.assertEqual(sb.returncode, 0)
            await sb.close()  # idempotent
            with self.assertRaisesRegex(sandboxd.SidecarError, "closed"):
                await sb.run(wat="", function="add", args=[1])

        asyncio.run(main())

    def test_cancel_sends_cancel_request(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=fake_sidecar_bin()) as sb:
                task = asyncio.ensure_future(sb.run(wat="", function="hang"))
                await asyncio.sleep(0.2)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                for _ in range(100):
                    stats = await sb.stats()
                    if stats["cancelRequests"]:
                        break
                    await asyncio.sleep(0.01)
                self.assertEqual(len(stats["cancelRequests"]), 1)
                # the -32800 reply is consumed, and the sidecar still serves
                await asyncio.sleep(0.1)
                self.assertEqual((await sb.run(wat="", function="add", args=[1])).values, [1])

        asyncio.run(main())

    def test_crash_and_restart(self):
        async def main():
            sb = sandboxd.AsyncSidecar(binary=fake_sidecar_bin(), restart=True)
            try:
                hangs = [asyncio.ensure_future(sb.run(wat="", function="hang")) for _ in range(3)]
                await asyncio.sleep(0.3)
                pid = sb.pid
                with self.assertRaisesRegex(sandboxd.SidecarError, "exited with status 3") as cm:
                    await sb.run(wat="", function="die")
                self.assertIn("fatal: scripted crash", cm.exception.stderr_tail)
                for h in hangs:
                    with self.assertRaises(sandboxd.SidecarError):
                        await h
                self.assertEqual((await sb.run(wat="", function="add", args=[6])).values, [6])
                self.assertNotEqual(sb.pid, pid)
            finally:
                await sb.close()

            sb = sandboxd.AsyncSidecar(binary=fake_sidecar_bin())
            try:
                with self.assertRaises(sandboxd.SidecarError):
                    await sb.run(wat="", function="die")
                with self.assertRaisesRegex(sandboxd.SidecarError, "sidecar is not running"):
                    await sb.run(wat="", function="add", args=[1])
            finally:
                await sb.close()

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
