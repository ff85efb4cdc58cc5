// `sandboxd mcp`'s snippet tools with the official TypeScript SDK client:
// values, input and output of JavaScript, Lua and Starlark (the SDK
// validates every structured output against the tool's output schema,
// listed first), a script error's position, hostile snippets ending in
// their fence as tool errors, a cancelled snippet that stops, and
// sessions: state kept, closed by a fence or by session_close.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { kindOf, type McpServer, startMcp, structured, textOf } from "./mcp-helpers.js";

describe("sandboxd mcp snippets with the TypeScript SDK client", () => {
  let server: McpServer;
  before(async () => {
    // One run slot: a snippet that kept running after its fence or its
    // cancel would hold up every later call.
    server = await startMcp(["mcp", "--max-concurrency", "1", "--max-timeout-ms", "60000"]);
    const { tools } = await server.client.listTools(); // the output schemas the SDK validates against
    const snippet = tools.find((t) => t.name === "run_snippet");
    assert.ok(snippet, `run_snippet is listed: ${tools.map((t) => t.name)}`);
    assert.deepEqual((snippet.inputSchema.properties?.["language"] as { enum?: string[] }).enum, ["js", "lua", "starlark"]);
  });
  after(async () => {
    const code = await server.close();
    assert.equal(code, 0, `sandboxd mcp exited ${code}; stderr:\n${server.stderr()}`);
    assert.doesNotMatch(server.stderr(), /panic|RUST_BACKTRACE/);
  });

  it("returns each language's value with what it printed", async () => {
    const cases: [Record<string, unknown>, unknown, string][] = [
      [{ language: "js", code: "console.log('hello', input.name); ({length: input.name.length})", input: { name: "Ada" } }, { length: 3 }, "hello Ada\n"],
      [{ language: "lua", code: "print('lua') return {1, 2, 3}" }, [1, 2, 3], "lua\n"],
      [{ language: "starlark", code: "sorted(input)", input: [3, 1, 2] }, [1, 2, 3], ""],
    ];
    for (const [args, value, stdout] of cases) {
      const res = await server.client.callTool({ name: "run_snippet", arguments: args });
      assert.equal(kindOf(res as never), "", JSON.stringify(res));
      const out = structured(res as never);
      assert.deepEqual(out["value"], value);
      assert.deepEqual(out["stdout"], { text: stdout });
      assert.equal(out["language"], args["language"]);
      assert.ok((out["fuelConsumed"] as number) > 0);
    }
  });

  it("a script error comes back with its line and column", async () => {
    const res = await server.client.callTool({ name: "run_snippet", arguments: { language: "js", code: "let a = 1;\nlet b = ;\n" } });
    assert.equal(kindOf(res as never), "script_error");
    const data = (structured(res as never)["error"] as { data: Record<string, unknown> }).data;
    assert.equal(data["line"], 2);
    assert.equal(data["column"], 9);
    assert.equal(data["language"], "js");
    assert.match(textOf(res as never), /^script_error: SyntaxError/);
  });

  it("hostile snippets end in their fence, and the server keeps serving", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ language: "js", code: "while (true) {}", limits: { timeoutMs: 200 } }, "timeout"],
      [{ language: "js", code: "let s = 'x'; while (true) s += s" }, "memory_limit_exceeded"],
      [{ language: "starlark", code: "def f():\n    return f()\n\nf()\n" }, "script_error"],
      [{ language: "lua", code: "return 1", limits: { timeoutMs: 60001 } }, "invalid_params"],
    ];
    for (const [args, kind] of cases) {
      const res = await server.client.callTool({ name: "run_snippet", arguments: args });
      assert.equal(kindOf(res as never), kind, JSON.stringify(res));
    }
    const res = await server.client.callTool({ name: "run_snippet", arguments: { language: "js", code: "6 * 7" } });
    assert.equal(structured(res as never)["value"], 42);
  });

  it("a cancelled snippet stops at once: the only run slot is free for the next call", async () => {
    const controller = new AbortController();
    let running!: () => void;
    const isRunning = new Promise<void>((resolve) => (running = resolve));
    const call = server.client.callTool(
      { name: "run_snippet", arguments: { language: "js", code: "console.log('spinning'); while (true) {}", limits: { timeoutMs: 60000 } } },
      undefined,
      {
        signal: controller.signal,
        onprogress: (p) => {
          if (p.message === "spinning\n") running();
        },
      },
    );
    await isRunning;
    controller.abort();
    await assert.rejects(call, /abort/i);
    const res = await server.client.callTool({ name: "run_snippet", arguments: { language: "lua", code: "return 'after'" } });
    assert.equal(structured(res as never)["value"], "after");
  });

  it("a session keeps its state; a fence or session_close closes it", async () => {
    const call = async (name: string, args: Record<string, unknown>) => {
      const res = await server.client.callTool({ name, arguments: args });
      return { kind: kindOf(res as never), out: structured(res as never), text: textOf(res as never) };
    };
    const created = await call("session_create", { language: "starlark" });
    assert.equal(created.kind, "", JSON.stringify(created));
    const session = created.out["session"] as string;
    assert.equal((await call("session_eval", { session, code: "def double(x):\n    return 2 * x\n" })).kind, "");
    let r = await call("session_eval", { session, code: "double(input)", input: 21 });
    assert.equal(r.out["value"], 42, JSON.stringify(r));
    r = await call("session_eval", { session, code: "undefined_name" });
    assert.equal(r.kind, "script_error");
    r = await call("session_eval", { session, code: "double(4)" });
    assert.equal(r.out["value"], 8, "a script error leaves the session usable");
    r = await call("session_close", { session });
    assert.deepEqual([r.kind, r.out["session"]], ["", session]);
    r = await call("session_eval", { session, code: "double(4)" });
    assert.equal(r.kind, "session_closed");
    assert.match(r.text, /is closed: released/);

    const js = (await call("session_create", { language: "js" })).out["session"] as string;
    r = await call("session_eval", { session: js, code: "while (true) {}", limits: { timeoutMs: 100 } });
    assert.equal(r.kind, "timeout");
    assert.equal((r.out["error"] as { data: Record<string, unknown> }).data["instanceClosed"], true);
    assert.equal((await call("session_eval", { session: js, code: "1" })).kind, "session_closed");
  });
});
