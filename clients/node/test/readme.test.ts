// The package installs, linked from the checkout or as the tarball npm pack
// makes, offline and with no install script, and README.md's Node snippets
// work as printed: each is extracted from README.md (so the README cannot
// drift), run against the real binary found the way a user's would be, and
// what it prints is compared with the README's output block.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join, resolve } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";

import { packageDir, plainEnv, readmeBlock, repoDir, requireBinary } from "./helpers.js";

const exec = promisify(execFile);

/** This environment as a user's would be: no $SANDBOXD_BIN and no sandboxd on PATH. */
function userEnv(): NodeJS.ProcessEnv {
  const env = plainEnv();
  delete env["SANDBOXD_BIN"];
  env["PATH"] = (env["PATH"] ?? "")
    .split(delimiter)
    .filter((d) => d !== "" && !existsSync(join(d, "sandboxd")))
    .join(delimiter);
  return env;
}

/** A fresh project directory with a package.json. */
function project(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module" }));
  return dir;
}

/**
 * Runs README.md's snippet `name` as a user's project would (from `cwd`,
 * default the project directory), compares what it prints with its output
 * block, and type-checks it as TypeScript.
 */
async function checkSnippet(name: string, cwd?: string): Promise<void> {
  const snippet = readmeBlock(`snippet: ${name}`);
  const expected = readmeBlock(`output: ${name}`);
  assert.ok(
    existsSync(join(repoDir, "bin", "sandboxd")),
    `the README snippet finds bin/sandboxd of the checkout: run \`make build\` in ${repoDir}`,
  );
  const dir = project("sandboxd-readme-");
  try {
    // what `npm install <checkout>/clients/node` leaves: a link to the package
    mkdirSync(join(dir, "node_modules"));
    symlinkSync(packageDir, join(dir, "node_modules", "sandboxd"), "dir");
    writeFileSync(join(dir, "example.mjs"), snippet);
    const { stdout } = await exec(process.execPath, [join(dir, "example.mjs")], {
      cwd: cwd ?? dir,
      env: userEnv(),
      timeout: 30_000,
    });
    assert.equal(stdout, expected);

    // the README says the same code is valid TypeScript: type-check it against the package's types
    writeFileSync(join(dir, "example.mts"), snippet);
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ["node"],
          typeRoots: [join(packageDir, "node_modules", "@types")],
        },
        files: ["example.mts"],
      }),
    );
    const tsc = join(packageDir, "node_modules", "typescript", "bin", "tsc");
    await exec(process.execPath, [tsc, "-p", join(dir, "tsconfig.json")], { cwd: dir, timeout: 60_000 }).catch(
      (err: { stdout?: string }) => assert.fail(`the README's ${name} snippet does not type-check:\n${err.stdout}`),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("README.md", () => {
  it("the Node snippet runs as printed, and type-checks as TypeScript", () => checkSnippet("node"));
  // it names testdata/wasi/guest_c.wasm relative to the checkout, as the README says
  it("the WASI Node snippet runs as printed from the checkout, and type-checks", () => checkSnippet("wasi-node", repoDir));
  it("the plugin Node snippet runs as printed from the checkout, and type-checks", () => checkSnippet("plugin-node", repoDir));
  it("the host functions Node snippet runs as printed from the checkout, and type-checks", () => checkSnippet("host-node", repoDir));
  it("the eval Node snippet runs as printed, and type-checks", () => checkSnippet("eval-node"));
});

/** npm, as the running `npm test` was started (its CLI through this node), or npm on PATH. */
function npm(args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<{ stdout: string; stderr: string }> {
  const npmCli = process.env["npm_execpath"];
  const [cmd, pre] = npmCli ? [process.execPath, [npmCli]] : ["npm", []];
  return exec(cmd, [...pre, ...args], { cwd, env, timeout: 600_000, maxBuffer: 16 << 20 });
}

/** Fails on any npm warning (npm 11 warns on stderr, e.g. about install scripts). */
function assertNoWarning(what: string, out: { stdout: string; stderr: string }): void {
  assert.doesNotMatch(out.stdout + out.stderr, /warn/i, `${what} warned:\n${out.stdout}${out.stderr}`);
}

/**
 * In a fresh project outside the checkout: installs `spec` offline with no
 * warning, runs README.md's Node snippet there (printing also which binary
 * the client found) and `npx sandboxd version`; returns that binary.
 */
async function installAndRun(spec: string): Promise<string> {
  const dir = project("sandboxd-consumer-");
  try {
    assertNoWarning("npm install", await npm(["install", "--offline", "--no-audit", "--no-fund", spec], dir));
    writeFileSync(join(dir, "example.mjs"), readmeBlock("snippet: node") + 'console.log((await import("sandboxd")).findBinary());\n');
    const { stdout } = await exec(process.execPath, ["example.mjs"], { cwd: dir, env: userEnv(), timeout: 60_000 });
    const lines = stdout.split("\n");
    const used = lines.at(-2)!;
    assert.equal(lines.slice(0, -2).join("\n") + "\n", readmeBlock("output: node"));
    const version = await npm(["exec", "--offline", "--", "sandboxd", "version"], dir, userEnv());
    assert.match(version.stdout, /^sandboxd 0\.1\.0 \(wasmtime-go v[0-9.]+\)\n$/);
    assertNoWarning("npx sandboxd", version);
    return used;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("installing the package", () => {
  it("has no script npm runs when it installs the package (npm 11 warns about those)", () => {
    const scripts = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")).scripts ?? {};
    for (const name of ["preinstall", "install", "postinstall", "prepublish", "preprepare", "prepare", "postprepare"]) {
      assert.equal(scripts[name], undefined, `package.json has a ${name} script`);
    }
  });

  it("npm install <checkout>/clients/node: a link, offline, no warning; the client and npx use the checkout's binary", async () => {
    const binary = resolve(requireBinary());
    assert.ok(existsSync(join(packageDir, "dist", "index.js")), "dist/ is built by make build");
    assert.equal(await installAndRun(packageDir), resolve(repoDir, "bin", "sandboxd"));
    assert.equal(resolve(repoDir, "bin", "sandboxd"), binary);
  });

  it("npm pack: the tarball carries dist/, the binary and vscode-jsonrpc, and installs offline with no warning", async () => {
    requireBinary();
    const out = mkdtempSync(join(tmpdir(), "sandboxd-pack-"));
    try {
      const packed = await npm(["pack", "--pack-destination", out], packageDir);
      assert.ok(!existsSync(join(packageDir, "bin")), "postpack left the copy of bin/ in the package");
      const tarball = join(out, packed.stdout.trim().split("\n").at(-1)!);
      const { stdout: listing } = await exec("tar", ["tzvf", tarball], { maxBuffer: 16 << 20 });
      for (const want of [/^-rwxr-xr-x .* package\/bin\/sandboxd$/m, /package\/dist\/index\.js$/m, /package\/sandboxd\.sh$/m,
        /package\/node_modules\/vscode-jsonrpc\/package\.json$/m]) {
        assert.match(listing, want);
      }
      const used = await installAndRun(tarball);
      assert.match(used, /\/node_modules\/sandboxd\/bin\/sandboxd$/);
      assert.ok(!used.startsWith(repoDir), used);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
