"""AsyncSidecar against the real sidecar: gather, cancellation, crashes."""

import asyncio
import os
import signal
import sys
import time

import sandboxd

from _support import WAT, IntegrationTest, wat


def fixture(name):
    return str(WAT / name)


class AsyncSidecarTest(IntegrationTest):
    def arun(self, coro, limit=30):
        """Run a coroutine with a hard time limit, so a hang fails the test."""
        return asyncio.run(asyncio.wait_for(coro, limit))

    def test_api(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN) as sb:
                r = await sb.run(wat=wat("well_behaved.wat"), function="add", args=[2, 40])
                self.assertEqual((r.values, r.fuel_consumed, r.peak_memory_bytes), ([42], 4, 0))
                mod = await sb.compile(path=fixture("well_behaved.wat"))
                r = await sb.run(module=mod, function="fib", args=[30])
                self.assertEqual((r.values, r.fuel_consumed), ([832040], 522))
                seen = []
                r = await sb.run(path=fixture("logger.wat"), log=True, on_log=seen.append)
                self.assertEqual(seen, ["hello from the guest"])
                self.assertEqual(r.logs, seen)
                with self.assertRaises(sandboxd.FuelExhausted):
                    await sb.run(path=fixture("infinite_loop.wat"), fuel=1_000_000)
                with self.assertRaises(sandboxd.Trap) as cm:
                    await sb.run(path=fixture("traps.wat"), function="div_by_zero")
                self.assertEqual(cm.exception.trap_code, "integer_divide_by_zero")
                self.assertIn("runs", await sb.stats())
                self.assertEqual((await sb.initialize())["serverInfo"]["name"], "sandboxd")
                self.assertEqual(sb.info["serverInfo"]["name"], "sandboxd")
            self.assertEqual(sb.returncode, 0)
        self.arun(main())

    def test_gather_64(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN, max_concurrency=8) as sb:
                well = wat("well_behaved.wat")
                runs = [sb.run(wat=well, function="add", args=[i, 1000]) for i in range(48)]
                runs += [sb.run(path=fixture("log_flood.wat"), function="flood", args=[i], log=True)
                         for i in range(16)]
                results = await asyncio.gather(*runs)
                self.assertEqual([r.values[0] for r in results[:48]], [i + 1000 for i in range(48)])
                self.assertEqual([len(r.logs) for r in results[48:]], list(range(16)))
                # and they really overlap: 8 endless guests are in flight at once
                spinning = [asyncio.ensure_future(
                    sb.run(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=60)) for _ in range(8)]
                try:
                    while (await sb.stats())["inFlight"] < 8:
                        await asyncio.sleep(0.005)  # the hang bound is arun's
                finally:
                    for task in spinning:
                        task.cancel()
                outcomes = await asyncio.gather(*spinning, return_exceptions=True)
                self.assertTrue(all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes)
        self.arun(main())

    def test_task_cancel_stops_the_guest(self):
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN) as sb:
                before = (await sb.stats())["runs"]["cancelled"]
                task = asyncio.ensure_future(
                    sb.run(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=10))
                await asyncio.sleep(0.3)
                self.assertFalse(task.done(), "the run should still be spinning")
                t0 = time.monotonic()
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                # The guest has stopped once the server counts a cancelled run
                # and nothing is in flight (it would otherwise spin for 10 s).
                while True:
                    stats = await sb.stats()
                    if stats["runs"]["cancelled"] == before + 1 and stats["inFlight"] == 0:
                        break
                    await asyncio.sleep(0.005)  # the hang bound is arun's; the deadline (10 s) would count a timeout
                took = time.monotonic() - t0
                print("\n  cancel -> guest stopped in %.1f ms" % (took * 1000), file=sys.stderr)
                # the -32800 reply was consumed; the sidecar still serves
                r = await sb.run(wat=wat("well_behaved.wat"), function="add", args=[1, 2])
                self.assertEqual(r.values, [3])
        self.arun(main())

    def test_cancelled_error_from_the_server(self):
        # A $/cancelRequest for a run whose caller is still waiting: the
        # server's -32800 reaches the caller as sandboxd.Cancelled.
        async def main():
            async with sandboxd.AsyncSidecar(binary=self.BIN) as sb:
                task = asyncio.ensure_future(
                    sb.run(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=10))
                await asyncio.sleep(0.2)
                conn = sb._conn
                (run_id,) = list(conn.session._pending)
                conn.notify("$/cancelRequest", {"id": run_id})
                with self.assertRaises(sandboxd.Cancelled) as cm:
                    await task
                self.assertEqual((cm.exception.kind, cm.exception.code), ("cancelled", -32800))
        self.arun(main())

    def test_killed_sidecar(self):
        async def main():
            sb = sandboxd.AsyncSidecar(binary=self.BIN, restart=True)
            try:
                await sb.start()
                old = sb.pid
                task = asyncio.ensure_future(
                    sb.run(path=fixture("infinite_loop.wat"), fuel=10 ** 15, timeout=10))
                await asyncio.sleep(0.3)
                os.kill(old, signal.SIGKILL)
                with self.assertRaisesRegex(sandboxd.SidecarError, "SIGKILL"):
                    await task  # the death, not the 10 s deadline (that would be Timeout)
                r = await sb.run(wat=wat("well_behaved.wat"), function="add", args=[2, 40])
                self.assertEqual(r.values, [42])
                self.assertNotEqual(sb.pid, old)
            finally:
                await sb.close()
        self.arun(main())


if __name__ == "__main__":
    import unittest
    unittest.main()
