"""Where a round trip's CPU goes, by class, from a CPU profile of a
`go run ./bench -loop` (the sidecar's `serve --cpuprofile`, or the
client's `-cpuprofile`). Each sample goes to the first class below whose
pattern matches a frame of its stack, so a write(2) made while encoding
counts as write(2); the figures are µs per round trip (the profile's CPU
divided by the loop's round trips). docs/performance.md "Where a
sequential round trip goes now" shows what it gave.

    python3 bench/pprof_classes.py BINARY PROFILE ROUND_TRIPS
"""
import re
import subprocess
import sys

CLASSES = [
    ("engine (sandbox, wasmtime, cgo)", r"sandboxd/sandbox\.|wasmtime|runtime\.cgocall|_cgo_"),
    ("write(2)", r"syscall\.write\b|poll\.\(\*FD\)\.Write"),
    ("read(2), and ppoll(2) waiting for input", r"waitingPipe|syscall\.read\b|poll\.\(\*FD\)\.Read"),
    ("epoll_wait (Go's poller)", r"runtime\.netpoll\b|EpollWait"),
    ("GC in the background", r"gcBgMarkWorker|bgsweep|bgscavenge|gcAssist"),
    ("Go scheduler: park, find work, wake threads",
     r"runtime\.(schedule|findRunnable|park_m|wakep|startm|stopm|notewakeup|notesleep|futex|mcall|exitsyscall"
     r"|entersyscall|goready|ready|mPark|handoffp|gopark|goexit0|newproc|usleep|osyield)\b"),
    ("allocation", r"runtime\.mallocgc|runtime\.newobject|growslice|makeslice"),
    ("timers", r"runtime\.\(\*timers?\)|\btime\.(AfterFunc|NewTimer|\(\*Timer\))|context\.AfterFunc"),
    ("JSON (jsonscan, encoding/json, protocol)",
     r"jsonscan|encoding/json|rpc\.decode|rpc\.encode|rpc\.responseBody|encodeResponse|fastjson|strconv|validString"
     r"|sandboxd/protocol\.|sandboxd\.decode|sandboxd\.encode|modcache"),
    ("framing (Content-Length, bufio)", r"framing|bufio"),
    ("dispatch and client bookkeeping", r"sandboxd/rpc|clients/go|main\."),
]


def main() -> None:
    binary, profile, trips = sys.argv[1], sys.argv[2], int(sys.argv[3])
    raw = subprocess.run(["go", "tool", "pprof", "-raw", binary, profile],
                         capture_output=True, text=True, check=True).stdout
    head, _, locations = raw.partition("\nLocations")
    frames, cur = {}, None
    for line in locations.splitlines():
        m = re.match(r"\s*(\d+): 0x[0-9a-f]+ M=\d+ (.*)", line)
        if m:
            cur = m.group(1)
            frames[cur] = [m.group(2)]
        elif cur and line.strip():
            frames[cur].append(line.strip())  # an inlined frame of the same location
    totals = {name: 0 for name, _ in CLASSES}
    totals["other"] = 0
    all_ns = 0
    for _, ns, ids in re.findall(r"^ *(\d+) +(\d+):((?: +\d+)+)", head, re.M):
        stack = " ".join(" ".join(frames.get(i, [])) for i in ids.split())
        all_ns += int(ns)
        name = next((n for n, rx in CLASSES if re.search(rx, stack)), "other")
        totals[name] += int(ns)
    print("%.2f s of CPU sampled: %.2f µs per round trip" % (all_ns / 1e9, all_ns / 1e3 / trips))
    for name, ns in totals.items():
        print("  %-45s %5.1f%%  %5.2f µs" % (name, 100 * ns / max(all_ns, 1), ns / 1e3 / trips))


if __name__ == "__main__":
    main()
