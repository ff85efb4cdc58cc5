"""The asyncio client's writes, against a recording stdin: a frame goes out
at once, and the frames that callers resumed by one chunk of answers send
next are joined into one write."""

import asyncio
import unittest

from sandboxd._async import _AsyncConnection
from sandboxd._framing import FrameDecoder, encode_message


class RecordingStdin:
    def __init__(self):
        self.writes = []

    def write(self, data):
        self.writes.append(bytes(data))

    def is_closing(self):
        return False


def answer(id):
    return encode_message({"jsonrpc": "2.0", "id": id, "result": {"n": id}})


class AsyncWritesTest(unittest.TestCase):
    def test_batched_under_load_immediate_alone(self):
        async def main():
            conn = _AsyncConnection(asyncio.get_running_loop(), proc=None)
            stdin = conn._stdin = RecordingStdin()

            # alone: written at once, before the caller awaits
            first = asyncio.ensure_future(conn.call("stats"))
            await asyncio.sleep(0)
            self.assertEqual(len(stdin.writes), 1)
            conn._stdout_data(answer(1))
            self.assertEqual(await first, {"n": 1})

            # 16 callers in flight, each sending again when answered
            async def caller():
                await conn.call("stats")
                return await conn.call("stats")

            tasks = [asyncio.ensure_future(caller()) for _ in range(16)]
            await asyncio.sleep(0)
            before = len(stdin.writes)
            ids = [m["id"] for w in stdin.writes[1:] for m in FrameDecoder().feed(w)]
            self.assertEqual(len(ids), 16)
            # one chunk answers all 16; the 16 frames they send next are one write
            conn._stdout_data(b"".join(answer(i) for i in ids))
            for _ in range(3):
                await asyncio.sleep(0)
            self.assertEqual(len(stdin.writes), before + 1)
            again = [m["id"] for m in FrameDecoder().feed(stdin.writes[-1])]
            self.assertEqual(len(again), 16)
            conn._stdout_data(b"".join(answer(i) for i in again))
            self.assertEqual(sorted(r["n"] for r in await asyncio.gather(*tasks)), sorted(again))

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
