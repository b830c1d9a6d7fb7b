// What a finished run tells besides its status: its metrics (duration, limit fired, how much of
// each limit it used) and the events that close its story.
import { formatDuration } from "../../api/duration.js";
import type { ResolvedLimits } from "../../api/limits.js";
import type { PlaybookStatus, TaskStatus } from "../../api/playbook.js";
import { isLimitReason, type TerminalReason } from "../../api/reasons.js";
import type { RecordedEvent } from "../../runtime/events.js";
import type { DistrustWhy } from "./report-trust.js";

/** How much of an effective limit a run or task used, for the near-miss histogram. */
export interface LimitUsage {
  limit: "TaskTimeout" | "RunCeiling";
  ratio: number;
  /** the task, for a TaskTimeout ratio */
  task?: string;
}

/** What a finished run contributes to the metrics, counted when its terminal status is written. */
export interface FinishedRun {
  reason: TerminalReason;
  limit?: string;
  durationSeconds: number;
  tasks: { name: string; phase: string; durationSeconds: number }[];
  /** Duration over the effective limit, for tasks and runs that ended before their limit fired. */
  usage: LimitUsage[];
  /** The fields the namespace's policy refused, when it refused the run. */
  policyRefusals?: string[];
  /** Why the last pod's termination message was not trusted as its runner's report, when it was not. */
  distrust?: DistrustWhy;
  /** What each task that ran cost, as the runner's report measured it (none when no report decided). */
  taskResources: TaskResources[];
}

/** A finished task's figures from the report: CPU seconds (user + system) and peak resident memory. */
export interface TaskResources {
  cpuSeconds?: number;
  peakMemoryBytes?: number;
}

/**
 * The tasks whose rows the runner's trusted report gave, the finally tasks' too: a row its progress
 * gave (marked `verified: false`) is no outcome, and its times and figures are never counted.
 */
function reportedTasks(status: PlaybookStatus): TaskStatus[] {
  return [...(status.tasks ?? []), ...(status.finally ?? [])].filter((task) => task.verified !== false);
}

/**
 * When the main tasks ended, the end the run's ceiling bounds: the finally tasks' time after it is
 * not taken from the ceiling. The run's completion for a run without finally rows, or whose main
 * tasks' rows give no times.
 */
function mainTasksEnd(status: PlaybookStatus): string | undefined {
  if (!status.finally?.length) return status.completionTime;
  const ends = (status.tasks ?? [])
    .filter((task) => task.verified !== false && task.completionTime)
    .map((task) => Date.parse(task.completionTime ?? ""));
  return ends.length > 0 ? new Date(Math.max(...ends)).toISOString() : status.completionTime;
}

/** The figures of the report's tasks that have any; a live progress record's never count. */
function taskResources(status: PlaybookStatus): TaskResources[] {
  const figures: TaskResources[] = [];
  for (const task of reportedTasks(status)) {
    if (task.cpuSeconds === undefined && task.peakMemoryBytes === undefined) continue;
    figures.push({
      ...(task.cpuSeconds !== undefined ? { cpuSeconds: task.cpuSeconds } : {}),
      ...(task.peakMemoryBytes !== undefined ? { peakMemoryBytes: task.peakMemoryBytes } : {}),
    });
  }
  return figures;
}

function durationMs(start: string | undefined, end: string | undefined): number | undefined {
  if (!start || !end) return undefined;
  return Math.max(0, Date.parse(end) - Date.parse(start));
}

function durationSeconds(start: string | undefined, end: string | undefined): number {
  return (durationMs(start, end) ?? 0) / 1000;
}

/**
 * Each task that ended on its own (Succeeded or Failed) against its timeout, and the run against
 * its ceiling unless the ceiling is what ended it: a limit that fired used all of it by
 * definition and is counted by playbook_limit_fired_total instead.
 */
function limitUsage(
  status: PlaybookStatus,
  reason: TerminalReason,
  limits: ResolvedLimits | null,
): LimitUsage[] {
  if (!limits) return [];
  const usage: LimitUsage[] = [];
  for (const task of reportedTasks(status)) {
    if (task.phase !== "Succeeded" && task.phase !== "Failed") continue;
    const timeout = [...limits.tasks, ...limits.finally].find((t) => t.name === task.name)?.timeout;
    const took = durationMs(task.startTime, task.completionTime);
    if (!timeout || timeout.ms <= 0 || took === undefined) continue;
    // The timeout bounds each attempt: a retried task's span is held against all its attempts.
    usage.push({
      limit: "TaskTimeout",
      ratio: took / (timeout.ms * Math.max(1, task.attempts)),
      task: task.name,
    });
  }
  const took = durationMs(status.startTime, mainTasksEnd(status));
  // A pod that never started ends StartTimeout also when the ceiling came first: then it used all of it.
  const ceilingFired =
    reason === "RunCeiling" ||
    reason === "PodDeadlineExceeded" ||
    (reason === "StartTimeout" && took !== undefined && took >= limits.ceiling.ms);
  if (!ceilingFired && took !== undefined && limits.ceiling.ms > 0) {
    usage.push({ limit: "RunCeiling", ratio: took / limits.ceiling.ms });
  }
  return usage;
}

export function finishedRun(
  status: PlaybookStatus,
  reason: TerminalReason,
  limits: ResolvedLimits | null,
  fromReport = false,
): FinishedRun {
  const run: FinishedRun = {
    reason,
    durationSeconds: durationSeconds(status.startTime, status.completionTime),
    tasks: reportedTasks(status)
      .filter((task) => task.startTime && task.completionTime)
      .map((task) => ({
        name: task.name,
        phase: task.phase,
        durationSeconds: durationSeconds(task.startTime, task.completionTime),
      })),
    usage: limitUsage(status, reason, limits),
    taskResources: fromReport ? taskResources(status) : [],
  };
  if (isLimitReason(reason)) run.limit = reason;
  return run;
}

export function finishEvents(
  status: PlaybookStatus,
  reason: TerminalReason,
  limits: ResolvedLimits | null,
): RecordedEvent[] {
  const condition = status.conditions?.find((c) => c.type === "Succeeded");
  const message = condition?.message ?? reason;
  const events: RecordedEvent[] = [];
  if (isLimitReason(reason)) {
    events.push({
      type: "Warning",
      reason: "LimitFired",
      message: `${reason} fired: ${describeFiredLimit(status, reason, limits)}`,
    });
  }
  // A cancel is what someone asked for, not a failure.
  const normal = reason === "Succeeded" || reason === "Cancelled";
  events.push({
    type: normal ? "Normal" : "Warning",
    reason: reason === "Succeeded" ? "RunSucceeded" : reason === "Cancelled" ? "RunCancelled" : "RunFailed",
    message: `Run finished with reason ${reason}: ${message}`,
  });
  return events;
}

/** "limit 10m from task (spec.tasks[0].timeout)" for the limit that ended the run. */
function describeFiredLimit(status: PlaybookStatus, reason: string, limits: ResolvedLimits | null): string {
  const task = status.tasks?.find((t) => t.limit === reason);
  const condition = status.conditions?.find((c) => c.type === "Succeeded");
  if (reason === "StartTimeout" && limits) {
    const limit = limits.startTimeout;
    return `start timeout ${formatDuration(limit.ms)} (source ${limit.source}, ${limit.field}): ${condition?.message ?? ""}`;
  }
  if (reason === "QueueTimeout" && limits?.queueTimeout) {
    const limit = limits.queueTimeout;
    return `queue timeout ${formatDuration(limit.ms)} (source ${limit.source}, ${limit.field}): ${condition?.message ?? ""}`;
  }
  if (task?.limitValue && task.limitSource) {
    return `limit ${task.limitValue} (source ${task.limitSource}) on task ${task.name}: ${condition?.message ?? ""}`;
  }
  if (limits) {
    return `ceiling ${formatDuration(limits.ceiling.ms)} (source ${limits.ceiling.source}, ${limits.ceiling.field}): ${condition?.message ?? ""}`;
  }
  return condition?.message ?? reason;
}
