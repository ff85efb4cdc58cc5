"""Helpers shared by the Python benchmark scripts."""
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
