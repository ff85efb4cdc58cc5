"""A scripted stand-in for `sandboxd serve`, for the client's unit tests.

It speaks the same framing and JSON-RPC as the real server, but its `run`
does whatever the `function` name asks for, so the tests can provoke the
situations a real guest cannot produce on demand (malformed output, a crash
at a chosen moment, orphan errors, out-of-order logs). The behaviour of real
guests is tested against the real binary in test_integration*.py.
"""

import json
import os
import sys
import threading
import time

KIND_CODES = {"host": 1, "fuel_exhausted": 2, "timeout": 3, "memory_limit_exceeded": 4,
              "disallowed_import": 5, "invalid_module": 6, "export": 7, "trap": 8, "cancelled": -32800,
              "script_error": 13}

out = sys.stdout.buffer
write_lock = threading.Lock()
cancels = {}  # id -> threading.Event
cancels_lock = threading.Lock()
shutdown_seen = False
cancel_requests = []  # ids named by $/cancelRequest, in arrival order
releases = []  # instance ids named by release, in arrival order
instances = set()  # live instance ids
sessions = {}  # instance id -> language, of the instances that are sessions
evals = []  # the code of every eval request, in arrival order
instance_ids = iter(range(1, 1 << 30))
rendezvous_cond = threading.Condition()
rendezvous_waiting = {}  # group -> rendezvous calls of that group received so far
max_message = int(os.environ.get("FAKE_MAX_MESSAGE", "0")) or None
host_ids = iter(range(1, 1 << 30))
host_waiting = {}  # host/call id -> Event set by its answer
host_answers = {}  # host/call id -> the answer message (every one received, late ones too)
cancel_on_stats = []  # (run id, host/call id): cancelled, and the run answered timeout, at the next stats


def send(msg):
    body = json.dumps(msg).encode()
    with write_lock:
        out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        out.flush()


def raw(data):
    with write_lock:
        out.write(data)
        out.flush()


def result(id, res):
    send({"jsonrpc": "2.0", "id": id, "result": res})


def error(id, code, message, data=None):
    err = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    send({"jsonrpc": "2.0", "id": id, "error": err})


def run_result(values, params, **extra):
    res = {"values": values, "fuelConsumed": 7, "peakMemoryBytes": 65536, "elapsedMicros": 1500,
           "queuedMicros": 20, "moduleId": "sha256:" + "ab" * 32, "logLines": 0, "logTruncated": False,
           "params": params}
    res.update(extra)
    return res


def do_host(id, params):
    """Each argument is a host call to make, in turn: {"module", "name",
    "args"} (args as the sidecar sends them); "cancel": "on_stats" leaves
    it waiting until the next stats request, which cancels it and answers
    the run timeout, as the real sidecar does at a deadline. The result's
    "answers" are the answer messages."""
    answers = []
    for step in params.get("args", []):
        hid = step.get("id", "sbx-%d" % next(host_ids))
        ev = host_waiting[hid] = threading.Event()
        call = {"id": id, "module": step["module"], "name": step["name"], "args": step.get("args", [])}
        if "instance" in params:
            call["instance"] = params["instance"]
        if step.get("cancel") == "on_stats":
            with cancels_lock:
                cancel_on_stats.append((id, hid))
        send({"jsonrpc": "2.0", "id": hid, "method": "host/call", "params": call})
        if step.get("cancel") == "on_stats":
            return
        if not ev.wait(10):
            error(id, 1, "host: no answer to %s" % hid, {"kind": "host"})
            return
        answers.append(host_answers[hid])
    result(id, run_result([], params, answers=answers))


def do_run(id, params):
    fn = params.get("function", "run")
    args = params.get("args", [])
    if fn == "host":
        do_host(id, params)
    elif fn == "add":
        result(id, run_result([{"type": "i32", "value": sum(args)}], params))
    elif fn == "echo":
        result(id, run_result([], params))
    elif fn == "logs":
        n = args[0]
        for i in range(n):
            send({"jsonrpc": "2.0", "method": "log", "params": {"id": id, "seq": i, "line": "line %d" % i}})
        result(id, run_result([], params, logLines=n))
    elif fn == "bad_seq":
        for seq in (0, 2, 1):
            send({"jsonrpc": "2.0", "method": "log", "params": {"id": id, "seq": seq, "line": "s%d" % seq}})
        result(id, run_result([], params, logLines=3))
    elif fn.startswith("error:"):
        kind = fn[len("error:"):]
        data = dict(params.get("errorData", {}), kind=kind)
        error(id, KIND_CODES.get(kind, 1), "%s: scripted" % kind, data)
    elif fn == "protocol_error":
        error(id, args[0], "scripted protocol error", params.get("errorData"))
    elif fn == "hang":
        ev = threading.Event()
        with cancels_lock:
            cancels[id] = ev
        send({"jsonrpc": "2.0", "method": "log", "params": {"id": id, "seq": 0, "line": "hanging"}})
        ev.wait(30)
        error(id, -32800, "cancelled: request cancelled", {"kind": "cancelled"})
    elif fn == "slow":
        time.sleep(args[0] / 1000.0)
        result(id, run_result([{"type": "i32", "value": args[0]}], params))
    elif fn == "rendezvous":
        # Answers only once args[0] rendezvous calls are outstanding at the
        # same time: a client that serialises calls can never get there, and
        # each call then fails after 10 s. No wall-clock bound is asserted.
        n, group = args[0], args[1]
        with rendezvous_cond:
            rendezvous_waiting[group] = rendezvous_waiting.get(group, 0) + 1
            rendezvous_cond.notify_all()
            met = rendezvous_cond.wait_for(lambda: rendezvous_waiting[group] >= n, timeout=10)
        if met:
            result(id, run_result([{"type": "i32", "value": n}], params))
        else:
            error(id, 1, "rendezvous not met: calls were serialised", {"kind": "host"})
    elif fn == "die":
        sys.stderr.write("fatal: scripted crash\n")
        sys.stderr.flush()
        os._exit(3)
    elif fn == "stderr_flood":
        sys.stderr.write("x" * (1 << 20) + "\nEND OF FLOOD\n")
        sys.stderr.flush()
        result(id, run_result([], params))
    elif fn == "null_id":
        error(None, -32600, "scripted error without id")
    elif fn == "garbage":
        raw(b"Content-Length: nope\r\n\r\n{}")
    elif fn == "torn":
        raw(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"")
        os._exit(0)
    elif fn == "bad_value":
        result(id, run_result([{"type": "i64", "value": 5}], params))
    elif fn == "no_result":
        send({"jsonrpc": "2.0", "id": id})
    else:
        error(id, 7, "export: no export named %r" % fn, {"kind": "export", "function": fn})


def do_eval(id, params):
    """A snippet: its code picks what happens. "echo" answers the params
    as the value; "print" streams output before the answer; "error:KIND"
    fails with that kind (closing a session for a fence, as the sidecar
    does); "hang" waits for $/cancelRequest. In a session (an instance
    made with "language"), the instance must be live."""
    code, instance = params.get("code"), params.get("instance")
    if instance is not None and instance not in instances:
        reason = "released" if instance in releases else "closed after timeout in an evaluation"
        error(id, -32001, "instance %s is closed: %s" % (instance, reason), {"instance": instance, "reason": reason})
        return
    language = params.get("language") or sessions.get(instance)
    stdout, stderr = {"text": ""}, {"text": ""}
    if code == "print":
        pieces = [("stdout", {"text": "hello\n"}), ("stderr", {"text": "careful\n"}), ("stdout", {"base64": "/w=="})]
        for seq, (stream, data) in enumerate(pieces):
            send({"jsonrpc": "2.0", "method": "output", "params": {"id": id, "seq": seq, "stream": stream, "data": data}})
        stdout, stderr = {"base64": "aGVsbG8K/w=="}, {"text": "careful\n"}
    elif code.startswith("error:"):
        kind = code[len("error:"):]
        data = {"kind": kind, "fuelConsumed": 12, "peakMemoryBytes": 4096, "stdout": {"text": "so far"}}
        if kind == "script_error":
            data.update(language=language, message="ReferenceError: x is not defined", line=2, column=5,
                        text="ReferenceError: x is not defined\n\tat snippet:2:5(1)")
        elif instance is not None:
            data["instanceClosed"] = True
            instances.discard(instance)
        error(id, KIND_CODES.get(kind, 13), "%s: scripted" % kind, data)
        return
    elif code == "hang":
        ev = threading.Event()
        with cancels_lock:
            cancels[id] = ev
        send({"jsonrpc": "2.0", "method": "output", "params": {"id": id, "seq": 0, "stream": "stdout",
                                                               "data": {"text": "hanging"}}})
        ev.wait(30)
        if instance is not None:
            instances.discard(instance)
        error(id, -32800, "cancelled: request cancelled", {"kind": "cancelled", "instanceClosed": instance is not None})
        return
    elif code == "no_value":
        result(id, {"language": language, "fuelConsumed": 1, "peakMemoryBytes": 0, "elapsedMicros": 1,
                    "stdout": stdout, "stderr": stderr})
        return
    result(id, {"language": language, "value": params if code == "echo" else None, "fuelConsumed": 1200,
                "peakMemoryBytes": 5369832, "elapsedMicros": 1972, "queuedMicros": 4, "stdout": stdout,
                "stderr": stderr, "outputTruncated": code == "print"})


def do_instantiate(id, params):
    """An instance of nothing: config "delayMs" delays the answer (cancel or
    not), so a client can give up before it arrives. With "language", a
    session: the answer carries the language instead of a module."""
    if "language" in params:
        instance = "inst-fake-%d" % next(instance_ids)
        instances.add(instance)
        sessions[instance] = params["language"]
        result(id, {"instance": instance, "language": params["language"], "fuelConsumed": 12000000,
                    "peakMemoryBytes": 12300000, "elapsedMicros": 900, "queuedMicros": 2, "params": params})
        return
    config = params.get("config") or {}
    time.sleep(int(config.get("delayMs", "0")) / 1000.0)
    instance = "inst-fake-%d" % next(instance_ids)
    instances.add(instance)
    result(id, {"instance": instance, "moduleId": "sha256:" + "ef" * 32, "plugin": True,
                "exports": [{"name": "echo", "kind": "func", "params": [], "results": ["i32"]}],
                "fuelConsumed": 3, "peakMemoryBytes": 65536, "elapsedMicros": 100, "queuedMicros": 1,
                "logLines": 0, "logTruncated": False, "params": params})


def do_call(id, params):
    instance, fn = params.get("instance"), params.get("function")
    if instance not in instances:
        reason = "released" if instance in releases else "no such instance (never created, or already closed)"
        error(id, -32001, "instance %s is closed: %s" % (instance, reason), {"instance": instance, "reason": reason})
    elif fn == "echo":
        send({"jsonrpc": "2.0", "method": "log", "params": {"id": id, "seq": 0, "line": "echoing", "level": "info"}})
        result(id, {"values": [], "fuelConsumed": 9, "peakMemoryBytes": 65536, "elapsedMicros": 40,
                    "queuedMicros": 3, "logLines": 1, "logTruncated": False,
                    "output": params.get("input", {"text": ""}) if not isinstance(params.get("input"), str)
                    else {"text": params["input"]},
                    "outputTruncated": False, "params": params})
    elif fn == "die":
        os._exit(3)
    else:
        do_run(id, params)


def handle(msg):
    global shutdown_seen
    method = msg.get("method")
    id = msg.get("id")
    params = msg.get("params") or {}
    if method is None and isinstance(id, str):  # an answer to a host/call
        host_answers[id] = msg
        if id in host_waiting:
            host_waiting[id].set()
    elif method == "run":
        threading.Thread(target=do_run, args=(id, params), daemon=True).start()
    elif method == "instantiate":
        threading.Thread(target=do_instantiate, args=(id, params), daemon=True).start()
    elif method == "call":
        threading.Thread(target=do_call, args=(id, params), daemon=True).start()
    elif method == "eval":
        evals.append(params.get("code"))
        threading.Thread(target=do_eval, args=(id, params), daemon=True).start()
    elif method == "release":
        releases.append(params.get("instance"))
        instances.discard(params.get("instance"))
        result(id, None)
    elif method == "$/cancelRequest":
        with cancels_lock:
            cancel_requests.append(params.get("id"))
            ev = cancels.get(params.get("id"))
        if ev is not None:
            ev.set()
    elif method == "initialize":
        result(id, {"serverInfo": {"name": "fake"}, "argv": sys.argv[1:], "env": os.environ.get("FAKE_ENV"),
                    "params": params})
    elif method == "compile":
        result(id, {"moduleId": "sha256:" + "cd" * 32, "imports": [],
                    "exports": [{"name": "add", "kind": "func", "params": ["i32", "i32"], "results": ["i32"]}],
                    "cached": False, "compileMicros": 2500, "params": params})
    elif method == "stats":
        with cancels_lock:
            cancelling = list(cancel_on_stats)
            cancel_on_stats.clear()
        for run_id, hid in cancelling:
            send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": hid}})
            error(run_id, 3, "timeout: deadline of 100 ms exceeded", {"kind": "timeout", "timeoutMs": 100})
        result(id, {"runs": {"ok": 0}, "inFlight": 0, "hasParams": "params" in msg, "hostAnswers": dict(host_answers),
                    "cancelRequests": list(cancel_requests), "releases": list(releases),
                    "instances": sorted(instances), "evals": list(evals)})
    elif method == "shutdown":
        shutdown_seen = True
        result(id, None)
    elif method == "exit":
        os._exit(0 if shutdown_seen else 1)
    elif id is not None:
        error(id, -32601, "method not found: %s" % method)


def main():
    inp = sys.stdin.buffer
    while True:
        length = None
        while True:
            line = inp.readline()
            if not line:
                os._exit(0)  # stdin EOF
            line = line.rstrip(b"\r\n")
            if not line:
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = inp.read(length)
        if max_message is not None and length > max_message:
            error(None, -32600, "message of %d bytes exceeds --max-message-bytes %d" % (length, max_message))
            continue
        handle(json.loads(body))


if __name__ == "__main__":
    main()
