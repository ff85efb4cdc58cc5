"""This project's Python client (clients/python): sync Sidecar sequential
`run add`, and AsyncSidecar with 64 runs in flight. Prints one JSON line.

    PYTHONPATH=clients/python/src python3 client.py '{"binary": "...", "wat": ".../well_behaved.wat", ...}'
"""
import asyncio
import json
import sys
import time

import sandboxd

from benchlib import percentiles


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
    for name, fn in (("sync", lambda: sync_sequential(cfg)), ("async", lambda: asyncio.run(async_pipelined(cfg)))):
        try:
            out.update(fn())
        except Exception as exc:  # report, so the harness prints N/A with the reason
            out[name + "_error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
