"""Row 17 for this project's Python client (clients/python): host calls on a
warm instance of testdata/plugins/wat/host_relay.wat, from the sync Sidecar
(the handler runs on the caller's thread) and the AsyncSidecar (an async
def handler).

- A host call's round trip: the time between two calls of the handler
  inside one ``relay`` call (16 bytes each way), against a ``call`` of
  ``echo`` (16 bytes in and out), in alternating blocks.
- A call making one host call (``relay`` answered empty at once) against
  the same ``echo`` call (info: the whole extra cost; sync Sidecar only).
- 1 MiB into the plugin as the host function's answer (``fetch``) against
  the same MiB as a call's input (``sink``), in alternating blocks.

The verdicts read the median of the blocks' ratios of p50s. Prints one
JSON line.

    PYTHONPATH=clients/python/src python3 hostcalls.py '{"binary": "...", "plugin": ".../host_relay.wat",
        "warm": 50, "perCall": 10, "n": 4000, "nOne": 1000, "nMiB": 200, "blocks": 40}'
"""
import asyncio
import json
import random
import sys
import time

import sandboxd

from benchlib import atimed, p50, paired, timed


class Relay:
    """The instance's handler of extism:host/user::relay, switched between
    modes: relay ``stop`` calls then answer empty (recording when each call
    came), or answer ``answer`` (the MiB)."""

    def __init__(self) -> None:
        self.stamps = []
        self.stop = 0
        self.answer = None

    def handle(self, data: bytes) -> bytes:
        if self.answer is not None:
            return self.answer
        self.stamps.append(time.perf_counter())
        return data if len(self.stamps) <= self.stop else b""

    async def ahandle(self, data: bytes) -> bytes:
        return self.handle(data)

    def expect(self, calls: int) -> None:
        self.stamps, self.stop, self.answer = [], calls, None

    def gaps(self, warm: int) -> list:
        s = self.stamps
        return [(s[i] - s[i - 1]) * 1e6 for i in range(warm + 1, len(s))]


def relay_trips(call, relay: Relay, per_call: int, warm: int, n: int) -> list:
    """n round trips timed in relay calls of per_call host calls each (the
    first makes warm more): a relay of hundreds of host calls was seen
    to slow the calls right after it, which would inflate the floor blocks
    (bench/hostcalls.go)."""
    samples: list = []
    while len(samples) < n:
        skip, gaps = (warm if not samples else 0), min(per_call, n - len(samples))
        relay.expect(skip + gaps)
        assert len(call().output) == 16
        assert len(relay.stamps) == skip + gaps + 1, len(relay.stamps)
        samples += relay.gaps(skip)
    return samples


def payloads() -> tuple:
    rng = random.Random(20)
    mib = rng.randbytes(1 << 20)
    return mib[:16], mib


def plugin_keywords(cfg: dict, handler) -> dict:
    relay = sandboxd.HostFunction("extism:host/user", "relay", ["bytes"], ["bytes"], handler)
    return {"path": cfg["plugin"], "host_functions": [relay], "memory_bytes": 64 << 20,
            "output_bytes": 4 << 20, "timeout": 60}


def sync_rows(cfg: dict) -> dict:
    small, mib = payloads()
    relay = Relay()
    blocks = cfg["blocks"]
    with sandboxd.Sidecar(binary=cfg["binary"], args=["--log-level", "warn"]) as sb:
        with sb.plugin(**plugin_keywords(cfg, relay.handle)) as p:
            def echo() -> None:
                assert len(p.call("echo", small).output) == 16

            def trips(warm: int, n: int) -> list:
                return relay_trips(lambda: p.call("relay", small), relay, cfg["perCall"], warm, n)

            out = measure("seq", blocks, cfg["n"], 50, echo, trips, timed, subject_warm=cfg["warm"])

            def once() -> None:
                relay.expect(0)
                p.call("relay", small)

            out.update(measure("one", blocks, cfg["nOne"], 50, echo, lambda warm, n: timed(once, warm, n), timed))

            def sink() -> None:
                p.call("sink", mib)

            def fetch() -> None:
                p.call("fetch", small)

            def fetch_block(warm: int, n: int) -> list:
                relay.answer = mib
                return timed(fetch, warm, n)

            out.update(measure("seq_mib", blocks, cfg["nMiB"], 3, sink, fetch_block, timed, subject_warm=1))
    return out


def measure(prefix: str, blocks: int, n: int, first_warm: int, floor_call, subject_block, timer, subject_warm: int = 5) -> dict:
    """subject_block(warm, n) and timer(floor_call, warm, n) in alternating
    blocks, the figures as benchlib.paired gives them."""
    per = max(n // blocks, 1)
    fl, sub, ratios = [], [], []
    for b in range(blocks):
        warm = first_warm if b == 0 else subject_warm
        f = timer(floor_call, warm, per)
        s = subject_block(warm, per)
        fl += f
        sub += s
        ratios.append(p50(s) / p50(f))
    return paired(prefix, sub, fl, ratios)


async def async_rows(cfg: dict) -> dict:
    small, mib = payloads()
    relay = Relay()
    blocks = cfg["blocks"]
    async with sandboxd.AsyncSidecar(binary=cfg["binary"], args=["--log-level", "warn"]) as sb:
        async with sb.plugin(**plugin_keywords(cfg, relay.ahandle)) as p:
            async def echo() -> None:
                assert len((await p.call("echo", small)).output) == 16

            fl, sub, ratios = [], [], []
            per = max(cfg["n"] // blocks, 1)
            for b in range(blocks):
                warm = 50 if b == 0 else cfg["warm"]
                f = await atimed(echo, warm, per)
                s = []
                while len(s) < per:  # as relay_trips, awaiting
                    skip, gaps = (warm if not s else 0), min(cfg["perCall"], per - len(s))
                    relay.expect(skip + gaps)
                    assert len((await p.call("relay", small)).output) == 16
                    assert len(relay.stamps) == skip + gaps + 1, len(relay.stamps)
                    s += relay.gaps(skip)
                fl += f
                sub += s
                ratios.append(p50(s) / p50(f))
    return paired("aseq", sub, fl, ratios)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    out = {}
    for name, fn in (("seq", lambda: sync_rows(cfg)), ("aseq", lambda: asyncio.run(async_rows(cfg)))):
        try:
            out.update(fn())
        except Exception as exc:  # report, so the harness prints N/A with the reason
            out[name + "_error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
