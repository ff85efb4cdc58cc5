// Unit tests of the error-class mapping against testdata/wire/error-kinds.json
// (generated from the Go table of kinds).
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  Cancelled,
  CompileLimitExceeded,
  HostFunctionError,
  ScriptError,
  PluginError,
  DisallowedImport,
  ERROR_KINDS,
  ExportError,
  FuelExhausted,
  HostError,
  InvalidModule,
  InvalidParams,
  MemoryLimitExceeded,
  SandboxError,
  SidecarError,
  Timeout,
  Trap,
  errorFromResponse,
} from "sandboxd";

import { wireFixture } from "./helpers.js";

interface KindRow {
  kind: string;
  exitCode: number;
  rpcCode: number;
  summary: string;
}

const expectedClass: Record<string, unknown> = {
  host: HostError,
  fuel_exhausted: FuelExhausted,
  timeout: Timeout,
  memory_limit_exceeded: MemoryLimitExceeded,
  disallowed_import: DisallowedImport,
  invalid_module: InvalidModule,
  export: ExportError,
  trap: Trap,
  cancelled: Cancelled,
  plugin_error: PluginError,
  compile_limit_exceeded: CompileLimitExceeded,
  host_function_error: HostFunctionError,
  script_error: ScriptError,
};

describe("error-kinds.json", () => {
  const rows = wireFixture<KindRow[]>("error-kinds.json");

  it("is a non-empty array of {kind, exitCode, rpcCode, summary}", () => {
    assert.ok(Array.isArray(rows) && rows.length >= 9, `got ${JSON.stringify(rows)}`);
    for (const r of rows) {
      assert.equal(typeof r.kind, "string");
      assert.equal(typeof r.exitCode, "number");
      assert.equal(typeof r.rpcCode, "number");
      assert.equal(typeof r.summary, "string");
    }
  });

  it("names exactly the kinds the client knows", () => {
    assert.deepEqual(rows.map((r) => r.kind).sort(), Object.keys(ERROR_KINDS).sort());
    assert.deepEqual(Object.keys(expectedClass).sort(), Object.keys(ERROR_KINDS).sort());
  });

  for (const row of rows) {
    it(`maps ${row.kind} (rpc ${row.rpcCode}) to its class`, () => {
      const entry = ERROR_KINDS[row.kind];
      assert.ok(entry, `no client entry for kind ${row.kind}`);
      assert.equal(entry.rpcCode, row.rpcCode);
      assert.equal(entry.errorClass, expectedClass[row.kind]);
      const err = errorFromResponse(row.rpcCode, `${row.kind}: boom`, {
        kind: row.kind,
        fuelConsumed: 12,
        peakMemoryBytes: 65536,
      });
      assert.ok(err instanceof (expectedClass[row.kind] as typeof SandboxError));
      assert.ok(err instanceof SandboxError);
      assert.ok(!(err instanceof SidecarError));
      assert.equal(err.kind, row.kind);
      assert.equal(err.code, row.rpcCode);
      assert.equal(err.message, `${row.kind}: boom`);
      assert.equal(err.fuelConsumed, 12);
      assert.equal(err.peakMemoryBytes, 65536);
      assert.equal(err.name, (expectedClass[row.kind] as { name: string }).name);
    });
  }
});

describe("errorFromResponse", () => {
  it("carries each kind's details", () => {
    const fuel = errorFromResponse(2, "m", { kind: "fuel_exhausted", budget: 1000000, fuelConsumed: 1000000 });
    assert.ok(fuel instanceof FuelExhausted);
    assert.equal(fuel.budget, 1000000);
    const to = errorFromResponse(3, "m", { kind: "timeout", timeoutMs: 50 });
    assert.ok(to instanceof Timeout);
    assert.equal(to.timeoutMs, 50);
    const mem = errorFromResponse(4, "m", { kind: "memory_limit_exceeded", limit: 4194304, resource: "memory", requested: 5242880 });
    assert.ok(mem instanceof MemoryLimitExceeded);
    assert.deepEqual([mem.limit, mem.resource, mem.requested], [4194304, "memory", 5242880]);
    const imp = errorFromResponse(5, "m", { kind: "disallowed_import", module: "env", name: "secret" });
    assert.ok(imp instanceof DisallowedImport);
    assert.deepEqual([imp.module, imp.importName, imp.name], ["env", "secret", "DisallowedImport"]);
    const exp = errorFromResponse(7, "m", { kind: "export", function: "nope" });
    assert.ok(exp instanceof ExportError);
    assert.equal(exp.function, "nope");
    const frames = [{ funcIndex: 3, moduleOffset: 77 }];
    const trap = errorFromResponse(8, "m", { kind: "trap", trapCode: "unreachable", frames });
    assert.ok(trap instanceof Trap);
    assert.equal(trap.trapCode, "unreachable");
    assert.deepEqual(trap.frames, frames);
  });

  it("maps protocol errors and busy to SidecarError, invalid params to InvalidParams", () => {
    for (const code of [-32700, -32600, -32601, -32603]) {
      const e = errorFromResponse(code, "bad", undefined, { stderrTail: "tail" });
      assert.ok(e instanceof SidecarError, String(code));
      assert.equal(e.reason, "protocol");
      assert.equal(e.code, code);
      assert.equal(e.kind, "sidecar");
      assert.equal(e.stderrTail, "tail");
    }
    const busy = errorFromResponse(-32000, "busy", { queued: 1, maxQueue: 1 });
    assert.ok(busy instanceof SidecarError);
    assert.equal(busy.reason, "busy");
    assert.deepEqual(busy.data, { queued: 1, maxQueue: 1 });
    // the code decides, whatever data says
    const tagged = errorFromResponse(-32000, "busy", { kind: "busy", queued: 1, maxQueue: 1 });
    assert.ok(tagged instanceof SidecarError && tagged.reason === "busy");
    const params = errorFromResponse(-32602, "args[0]: bad", { kind: "trap" });
    assert.ok(params instanceof InvalidParams && !(params instanceof SidecarError), String(params));
    assert.equal(params.kind, "invalid_params");
    assert.equal(params.code, -32602);
  });

  it("maps a bare -32800 to Cancelled and unknown kinds to SandboxError", () => {
    assert.ok(errorFromResponse(-32800, "cancelled", null) instanceof Cancelled);
    const odd = errorFromResponse(42, "new kind", { kind: "quantum" });
    assert.equal(odd.constructor, SandboxError);
    assert.equal(odd.kind, "quantum");
    const bare = errorFromResponse(42, "no kind", undefined);
    assert.equal(bare.constructor, SandboxError);
    assert.equal(bare.kind, "unknown");
  });
});
