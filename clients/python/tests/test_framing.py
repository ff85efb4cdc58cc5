"""Content-Length framing: encoder output and the incremental decoder."""

import json
import os
import threading
import unittest

from sandboxd._framing import MAX_HEADER_LINE, FrameDecoder, FramingError, encode_message


def frame(obj, extra_headers=b""):
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n" % len(body) + extra_headers + b"\r\n" + body


class EncodeTest(unittest.TestCase):
    def test_exact_bytes(self):
        self.assertEqual(
            encode_message({"jsonrpc": "2.0", "id": 1, "method": "stats"}),
            b'Content-Length: 41\r\n\r\n{"jsonrpc":"2.0","id":1,"method":"stats"}')

    def test_length_counts_utf8_bytes_not_characters(self):
        data = encode_message({"line": "h\u00e9llo \u2603"})
        header, body = data.split(b"\r\n\r\n", 1)
        self.assertEqual(int(header.split(b":")[1]), len(body))
        self.assertEqual(json.loads(body)["line"], "h\u00e9llo \u2603")

    def test_refuses_nan_literal(self):
        # Special floats must be strings by the time they reach the framer.
        with self.assertRaises(ValueError):
            encode_message({"x": float("nan")})

    def test_lone_surrogate_does_not_break_encoding(self):
        data = encode_message({"wat": "\ud800"})
        self.assertIn(b"\\ud800", data)


class DecodeTest(unittest.TestCase):
    def test_whole_and_partial_messages_in_one_chunk(self):
        # A chunk of whole frames takes the fast path; one that ends inside
        # a frame, or holds a header the fast path does not take, hands the
        # rest to the general path, keeping the order.
        a, b, c = ({"id": i, "result": {"v": "x" * i}} for i in range(3))
        odd = frame(c, b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n")
        cases = [
            [frame(a) + frame(b)],
            [frame(a) + frame(b) + frame(c)[:10], frame(c)[10:]],
            [frame(a) + frame(b)[:-1], frame(b)[-1:] + frame(c)],
            [frame(a) + frame(b) + odd],
            [frame(a), b"CONTENT-LENGTH" + frame(b)[len(b"Content-Length"):], frame(c)],
        ]
        for chunks in cases:
            with self.subTest(chunks=chunks):
                d = FrameDecoder()
                got = []
                for chunk in chunks:
                    got += d.feed(chunk)
                want = [a, b] if len(b"".join(chunks)) == len(frame(a) + frame(b)) else [a, b, c]
                self.assertEqual(got, want)
                self.assertFalse(d.mid_message)

    def test_fast_path_still_refuses_garbage(self):
        for data in (b"Content-Length: \r\n\r\n{}", b"Content-Length: 2\r\n\r\n[]",
                     b"Content-Length: 3\r\n\r\n{x}"):
            with self.subTest(data=data):
                with self.assertRaises(FramingError):
                    FrameDecoder().feed(data)

    def test_round_trip(self):
        msgs = [{"id": i, "result": {"v": "x" * i}} for i in range(5)]
        data = b"".join(encode_message(m) for m in msgs)
        self.assertEqual(FrameDecoder().feed(data), msgs)

    def test_byte_at_a_time(self):
        msgs = [{"id": 1, "result": None}, {"method": "log", "params": {"line": "\u00e9"}}]
        data = b"".join(encode_message(m) for m in msgs)
        dec = FrameDecoder()
        got = []
        for i in range(len(data)):
            got += dec.feed(data[i:i + 1])
            # mid_message is true exactly when a message has been started
        self.assertEqual(got, msgs)
        self.assertFalse(dec.mid_message)

    def test_every_split_point(self):
        data = encode_message({"id": 7, "result": [1, 2, 3]}) * 2
        for cut in range(len(data) + 1):
            dec = FrameDecoder()
            got = dec.feed(data[:cut]) + dec.feed(data[cut:])
            self.assertEqual(len(got), 2, cut)

    def test_other_headers_and_case_ignored(self):
        body = b'{"id":1}'
        data = (b"content-type: application/vscode-jsonrpc; charset=utf-8\r\n"
                b"CONTENT-LENGTH: %d\r\n\r\n" % len(body) + body)
        self.assertEqual(FrameDecoder().feed(data), [{"id": 1}])

    def test_mid_message(self):
        dec = FrameDecoder()
        self.assertFalse(dec.mid_message)
        dec.feed(b"Content-Length: 10\r\n")
        self.assertTrue(dec.mid_message)
        dec = FrameDecoder()
        dec.feed(b"Content-Length: 10\r\n\r\n{")
        self.assertTrue(dec.mid_message)

    def test_errors(self):
        cases = {
            "missing length": b"Content-Type: x\r\n\r\n{}",
            "negative": b"Content-Length: -1\r\n\r\n",
            "non-numeric": b"Content-Length: ten\r\n\r\n",
            "no colon": b"garbage\r\n\r\n",
            "not json": b"Content-Length: 3\r\n\r\nabc",
            "not an object": b"Content-Length: 2\r\n\r\n[]",
            "bad utf8": b"Content-Length: 4\r\n\r\n\"\xff\xfe\"",
            "long header": b"X-Long: " + b"a" * (MAX_HEADER_LINE + 1) + b"\r\n\r\n",
            "no terminator": b"a" * (4 * MAX_HEADER_LINE + 1),
        }
        for name, data in cases.items():
            with self.subTest(name), self.assertRaises(FramingError):
                FrameDecoder().feed(data)

    def test_through_a_real_pipe(self):
        # The decoder fed by os.read of a pipe, written by another thread in
        # odd-sized pieces: what the reader thread does.
        msgs = [{"id": i, "result": {"pad": "p" * (i * 997 % 5000)}} for i in range(200)]
        data = b"".join(encode_message(m) for m in msgs)
        r, w = os.pipe()

        def writer():
            with os.fdopen(w, "wb", buffering=0) as f:
                for i in range(0, len(data), 1531):
                    f.write(data[i:i + 1531])

        t = threading.Thread(target=writer)
        t.start()
        dec, got = FrameDecoder(), []
        with os.fdopen(r, "rb", buffering=0) as f:
            while True:
                chunk = f.read(4096)
                if not chunk:
                    break
                got += dec.feed(chunk)
        t.join()
        self.assertEqual(got, msgs)


if __name__ == "__main__":
    unittest.main()
