"""Helpers shared by the Python benchmark scripts."""
import os
import subprocess
import time
from typing import BinaryIO, Dict, List


def read_frame(reader: BinaryIO) -> bytes:
    """Read one Content-Length frame (the headers the harness writes)."""
    length = -1
    while True:
        line = reader.readline()
        if not line:
            raise EOFError("echo child closed its stdout")
        line = line.strip()
        if not line:
            break
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return reader.read(length)


def percentiles(samples: List[float]) -> Dict[str, float]:
    """p50/p99 of microsecond samples, nearest rank."""
    s = sorted(samples)

    def at(p: float) -> float:
        return s[max(0, min(len(s) - 1, round(p / 100 * len(s)) - 1))]

    return {"p50_us": at(50), "p99_us": at(99), "n": len(s)}


class PipeFloor:
    """The raw Python pipe floor: Content-Length ping-pong of a run-sized
    message with the Go echo child, using only subprocess and unbuffered
    pipes - what a Python client cannot go below. block() measures one
    block of it, so that a script can alternate floor blocks with what the
    floor judges (cfg: "echo", "echoEnv", "message")."""

    def __init__(self, cfg: dict) -> None:
        env = dict(os.environ, **{cfg["echoEnv"]: "1"})
        self.proc = subprocess.Popen([cfg["echo"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
        body = cfg["message"].encode()
        self.frame = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        self.reader = os.fdopen(self.proc.stdout.fileno(), "rb", buffering=65536, closefd=False)

    def block(self, warm: int, n: int) -> List[float]:
        samples = []
        for i in range(warm + n):
            t = time.perf_counter()
            self.proc.stdin.write(self.frame)
            read_frame(self.reader)
            if i >= warm:
                samples.append((time.perf_counter() - t) * 1e6)
        return samples

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def timed(call, warm: int, n: int) -> List[float]:
    """Sequential latency samples (µs) of call: warm untimed, then n timed."""
    samples = []
    for i in range(warm + n):
        t = time.perf_counter()
        call()
        if i >= warm:
            samples.append((time.perf_counter() - t) * 1e6)
    return samples


async def atimed(call, warm: int, n: int) -> List[float]:
    """timed for a coroutine function."""
    samples = []
    for i in range(warm + n):
        t = time.perf_counter()
        await call()
        if i >= warm:
            samples.append((time.perf_counter() - t) * 1e6)
    return samples


def p50(samples: List[float]) -> float:
    return percentiles(samples)["p50_us"]


def median(xs: List[float]) -> float:
    s = sorted(xs)
    if not s:
        return 0.0
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def paired(prefix: str, subject: List[float], floor: List[float], ratios: List[float]) -> Dict[str, float]:
    """The figures of a subject measured in blocks alternating with its
    floor: p50/p99 of each over all blocks, and the median (and range) of
    the per-block ratios of p50s, which is what a verdict reads."""
    s, f = percentiles(subject), percentiles(floor)
    return {prefix + "_p50_us": s["p50_us"], prefix + "_p99_us": s["p99_us"],
            prefix + "_floor_p50_us": f["p50_us"], prefix + "_floor_p99_us": f["p99_us"],
            prefix + "_ratio": median(ratios), prefix + "_ratio_min": min(ratios), prefix + "_ratio_max": max(ratios),
            prefix + "_blocks": len(ratios)}
