"""A WASI command-style plugin against the real sidecar: the Go PDK's own
example for the standard Go compiler (testdata/plugins/go/std_countvowels.wasm),
whose main is the plugin, called as ``_start``."""

import unittest

import sandboxd

from _support import REPO, IntegrationTest

STD_PLUGIN = REPO / "testdata" / "plugins" / "go" / "std_countvowels.wasm"
COMPILE = sandboxd.Limits(compile_timeout=300)  # a hang bound: ~3 MB of Go


class GoStdPluginTest(IntegrationTest):
    def test_start_takes_input_and_config_once(self):
        with sandboxd.Sidecar(binary=self.BIN) as sb:
            with sb.plugin(path=STD_PLUGIN, wasi=True, log=True, config={"thing": "1234"}, limits=COMPILE) as p:
                r = p.call("_start", '{"input": "this is a test"}')
                # main runs four functions; the last one's output wins
                self.assertEqual((r.output, r.values), (b"JSON roundtrip: a === b", []))
                with self.assertRaises(sandboxd.InstanceClosed) as cm:
                    p.call("_start", "{}")
                self.assertIn('exited with status 0 in a call of "_start"', cm.exception.reason)
            with sb.plugin(path=STD_PLUGIN, wasi=True, log=True, limits=COMPILE) as p:
                with self.assertRaises(sandboxd.PluginError) as cm:
                    p.call("_start", b"not json")
                self.assertEqual((cm.exception.function, cm.exception.return_code), ("_start", 0))
                self.assertIn("invalid character", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
