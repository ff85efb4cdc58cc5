/**
 * Finding the `sandboxd` binary: an explicit path, `$SANDBOXD_BIN`, the
 * binary this package carries (`npm pack` puts it in the package's `bin/`),
 * `PATH`, then `bin/sandboxd` of the sandboxd checkout this package (or the
 * current directory) is in.
 *
 * @module
 */
import { accessSync, constants, readFileSync, realpathSync, statSync } from "node:fs";
import { delimiter, dirname, isAbsolute, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

import { SidecarError } from "./errors.js";

/** The hint every "binary not found" error carries. */
export const BUILD_HINT =
  "build it with `make build` in the sandboxd repository (needs Go and gcc), then pass { binary }, set SANDBOXD_BIN, or put it on PATH (`make install`); `npm install <checkout>/clients/node` (or the tarball `npm pack` makes there) installs a package that finds or carries it";

/** Where a package made by `npm pack` keeps the binary it carries (with what `make build` puts next to it). */
export const bundleDir: string = join(dirname(dirname(fileURLToPath(import.meta.url))), "bin");

/** The binary this package carries, if it does (a package linked from a checkout does not). */
export function bundledBinary(dir: string = bundleDir): string | undefined {
  const candidate = join(dir, "sandboxd");
  return isExecutableFile(candidate) ? candidate : undefined;
}

/** The module path in a sandboxd checkout's go.mod. */
const GO_MODULE = "github.com/sandboxd/sandboxd";

function isExecutableFile(p: string): boolean {
  try {
    if (!statSync(p).isFile()) return false;
    if (process.platform !== "win32") accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Searches `PATH` for an executable called `name`; returns its absolute path or undefined. */
export function searchPath(name: string, envPath: string | undefined = process.env["PATH"]): string | undefined {
  const exts =
    process.platform === "win32" ? ["", ...(process.env["PATHEXT"] ?? ".EXE;.CMD;.BAT;.COM").split(";")] : [""];
  for (const dir of (envPath ?? "").split(delimiter)) {
    if (dir === "") continue;
    for (const ext of exts) {
      const candidate = join(dir, name + ext);
      if (isExecutableFile(candidate)) return resolve(candidate);
    }
  }
  return undefined;
}

function declaresModule(goMod: string): boolean {
  for (const line of goMod.split("\n")) {
    const fields = line.trim().split(/\s+/);
    if (fields[0] === "module") return fields[1] === GO_MODULE;
  }
  return false;
}

/**
 * The sandboxd repository holding `start`: the nearest directory at or above
 * it whose go.mod declares module github.com/sandboxd/sandboxd.
 */
export function findCheckout(start: string): string | undefined {
  let here = resolve(start);
  for (;;) {
    try {
      if (declaresModule(readFileSync(join(here, "go.mod"), "utf8"))) return here;
    } catch {
      // no go.mod here
    }
    const parent = dirname(here);
    if (parent === here) return undefined;
    here = parent;
  }
}

/**
 * Where to look for a checkout's `bin/sandboxd`: above this package's own
 * files (`npm install <checkout>/clients/node` links the package, so its real
 * path is inside the checkout), then above the current directory.
 */
export function checkoutRoots(): string[] {
  let own = dirname(fileURLToPath(import.meta.url));
  try {
    own = realpathSync(own);
  } catch {
    // keep the path as given
  }
  return [own, process.cwd()];
}

/**
 * Finds the sidecar binary: `explicit` (a path, or a bare name searched on
 * PATH), else `$SANDBOXD_BIN`, else the binary this package carries (in
 * `bundle`), else `sandboxd` on PATH, else `bin/sandboxd` of the sandboxd
 * checkout that holds this package or the current directory (see
 * {@link findCheckout}). A configured path that is not executable is an
 * error, not a fall-through. Throws a {@link SidecarError} (reason
 * `missing`) naming every place it looked and how to build the binary.
 */
export function findBinary(explicit?: string, roots: string[] = checkoutRoots(), bundle: string = bundleDir): string {
  let wanted: string;
  let from: string;
  if (explicit !== undefined && explicit !== "") {
    wanted = explicit;
    from = "the binary option";
  } else if (process.env["SANDBOXD_BIN"]) {
    wanted = process.env["SANDBOXD_BIN"];
    from = "$SANDBOXD_BIN";
  } else {
    return findDefault(roots, bundle);
  }
  const looksLikePath = isAbsolute(wanted) || wanted.includes("/") || wanted.includes(sep);
  if (looksLikePath) {
    const abs = resolve(wanted);
    if (isExecutableFile(abs)) return abs;
    throw new SidecarError(`sandboxd binary not found: ${abs} (from ${from}) is not an executable file; ${BUILD_HINT}`, {
      reason: "missing",
    });
  }
  const found = searchPath(wanted);
  if (found !== undefined) return found;
  throw new SidecarError(`sandboxd binary not found: no executable ${JSON.stringify(wanted)} on PATH (from ${from}); ${BUILD_HINT}`, {
    reason: "missing",
  });
}

function findDefault(roots: string[], bundle: string): string {
  const found = bundledBinary(bundle) ?? searchPath("sandboxd");
  if (found !== undefined) return found;
  const checkouts: string[] = [];
  for (const start of roots) {
    const root = findCheckout(start);
    if (root === undefined || checkouts.includes(root)) continue;
    checkouts.push(root);
    const candidate = join(root, "bin", "sandboxd");
    if (isExecutableFile(candidate)) return candidate;
  }
  const where =
    checkouts.length > 0
      ? `the sandboxd checkout at ${checkouts.join(" or ")} has no bin/sandboxd`
      : `neither this package nor the current directory is inside a sandboxd checkout (looked above ${roots.join(" and ")})`;
  throw new SidecarError(
    `sandboxd binary not found: $SANDBOXD_BIN is not set, this package carries none, there is no sandboxd on PATH, and ${where}; ${BUILD_HINT}`,
    { reason: "missing" },
  );
}
