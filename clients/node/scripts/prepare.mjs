// The package's `prepare` script: compiles src/ to dist/ so that
// `npm install <checkout>/clients/node` works from a clean checkout.
//
// npm runs `prepare` in a directory it installs from, but it installs none
// of that directory's own dependencies (it links the directory, or packs it
// with --install-links), so TypeScript and vscode-jsonrpc may be absent.
// This script then installs them from package-lock.json (`npm ci`, dev
// dependencies included) before compiling. The linked package resolves
// vscode-jsonrpc from that node_modules at run time.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = dirname(dirname(fileURLToPath(import.meta.url)));
const has = (name) => existsSync(join(pkgDir, "node_modules", name, "package.json"));

function run(command, args) {
  const r = spawnSync(command, args, { cwd: pkgDir, stdio: "inherit" });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    console.error(`sandboxd prepare: ${command} ${args.join(" ")} failed with status ${r.status ?? r.signal}`);
    process.exit(r.status ?? 1);
  }
}

if (!has("typescript") || !has("vscode-jsonrpc") || !has("@types/node")) {
  // npm passes the installing command's configuration down in npm_config_*
  // variables (--global, --omit=dev, --prefix, ...); the flags below override
  // whatever of it would install somewhere else or leave TypeScript out.
  const npm = process.env["npm_execpath"];
  const [command, pre] = npm ? [process.execPath, [npm]] : ["npm", []];
  run(command, [
    ...pre, "ci", "--prefix", pkgDir, "--global=false", "--include=dev", "--include=optional",
    "--ignore-scripts", "--install-links=false", "--workspaces=false", "--prefer-offline", "--no-audit", "--no-fund",
  ]);
}
run(process.execPath, [join(pkgDir, "node_modules", "typescript", "bin", "tsc"), "-p", join(pkgDir, "tsconfig.json")]);
