// A WASI command-style plugin against the real sidecar: the Go PDK's own
// example for the standard Go compiler (testdata/plugins/go/std_countvowels.wasm),
// whose main is the plugin, called as `_start`.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { InstanceClosed, type Sidecar } from "sandboxd";

import { rejection, spawnSidecar, testdataDir } from "./helpers.js";

const stdPlugin = join(testdataDir, "plugins", "go", "std_countvowels.wasm");

describe("the Go PDK's std-Go example (_start)", () => {
  let sb: Sidecar;
  before(async () => {
    sb = await spawnSidecar();
  });
  after(() => sb.close());

  it("_start takes the input and config and gives the output, once per instance", async () => {
    await using p = await sb.plugin({
      path: stdPlugin,
      wasi: true,
      capabilities: { log: true },
      config: { thing: "1234" },
      limits: { compileTimeoutMs: 300_000, timeoutMs: 60_000 }, // hang bounds
    });
    const r = await p.call("_start", '{"input": "this is a test"}');
    // main runs four functions; the last one's output wins
    assert.equal(new TextDecoder().decode(r.output), "JSON roundtrip: a === b");
    assert.deepEqual(r.values, []);
    const again = await rejection(p.call("_start", "{}"));
    assert.ok(again instanceof InstanceClosed, String(again));
    assert.match(again.reason ?? "", /exited with status 0 in a call of "_start"/);
  });
});
