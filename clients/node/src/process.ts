/**
 * The sidecar child process: starting it, its stdio, the tail of its
 * stderr, and knowing when it is gone. Nothing here speaks the protocol;
 * {@link Session} does, over {@link SidecarProcess.reader} and
 * {@link SidecarProcess.writer}.
 *
 * @module
 */
import { spawn, type ChildProcess } from "node:child_process";

import type { MessageWriter } from "vscode-jsonrpc/node";

import { BUILD_HINT } from "./binary.js";
import { SidecarError } from "./errors.js";
import { FrameReader, FrameWriter } from "./framing.js";

/** How much of the sidecar's stderr is kept for error messages. */
const STDERR_TAIL_BYTES = 4096;
/** After the process exited, how long stdout may stay open (a grandchild may hold it). */
const STDOUT_GRACE_MS = 250;
/** After stdout ended, how long the process may take to exit before it is killed. */
const EXIT_GRACE_MS = 1000;
/** How long to wait for the last of stderr once the process is gone. */
const STDERR_GRACE_MS = 200;

/** How the process ended. */
export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Options of {@link SidecarProcess.start}. */
export interface ProcessOptions {
  env?: Record<string, string>;
  cwd?: string;
  onStderr?: (text: string) => void;
}

/** "exited with status 3", "was killed by SIGKILL". */
export function describeExit(exit: ExitInfo): string {
  return exit.signal ? `was killed by ${exit.signal}` : `exited with status ${exit.code}`;
}

/** The last non-empty line of `text`, cut to 300 characters. */
export function lastLine(text: string): string {
  const lines = text.split("\n").filter((l) => l.trim() !== "");
  const l = lines[lines.length - 1] ?? "";
  return l.length > 300 ? l.slice(0, 300) + "…" : l;
}

/** A started `sandboxd serve` process. */
export class SidecarProcess {
  /** Frames from the child's stdout. */
  readonly reader: FrameReader;
  /** Frames to the child's stdin. */
  readonly writer: MessageWriter;
  /** Resolves with the exit status once the process has exited. */
  readonly exited: Promise<ExitInfo>;
  /**
   * Resolves once the process is gone: it exited and its stdout ended (or
   * one of them happened and the other is late), and the last of its stderr
   * was read. A process that closed stdout but lingers is killed.
   */
  readonly gone: Promise<void>;
  /** The exit status, once known. */
  exitInfo: ExitInfo | undefined;
  /** An error the process reported after it started (e.g. a failed kill). */
  processError: Error | undefined;
  /** kill() was called. */
  killed = false;

  private stderrTailBuf: Buffer = Buffer.alloc(0);

  private constructor(private readonly child: ChildProcess, onStderr?: (text: string) => void) {
    const stdout = child.stdout!;
    const stderr = child.stderr!;
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
      });
    });
    child.on("error", (err) => {
      this.processError ??= err;
    });
    const stderrClosed = new Promise<void>((resolve) => stderr.once("close", () => resolve()));
    stderr.on("data", (chunk: Buffer) => {
      const merged = Buffer.concat([this.stderrTailBuf, chunk]);
      this.stderrTailBuf = merged.length > STDERR_TAIL_BYTES ? merged.subarray(merged.length - STDERR_TAIL_BYTES) : merged;
      if (onStderr) {
        try {
          onStderr(chunk.toString("utf8"));
        } catch {
          // a failing observer must not break the sidecar
        }
      }
    });
    child.stdin!.on("error", () => {
      // EPIPE after the child died: the exit path reports it.
    });
    const stdoutEnded = new Promise<void>((resolve) => {
      stdout.once("end", () => resolve());
      stdout.once("close", () => resolve());
    });
    this.reader = new FrameReader(stdout);
    this.writer = new FrameWriter(child.stdin!);
    const exited = this.exited;
    this.gone = (async () => {
      // Whichever comes first, give the other its grace period.
      const first = await Promise.race([exited.then(() => "exit"), stdoutEnded.then(() => "stdout")]);
      const other = first === "exit" ? stdoutEnded : exited;
      await Promise.race([other, sleep(first === "exit" ? STDOUT_GRACE_MS : EXIT_GRACE_MS)]);
      // stdout is gone but the process lingers: it can never answer, end it
      if (this.exitInfo === undefined) child.kill("SIGKILL");
      await Promise.race([stderrClosed, sleep(STDERR_GRACE_MS)]);
    })();
  }

  /**
   * Starts `binary args…`. Rejects with a {@link SidecarError} (reason
   * `missing`) if it cannot be started.
   */
  static async start(binary: string, args: string[], options: ProcessOptions = {}): Promise<SidecarProcess> {
    const child = spawn(binary, args, {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...options.env },
      cwd: options.cwd,
      windowsHide: true,
    });
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        child.off("spawn", onSpawn);
        reject(new SidecarError(`could not start ${binary}: ${err.message}; ${BUILD_HINT}`, { reason: "missing", cause: err }));
      };
      const onSpawn = () => {
        child.off("error", onError);
        resolve();
      };
      child.once("error", onError);
      child.once("spawn", onSpawn);
    });
    return new SidecarProcess(child, options.onStderr);
  }

  /** The process id. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** The last ~4 KiB the process wrote to stderr. */
  get stderrTail(): string {
    return this.stderrTailBuf.toString("utf8");
  }

  /** Sends `signal` unless the process has exited. */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    if (this.exitInfo !== undefined) return;
    this.killed = true;
    this.child.kill(signal);
  }

  /** Closes the child's stdin (EOF: the sidecar exits even if it missed `exit`). */
  endInput(): void {
    this.child.stdin!.end();
  }
}

function sleep(ms: number): Promise<void> {
  // unref: what the grace periods wait for (the child, its pipes) keeps the loop alive by itself
  return new Promise((r) => setTimeout(r, ms).unref());
}
