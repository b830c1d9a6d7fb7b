// One attempt of one task: `sh -c <run>` as the leader of a new process group, watched by a
// deadline and a stall timer. Whoever fires a limit records the outcome before any signal is
// sent, so an attempt that traps SIGTERM and exits 0 is still a timeout.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { performance } from "node:perf_hooks";
import type { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { formatDuration } from "../api/duration.js";
import type { Ending, TaskLimit } from "../api/reasons.js";
import { writeCancelFile } from "./cancel-file.js";
import { LinePrefixer, OutputTail } from "./output.js";
import {
  ATTEMPT_ID_VAR,
  CANCEL_FILE_VAR,
  groupMembers,
  processesWithCookie,
  sendSignal,
} from "./process-table.js";

export interface AttemptDeadline {
  /** performance.now() value at which the limit fires */
  at: number;
  limit: Exclude<TaskLimit, "StallLimit">;
}

export interface AttemptSpec {
  taskName: string;
  run: string;
  env: NodeJS.ProcessEnv;
  cwd?: string;
  attemptId: string;
  cancelFilePath: string;
  deadline: AttemptDeadline | null;
  /** 0 disables the stall limit */
  stallMs: number;
  killGraceMs: number;
  /** how long to wait for the pipes to close after the leader exits on its own */
  drainWindowMs: number;
  sink: Writable;
  prefix: string;
  tailBytes: number;
  cancelSignal?: AbortSignal;
  /** told once when a limit fires or cancellation starts, before any signal is sent */
  onStop?: (stop: AttemptStop) => void;
}

export interface AttemptStop {
  kind: "limit" | "cancelled";
  limit?: TaskLimit;
  warning?: string;
}

export interface AttemptResult {
  kind: "exited" | "limit" | "cancelled" | "spawn-error";
  limit?: TaskLimit;
  ending?: Ending;
  exitCode: number | null;
  signal: string | null;
  startTime: Date;
  completionTime: Date;
  tail: OutputTail;
  pgid: number | null;
  spawnError?: string;
}

const POLL_MS = 20;
/** After SIGKILL the kernel needs a moment; this bounds how long we wait to see the tree gone. */
const KILL_CONFIRM_MS = 5000;

function everyoneGone(pgid: number, attemptId: string): boolean {
  return groupMembers(pgid).length === 0 && processesWithCookie(attemptId).length === 0;
}

/**
 * Signals the attempt's whole tree. The group is signalled by id only while the leader has not
 * been reaped or the group still has members: a process group id cannot be reused while the
 * group exists, so this never reaches a recycled group.
 */
function signalTree(pgid: number, attemptId: string, leaderAlive: boolean, signal: NodeJS.Signals): void {
  if (leaderAlive || groupMembers(pgid).length > 0) sendSignal(-pgid, signal);
  for (const pid of processesWithCookie(attemptId)) sendSignal(pid, signal);
}

export async function runAttempt(spec: AttemptSpec): Promise<AttemptResult> {
  const tail = new OutputTail(spec.tailBytes);
  const startTime = new Date();
  let child: ChildProcess;
  try {
    child = spawn("sh", ["-c", spec.run], {
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      cwd: spec.cwd,
      env: { ...spec.env, [ATTEMPT_ID_VAR]: spec.attemptId, [CANCEL_FILE_VAR]: spec.cancelFilePath },
    });
  } catch (error) {
    return spawnFailure(error as Error, startTime, tail);
  }
  // events.once() rejects on "error", so the two outcomes of a spawn are awaited by hand.
  const spawned = await new Promise<Error | null>((resolve) => {
    child.once("spawn", () => resolve(null));
    child.once("error", (error) => resolve(error));
  });
  if (spawned !== null || child.pid === undefined) {
    return spawnFailure(spawned ?? new Error("no pid"), startTime, tail, spec.cwd);
  }
  const pgid = child.pid;

  let lastOutput = performance.now();
  const onData = (chunk: Buffer) => {
    lastOutput = performance.now();
    tail.push(chunk);
  };
  const streamsClosed = Promise.all(
    [child.stdout, child.stderr].map((stream) => {
      if (!stream) return Promise.resolve();
      const prefixer = new LinePrefixer(spec.prefix, onData);
      stream.pipe(prefixer).pipe(spec.sink, { end: false });
      return once(prefixer, "end").then(
        () => undefined,
        () => undefined,
      );
    }),
  );

  let leaderAlive = true;
  let exitCode: number | null = null;
  let exitSignal: string | null = null;
  const leaderExited = new Promise<void>((resolve) => {
    child.once("exit", (code, signal) => {
      leaderAlive = false;
      exitCode = code;
      exitSignal = signal;
      resolve();
    });
  });

  // The watchdog: one timer for the deadline, one for the stall window. Both are stopped the
  // moment the leader exits on its own or a limit fires.
  let stop: AttemptStop | null = null;
  let stopFired!: () => void;
  const stopped = new Promise<void>((resolve) => {
    stopFired = resolve;
  });
  let deadlineTimer: NodeJS.Timeout | undefined;
  let stallTimer: NodeJS.Timeout | undefined;
  const stopWatchdog = () => {
    clearTimeout(deadlineTimer);
    clearTimeout(stallTimer);
    spec.cancelSignal?.removeEventListener("abort", onCancel);
  };
  const fire = (next: AttemptStop) => {
    if (stop || !leaderAlive) return;
    stop = next;
    stopWatchdog();
    const message =
      next.kind === "cancelled"
        ? "cancelled"
        : `${next.limit}: ${spec.taskName} passed its limit, stop now (grace ${formatDuration(spec.killGraceMs)})`;
    const written = writeCancelFile(spec.cancelFilePath, `${message}\n`);
    if (!written.written) next.warning = `cancel file ${spec.cancelFilePath}: ${written.reason}`;
    spec.onStop?.(next);
    stopFired();
  };
  const onCancel = () => fire({ kind: "cancelled" });

  if (spec.deadline) {
    const deadline = spec.deadline;
    deadlineTimer = setTimeout(
      () => fire({ kind: "limit", limit: deadline.limit }),
      Math.max(0, deadline.at - performance.now()),
    );
  }
  if (spec.stallMs > 0) {
    // Re-armed from the last output time rather than on every chunk: cheap at 1 GiB of output.
    const armStall = (delay: number) => {
      stallTimer = setTimeout(() => {
        const quiet = performance.now() - lastOutput;
        if (quiet >= spec.stallMs - 1) fire({ kind: "limit", limit: "StallLimit" });
        else armStall(spec.stallMs - quiet);
      }, delay);
    };
    armStall(spec.stallMs);
  }
  if (spec.cancelSignal?.aborted) onCancel();
  else spec.cancelSignal?.addEventListener("abort", onCancel, { once: true });

  await Promise.race([leaderExited, stopped]);

  if (!stop) {
    stopWatchdog();
    // The leader is done: the attempt is over. Give the pipes a short window to close; a
    // background process that still holds them (a service for later tasks) is not waited for.
    await Promise.race([streamsClosed, sleep(spec.drainWindowMs)]);
    return {
      kind: "exited",
      exitCode,
      signal: exitSignal,
      startTime,
      completionTime: new Date(),
      tail,
      pgid,
    };
  }

  const ending = await endTree(pgid, spec, () => leaderAlive);
  await leaderExited;
  await Promise.race([streamsClosed, sleep(spec.drainWindowMs)]);
  const fired = stop as AttemptStop;
  return {
    kind: fired.kind,
    limit: fired.limit,
    ending,
    exitCode,
    signal: exitSignal,
    startTime,
    completionTime: new Date(),
    tail,
    pgid,
  };
}

/** SIGTERM, a grace window in which the tree may end by itself (Exited), then SIGKILL (Killed). */
async function endTree(pgid: number, spec: AttemptSpec, leaderAlive: () => boolean): Promise<Ending> {
  if (spec.killGraceMs > 0) {
    signalTree(pgid, spec.attemptId, leaderAlive(), "SIGTERM");
    const graceEnds = performance.now() + spec.killGraceMs;
    while (performance.now() < graceEnds) {
      await sleep(Math.min(POLL_MS, Math.max(1, graceEnds - performance.now())));
      if (!leaderAlive() && everyoneGone(pgid, spec.attemptId)) return "Exited";
    }
  }
  signalTree(pgid, spec.attemptId, leaderAlive(), "SIGKILL");
  const confirmBy = performance.now() + KILL_CONFIRM_MS;
  while (performance.now() < confirmBy) {
    if (!leaderAlive() && everyoneGone(pgid, spec.attemptId)) break;
    await sleep(2);
    // A fork racing the first kill may have escaped it; keep killing until the tree is empty.
    signalTree(pgid, spec.attemptId, leaderAlive(), "SIGKILL");
  }
  return "Killed";
}

function spawnFailure(error: Error, startTime: Date, tail: OutputTail, cwd?: string): AttemptResult {
  const code = (error as NodeJS.ErrnoException).code;
  const spawnError =
    code === "ENOENT" && cwd && !existsSync(cwd)
      ? `could not start: workingDir ${cwd} does not exist`
      : `could not start: ${error.message}`;
  return {
    kind: "spawn-error",
    exitCode: null,
    signal: null,
    startTime,
    completionTime: new Date(),
    tail,
    pgid: null,
    spawnError,
  };
}
