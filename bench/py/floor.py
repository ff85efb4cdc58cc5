"""Raw Python pipe floor: Content-Length ping-pong of a run-sized message
with the Go echo child, using only subprocess and unbuffered pipes - what
the Python client cannot go below. Prints one JSON line {"p50_us", "p99_us"}.

    python3 floor.py '{"echo": "/path/to/harness", "echoEnv": "NAME", "message": "...", "warm": 500, "n": 5000}'
"""
import json
import os
import subprocess
import sys
import time

from benchlib import percentiles, read_frame


def main() -> None:
    cfg = json.loads(sys.argv[1])
    env = dict(os.environ, **{cfg["echoEnv"]: "1"})
    proc = subprocess.Popen([cfg["echo"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
    body = cfg["message"].encode()
    frame = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    reader = os.fdopen(proc.stdout.fileno(), "rb", buffering=65536, closefd=False)
    samples = []
    for i in range(cfg["warm"] + cfg["n"]):
        t = time.perf_counter()
        proc.stdin.write(frame)
        read_frame(reader)
        if i >= cfg["warm"]:
            samples.append((time.perf_counter() - t) * 1e6)
    proc.stdin.close()
    proc.wait()
    print(json.dumps(percentiles(samples)))


if __name__ == "__main__":
    main()
