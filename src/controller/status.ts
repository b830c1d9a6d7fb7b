// The statuses a reconcile pass can settle on, each built from the previous status so that
// conditions keep their lastTransitionTime and observedGeneration is always set.
import { LIMIT_EXCEEDED, SUCCEEDED, setCondition, setFinishedConditions } from "../api/conditions.js";
import { formatDuration } from "../api/duration.js";
import { describeRunLimits, type ResolvedLimits } from "../api/limits.js";
import type { PlaybookStatus, TaskStatus } from "../api/playbook.js";
import type { RunPhase, TerminalReason } from "../api/reasons.js";
import { decidingIndex, type RunnerReport } from "../api/report.js";
import type { ReportContext } from "../api/report-expand.js";
import { statusFromReport } from "../api/report-status.js";
import { DEADLINE_MARGIN_SECONDS, describeFinallyWindow } from "./pods/pod-builder.js";

export { LIMIT_EXCEEDED, SUCCEEDED };

/** A run whose Succeeded condition is True or False is finished; its status is never rewritten. */
export function isFinished(status: PlaybookStatus | undefined): boolean {
  const condition = status?.conditions?.find((c) => c.type === SUCCEEDED);
  return condition !== undefined && condition.status !== "Unknown";
}

export interface StatusBase {
  previous: PlaybookStatus;
  generation: number | undefined;
  now: Date;
  limits: ResolvedLimits | null;
}

function withGeneration(status: PlaybookStatus, generation: number | undefined): PlaybookStatus {
  return generation === undefined ? status : { ...status, observedGeneration: generation };
}

/** Pending or Running: the run has not finished. */
export function progressStatus(
  base: StatusBase,
  progress: {
    phase: "Pending" | "Running";
    message: string;
    startTime: string;
    podName: string;
    podAttempts: number;
  },
): PlaybookStatus {
  const conditions = setCondition(
    base.previous.conditions ?? [],
    { type: SUCCEEDED, status: "Unknown", reason: progress.phase, message: progress.message },
    base.now,
    base.generation,
  );
  // queuedSince is said only while Kueue holds the pod (kueue-hold.ts): past its admission it goes.
  const { queuedSince: _admitted, ...previous } = base.previous;
  const status: PlaybookStatus = {
    ...previous,
    phase: progress.phase,
    startTime: progress.startTime,
    podName: progress.podName,
    podAttempts: progress.podAttempts,
    conditions,
  };
  if (base.limits) status.limits = describeRunLimits(base.limits);
  return withGeneration(status, base.generation);
}

/**
 * The Pending status of a run whose pod the API server would not create: the attempt is not
 * counted (no pod exists) and the Succeeded condition carries the server's reason.
 */
export function createFailedStatus(
  previous: PlaybookStatus,
  pending: PlaybookStatus,
  message: string,
  now: Date,
): PlaybookStatus {
  const generation = pending.observedGeneration;
  const conditions = setCondition(
    pending.conditions ?? [],
    { type: SUCCEEDED, status: "Unknown", reason: "Pending", message },
    now,
    generation,
  );
  const { podName: _podName, podAttempts: _podAttempts, ...rest } = pending;
  const status: PlaybookStatus = { ...rest, phase: "Pending", conditions };
  if (previous.podName !== undefined) status.podName = previous.podName;
  if (previous.podAttempts !== undefined) status.podAttempts = previous.podAttempts;
  return status;
}

/**
 * The task that ended the run: the last one that ran, unless every task succeeded; then the first
 * finally task that did not succeed (it failed the run), if one did not.
 */
export function endingTask(
  tasks: readonly TaskStatus[] | undefined,
  finallyTasks: readonly TaskStatus[] = [],
): string | undefined {
  const task = tasks?.[decidingIndex(tasks.map((t) => t.phase))];
  if (task && task.phase !== "Succeeded") return task.name;
  if (!tasks?.length) return undefined;
  return finallyTasks.find((t) => t.phase !== "Succeeded" && t.phase !== "Skipped")?.name;
}

/** A finished run the runner reported on. */
export function runStatusFromReport(
  base: StatusBase & { limits: ResolvedLimits },
  report: RunnerReport,
  run: { startTime: string; podName: string; podAttempts: number },
  context: ReportContext = {},
): PlaybookStatus {
  const settled = statusFromReport(
    report,
    base.limits,
    base.now,
    base.previous.conditions ?? [],
    base.generation,
    context,
  );
  // The live progress's current task ends with the run; its tasks give way to the report's.
  const { currentTask: _current, queuedSince: _queued, ...previous } = base.previous;
  const status: PlaybookStatus = {
    ...previous,
    ...settled,
    startTime: run.startTime,
    podName: run.podName,
    podAttempts: run.podAttempts,
  };
  const ending = endingTask(settled.tasks, settled.finally);
  if (ending) status.endingTask = ending;
  return withGeneration(status, base.generation);
}

/** A finished run the controller settles itself: the runner could not say (or never ran). */
export function settledStatus(
  base: StatusBase,
  outcome: {
    reason: Exclude<TerminalReason, "Succeeded">;
    message: string;
    phase?: RunPhase;
    tasks?: TaskStatus[];
    /** spec.finally's rows of the trusted report the kubelet's deadline overtook, with `tasks`. */
    finally?: TaskStatus[];
  },
): PlaybookStatus {
  const conditions = setFinishedConditions(
    base.previous.conditions ?? [],
    { reason: outcome.reason, message: outcome.message },
    base.now,
    base.generation,
  );
  const { currentTask: _current, queuedSince: _queued, ...previous } = base.previous;
  const status: PlaybookStatus = {
    ...previous,
    phase: outcome.phase ?? (outcome.reason === "Cancelled" ? "Cancelled" : "Failed"),
    completionTime: base.now.toISOString(),
    conditions,
  };
  // The tasks a running run shows are the runner's progress, never an outcome: without a report
  // (outcome.tasks: a trusted one the kubelet's deadline overtook) none of them is kept as said.
  const fromProgress = outcome.tasks === undefined;
  const known = outcome.tasks ?? previous.tasks ?? [];
  const reported = (task: TaskStatus) => !fromProgress && task.verified !== false;
  const tasks = known.map((task) => (reported(task) ? unfinishedTask(task) : unreportedTask(task)));
  if (tasks.length > 0) status.tasks = tasks;
  const finallyTasks = outcome.finally
    ? outcome.finally.map(unfinishedTask)
    : tasks.length > 0
      ? (base.limits?.finally ?? []).map((task) => unreportedFinallyTask(task.name))
      : [];
  if (finallyTasks.length > 0) status.finally = finallyTasks;
  // Only a task the report says ended on its own can be named as the one that ended the run.
  const ending = endingTask(
    known.filter((task) => reported(task) && task.phase !== "Pending" && task.phase !== "Running"),
  );
  if (ending) status.endingTask = ending;
  if (base.limits) status.limits = describeRunLimits(base.limits);
  return withGeneration(status, base.generation);
}

/** A report's task that had not finished when the run was stopped from outside the runner. */
function unfinishedTask(task: TaskStatus): TaskStatus {
  return task.phase === "Pending" || task.phase === "Running"
    ? { ...task, phase: "Cancelled", message: "the run was stopped" }
    : task;
}

/**
 * A finally task once the run ended without the runner's report: progress follows the main tasks
 * only, so whether it ran is not known. Shown as a main task the progress showed started is
 * (Cancelled, marked unverified), with no attempt counted, as nothing says one was made.
 */
function unreportedFinallyTask(name: string): TaskStatus {
  return {
    name,
    phase: "Cancelled",
    attempts: 0,
    message:
      "not reported: the run ended without the runner's report, and progress does not follow finally tasks, so whether this one ran is not known",
    verified: false,
  };
}

/**
 * A task as the runner's progress last showed it, once the run ended without the runner's report:
 * one it showed waiting was never run; one it showed started is Cancelled (the run was stopped
 * from outside its runner, as a report's unfinished task is), with the phase, times, exit and
 * figures the progress gave cleared (they were never reported) and its row still marked.
 */
function unreportedTask(task: TaskStatus): TaskStatus {
  const kept = { name: task.name, ...(task.image !== undefined ? { image: task.image } : {}) };
  if (task.phase === "Pending" || task.phase === "Skipped") {
    return { ...kept, phase: "Cancelled", attempts: 0, message: "the run was stopped" };
  }
  const shown = task.phase === "Running" ? "running" : "ended";
  return {
    ...kept,
    phase: "Cancelled",
    attempts: task.attempts,
    message: `not reported: the run ended without the runner's report, and its progress, which showed this task ${shown}, is not an outcome`,
    verified: false,
  };
}

/**
 * "250s (what is left of the ceiling 3m (spec.ceiling) + killGrace 5s (spec.killGrace) +
 * finallyCeiling 1m (spec.finallyCeiling) + killGrace 5s (spec.killGrace) + margin 5s)": each part
 * of the pod's whole life and where it is set.
 */
export function describeDeadline(limits: ResolvedLimits, seconds: number): string {
  const at = (limit: { ms: number; field: string }) => `${formatDuration(limit.ms)} (${limit.field})`;
  const grace = `killGrace ${at(limits.killGrace)}`;
  const window = limits.finally.length > 0 ? ` + finallyCeiling ${at(limits.finallyCeiling)} + ${grace}` : "";
  return `${seconds}s (what is left of the ceiling ${at(limits.ceiling)} + ${grace}${window} + margin ${DEADLINE_MARGIN_SECONDS}s)`;
}

/** What the pod's activeDeadlineSeconds covers, in words: "the run's 15s ceiling (spec.ceiling) plus killGrace and a margin". */
export function describeBackstop(limits: ResolvedLimits): string {
  return `the run's ${formatDuration(limits.ceiling.ms)} ceiling (${limits.ceiling.field}) plus killGrace${describeFinallyWindow(limits)} and a margin`;
}

/** Stable comparison of two statuses, so a pass that changes nothing writes nothing. */
export function sameStatus(a: PlaybookStatus | undefined, b: PlaybookStatus | undefined): boolean {
  return stableJson(a ?? {}) === stableJson(b ?? {});
}

function stableJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v && typeof v === "object" && !Array.isArray(v)) {
      return Object.fromEntries(
        Object.entries(v as Record<string, unknown>)
          .filter(([, inner]) => inner !== undefined)
          .sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)),
      );
    }
    return v;
  });
}
