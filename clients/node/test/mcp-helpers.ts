// Shared machinery of the MCP tests: `sandboxd mcp` spawned by the official
// TypeScript SDK's client (StdioClientTransport), as an agent or an editor
// spawns it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { getDefaultEnvironment, StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";

import { requireBinary, testdataDir } from "./helpers.js";

/** A connected client and what the server wrote on stderr. */
export interface McpServer {
  client: Client;
  stderr: () => string;
  /** Closes stdin and waits for the server to exit; resolves with its exit code. */
  close: () => Promise<number | null>;
}

/**
 * Spawns `command args` (default: the binary under test) and connects; env
 * is added to the few variables the SDK passes on (PATH, HOME, ...).
 */
export async function startMcp(args: string[], command = requireBinary(), env?: Record<string, string>): Promise<McpServer> {
  const transport = new StdioClientTransport({ command, args, stderr: "pipe", ...(env ? { env: { ...getDefaultEnvironment(), ...env } } : {}) });
  let stderr = "";
  transport.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString("utf8");
  });
  const client = new Client({ name: "sandboxd-node-test", version: "1.0.0" });
  await client.connect(transport);
  const pid = transport.pid;
  assert.ok(pid, "the server has a pid");
  return {
    client,
    stderr: () => stderr,
    close: async () => {
      const exited = new Promise<number | null>((resolve) => {
        // the transport's process: closing the client ends its stdin
        const child = (transport as unknown as { _process?: import("node:child_process").ChildProcess })._process;
        if (!child || child.exitCode !== null) {
          resolve(child?.exitCode ?? null);
          return;
        }
        child.once("exit", (code) => resolve(code));
      });
      await client.close();
      return exited;
    },
  };
}

/** The structured output of a result, as an object. */
export function structured(res: CallToolResult): Record<string, unknown> {
  assert.ok(res.structuredContent && typeof res.structuredContent === "object", `no structured content: ${JSON.stringify(res)}`);
  return res.structuredContent as Record<string, unknown>;
}

/** The error kind of a result ("" for a success); isError and the structured error agree. */
export function kindOf(res: CallToolResult): string {
  const out = structured(res);
  const error = out["error"] as { kind?: string } | undefined;
  assert.equal(res.isError === true, error !== undefined, `isError ${res.isError} with ${JSON.stringify(out)}`);
  return error?.kind ?? "";
}

/** The text content of a result. */
export function textOf(res: CallToolResult): string {
  const first = res.content[0];
  return first && first.type === "text" ? first.text : "";
}

export const guestC = join(testdataDir, "wasi", "guest_c.wasm");
export const wasiDir = join(testdataDir, "wasi");

/** A testdata file as base64. */
export function base64Of(path: string): string {
  return readFileSync(path).toString("base64");
}
