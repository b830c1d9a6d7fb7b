// Expands a runner report into status tasks and the condition message: the reading side of report.ts, kept apart.
import { formatDuration } from "./duration.js";
import type { EffectiveLimit, ResolvedLimits } from "./limits.js";
import type { TaskStatus } from "./playbook.js";
import type { TaskLimit } from "./reasons.js";
import { decidingIndex, type ReportTask, type RunnerReason, type RunnerReport } from "./report.js";
import { escapeControls } from "./visible-text.js";

/** Which list a report row belongs to: its limits and its skip reason differ. */
type TaskList = "tasks" | "finally";

function limitOf(
  limits: ResolvedLimits,
  index: number,
  limit: TaskLimit,
  list: TaskList = "tasks",
): EffectiveLimit {
  const task = (list === "tasks" ? limits.tasks : limits.finally)[index];
  if (limit === "TaskTimeout" && task?.timeout) return task.timeout;
  if (limit === "StallLimit" && task) return task.stall;
  if (limit === "FinallyCeiling" || list === "finally") return limits.finallyCeiling;
  return limits.ceiling;
}

/** The standard sentence for a limit, e.g. "exceeded its 10m timeout (spec.tasks[0].timeout)". */
export function describeLimit(limit: TaskLimit, effective: EffectiveLimit): string {
  const value = formatDuration(effective.ms);
  switch (limit) {
    case "TaskTimeout":
      return `exceeded its ${value} timeout (${effective.field})`;
    case "StallLimit":
      return `printed nothing for ${value}, its stall limit (${effective.field})`;
    case "RunCeiling":
      return `was stopped by the run's ${value} ceiling (${effective.field})`;
    case "FinallyCeiling":
      return `was stopped by the ${value} finally ceiling (${effective.field})`;
  }
}

function describeEnding(task: ReportTask, killGrace: EffectiveLimit): string {
  const grace = formatDuration(killGrace.ms);
  if (task.e === "Exited") return `; process group stopped within the ${grace} grace`;
  if (task.e === "Killed" && task.g !== undefined && killGrace.ms > 0) {
    // A later interrupt (Ctrl-C) ended the grace before its time.
    const when = task.g < 1000 ? "at once" : `after ${formatDuration(Math.floor(task.g / 100) * 100)}`;
    return `; process group killed ${when}: another interrupt cut its ${grace} grace short`;
  }
  if (task.e === "Killed")
    return killGrace.ms === 0
      ? "; process group killed at once"
      : `; process group killed after ${grace} grace`;
  return "";
}

/** What the controller (or a local run) knows beyond the report: the tasks' images, their containers' ends. */
export interface ReportContext {
  /** Per task (by index), the image it ran in. */
  images?: readonly (string | undefined)[];
  /** Per finally task (by index), the image it ran in. */
  finallyImages?: readonly (string | undefined)[];
  /** A lost task container in words: "container task-1 (image postgres:16) was OOMKilled (exit 137)". */
  describeContainer?: (container: string) => string;
}

/** The form quoteLastLine (report.ts) gives a failed task's last line. */
const QUOTED_LAST_LINE = /^std(?:out|err): "/;

function describeTask(
  task: ReportTask,
  index: number,
  limits: ResolvedLimits,
  context: ReportContext,
  list: TaskList,
): string | undefined {
  const detail = task.m ? `: ${task.m}` : "";
  if (task.p === "Failed" && task.k) {
    return context.describeContainer?.(task.k) ?? `container ${task.k} ended${detail}`;
  }
  switch (task.p) {
    case "TimedOut": {
      const limit = task.l ?? (list === "finally" ? "FinallyCeiling" : "RunCeiling");
      return `${describeLimit(limit, limitOf(limits, index, limit, list))}${describeEnding(task, limits.killGrace)}${detail}`;
    }
    case "Failed": {
      // Neither an exit code nor a signal: it never started, and its message says why.
      if (task.x === undefined && !task.sig && task.m) return task.m;
      const how = task.sig ? `was killed by ${task.sig}` : `exited with code ${task.x ?? "unknown"}`;
      const tries = (task.a ?? 1) > 1 ? ` after ${task.a} attempts` : "";
      if (task.m && QUOTED_LAST_LINE.test(task.m)) return `${how}${tries} (${task.m})`;
      return `${how}${tries}${detail}`;
    }
    case "Cancelled":
      return `was cancelled${describeEnding(task, limits.killGrace)}${detail}`;
    case "Skipped":
      // A finally task the finally window left no time for says so (the runner's words).
      if (task.m) return task.m;
      return list === "finally"
        ? "not run: the finally tasks were stopped (their ceiling passed, or a cancel ended them)"
        : "not run: an earlier task ended the run";
    default:
      return task.m;
  }
}

/** What the status says of a task that names an image and ran on the host. */
export const ON_HOST_NOTE = "ran on the host, not in its image (playbook run --on-host)";

export interface ExpandedReport {
  tasks: TaskStatus[];
  /** spec.finally's tasks; absent for a run without them */
  finally?: TaskStatus[];
  reason: RunnerReason;
  /** The Succeeded condition's message, e.g. "task build exceeded its 10m timeout (spec.tasks[0].timeout)". */
  message: string;
  startTime: string;
  completionTime: string;
  /** what the runner could not confirm ended (it is in the message too) */
  left?: string;
}

/** Expands a report into docs/design.md's status.tasks and the condition message, using the plan's limits. */
export function expandReport(
  report: RunnerReport,
  limits: ResolvedLimits,
  context: ReportContext = {},
): ExpandedReport {
  const start = Date.parse(report.start);
  const row =
    (list: TaskList) =>
    (task: ReportTask, index: number): TaskStatus => {
      const ran = task.p !== "Skipped" && task.p !== "Pending";
      const named = list === "tasks" ? limits.tasks[index] : limits.finally[index];
      const status: TaskStatus = {
        name: named?.name ?? `${list === "tasks" ? "task" : "finally"}-${index}`,
        phase: task.p,
        attempts: task.a ?? (ran ? 1 : 0),
      };
      const image = (list === "tasks" ? context.images : context.finallyImages)?.[index];
      if (image !== undefined) status.image = image;
      if (task.l) {
        const effective = limitOf(limits, index, task.l, list);
        status.limit = task.l;
        status.limitValue = formatDuration(effective.ms);
        status.limitSource = effective.source;
      }
      if (task.e) status.ending = task.e;
      if (ran) {
        status.exitCode = task.x ?? (task.p === "Succeeded" ? 0 : null);
        status.signal = task.sig ?? null;
      }
      if (task.t) {
        status.startTime = new Date(start + task.t[0]).toISOString();
        status.completionTime = new Date(start + task.t[1]).toISOString();
      }
      if (task.la !== undefined) status.lastAttemptStartTime = new Date(start + task.la).toISOString();
      if (task.cpu !== undefined) status.cpuSeconds = task.cpu / 1000;
      if (task.mem !== undefined) status.peakMemoryBytes = task.mem * 1024;
      if (task.ls !== undefined) status.longestSilence = formatDuration(task.ls);
      const described = describeTask(task, index, limits, context, list);
      const message = task.h ? `${described ? `${described}; ` : ""}${ON_HOST_NOTE}` : described;
      // A report's messages carry no control character (toReportTask); what the context adds (a
      // kubelet's message) or an older runner's report might: none reaches the status as it is.
      if (message) status.message = escapeControls(message);
      return status;
    };
  const tasks = report.tasks.map(row("tasks"));
  const finallyTasks = report.fin?.map(row("finally"));
  const deciding = decidingIndex(report.tasks.map((task) => task.p));
  const decidingTask = tasks[deciding];
  let message: string;
  if (report.reason === "Succeeded") {
    message = tasks.length === 1 ? "the task succeeded" : `all ${tasks.length} tasks succeeded`;
  } else if (decidingTask) {
    const lost = report.tasks[deciding]?.k !== undefined && report.tasks[deciding]?.p === "Failed";
    message = `task ${decidingTask.name} ${lost ? "failed: " : ""}${decidingTask.message ?? decidingTask.phase}`;
  } else {
    message = report.reason === "Cancelled" ? "the run was cancelled before any task started" : report.reason;
  }
  message = withFinallyOutcome(message, report, finallyTasks ?? []);
  // A run that may have left processes behind is not a clean end, whatever its reason: said last.
  if (report.left) message = `${message}; ${report.left}`;
  return {
    tasks,
    ...(finallyTasks ? { finally: finallyTasks } : {}),
    reason: report.reason,
    message: escapeControls(message),
    startTime: report.start,
    completionTime: report.end,
    ...(report.left ? { left: report.left } : {}),
  };
}

/**
 * The run's message with its finally tasks' part: a finally task that did not succeed is named,
 * first when it decided the reason (the main tasks succeeded), else after the main tasks' story.
 */
function withFinallyOutcome(message: string, report: RunnerReport, finallyTasks: TaskStatus[]): string {
  const stopped = finallyTasks.filter((task) => task.phase !== "Succeeded" && task.phase !== "Skipped");
  // With none stopped, a cleanup the finally window left no time for is still told: it never ran.
  const ended =
    stopped.length > 0
      ? stopped
      : finallyTasks.filter((task, index) => task.phase === "Skipped" && report.fin?.[index]?.m);
  if (ended.length === 0) return message;
  const told = ended.map((task) => `finally task ${task.name} ${task.message ?? task.phase}`).join("; ");
  const mainSucceeded = report.tasks.every((task) => task.p === "Succeeded");
  if (!mainSucceeded) return `${message}; ${told}`;
  const main =
    report.tasks.length === 1 ? "the task succeeded" : `all ${report.tasks.length} tasks succeeded`;
  return `${told}; ${main}`;
}
