// One attempt of one task: `sh -c <run>` as the leader of a new process group, watched by a
// deadline and a stall timer. Whoever fires a limit records the outcome before any signal is
// sent, so an attempt that traps SIGTERM and exits 0 is still a timeout.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import type { Socket } from "node:net";
import { performance } from "node:perf_hooks";
import type { Readable, Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { formatDuration } from "../api/duration.js";
import type { Ending, TaskLimit } from "../api/reasons.js";
import { writeCancelFile } from "./cancel-file.js";
import { LinePrefixer, OutputTail } from "./output.js";
import {
  ATTEMPT_ID_VAR,
  CANCEL_FILE_VAR,
  processStartTime,
  scanProcesses,
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
  /** PLAYBOOK_ATTEMPT_ID prefix shared by every attempt of the run */
  runCookie: string;
  /** start (clock ticks) of the run's first process, for finding what earlier tasks left */
  runStartedFrom?: number;
  cancelFilePath: string;
  deadline: AttemptDeadline | null;
  /** 0 disables the stall limit */
  stallMs: number;
  killGraceMs: number;
  /** how long to wait for the pipes to close after the leader exits on its own */
  drainWindowMs: number;
  sink: Writable;
  /** the sink is done with a chunk once it has called back: output buffers are reused */
  recycleOutput?: boolean;
  prefix: string;
  tailBytes: number;
  cancelSignal?: AbortSignal;
  /** aborted to cut a running grace window short (a second Ctrl-C) */
  hurrySignal?: AbortSignal;
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
  /** a final look after the kill found nothing of the whole run alive */
  runClean?: boolean;
  exitCode: number | null;
  signal: string | null;
  startTime: Date;
  completionTime: Date;
  tail: OutputTail;
  pgid: number | null;
  /** the leader's start in clock ticks (0 if it never started) */
  startedFrom: number;
  spawnError?: string;
}

const POLL_MS = 20;
/** The longest delay setTimeout keeps (about 24.8 days); beyond it, it fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** After SIGKILL the kernel needs a moment; this bounds how long we wait to see the tree gone. */
const KILL_CONFIRM_MS = 5000;
/** How long a SIGKILLed tree gets to close its pipes before we look for stragglers ourselves. */
const PIPE_CLOSE_WAIT_MS = 500;

/**
 * Streams a task's pipe into the sink with line prefixes, pausing the pipe while the sink is
 * full so memory stays bounded however much the task prints. Resolves when the pipe ends.
 */
function forward(
  stream: Readable,
  sink: Writable,
  prefix: string,
  recycle: boolean,
  onData: (chunk: Buffer) => void,
  onBlocked: (blocked: boolean) => void,
): Promise<void> {
  const prefixer = new LinePrefixer(prefix, recycle);
  let blocked = false;
  const resume = () => {
    blocked = false;
    onBlocked(false);
    stream.resume();
  };
  stream.on("data", (chunk: Buffer) => {
    onData(chunk);
    const out = prefixer.push(chunk);
    const accepted = recycle
      ? sink.write(out, (error) => {
          if (!error) prefixer.release(out);
        })
      : sink.write(out);
    if (!accepted) {
      stream.pause();
      blocked = true;
      onBlocked(true);
      sink.once("drain", resume);
    }
  });
  return new Promise((resolve) => {
    const done = () => {
      const tail = prefixer.end();
      if (tail) sink.write(tail);
      sink.off("drain", resume);
      if (blocked) onBlocked(false);
      resolve();
    };
    stream.once("end", done);
    stream.once("error", done);
  });
}

/**
 * Waits for `promise`, at most `ms`, and says whether it settled in time. The timer is cleared
 * either way so it holds no process open.
 */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = await Promise.race([
    promise.then(() => true),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]);
  clearTimeout(timer);
  return settled;
}

/** What the kill path needs to know of a live attempt. */
interface Tree {
  pgid: number;
  /** the leader's start, in clock ticks: nothing older can be the attempt's */
  startedFrom: number;
  /** the same for the whole run: the earlier of this and the run's first process */
  runStartedFrom: number;
  cookie: string;
  leaderAlive: () => boolean;
  leaderExited: Promise<void>;
  streamsClosed: Promise<void>;
}

/**
 * The attempt's live processes that a signal to its group by id does not reach: while the group
 * is signalled by id (`groupSignalled`, the leader unreaped), those that left it; afterwards,
 * its members too. `cookie` widens the search to the whole run.
 */
function findRest(tree: Tree, cookie = tree.cookie, groupSignalled = tree.leaderAlive()): number[] {
  return scanProcesses({
    pgid: groupSignalled ? undefined : tree.pgid,
    excludePgid: groupSignalled ? tree.pgid : undefined,
    cookiePrefix: cookie,
    startedFrom: cookie !== tree.cookie ? tree.runStartedFrom : tree.startedFrom,
  });
}

/**
 * Signals the attempt's whole tree. The group is signalled by id only while the leader is
 * unreaped; after that its members are found and signalled one by one, so a signal never
 * reaches a group whose id was recycled. Each process gets the signal once: many programs read
 * a second SIGTERM as "stop now, skip the clean-up". `cookie` widens the search to the whole run.
 */
function signalTree(tree: Tree, signal: NodeJS.Signals, cookie = tree.cookie): void {
  const byGroup = tree.leaderAlive();
  if (byGroup) sendSignal(-tree.pgid, signal);
  for (const pid of findRest(tree, cookie, byGroup)) sendSignal(pid, signal);
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
  // While a pipe is paused because our reader is slow, the task is blocked on us, not silent:
  // that time is not a stall.
  let blockedPipes = 0;
  const onBlocked = (blocked: boolean) => {
    blockedPipes += blocked ? 1 : -1;
    lastOutput = performance.now();
  };
  const streamsClosed = Promise.all(
    [child.stdout, child.stderr].map((stream) =>
      stream ? forward(stream, spec.sink, spec.prefix, spec.recycleOutput === true, onData, onBlocked) : null,
    ),
  ).then(() => undefined);

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

  const startedFrom = processStartTime(pgid);
  const tree: Tree = {
    pgid,
    startedFrom,
    runStartedFrom: Math.min(startedFrom, spec.runStartedFrom ?? Number.POSITIVE_INFINITY),
    cookie: `${spec.attemptId}\0`,
    leaderAlive: () => leaderAlive,
    leaderExited,
    streamsClosed,
  };

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
    // A longer wait than a timer can hold is taken in steps (setTimeout fires at once beyond it).
    const armDeadline = () => {
      const wait = Math.max(0, deadline.at - performance.now());
      deadlineTimer = setTimeout(
        () => (wait > MAX_TIMER_MS ? armDeadline() : fire({ kind: "limit", limit: deadline.limit })),
        Math.min(wait, MAX_TIMER_MS),
      );
    };
    armDeadline();
  }
  if (spec.stallMs > 0) {
    // Re-armed from the last output time rather than on every chunk: cheap at 1 GiB of output.
    const armStall = (delay: number) => {
      stallTimer = setTimeout(
        () => {
          const quiet = performance.now() - lastOutput;
          if (blockedPipes > 0) armStall(spec.stallMs);
          else if (quiet >= spec.stallMs - 1) fire({ kind: "limit", limit: "StallLimit" });
          else armStall(spec.stallMs - quiet);
        },
        Math.min(delay, MAX_TIMER_MS),
      );
    };
    armStall(spec.stallMs);
  }
  if (spec.cancelSignal?.aborted) onCancel();
  else spec.cancelSignal?.addEventListener("abort", onCancel, { once: true });

  await Promise.race([leaderExited, stopped]);

  // Stopped by a limit or cancellation: end the tree. Otherwise the leader is done and the
  // attempt is over; a background process that still holds the pipes (a service for later
  // tasks) gets only the drain window, it is not waited for.
  const fired = stop as AttemptStop | null;
  let ended: { ending?: Ending; runClean?: boolean } = {};
  if (fired) ended = await endTree(tree, spec.killGraceMs, spec.runCookie, spec.hurrySignal);
  else stopWatchdog();
  if (!(await within(streamsClosed, spec.drainWindowMs))) {
    // Output from what still holds the pipes keeps flowing while the run goes on, but must not
    // keep the runner alive after it: a holder the final sweep cannot find (a new session and a
    // cleared environment) would otherwise hold the pod or the terminal for as long as it lives.
    for (const stream of [child.stdout, child.stderr]) (stream as Socket | null)?.unref();
  }
  // Likewise a leader the kill could not reach (it became another user).
  if (leaderAlive) child.unref();
  return {
    kind: fired ? fired.kind : "exited",
    limit: fired?.limit,
    ...ended,
    exitCode,
    signal: exitSignal,
    startTime,
    completionTime: new Date(),
    tail,
    pgid,
    startedFrom: tree.startedFrom,
  };
}

/**
 * SIGTERM, a grace window in which the tree may end by itself (Exited), then SIGKILL (Killed).
 * A limit or a cancellation ends the run, so what earlier tasks left running is signalled with
 * this task's tree, and a clean final look lets the run skip its own sweep.
 */
async function endTree(
  tree: Tree,
  killGraceMs: number,
  runCookie: string,
  hurry?: AbortSignal,
): Promise<{ ending: Ending; runClean: boolean }> {
  if (killGraceMs > 0) {
    signalTree(tree, "SIGTERM", runCookie);
    const graceEnds = performance.now() + killGraceMs;
    while (performance.now() < graceEnds && !hurry?.aborted) {
      const wait = Math.min(POLL_MS, Math.max(1, graceEnds - performance.now()));
      // Once the leader is gone its exit no longer paces the loop: sleep, or /proc is scanned flat out.
      if (tree.leaderAlive()) await within(tree.leaderExited, wait);
      else await sleep(wait);
      if (!tree.leaderAlive() && findRest(tree).length === 0) {
        return { ending: "Exited", runClean: false };
      }
    }
  }
  // The group first, by id and without a scan, so the kill is not delayed by looking around.
  // While the leader is unreaped the id is still its group's, and a group kill leaves no member
  // behind: the kernel fails a fork that races it.
  const killedByGroup = tree.leaderAlive();
  if (killedByGroup) sendSignal(-tree.pgid, "SIGKILL");
  const confirmBy = performance.now() + KILL_CONFIRM_MS;
  // While the kernel ends the group, look for what the group kill cannot reach: processes that
  // left it (setsid, double fork), by the run's cookie, and the members one by one when the
  // group could not be killed by id. The pipes closing is no proof: a daemon closes them. The
  // look is repeated until it finds nothing, so forks of an escaper between looks are caught.
  let runClean = false;
  while (performance.now() < confirmBy) {
    const left = findRest(tree, runCookie, killedByGroup);
    if (left.length === 0) {
      runClean = true;
      break;
    }
    for (const pid of left) sendSignal(pid, "SIGKILL");
    await sleep(2);
  }
  // Every holder of the pipes is dead or dying: they close as the kernel finishes. One that stays
  // open is held by a process that hid its cookie; it is not waited for long.
  await within(tree.leaderExited, Math.max(0, confirmBy - performance.now()));
  await within(tree.streamsClosed, PIPE_CLOSE_WAIT_MS);
  return { ending: "Killed", runClean };
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
    startedFrom: 0,
    spawnError,
  };
}
