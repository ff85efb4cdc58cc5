// The package installs from a clean directory, and README.md's Node snippet
// works as printed: it is extracted from README.md (so the README cannot
// drift), run against the real binary found the way a user's would be, and
// what it prints is compared with the README's output block.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join, resolve } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";

import { packageDir, requireBinary } from "./helpers.js";

const exec = promisify(execFile);
const repoDir = resolve(packageDir, "../..");

/** The fenced block that follows `<!-- marker …-->` in README.md. */
function readmeBlock(marker: string): string {
  const text = readFileSync(join(repoDir, "README.md"), "utf8");
  const escaped = marker.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const m = new RegExp(`<!-- ${escaped}\\b[^>]*-->\\s*\`\`\`[a-z]*\\n([\\s\\S]*?)\`\`\``).exec(text);
  assert.ok(m, `README.md has no fenced block after <!-- ${marker} -->`);
  return m[1]!;
}

/** This environment as a user's would be: no $SANDBOXD_BIN and no sandboxd on PATH. */
function userEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
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
});

describe("npm install <dir>", () => {
  it("builds the package from a clean copy (prepare) and it runs", async () => {
    const binary = requireBinary();
    const root = mkdtempSync(join(tmpdir(), "sandboxd-install-"));
    try {
      // the package's files as a clean checkout has them: no node_modules, no dist
      const pkg = join(root, "pkg");
      for (const f of ["package.json", "package-lock.json", ".npmrc", "tsconfig.json", "README.md", "src", "scripts"]) {
        cpSync(join(packageDir, f), join(pkg, f), { recursive: true });
      }
      const consumer = project("sandboxd-consumer-");
      try {
        const npmCli = process.env["npm_execpath"];
        const [cmd, pre] = npmCli ? [process.execPath, [npmCli]] : ["npm", []];
        await exec(cmd, [...pre, "install", "--prefer-offline", "--no-audit", "--no-fund", pkg], {
          cwd: consumer,
          timeout: 240_000,
        });
        assert.ok(existsSync(join(pkg, "dist", "index.js")), "prepare did not build dist/");
        const program = `
          import { Sidecar } from "sandboxd";
          const sb = await Sidecar.spawn({ binary: ${JSON.stringify(binary)} });
          const r = await sb.run({ wat: '(module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))', function: "add", args: [2, 40] });
          console.log(r.values[0]);
          await sb.close();`;
        writeFileSync(join(consumer, "check.mjs"), program);
        const { stdout } = await exec(process.execPath, ["check.mjs"], { cwd: consumer, timeout: 30_000 });
        assert.equal(stdout.trim(), "42");
      } finally {
        rmSync(consumer, { recursive: true, force: true });
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
