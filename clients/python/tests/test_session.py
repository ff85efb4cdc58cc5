"""The I/O-free Session on its own: ids, log routing, notification handlers."""

import unittest

from sandboxd._framing import encode_message
from sandboxd._protocol import Session
from sandboxd.errors import SidecarError


class SessionTest(unittest.TestCase):
    def setUp(self):
        self.session = Session()
        self.settled = {}

    def start(self, method, on_log=None):
        call, _frame = self.session.start(
            method, None, lambda result, exc: self.settled.__setitem__(call.id, (result, exc)), on_log)
        return call

    def test_logs_reach_their_call_then_the_response(self):
        lines = []
        a, b = self.start("run", lines.append), self.start("run")
        self.assertNotEqual(a.id, b.id)
        self.session.feed(encode_message({"jsonrpc": "2.0", "method": "log",
                                          "params": {"id": a.id, "seq": 0, "line": "one"}}))
        self.session.feed(encode_message({"jsonrpc": "2.0", "id": a.id, "result": {"ok": 1}}))
        self.assertEqual(lines, ["one"])
        self.assertEqual(self.settled[a.id], ({"ok": 1}, None))
        self.assertNotIn(b.id, self.settled)

    def test_notification_handlers_by_method(self):
        seen = []
        self.session.on_notification("output", lambda params, call: seen.append((params["data"], call)))
        a = self.start("run")
        self.session.feed(encode_message({"jsonrpc": "2.0", "method": "output", "params": {"id": a.id, "data": "x"}}))
        self.session.feed(encode_message({"jsonrpc": "2.0", "method": "output", "params": {"id": 999, "data": "y"}}))
        self.session.feed(encode_message({"jsonrpc": "2.0", "method": "unknown", "params": {}}))  # ignored
        self.assertEqual(seen, [("x", a), ("y", None)])


class OutputTest(unittest.TestCase):
    """The built-in ``output`` handler: bytes to on_output, seq checked."""

    def setUp(self):
        self.session = Session()
        self.settled = {}
        self.pieces = []
        self.call, _ = self.session.start("run", None, lambda r, e: self.settled.__setitem__("run", (r, e)),
                                          on_output=lambda stream, data: self.pieces.append((stream, data)))

    def output(self, **params):
        self.session.feed(encode_message({"jsonrpc": "2.0", "method": "output",
                                          "params": dict(params, id=self.call.id)}))

    def respond(self):
        self.session.feed(encode_message({"jsonrpc": "2.0", "id": self.call.id, "result": {"ok": 1}}))
        return self.settled["run"]

    def test_pieces_in_order_as_bytes(self):
        self.output(seq=0, stream="stdout", data={"text": "héllo"})
        self.output(seq=1, stream="stderr", data={"base64": "/wA="})
        self.assertEqual(self.pieces, [("stdout", "héllo".encode()), ("stderr", b"\xff\x00")])
        self.assertEqual(self.respond(), ({"ok": 1}, None))

    def test_out_of_order_fails_the_run(self):
        self.output(seq=0, stream="stdout", data={"text": "a"})
        self.output(seq=2, stream="stdout", data={"text": "c"})
        self.output(seq=3, stream="stdout", data={"text": "d"})  # no more callbacks after the gap
        self.assertEqual(self.pieces, [("stdout", b"a")])
        _, exc = self.respond()
        self.assertIsInstance(exc, SidecarError)
        self.assertIn("expected seq 1, got 2", str(exc))

    def test_malformed_fails_the_run(self):
        for params in ({"seq": 0, "stream": "stdin", "data": {"text": "x"}},
                       {"seq": 0, "stream": "stdout", "data": "x"},
                       {"seq": 0, "stream": "stdout", "data": {"base64": "!!"}}):
            with self.subTest(params=params):
                self.setUp()
                self.output(**params)
                self.assertEqual(self.pieces, [])
                _, exc = self.respond()
                self.assertIsInstance(exc, SidecarError)
                self.assertIn("malformed output notification", str(exc))


if __name__ == "__main__":
    unittest.main()
