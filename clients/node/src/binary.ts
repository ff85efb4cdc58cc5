import { accessSync, constants, statSync } from "node:fs";
import { delimiter, isAbsolute, join, resolve, sep } from "node:path";

import { SidecarError } from "./errors.js";

/** The hint every "binary not found" error carries. */
export const BUILD_HINT =
  "build it with `make build` in the sandboxd repository (needs Go and gcc), then pass { binary } or set SANDBOXD_BIN";

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

/**
 * Finds the sidecar binary: `explicit` (a path, or a bare name searched on
 * PATH), else `$SANDBOXD_BIN`, else `sandboxd` on PATH. Throws a
 * {@link SidecarError} (reason `missing`) saying how to build it.
 */
export function findBinary(explicit?: string): string {
  let wanted: string;
  let from: string;
  if (explicit !== undefined && explicit !== "") {
    wanted = explicit;
    from = "the binary option";
  } else if (process.env["SANDBOXD_BIN"]) {
    wanted = process.env["SANDBOXD_BIN"];
    from = "$SANDBOXD_BIN";
  } else {
    wanted = "sandboxd";
    from = "PATH";
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
