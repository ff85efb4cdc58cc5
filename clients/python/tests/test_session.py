"""The I/O-free Session on its own: ids, log routing, notification handlers."""

import unittest

from sandboxd._framing import encode_message
from sandboxd._protocol import Session


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


if __name__ == "__main__":
    unittest.main()
