// A whole run: tasks in order, retries after ordinary failures only, the ceiling counted from the
// run's start (which the controller carries across pod re-creations), and a sweep at the end so
// nothing a task left behind outlives the run.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import type { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { formatDuration } from "../api/duration.js";
import type { EffectiveLimit, ResolvedLimits, TaskLimits } from "../api/limits.js";
import type { TaskSpec } from "../api/playbook.js";
import type { TaskPhase } from "../api/reasons.js";
import type { ContainmentKind, RunnerReason, RunOutcome, TaskOutcome } from "../api/report.js";
import { effectiveShell } from "../api/shell.js";
import {
  type AgentRun,
  agentCancelFileOf,
  agentContainment,
  agentLaunchers,
  attemptsSeen,
  containerOfTask,
} from "./agent-mode.js";
import {
  type AttemptDeadline,
  type AttemptResult,
  type AttemptStop,
  drainPipes,
  type OpenPipes,
  runAttempt,
} from "./attempt.js";
import { type Containment, openContainment } from "./containment.js";
import { type Sweep, sweepLeftovers } from "./leftover-sweep.js";
import { oomCounter } from "./oom.js";
import { PROC, type ProcessTable } from "./process-table.js";
import { DEFAULT_RETRY_WAITS, retryWaitMs, showWait } from "./retry-wait.js";
import { createSecretMask, readMaskDirs } from "./secret-mask.js";
import { namespaceKeeper } from "./subreaper.js";
import { markStopped, markWindowPassed, type StopBeforeStart, settleTask } from "./task-settle.js";

export type RunEvent =
  | {
      type: "containment";
      kind: ContainmentKind;
      description: string;
      /** what it cleaned when it was opened (an earlier killed run's cgroup) */
      notices?: string[];
    }
  | { type: "task-started"; index: number; name: string; attempt: number; limits: TaskLimits }
  | { type: "task-stopping"; index: number; name: string; stop: AttemptStop }
  | {
      type: "task-retrying";
      index: number;
      name: string;
      /** the attempt about to start, and how many the task may make */
      attempt: number;
      attempts: number;
      exitCode: number | null;
      signal: string | null;
      /** how long the runner waits before it (retry-wait.ts) */
      delayMs: number;
    }
  | {
      type: "task-finished";
      index: number;
      outcome: TaskOutcome;
      /** The task's time by the runner's clock, read back from its line (a cluster run's log). */
      tookMs?: number;
    }
  /**
   * Output a task printed after its stop (`when: "stop"`) or at the run's end ("end") that came
   * faster than the runner's stdout took it and was dropped, not kept (agent-launcher.ts).
   */
  | { type: "output-dropped"; index: number; name: string; bytes: number; when: "stop" | "end" }
  /** The run's sweep: what tasks left running it found, and how many of those it saw end. */
  | { type: "leftovers-swept"; found: number; ended: number; warnings: string[] }
  /**
   * The main tasks ended (`outcome`, and the task that ended them) and the finally tasks begin;
   * their events' index counts on after the main tasks' (tasks.length + i).
   */
  | {
      type: "finally-started";
      count: number;
      outcome: RunnerReason;
      endingTask?: string;
      /** their ceiling, counted from now */
      finallyCeiling: EffectiveLimit;
    };

export interface RunOptions {
  tasks: readonly TaskSpec[];
  /**
   * spec.finally: run after the main tasks end, however they ended, within limits.finallyCeiling
   * counted from then. In events, agents' containers and placements a finally task's index is
   * tasks.length + its own.
   */
  finally?: readonly TaskSpec[];
  /** Ends the finally tasks (a cancel that came once they began). */
  finallyCancelSignal?: AbortSignal;
  /** aborted to skip what is left of a finally task's grace (default: hurrySignal) */
  finallyHurrySignal?: AbortSignal;
  /** spec.shell: the shell of tasks that name none (absent: `sh`) */
  shell?: string | undefined;
  limits: ResolvedLimits;
  /** When the run started; the ceiling counts from here (default: now). */
  runStart?: Date;
  /**
   * What is left of the ceiling now, as a duration on this machine's monotonic clock: a pod's
   * runner is handed one, so that its node's wall clock (perhaps skewed against the controller's,
   * which stamped runStart) neither shortens nor lengthens the run. Wins over runStart.
   */
  ceilingLeftMs?: number;
  /** Where task output goes (the runner's stdout in a pod). */
  sink: Writable;
  /**
   * The sink is done with a chunk once its write callback has run, as a stream over a file
   * descriptor is: the runner then reuses its output buffers. Not for a sink that hands chunks
   * on to readers who may keep them (a PassThrough).
   */
  recycleOutput?: boolean;
  /** Prefix each output line with "[task] ". */
  prefixOutput?: boolean;
  cancelSignal?: AbortSignal;
  /** aborted to skip what is left of a main task's grace window */
  hurrySignal?: AbortSignal;
  onEvent?: (event: RunEvent) => void;
  /** how long a task's pipes may stay open after its shell exits before the next task starts */
  drainWindowMs?: number;
  tailBytes?: number;
  /** Environment the tasks inherit (default: this process's, without PLAYBOOK_* variables). */
  baseEnv?: NodeJS.ProcessEnv;
  /** where the tasks' processes are looked for (default: this machine's /proc) */
  processTable?: ProcessTable;
  /** What holds the run's processes (default: the best this machine offers, see containment.ts). */
  containment?: (runId: string) => Containment;
  /**
   * Agent mode: every task runs in its container through that container's agent, and the
   * agents hold the run's processes (agent-mode.ts).
   */
  agents?: AgentRun;
  /** Secret values printed as `***` (--secret's), beside the mask directories' files; never logged. */
  maskValues?: readonly string[];
  /** Directories of secret files whose contents are masked ($PLAYBOOK_MASK_DIRS, read by the session). */
  maskDirs?: readonly string[];
  /** The jitter of the waits between a task's attempts, in [0, 1) (default Math.random; tests fix it). */
  random?: () => number;
}

/** What a finally task is told of the main tasks: the run's reason so far, and the task that ended them. */
export const OUTCOME_ENV_VAR = "PLAYBOOK_OUTCOME";
export const FAILED_TASK_ENV_VAR = "PLAYBOOK_FAILED_TASK";

const DEFAULT_DRAIN_WINDOW_MS = 250;
const DEFAULT_TAIL_BYTES = 4096;

function inheritedEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("PLAYBOOK_")));
}

/**
 * Where a task in a container starts from: its image's environment (a local run reads it from the
 * engine; in a pod its agent sent its own), never the runner's, whose image is not the task's.
 */
function containerEnv(
  agents: AgentRun | undefined,
  container: string,
  fallback: NodeJS.ProcessEnv,
): NodeJS.ProcessEnv {
  if (agents?.local) return agents.local.baseEnv(container);
  const own = agents?.agent(container)?.env;
  if (own === undefined) return fallback;
  return Object.fromEntries(Object.entries(own).filter(([name]) => !name.startsWith("PLAYBOOK_")));
}

/**
 * An id no other live run on this machine has: no two live runners share a pid, and the random
 * part tells this run from what an earlier runner with the same pid left behind. Not node:crypto,
 * which would cost every start some milliseconds to load; the id needs to be unique, not secret.
 */
function newRunId(): string {
  const random = Math.floor(Math.random() * 2 ** 32);
  // In a PID namespace of its own the runner is pid 2: its keeper's pid, as the host numbers it,
  // names the run, marked `ns` (containment.ts, RUN_CGROUP).
  const keeper = namespaceKeeper();
  const pid = keeper === null ? process.pid.toString(16) : `ns${keeper.toString(16)}`;
  return `${pid}-${random.toString(16).padStart(8, "0")}`;
}

export async function runPlaybook(options: RunOptions): Promise<RunOutcome> {
  const runStart = options.runStart ?? new Date();
  const startedAt = performance.now();
  const ceilingAt =
    startedAt + (options.ceilingLeftMs ?? runStart.getTime() + options.limits.ceiling.ms - Date.now());
  // Before anything is started: a mask directory that cannot be read ends the run here.
  const mask = createSecretMask([...(options.maskValues ?? []), ...readMaskDirs(options.maskDirs ?? [])]);
  const runId = newRunId();
  // Every attempt's PLAYBOOK_ATTEMPT_ID starts with this, so the whole run can be found at once.
  const runCookie = `${runId}.`;
  let scratch: string;
  try {
    scratch = mkdtempSync(join(tmpdir(), "playbook-"));
  } catch {
    // No writable temp dir (a read-only root, a bad TMPDIR): run anyway. Each cancel file is
    // still tried when a limit fires, and a failure is a warning, not a lost run and report.
    scratch = join(tmpdir(), `playbook-${runId}`);
  }
  const baseEnv = options.baseEnv ?? inheritedEnv();
  const table = options.processTable ?? PROC;
  const emit = options.onEvent ?? (() => {});
  const agents = options.agents;
  const attempts = agents ? attemptsSeen(agents) : undefined;
  // A local run brings its own: its host tasks' and its containers' (local-run.ts).
  const containment = options.containment
    ? options.containment(runId)
    : agents
      ? agentContainment(agents, undefined, attempts)
      : openContainment(runId);
  const launcherOf = agents ? agentLaunchers(agents, attempts) : null;
  emit({
    type: "containment",
    kind: containment.kind,
    description: containment.description,
    ...(containment.notices?.length ? { notices: containment.notices } : {}),
  });
  const oom = oomCounter();
  const outcomes: TaskOutcome[] = options.tasks.map((task) => ({
    name: task.name,
    phase: "Pending",
    attempts: 0,
    exitCode: null,
    signal: null,
  }));
  const finallyTasks = options.finally ?? [];
  const finallyOutcomes: TaskOutcome[] = finallyTasks.map((task) => ({
    name: task.name,
    phase: "Pending",
    attempts: 0,
    exitCode: null,
    signal: null,
  }));
  let reason: RunnerReason = "Succeeded";
  // Nothing started before the run's first task can be one of its processes.
  let firstStart = Number.POSITIVE_INFINITY;

  const cancelFileOf = agents
    ? agentCancelFileOf(agents.runDir)
    : (attemptId: string) => join(scratch, `${attemptId}.cancel`);
  // Pipes still held by what finished tasks left running: read on, and drained at the end.
  const openPipes: OpenPipes[] = [];
  /** Each attempt's count of dropped output, and how much of it the log has told. */
  const drops: { index: number; name: string; bytes: () => number; told: number }[] = [];
  let runClean = false;
  /** what the final kill could not confirm ended, in words */
  let left: string | undefined;
  // Set when the run was stopped with a grace that leftovers shared: when that grace ends.
  let sharedGraceEndsAt: number | undefined;
  const finallyHurry = options.finallyHurrySignal ?? options.hurrySignal;
  // The grace a signal cuts is the grace of the phase that runs: the finally tasks' once they began.
  let hurryNow = options.hurrySignal;
  const sweepOf = (reasonNow: RunnerReason): Sweep => ({
    runCookie,
    startedFrom: firstStart,
    alreadyWarned: sharedGraceEndsAt !== undefined,
    graceMs:
      sharedGraceEndsAt === undefined
        ? options.limits.killGrace.ms
        : Math.max(0, sharedGraceEndsAt - performance.now()),
    cancelFileOf,
    cancelText:
      reasonNow === "Cancelled"
        ? "cancelled\n"
        : `${reasonNow}: the run is over, stop now (grace ${formatDuration(options.limits.killGrace.ms)})\n`,
    hurry: hurryNow,
    table,
  });

  /** Runs one task (its attempts); says how it settled. `index` counts the finally tasks on after the main ones. */
  const runTask = async (task: TaskSpec, index: number, phase: TaskPhaseRules): Promise<TaskPhase> => {
    // Its place in its own list: spec.tasks or spec.finally.
    const own = index - phase.first;
    const limits = phase.limits[own] as TaskLimits;
    const outcome = phase.outcomes[own] as TaskOutcome;
    const container = agents
      ? agents.local
        ? agents.local.containerOf(index)
        : containerOfTask(task, agents.containers, agents.taskContainers?.[index])
      : null;
    // Where each container runs under a user of its own, a task waits for its own container's
    // agent only, not for every agent: the first task starts as soon as the first agent is in.
    if (container !== null && agents?.arrive) {
      await agents.arrive(container, Math.max(0, phase.boundAt - performance.now()), phase.cancelSignal);
    }
    const stopped = stopBeforeStart(phase);
    if (stopped === "FinallyCeiling") {
      // A cleanup the finally window left no time for never ran: Skipped, saying why.
      markWindowPassed(outcome, options.limits.finallyCeiling);
      return outcome.phase;
    }
    if (stopped) {
      // Stopped between tasks: this task is the one it kept from starting.
      outcome.startTime = new Date();
      markStopped(outcome, stopped);
      emit({ type: "task-finished", index, outcome });
      return outcome.phase;
    }
    outcome.phase = "Running";
    outcome.startTime = new Date();
    const launcher = container !== null ? launcherOf?.(container) : undefined;
    // An agent that never said hello (the runner waited for every one) fails the run before
    // anything starts, on its first task, naming the container.
    const missing =
      agents?.missing?.[0] ?? (agents && container !== null && !launcher ? container : undefined);
    if (agents && missing !== undefined) {
      outcome.attempts = 1;
      outcome.completionTime = new Date();
      outcome.phase = "Failed";
      outcome.lostContainer = missing;
      outcome.detail = `container ${missing} (image ${agents.containers[missing] ?? "unknown"}): its agent did not connect; ${agents.arrive ? "the task was not run" : "nothing was run"}`;
      emit({ type: "task-finished", index, outcome });
      return outcome.phase;
    }
    const shell = effectiveShell(task, own, options.shell, phase.list);
    let result: AttemptResult;
    let stoppedBeforeRetry: StopBeforeStart | null = null;
    /** what a stop between attempts cut: the wait before attempt `attempt` */
    let cutWait: { ms: number; leftMs: number; attempt: number } | null = null;
    for (;;) {
      outcome.attempts += 1;
      emit({ type: "task-started", index, name: task.name, attempt: outcome.attempts, limits });
      const attemptStart = performance.now();
      outcome.lastAttemptStartTime = new Date();
      const attemptId = `${runId}.${index}.${outcome.attempts}`;
      const oomBefore = oom?.read() ?? null;
      result = await runAttempt({
        taskName: task.name,
        run: task.run,
        ...(shell ? { shell } : {}),
        command: containment.command,
        env: {
          ...(container !== null ? containerEnv(agents, container, baseEnv) : baseEnv),
          // A valueFrom env is set by the kubelet (or --secret/--config-map): the plan has its name only.
          ...Object.fromEntries(task.env.flatMap((v) => (v.valueFrom ? [] : [[v.name, v.value]]))),
          ...phase.env,
        },
        // In a task container a relative workingDir is the container's (its agent's working
        // directory, /workspace), not the runner's.
        cwd: container !== null ? task.workingDir : task.workingDir ? resolve(task.workingDir) : undefined,
        attemptId,
        runCookie,
        runStartedFrom: firstStart,
        cancelFileOf,
        deadline: attemptDeadline(attemptStart, limits, phase.boundAt, phase.ceiling),
        stallMs: limits.stall.ms,
        killGraceMs: options.limits.killGrace.ms,
        drainWindowMs: options.drainWindowMs ?? DEFAULT_DRAIN_WINDOW_MS,
        sink: options.sink,
        recycleOutput: options.recycleOutput,
        prefix: options.prefixOutput === false ? "" : `[${task.name}] `,
        tailBytes: options.tailBytes ?? DEFAULT_TAIL_BYTES,
        mask,
        cancelSignal: phase.cancelSignal,
        hurrySignal: phase.hurrySignal,
        onStop: (stop) => emit({ type: "task-stopping", index, name: task.name, stop }),
        processTable: table,
        ...(launcher ? { launcher } : {}),
      });
      const oomAfter = oom?.read() ?? null;
      if (oom && oomBefore !== null && oomAfter !== null && oomAfter > oomBefore) {
        result.outOfMemory = `the kernel's OOM killer ended ${oomAfter - oomBefore} process(es) ${oom.scope} during the attempt`;
      }
      if (result.startedFrom > 0) firstStart = Math.min(firstStart, result.startedFrom);
      if (result.pipes) openPipes.push(result.pipes);
      if (result.droppedBytes) {
        const drop = { index, name: task.name, bytes: result.droppedBytes, told: result.droppedBytes() };
        drops.push(drop);
        if (drop.told > 0) {
          emit({ type: "output-dropped", index, name: task.name, bytes: drop.told, when: "stop" });
        }
      }
      // A lost container is an ordinary failure: retries apply (a retry in a container that is
      // gone fails at once).
      const failedOrdinarily = (result.kind === "exited" && result.exitCode !== 0) || result.kind === "lost";
      if (!failedOrdinarily || outcome.attempts > limits.retries) break;
      // A retry is a new start: not after a cancellation or past the ceiling.
      stoppedBeforeRetry = stopBeforeStart(phase);
      if (stoppedBeforeRetry) break;
      // The wait is not the attempt's: the task's timeout counts each attempt from its own start,
      // while the ceiling counts it all. A wait the ceiling would cut ends the task now: no retry
      // could start after it.
      const delayMs = retryWaitMs(limits.retryWaits ?? DEFAULT_RETRY_WAITS, outcome.attempts, options.random);
      const leftMs = phase.boundAt - performance.now();
      cutWait = { ms: delayMs, leftMs: Math.max(0, leftMs), attempt: outcome.attempts + 1 };
      if (delayMs >= leftMs) {
        stoppedBeforeRetry = phase.ceiling;
        break;
      }
      emit({
        type: "task-retrying",
        index,
        name: task.name,
        attempt: outcome.attempts + 1,
        attempts: limits.retries + 1,
        exitCode: result.exitCode,
        signal: result.signal,
        delayMs,
      });
      if (delayMs > 0) await waitUnlessCancelled(delayMs, phase.cancelSignal);
      stoppedBeforeRetry = stopBeforeStart(phase);
      if (stoppedBeforeRetry) break;
      cutWait = null;
    }
    runClean = result.runClean === true;
    sharedGraceEndsAt = result.graceEndsAt;
    let settled = settleTask(outcome, result);
    if (stoppedBeforeRetry) {
      outcome.detail = undefined;
      settled = markStopped(outcome, stoppedBeforeRetry);
      if (cutWait) outcome.detail = describeCutWait(cutWait, stoppedBeforeRetry, limits.retries + 1);
    }
    emit({ type: "task-finished", index, outcome });
    return settled;
  };

  try {
    const main: TaskPhaseRules = {
      list: "tasks",
      first: 0,
      limits: options.limits.tasks,
      outcomes,
      boundAt: ceilingAt,
      ceiling: "RunCeiling",
      cancelSignal: options.cancelSignal,
      hurrySignal: options.hurrySignal,
      env: {},
    };
    for (const [index, task] of options.tasks.entries()) {
      const settled = await runTask(task, index, main);
      if (settled === "Succeeded") continue;
      const outcome = outcomes[index] as TaskOutcome;
      reason =
        settled === "TimedOut"
          ? ((outcome.limit as RunnerReason | undefined) ?? "RunCeiling")
          : settled === "Cancelled"
            ? "Cancelled"
            : "TaskFailed";
      break;
    }
    // The finally tasks: once a main task started (a run cancelled before its first has nothing
    // to clean up), after what the main tasks left is gone, under a ceiling of their own.
    if (finallyTasks.length > 0 && outcomes.some((outcome) => outcome.attempts > 0)) {
      const swept =
        runClean && containment.members().length === 0
          ? { found: 0, ended: 0, warnings: [] }
          : await sweepLeftovers(sweepOf(reason), containment, false);
      if (swept.found > 0) emit({ type: "leftovers-swept", ...swept });
      sharedGraceEndsAt = undefined;
      hurryNow = finallyHurry;
      const ending = outcomes.find((outcome) => outcome.phase !== "Succeeded" && outcome.phase !== "Pending");
      emit({
        type: "finally-started",
        count: finallyTasks.length,
        outcome: reason,
        ...(ending ? { endingTask: ending.name } : {}),
        finallyCeiling: options.limits.finallyCeiling,
      });
      const rules: TaskPhaseRules = {
        list: "finally",
        first: options.tasks.length,
        limits: options.limits.finally,
        outcomes: finallyOutcomes,
        boundAt: performance.now() + options.limits.finallyCeiling.ms,
        ceiling: "FinallyCeiling",
        cancelSignal: options.finallyCancelSignal,
        hurrySignal: finallyHurry,
        env: { [OUTCOME_ENV_VAR]: reason, [FAILED_TASK_ENV_VAR]: ending?.name ?? "" },
      };
      let finallyEnded: TaskPhase | null = null;
      for (const [offset, task] of finallyTasks.entries()) {
        const settled = await runTask(task, options.tasks.length + offset, rules);
        // Each cleanup runs whatever the one before did; only their ceiling or a cancel ends them.
        const outcome = finallyOutcomes[offset] as TaskOutcome;
        if (settled !== "Succeeded" && settled !== "Skipped") finallyEnded ??= settled;
        if (settled === "Cancelled") break;
        if (settled === "Skipped" || outcome.limit === "FinallyCeiling") {
          for (const rest of finallyOutcomes.slice(offset + 1)) {
            markWindowPassed(rest, options.limits.finallyCeiling);
          }
          break;
        }
      }
      // They decide the reason only of a run whose main tasks succeeded.
      if (reason === "Succeeded" && finallyEnded !== null) {
        reason = finallyEnded === "Cancelled" ? "Cancelled" : "TaskFailed";
      }
    }
  } finally {
    // When a live task was stopped, the leftovers had their cancel file and SIGTERM with its group
    // and share its grace: a second grace here could outlast the pod's termination grace period.
    // Otherwise (the run is over, or was stopped between tasks) they get the whole grace now.
    const swept =
      runClean && containment.members().length === 0
        ? { found: 0, ended: 0, warnings: [] }
        : await sweepLeftovers(sweepOf(reason), containment);
    if (swept.found > 0) emit({ type: "leftovers-swept", ...swept });
    // The containment's own (a cgroup's anchor) go too, and with them the cgroup.
    if (!(await containment.killAll(performance.now() + 5000))) {
      const what = containment.unconfirmed?.();
      left = `processes of the run may still be running: the ${containment.kind === "agents" ? "agents' fence" : `${containment.kind} kill`} did not confirm their end${what ? ` (${what})` : ""}`;
    }
    await containment.close();
    // Everything that could hold a pipe is dead now: what it queued comes out before the report.
    await drainPipes(openPipes, hurryNow);
    for (const drop of drops) {
      const more = drop.bytes() - drop.told;
      if (more > 0)
        emit({ type: "output-dropped", index: drop.index, name: drop.name, bytes: more, when: "end" });
    }
    rmSync(scratch, { recursive: true, force: true });
  }

  for (const outcome of [...outcomes, ...finallyOutcomes]) {
    if (outcome.phase === "Pending") outcome.phase = "Skipped";
  }
  const phase = reason === "Succeeded" ? "Succeeded" : reason === "Cancelled" ? "Cancelled" : "Failed";
  return {
    phase,
    reason,
    startTime: runStart,
    completionTime: new Date(),
    tasks: outcomes,
    ...(finallyTasks.length > 0 ? { finally: finallyOutcomes } : {}),
    containment: containment.kind,
    ...(left !== undefined ? { left } : {}),
  };
}

/**
 * How the tasks of one phase (the main tasks, or the finally tasks) run: the two differ only in
 * their list, their ceiling and their cancel.
 */
interface TaskPhaseRules {
  list: "tasks" | "finally";
  /** the run-wide index (events, containers) of the phase's first task */
  first: number;
  limits: readonly TaskLimits[];
  outcomes: readonly TaskOutcome[];
  /** performance.now() past which no task of the phase may run: its ceiling */
  boundAt: number;
  ceiling: "RunCeiling" | "FinallyCeiling";
  cancelSignal: AbortSignal | undefined;
  /** cuts the grace of the phase's live task */
  hurrySignal: AbortSignal | undefined;
  /** what the phase tells its tasks (PLAYBOOK_OUTCOME for the finally tasks) */
  env: Record<string, string>;
}

/** A cancellation or the phase's passed ceiling that forbids starting another attempt. */
function stopBeforeStart(phase: TaskPhaseRules): StopBeforeStart | null {
  if (phase.cancelSignal?.aborted) return "Cancelled";
  return performance.now() >= phase.boundAt ? phase.ceiling : null;
}

/**
 * Deadline of an attempt = min(attempt start + task timeout, run start + ceiling); of a finally
 * task's, min(attempt start + task timeout, finally start + finallyCeiling).
 */
export function attemptDeadline(
  attemptStart: number,
  limits: TaskLimits,
  ceilingAt: number,
  ceiling: "RunCeiling" | "FinallyCeiling" = "RunCeiling",
): AttemptDeadline {
  if (limits.timeout) {
    const timeoutAt = attemptStart + limits.timeout.ms;
    if (timeoutAt <= ceilingAt) return { at: timeoutAt, limit: "TaskTimeout" };
  }
  return { at: ceilingAt, limit: ceiling };
}

/** Waits `ms`, or until the cancel comes. */
async function waitUnlessCancelled(ms: number, cancel: AbortSignal | undefined): Promise<void> {
  if (cancel?.aborted) return;
  try {
    await sleep(ms, undefined, cancel ? { signal: cancel } : {});
  } catch {
    // aborted: the caller sees the cancel
  }
}

/** What a stop between two attempts cut short: the task's wait to retry. */
function describeCutWait(
  cut: { ms: number; leftMs: number; attempt: number },
  stop: StopBeforeStart,
  attempts: number,
): string {
  const retry = `to retry (attempt ${cut.attempt}/${attempts})`;
  return stop === "Cancelled"
    ? `it was waiting ${showWait(cut.ms)} ${retry}`
    : `its wait of ${showWait(cut.ms)} ${retry} would have outlasted it (${showWait(cut.leftMs)} was left)`;
}
