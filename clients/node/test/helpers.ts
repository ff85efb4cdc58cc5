// Shared helpers of the test suite. The tests run the compiled files in
// dist-test/, so paths are resolved from this file's location.
import { chmodSync, existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Sidecar, type SpawnOptions } from "sandboxd";

/** clients/node */
export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** The repository's testdata/ */
export const testdataDir = resolve(packageDir, "../../testdata");

/** The repository's root */
export const repoDir = resolve(packageDir, "../..");

/** The fenced block that follows `<!-- marker …-->` in README.md. */
export function readmeBlock(marker: string): string {
  const text = readFileSync(join(repoDir, "README.md"), "utf8");
  const escaped = marker.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const m = new RegExp(`<!-- ${escaped}\\b[^>]*-->\\s*\`\`\`[a-z]*\\n([\\s\\S]*?)\`\`\``).exec(text);
  if (!m) throw new Error(`README.md has no fenced block after <!-- ${marker} -->`);
  return m[1]!;
}

/** The sidecar binary under test: $SANDBOXD_BIN, else ../../bin/sandboxd. */
export const binaryPath = process.env["SANDBOXD_BIN"] || resolve(packageDir, "../../bin/sandboxd");

/** Path of a .wat fixture. */
export function watPath(name: string): string {
  return join(testdataDir, "wat", name);
}

/** Text of a .wat fixture. */
export function watText(name: string): string {
  return readFileSync(watPath(name), "utf8");
}

/**
 * The environment of a child whose printed output a test compares: `env`
 * without FORCE_COLOR, which `node --test` sets when its own output is a
 * terminal and a child would inherit, colouring what it prints.
 */
export function plainEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const plain = { ...env };
  delete plain["FORCE_COLOR"];
  return plain;
}

/** Fails loudly (never skips) when the binary is missing. */
export function requireBinary(): string {
  if (!existsSync(binaryPath)) {
    throw new Error(
      `sandboxd binary not found at ${binaryPath}: run \`make build\` in the repository root or set SANDBOXD_BIN`,
    );
  }
  return binaryPath;
}

/** Spawns a sidecar on the binary under test. */
export function spawnSidecar(options: SpawnOptions = {}): Promise<Sidecar> {
  return Sidecar.spawn({ binary: requireBinary(), ...options });
}

/** The scripted fake sidecar (test/fixtures/fake-sidecar.mjs), executable. */
export const fakeSidecar = join(packageDir, "test", "fixtures", "fake-sidecar.mjs");
chmodSync(fakeSidecar, 0o755);

/** Runs `fn` with a Sidecar on the fake, which is killed afterwards. */
export async function withFake<T>(fn: (sb: Sidecar) => Promise<T>): Promise<T> {
  const sb = await Sidecar.spawn({ binary: fakeSidecar });
  try {
    return await fn(sb);
  } finally {
    sb.kill();
    await sb.close().catch(() => {});
  }
}

/** Awaits `p` and returns what it rejected with; fails if it resolved. */
export async function rejection(p: Promise<unknown>): Promise<unknown> {
  let value: unknown;
  try {
    value = await p;
  } catch (err) {
    return err;
  }
  throw new Error(`expected a rejection, got ${JSON.stringify(value, (_k, x) => (typeof x === "bigint" ? `${x}n` : x))}`);
}

/** JSON.parse a testdata/wire file. */
export function wireFixture<T>(name: string): T {
  return JSON.parse(readFileSync(join(testdataDir, "wire", name), "utf8")) as T;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `pred` every 5 ms until it holds; fails after `ms`. */
export async function waitFor(pred: () => Promise<boolean> | boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(5);
  }
}
