"""This project's Python client (clients/python): sync Sidecar and
AsyncSidecar sequential `run add`, AsyncSidecar with 64 runs in flight, and
the same sequential run written and read by hand to the same kind of
sidecar, over a blocking pipe and over asyncio's pipe transports (what each
client adds is the difference). Prints one JSON line.

    PYTHONPATH=clients/python/src python3 client.py '{"binary": "...", "wat": ".../well_behaved.wat", ...}'
"""
import asyncio
import json
import os
import subprocess
import sys
import time

import sandboxd

from benchlib import percentiles, read_frame


def sync_sequential(cfg: dict) -> dict:
    with sandboxd.Sidecar(binary=cfg["binary"], args=["--log-level", "warn"]) as sb:
        mod = sb.compile(path=cfg["wat"])
        samples = []
        for i in range(cfg["warm"] + cfg["n"]):
            t = time.perf_counter()
            r = sb.run(module=mod, function="add", args=[1, 2])
            if i >= cfg["warm"]:
                samples.append((time.perf_counter() - t) * 1e6)
        assert r.values == [3], r.values
    p = percentiles(samples)
    return {"seq_p50_us": p["p50_us"], "seq_p99_us": p["p99_us"]}


async def async_sequential(cfg: dict) -> dict:
    async with sandboxd.AsyncSidecar(binary=cfg["binary"], args=["--log-level", "warn"]) as sb:
        mod = await sb.compile(path=cfg["wat"])
        samples = []
        for i in range(cfg["warm"] + cfg["n"]):
            t = time.perf_counter()
            r = await sb.run(module=mod, function="add", args=[1, 2])
            if i >= cfg["warm"]:
                samples.append((time.perf_counter() - t) * 1e6)
        assert r.values == [3], r.values
    p = percentiles(samples)
    return {"aseq_p50_us": p["p50_us"], "aseq_p99_us": p["p99_us"]}


def raw_sequential(cfg: dict) -> dict:
    """The client's floor against the real sidecar: one prebuilt run frame
    written and its answer read as bytes, no client library in between."""
    proc = subprocess.Popen([cfg["binary"], "serve", "--log-level", "warn"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, bufsize=0)
    reader = os.fdopen(proc.stdout.fileno(), "rb", buffering=65536, closefd=False)

    def frame(message: dict) -> bytes:
        body = json.dumps(message, separators=(",", ":")).encode()
        return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)

    try:
        proc.stdin.write(frame({"jsonrpc": "2.0", "id": 1, "method": "compile", "params": {"module": {"path": cfg["wat"]}}}))
        mod = json.loads(read_frame(reader))["result"]["moduleId"]
        run = frame({"jsonrpc": "2.0", "id": 2, "method": "run",
                     "params": {"module": {"id": mod}, "function": "add", "args": [1, 2]}})
        samples = []
        for i in range(cfg["warm"] + cfg["n"]):
            t = time.perf_counter()
            proc.stdin.write(run)
            answer = read_frame(reader)
            if i >= cfg["warm"]:
                samples.append((time.perf_counter() - t) * 1e6)
        assert b'"value":3' in answer, answer
    finally:
        proc.stdin.close()
        proc.wait()
    p = percentiles(samples)
    return {"raw_p50_us": p["p50_us"], "raw_p99_us": p["p99_us"]}


async def async_raw_sequential(cfg: dict) -> dict:
    """raw_sequential on asyncio: the event loop's own pipe transports and
    one future per round trip, no client library (the asyncio floor)."""
    loop = asyncio.get_running_loop()
    proc = subprocess.Popen([cfg["binary"], "serve", "--log-level", "warn"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, bufsize=0)
    waiter = []
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

    def frame(message: dict) -> bytes:
        body = json.dumps(message, separators=(",", ":")).encode()
        return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)

    await loop.connect_read_pipe(Answers, proc.stdout)
    stdin, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, proc.stdin)

    async def round_trip(data: bytes) -> bytes:
        fut = loop.create_future()
        waiter.append(fut)
        stdin.write(data)
        return await fut

    try:
        compiled = await round_trip(frame({"jsonrpc": "2.0", "id": 1, "method": "compile",
                                           "params": {"module": {"path": cfg["wat"]}}}))
        run = frame({"jsonrpc": "2.0", "id": 2, "method": "run",
                     "params": {"module": {"id": json.loads(compiled)["result"]["moduleId"]}, "function": "add",
                                "args": [1, 2]}})
        samples = []
        for i in range(cfg["warm"] + cfg["n"]):
            t = time.perf_counter()
            answer = await round_trip(run)
            if i >= cfg["warm"]:
                samples.append((time.perf_counter() - t) * 1e6)
        assert b'"value":3' in answer, answer
    finally:
        stdin.close()
        await asyncio.sleep(0.05)  # let the close reach the pipe
        proc.kill()
        proc.wait()
    p = percentiles(samples)
    return {"araw_p50_us": p["p50_us"], "araw_p99_us": p["p99_us"]}


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
    for name, fn in (("raw", lambda: raw_sequential(cfg)), ("sync", lambda: sync_sequential(cfg)),
                     ("araw", lambda: asyncio.run(async_raw_sequential(cfg))),
                     ("aseq", lambda: asyncio.run(async_sequential(cfg))),
                     ("async", lambda: asyncio.run(async_pipelined(cfg)))):
        try:
            out.update(fn())
        except Exception as exc:  # report, so the harness prints N/A with the reason
            out[name + "_error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
