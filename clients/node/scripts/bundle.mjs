// The package's prepack and postpack steps (npm pack): copies the
// checkout's bin/ (the sandboxd binary and whatever `make build` puts next
// to it) into the package's bin/, which `files` ships and the client runs
// first; --remove deletes that copy again once the tarball is written, so
// that a package linked from the checkout never runs a stale copy (it
// finds the checkout's bin/sandboxd itself). Neither runs when a package
// is installed: the package has no install scripts.
import { cpSync, existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = dirname(dirname(fileURLToPath(import.meta.url)));
const bundle = join(pkgDir, "bin");
const source = join(pkgDir, "..", "..", "bin");

rmSync(bundle, { recursive: true, force: true });
if (process.argv[2] !== "--remove") {
  if (!existsSync(join(source, "sandboxd"))) {
    console.error(`sandboxd bundle: ${join(source, "sandboxd")} is missing: run make build in the checkout`);
    process.exit(1);
  }
  cpSync(source, bundle, { recursive: true, preserveTimestamps: true });
}
