"""This project's Python client (clients/python): sync Sidecar and
AsyncSidecar sequential `run add`, AsyncSidecar with 64 runs in flight, and
the same sequential run written and read by hand to the same kind of
sidecar, over a blocking pipe and over asyncio's pipe transports (what each
client adds is the difference). The sequential rounds go in blocks
alternating with blocks of the raw Python pipe floor (benchlib.PipeFloor,
against the Go echo child), and the verdict's ratio is the median of the
blocks' ratios, so that one noisy stretch of the floor cannot decide it.
Prints one JSON line.

    PYTHONPATH=clients/python/src python3 client.py '{"binary": "...", "wat": ".../well_behaved.wat",
        "echo": "/path/to/harness", "echoEnv": "NAME", "message": "...", "warm": 200, "n": 2000, "blocks": 10, ...}'
"""
import asyncio
import json
import os
import subprocess
import sys
import time

import sandboxd

from benchlib import PipeFloor, atimed, p50, paired, read_frame, timed


def frame(message: dict) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class RawSidecar:
    """The client's floor against the real sidecar: one prebuilt run frame
    written and its answer read as bytes, no client library in between."""

    def __init__(self, cfg: dict) -> None:
        self.proc = subprocess.Popen([cfg["binary"], "serve", "--log-level", "warn"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        self.reader = os.fdopen(self.proc.stdout.fileno(), "rb", buffering=65536, closefd=False)
        self.proc.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "compile",
                                     "params": {"module": {"path": cfg["wat"]}}}))
        mod = json.loads(read_frame(self.reader))["result"]["moduleId"]
        self.run = frame({"jsonrpc": "2.0", "id": 2, "method": "run",
                          "params": {"module": {"id": mod}, "function": "add", "args": [1, 2]}})
        self.answer = b""

    def round_trip(self) -> None:
        self.proc.stdin.write(self.run)
        self.answer = read_frame(self.reader)

    def close(self) -> None:
        assert b'"value":3' in self.answer, self.answer
        self.proc.stdin.close()
        self.proc.wait()


def sync_sequential(cfg: dict, floor: PipeFloor) -> dict:
    """The sync Sidecar and raw JSON-RPC over a blocking pipe, each in
    blocks alternating with blocks of the Python pipe floor."""
    blocks, per = cfg["blocks"], max(cfg["n"] // cfg["blocks"], 1)
    raw = RawSidecar(cfg)
    try:
        with sandboxd.Sidecar(binary=cfg["binary"], args=["--log-level", "warn"]) as sb:
            mod = sb.compile(path=cfg["wat"])
            out = {}

            def run() -> None:
                out["r"] = sb.run(module=mod, function="add", args=[1, 2])

            fl, rw, cl, ratios = [], [], [], []
            for b in range(blocks):
                warm = cfg["warm"] if b == 0 else 5
                f = floor.block(warm, per)
                rw += timed(raw.round_trip, warm, per)
                c = timed(run, warm, per)
                fl += f
                cl += c
                ratios.append(p50(c) / p50(f))
            assert out["r"].values == [3], out["r"].values
    finally:
        raw.close()
    res = paired("seq", cl, fl, ratios)
    res["raw_p50_us"] = p50(rw)
    return res


class AsyncRawSidecar:
    """RawSidecar on asyncio: the event loop's own pipe transports and one
    future per round trip, no client library (the asyncio floor)."""

    async def start(self, cfg: dict) -> "AsyncRawSidecar":
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.proc = subprocess.Popen([cfg["binary"], "serve", "--log-level", "warn"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        waiter = self.waiter = []
        buf = bytearray()

        class Answers(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                buf.extend(data)
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                stop = end + 4 + int(buf[16:end])  # "Content-Length: N", the sidecar's only header
                if len(buf) >= stop:
                    body = bytes(buf[end + 4:stop])
                    del buf[:stop]
                    waiter.pop().set_result(body)

        await loop.connect_read_pipe(Answers, self.proc.stdout)
        self.stdin, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, self.proc.stdin)
        compiled = await self.send(frame({"jsonrpc": "2.0", "id": 1, "method": "compile",
                                          "params": {"module": {"path": cfg["wat"]}}}))
        self.run = frame({"jsonrpc": "2.0", "id": 2, "method": "run",
                          "params": {"module": {"id": json.loads(compiled)["result"]["moduleId"]}, "function": "add",
                                     "args": [1, 2]}})
        self.answer = b""
        return self

    async def send(self, data: bytes) -> bytes:
        fut = self.loop.create_future()
        self.waiter.append(fut)
        self.stdin.write(data)
        return await fut

    async def round_trip(self) -> None:
        self.answer = await self.send(self.run)

    async def close(self) -> None:
        self.stdin.close()
        await asyncio.sleep(0.05)  # let the close reach the pipe
        self.proc.kill()
        self.proc.wait()
        assert b'"value":3' in self.answer, self.answer


async def async_sequential(cfg: dict, floor: PipeFloor) -> dict:
    """AsyncSidecar and raw JSON-RPC over asyncio's pipe transports, each
    in blocks alternating with blocks of the (blocking) Python pipe floor."""
    blocks, per = cfg["blocks"], max(cfg["n"] // cfg["blocks"], 1)
    raw = await AsyncRawSidecar().start(cfg)
    try:
        async with sandboxd.AsyncSidecar(binary=cfg["binary"], args=["--log-level", "warn"]) as sb:
            mod = await sb.compile(path=cfg["wat"])
            out = {}

            async def run() -> None:
                out["r"] = await sb.run(module=mod, function="add", args=[1, 2])

            fl, rw, cl, ratios = [], [], [], []
            for b in range(blocks):
                warm = cfg["warm"] if b == 0 else 5
                f = floor.block(warm, per)
                rw += await atimed(raw.round_trip, warm, per)
                c = await atimed(run, warm, per)
                fl += f
                cl += c
                ratios.append(p50(c) / p50(f))
            assert out["r"].values == [3], out["r"].values
    finally:
        await raw.close()
    res = paired("aseq", cl, fl, ratios)
    res["araw_p50_us"] = p50(rw)
    return res


async def async_pipelined(cfg: dict) -> dict:
    async with sandboxd.AsyncSidecar(binary=cfg["binary"], args=["--log-level", "warn"]) as sb:
        mod = await sb.compile(path=cfg["wat"])
        done = 0
        start = time.perf_counter()
        deadline = start + cfg["durationMs"] / 1000

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await sb.run(module=mod, function="add", args=[1, 2])
                done += 1

        await asyncio.gather(*(worker() for _ in range(64)))
        return {"async_calls_per_s": done / (time.perf_counter() - start)}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    out = {}
    floor = PipeFloor(cfg)
    try:
        for name, fn in (("sync", lambda: sync_sequential(cfg, floor)),
                         ("aseq", lambda: asyncio.run(async_sequential(cfg, floor))),
                         ("async", lambda: asyncio.run(async_pipelined(cfg)))):
            try:
                out.update(fn())
            except Exception as exc:  # report, so the harness prints N/A with the reason
                out[name + "_error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    finally:
        floor.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
