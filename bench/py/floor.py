"""Raw Python pipe floor on its own (the harness measures it inside
client.py, in blocks alternating with the clients): Content-Length
ping-pong of a run-sized message with the Go echo child. Prints one JSON
line {"p50_us", "p99_us"}.

    python3 floor.py '{"echo": "/path/to/harness", "echoEnv": "NAME", "message": "...", "warm": 500, "n": 5000}'
"""
import json
import sys

from benchlib import PipeFloor, percentiles


def main() -> None:
    cfg = json.loads(sys.argv[1])
    floor = PipeFloor(cfg)
    try:
        samples = floor.block(cfg["warm"], cfg["n"])
    finally:
        floor.close()
    print(json.dumps(percentiles(samples)))


if __name__ == "__main__":
    main()
