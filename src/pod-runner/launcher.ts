// How an attempt's shell is started and its tree ended: the seam between the attempt's watchdog
// (attempt.ts: deadline, stall, cancel file, who fired first) and where the task runs. The local
// launcher spawns the task's shell (`sh -c` by default) on this machine in a new process group and ends it with signals and
// /proc scans; the agent launcher (agent-launcher.ts) asks the agent of the task's container.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { performance } from "node:perf_hooks";
import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import type { Ending } from "../api/reasons.js";
import { DEFAULT_SHELL } from "../api/shell.js";
import type { AttemptSpec } from "./attempt.js";
import { writeCancelFilesOf } from "./cancel-file.js";
import {
  ATTEMPT_ID_VAR,
  CANCEL_FILE_VAR,
  killUntilGone,
  PROC,
  type ProcessTable,
  sendSignal,
} from "./process-table.js";
import { childrenCpuTicks, cpuSecondsSince, PeakSampler, type TaskUsage } from "./task-usage.js";

/** How a stopped tree ended. */
export interface TreeEnd {
  /** absent when the kill did not end the tree: `unended` says why */
  ending?: Ending;
  /** what of the attempt was still alive when the kill gave up, and why (a stopped agent) */
  unended?: string;
  /** a final look after the kill found nothing of the whole run alive */
  runClean: boolean;
  /** performance.now() when the grace given with the stop ends */
  graceEndsAt: number;
  /** ms of killGrace the group had when a second Ctrl-C cut the grace short */
  graceCutAfterMs?: number;
}

/** What became of the SIGTERM a stop sends the attempt's process group, as the runner's log says it. */
export interface TermSent {
  /** it reached the group (locally: the kernel took it; through an agent: a running agent was told) */
  delivered: boolean;
  /** what was done, in words: "SIGTERM sent to its process group", "SIGTERM not delivered: ..." */
  detail: string;
}

/** No SIGTERM to the group: its leader had exited, so its id may be another's now. */
export const TERM_NOT_SENT_LEADER_GONE: TermSent = {
  delivered: false,
  detail: "SIGTERM not sent to its process group: its shell had exited (what it left gets one each)",
};

/** A started attempt, as the watchdog sees it. */
export interface Launched {
  /** the leader's pid, which is its group's id */
  pgid: number;
  /** the leader's start in clock ticks (0 if unknown) */
  startedFrom: number;
  /** the leader's stdout and stderr, in that order (a failure message quotes stderr first) */
  streams: Readable[];
  /**
   * Each chunk of `streams` is a buffer of its own that nothing else holds (a pipe read by Node):
   * the attempt frees it once it has copied what it keeps (spent-chunks.ts).
   */
  chunksOwned?: boolean;
  leaderAlive(): boolean;
  /** resolves once the leader has exited */
  leaderExited: Promise<void>;
  /** the leader's exit code and signal (null until it exited) */
  exit(): { code: number | null; signal: string | null };
  /**
   * Resolves with the name of the task's container when it is lost while the attempt runs (its
   * agent's connection closed); never for a local attempt.
   */
  lost?: Promise<string>;
  /**
   * Writes the cancel file of every earlier attempt of the run that left something running, as a
   * stop ends the run; returns what could not be written.
   */
  warnLeftovers(runCookie: string, text: string): Promise<string[]>;
  /**
   * SIGTERM, the grace window, SIGKILL: the stop's decision carried out. `onTerm` is told what
   * became of the SIGTERM as soon as it was sent, before the grace (not with killGrace 0).
   */
  endTree(
    killGraceMs: number,
    runCookie: string,
    hurry?: AbortSignal,
    onTerm?: (term: TermSent) => void,
  ): Promise<TreeEnd>;
  /** a leader that could not be ended must not keep the runner alive */
  release(): void;
  /**
   * Bytes of output dropped so far because the reader was behind when the pipes could no longer
   * be held (an agent's connection during a stop and at the run's end); absent: none ever are.
   */
  droppedBytes?(): number;
  /**
   * Why the started leader could not become the task's shell (an agent's chdir or exec failed, and
   * it exited 127), in words that name the field; absent when it did.
   */
  execFailure?(): string | undefined;
  /** what the attempt cost, once its leader exited (task-usage.ts; an agent's wait4) */
  usage?(): TaskUsage;
}

/** `lostContainer`: it could not start because the task's container is gone. */
export type LaunchResult = { launched: Launched } | { error: string; lostContainer?: string };

export interface Launcher {
  launch(spec: AttemptSpec): Promise<LaunchResult>;
}

const POLL_MS = 20;
/** After SIGKILL the kernel needs a moment; this bounds how long we wait to see the tree gone. */
export const KILL_CONFIRM_MS = 5000;

/**
 * Waits for `promise`, at most `ms`, and says whether it settled in time. The timer is cleared
 * either way so it holds no process open.
 */
export async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
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

/** The task's shell (`sh -c`, or its `shell`), wrapped by the run's containment, spawned here in a group of its own. */
export const LOCAL_LAUNCHER: Launcher = {
  async launch(spec) {
    let child: ChildProcess;
    const cpuBefore = childrenCpuTicks();
    try {
      const shell = spec.shell?.words ?? DEFAULT_SHELL;
      const { file, args } = spec.command?.(spec.run, shell) ?? {
        file: shell[0] ?? "sh",
        args: [...shell.slice(1), "-c", spec.run],
      };
      child = spawn(file, args, {
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
        cwd: spec.cwd,
        env: {
          ...spec.env,
          [ATTEMPT_ID_VAR]: spec.attemptId,
          [CANCEL_FILE_VAR]: spec.cancelFileOf(spec.attemptId),
        },
      });
    } catch (error) {
      return { error: describeSpawnError(error as Error, spec.cwd) };
    }
    // events.once() rejects on "error", so the two outcomes of a spawn are awaited by hand.
    const spawned = await new Promise<Error | null>((resolve) => {
      child.once("spawn", () => resolve(null));
      child.once("error", (error) => resolve(error));
    });
    if (spawned !== null || child.pid === undefined) {
      return { error: describeSpawnError(spawned ?? new Error("no pid"), spec.cwd) };
    }
    const pgid = child.pid;
    let leaderAlive = true;
    let exitCode: number | null = null;
    let exitSignal: string | null = null;
    const peak = new PeakSampler(pgid);
    let usage: TaskUsage = {};
    const leaderExited = new Promise<void>((resolve) => {
      child.once("exit", (code, signal) => {
        leaderAlive = false;
        exitCode = code;
        exitSignal = signal;
        // Node has reaped the shell: its CPU is in the runner's children's now.
        const cpuSeconds = cpuSecondsSince(cpuBefore);
        const peakMemoryBytes = peak.stop();
        usage = {
          ...(cpuSeconds !== undefined ? { cpuSeconds } : {}),
          ...(peakMemoryBytes !== undefined ? { peakMemoryBytes } : {}),
        };
        resolve();
      });
    });
    const table = spec.processTable ?? PROC;
    const startedFrom = table.startTime(pgid);
    const tree: Tree = {
      table,
      pgid,
      startedFrom,
      runStartedFrom: Math.min(startedFrom, spec.runStartedFrom ?? Number.POSITIVE_INFINITY),
      cookie: `${spec.attemptId}\0`,
      leaderAlive: () => leaderAlive,
      leaderExited,
    };
    const streams = [child.stdout, child.stderr].filter((stream): stream is Readable => stream !== null);
    return {
      launched: {
        pgid,
        startedFrom,
        streams,
        chunksOwned: true,
        leaderAlive: () => leaderAlive,
        leaderExited,
        exit: () => ({ code: exitCode, signal: exitSignal }),
        async warnLeftovers(runCookie, text) {
          const leftovers = await findRest(tree, runCookie);
          return writeCancelFilesOf(table, leftovers, runCookie, spec.cancelFileOf, text, spec.attemptId);
        },
        endTree: (killGraceMs, runCookie, hurry, onTerm) =>
          endTree(tree, killGraceMs, runCookie, hurry, onTerm),
        release: () => {
          if (leaderAlive) child.unref();
        },
        usage: () => usage,
      },
    };
  },
};

function describeSpawnError(error: Error, cwd?: string): string {
  const code = (error as NodeJS.ErrnoException).code;
  return code === "ENOENT" && cwd && !existsSync(cwd)
    ? `could not start: workingDir ${cwd} does not exist`
    : `could not start: ${error.message}`;
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
  table: ProcessTable;
}

/**
 * The attempt's live processes that a signal to its group by id does not reach: while the group
 * is signalled by id (`groupSignalled`, the leader unreaped), those that left it; afterwards,
 * its members too. `cookie` widens the search to the whole run.
 */
function findRest(tree: Tree, cookie = tree.cookie, groupSignalled = tree.leaderAlive()): Promise<number[]> {
  return tree.table.scan({
    pgid: groupSignalled ? undefined : tree.pgid,
    excludePgid: groupSignalled ? tree.pgid : undefined,
    cookiePrefix: cookie,
    startedFrom: cookie !== tree.cookie ? tree.runStartedFrom : tree.startedFrom,
  });
}

/**
 * SIGTERM, a grace window in which the tree may end by itself (Exited), then SIGKILL (Killed).
 * A limit or a cancellation ends the run, so what earlier tasks left running is signalled with
 * this task's tree, and a clean final look lets the run skip its own sweep.
 */
export async function endTree(
  tree: Tree,
  killGraceMs: number,
  runCookie: string,
  hurry?: AbortSignal,
  onTerm?: (term: TermSent) => void,
): Promise<TreeEnd> {
  const graceStartedAt = performance.now();
  const graceEndsAt = graceStartedAt + killGraceMs;
  if (killGraceMs > 0) {
    // The group by id while the leader is unreaped; after that its members one by one, so a signal
    // never reaches a group whose id was recycled. Each process gets SIGTERM once: many programs
    // read a second one as "stop now, skip the clean-up".
    const byGroup = tree.leaderAlive();
    const delivered = byGroup && sendSignal(-tree.pgid, "SIGTERM");
    onTerm?.(
      !byGroup
        ? TERM_NOT_SENT_LEADER_GONE
        : delivered
          ? { delivered, detail: "SIGTERM sent to its process group" }
          : {
              delivered,
              detail: "SIGTERM not delivered: its process group was gone or not the runner's to signal",
            },
    );
    for (const pid of await findRest(tree, runCookie, byGroup)) sendSignal(pid, "SIGTERM");
    while (performance.now() < graceEndsAt && !hurry?.aborted) {
      const wait = Math.min(POLL_MS, Math.max(1, graceEndsAt - performance.now()));
      // Once the leader is gone its exit no longer paces the loop: sleep, or /proc is scanned flat out.
      if (tree.leaderAlive()) await within(tree.leaderExited, wait);
      else await sleep(wait);
      if (!tree.leaderAlive() && (await findRest(tree)).length === 0) {
        return { ending: "Exited", runClean: false, graceEndsAt };
      }
    }
  }
  // A second Ctrl-C ended the grace early: the report says so rather than "after <killGrace>".
  const cut = killGraceMs > 0 && hurry?.aborted === true && performance.now() < graceEndsAt;
  const graceCutAfterMs = cut ? Math.round(performance.now() - graceStartedAt) : undefined;
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
  const runClean = await killUntilGone(() => findRest(tree, runCookie, killedByGroup), confirmBy);
  await within(tree.leaderExited, Math.max(0, confirmBy - performance.now()));
  return {
    ending: "Killed",
    runClean,
    graceEndsAt,
    ...(graceCutAfterMs !== undefined ? { graceCutAfterMs } : {}),
  };
}
