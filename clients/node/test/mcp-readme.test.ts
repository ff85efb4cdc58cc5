// README.md's MCP client configurations (Claude Desktop's mcpServers, VS
// Code's mcp.json) spawn a working server through the TypeScript SDK's
// client: each block is parsed as its client parses it, its placeholder
// directories become temporary ones, VS Code's `sandboxd` is found on PATH
// as it would be, and the server serves a program from the directory the
// configuration allows. cmd/sandboxd/mcp_readme_test.go does the same with
// the Go SDK's client.
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { describe, it } from "node:test";

import { readmeBlock, requireBinary } from "./helpers.js";
import { guestC, kindOf, startMcp, structured } from "./mcp-helpers.js";

interface ServerConfig {
  type?: string;
  command: string;
  args: string[];
}

/** The "sandboxd" server of the README's configuration `name`, under `key`. */
function readmeServer(name: string, key: string): ServerConfig {
  const config = JSON.parse(readmeBlock(`mcp-config: ${name}`)) as Record<string, Record<string, ServerConfig>>;
  assert.deepEqual(Object.keys(config), [key], `${name}: servers under ${key}`);
  const server = config[key]!["sandboxd"];
  assert.ok(server, `${name}: no ${key}.sandboxd`);
  assert.ok(server.type === undefined || server.type === "stdio", `${name}: type ${server.type}`);
  assert.equal(basename(server.command), "sandboxd");
  assert.equal(server.args[0], "mcp");
  return server;
}

/** The value after flag in args, if any. */
function flagValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

describe("README's MCP configurations, with the TypeScript SDK client", () => {
  for (const [name, key, placeholder] of [
    ["claude-desktop", "mcpServers", "/home/me"],
    ["vscode", "servers", "${workspaceFolder}"],
  ] as const) {
    it(`${name}: spawns sandboxd mcp, which runs a program from the directory it allows`, async () => {
      const root = mkdtempSync(join(tmpdir(), "sandboxd-mcp-readme-"));
      try {
        const server = readmeServer(name, key);
        const args = server.args.map((a) => a.replaceAll(placeholder, root));
        const moduleDir = flagValue(args, "--allow-path-dir");
        const dataDir = flagValue(args, "--allow-dir");
        assert.ok(moduleDir, `${name} allows a module directory`);
        for (const d of [moduleDir, dataDir]) if (d) mkdirSync(d, { recursive: true });
        const program = join(moduleDir, "guest.wasm");
        copyFileSync(guestC, program);
        // A bare command is found on PATH, as the editor finds it; a path
        // is the one the user writes in, here the binary under test.
        let command = server.command;
        let env: Record<string, string> | undefined;
        if (command.includes("/")) {
          command = requireBinary();
        } else {
          const bin = join(root, "bin");
          mkdirSync(bin);
          symlinkSync(requireBinary(), join(bin, command));
          env = { PATH: `${bin}:${process.env["PATH"] ?? ""}` };
        }
        const mcp = await startMcp(args, command, env);
        try {
          let call: Record<string, unknown> = { module: { path: program }, args: ["args", "from", "the README"] };
          let want = "from\nthe README\n";
          if (dataDir) {
            writeFileSync(join(dataDir, "in.txt"), "data\n");
            call = { module: { path: program }, args: ["cat", "/data/in.txt"], dirs: [{ host: dataDir, guest: "/data" }] };
            want = "data\n";
          }
          const res = await mcp.client.callTool({ name: "run_wasi", arguments: call });
          assert.equal(kindOf(res as never), "", JSON.stringify(res));
          assert.deepEqual(structured(res as never)["stdout"], { text: want });
        } finally {
          assert.equal(await mcp.close(), 0, mcp.stderr());
        }
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    });
  }
});
