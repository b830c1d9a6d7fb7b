// The runner's report: what the pod runner writes to its termination-message file (4096 bytes at
// most, the kubelet's limit) and what the controller and `playbook run` read back with the same
// schema. Keys are short and derivable facts are left out (task names, limit values and the
// standard messages come from the plan), so that 200 tasks still fit.
import { z } from "zod";
import { MAX_FINALLY_TASKS } from "./playbook.js";
import {
  ENDINGS,
  RUN_TASK_LIMITS,
  TASK_LIMITS,
  TASK_PHASES,
  type TaskLimit,
  type TaskPhase,
  type TerminalReason,
} from "./reasons.js";
import { escapeControls } from "./visible-text.js";

export const REPORT_MAX_BYTES = 4096;
export const REPORT_VERSION = 1;

/** Ten years: far past any ceiling, and start + offset stays inside JavaScript's dates. */
const MAX_TASK_OFFSET_MS = 10 * 366 * 24 * 3_600_000;

export const RUNNER_REASONS = [
  "Succeeded",
  "TaskFailed",
  "TaskTimeout",
  "StallLimit",
  "RunCeiling",
  "Cancelled",
] as const satisfies readonly TerminalReason[];
export type RunnerReason = (typeof RUNNER_REASONS)[number];

export const ReportTaskSchema = z.strictObject({
  /** phase */
  p: z.enum(TASK_PHASES),
  /** attempts; omitted = 1 for a task that ran, 0 otherwise */
  a: z.number().int().min(0).optional(),
  /** exit code of the last attempt; omitted = 0 for Succeeded, unknown otherwise */
  x: z.number().int().optional(),
  /** signal that ended the last attempt's leader */
  sig: z.string().optional(),
  /** the limit that fired (TimedOut tasks only) */
  l: z.enum(TASK_LIMITS).optional(),
  /** how the group ended after a limit or cancellation */
  e: z.enum(ENDINGS).optional(),
  /** ms of killGrace the group had before a later interrupt cut it short (Killed only) */
  g: z.number().int().min(0).max(MAX_TASK_OFFSET_MS).optional(),
  /** [start, end] in ms after the report's start; bounded so that start + t stays a date */
  t: z
    .tuple([z.number().int().min(0).max(MAX_TASK_OFFSET_MS), z.number().int().min(0).max(MAX_TASK_OFFSET_MS)])
    .optional(),
  /** extra detail, e.g. the last line of output of a failed task */
  m: z.string().optional(),
  /** 1: it names an image but ran on the host (`playbook run --on-host`) */
  h: z.literal(1).optional(),
  /** the task container that ended under the task (OOMKilled, killed): the task failed with it */
  k: z
    .string()
    .regex(/^task-[1-9][0-9]*$/, "must be a task container's name, task-K")
    .optional(),
  /** CPU time of the last attempt, user + system, in ms (wait4's rusage of its shell and what it reaped) */
  cpu: z.number().int().min(0).optional(),
  /** peak resident memory of the last attempt in KiB (rusage's ru_maxrss: its largest process) */
  mem: z.number().int().min(0).optional(),
  /** the last attempt's longest silence in ms: the longest time between two outputs, from its start to its end */
  ls: z.number().int().min(0).max(MAX_TASK_OFFSET_MS).optional(),
  /** a retried task's last attempt's start, in ms after the report's start (t[0] is its first's) */
  la: z.number().int().min(0).max(MAX_TASK_OFFSET_MS).optional(),
});
export type ReportTask = z.infer<typeof ReportTaskSchema>;

/**
 * What held a run's processes so that nothing outlived it: a cgroup of its own ended with
 * cgroup.kill, a child subreaper that every orphan of the run is re-parented to, the agents of a
 * pod's task containers sweeping its shared process namespace, or nothing but the process group
 * kill and the environment-cookie sweep.
 */
export const CONTAINMENTS = ["cgroup", "subreaper", "agents", "none"] as const;
export type ContainmentKind = (typeof CONTAINMENTS)[number];

export const RunnerReportSchema = z.strictObject({
  v: z.literal(REPORT_VERSION),
  phase: z.enum(["Succeeded", "Failed", "Cancelled"]),
  reason: z.enum(RUNNER_REASONS),
  start: z.iso.datetime(),
  end: z.iso.datetime(),
  tasks: z.array(ReportTaskSchema),
  /** spec.finally's tasks, in order; absent for a run without them */
  fin: z.array(ReportTaskSchema).max(MAX_FINALLY_TASKS).optional(),
  /** what held the run's processes; absent when the runner did not say */
  ct: z.enum(CONTAINMENTS).optional(),
  /** processes the final kill could not confirm ended, in words: the run did not end clean */
  left: z.string().max(300).optional(),
  /** how far the encoder had to compact to fit; absent when nothing was dropped */
  c: z.number().int().min(1).optional(),
});
export type RunnerReport = z.infer<typeof RunnerReportSchema>;

/** What the runner knows of one task when the run ends. */
export interface TaskOutcome {
  name: string;
  phase: TaskPhase;
  attempts: number;
  exitCode: number | null;
  signal: string | null;
  limit?: TaskLimit;
  ending?: "Exited" | "Killed";
  /** set when a later interrupt cut the grace short: how much of it the group had, in ms */
  graceCutAfterMs?: number;
  startTime?: Date;
  /** when its last attempt started (reported for a task of more than one attempt) */
  lastAttemptStartTime?: Date;
  completionTime?: Date;
  detail?: string;
  /** it names an image but ran on the host (`playbook run --on-host`) */
  onHost?: boolean;
  /** the task container (task-K) that ended under the task, failing it (agent mode) */
  lostContainer?: string;
  /** CPU seconds (user + system) of the last attempt, where the runner could measure them */
  cpuSeconds?: number;
  /** peak resident memory of the last attempt in bytes, where the runner could measure it */
  peakMemoryBytes?: number;
  /** the last attempt's longest time in ms with no output, from its start to its end (advise's stall) */
  longestSilenceMs?: number;
}

export interface RunOutcome {
  phase: "Succeeded" | "Failed" | "Cancelled";
  reason: RunnerReason;
  startTime: Date;
  completionTime: Date;
  tasks: TaskOutcome[];
  /** spec.finally's tasks; absent for a run without them */
  finally?: TaskOutcome[];
  /** what held the run's processes (see src/pod-runner/containment.ts) */
  containment?: ContainmentKind;
  /** what the final kill could not confirm ended: the run did not end clean */
  left?: string;
}

function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  if (max <= 1) return "";
  return `${text.slice(0, max - 1)}…`;
}

/** One task of the report (a progress record shows a finished task the same way). */
export function toReportTask(task: TaskOutcome, start: number): ReportTask {
  const out: ReportTask = { p: task.phase };
  const ran = task.phase !== "Skipped" && task.phase !== "Pending";
  if (task.attempts !== (ran ? 1 : 0)) out.a = task.attempts;
  if (task.exitCode !== null && !(task.phase === "Succeeded" && task.exitCode === 0)) out.x = task.exitCode;
  if (task.signal) out.sig = task.signal;
  if (task.limit) out.l = task.limit;
  if (task.ending) out.e = task.ending;
  if (task.ending === "Killed" && task.graceCutAfterMs !== undefined) {
    out.g = Math.min(MAX_TASK_OFFSET_MS, Math.max(0, Math.round(task.graceCutAfterMs)));
  }
  if (task.startTime && task.completionTime) {
    out.t = [
      Math.max(0, task.startTime.getTime() - start),
      Math.max(0, task.completionTime.getTime() - start),
    ];
  }
  if (task.attempts > 1 && task.lastAttemptStartTime) {
    out.la = Math.min(MAX_TASK_OFFSET_MS, Math.max(0, task.lastAttemptStartTime.getTime() - start));
  }
  // A task's last line, an error with a workingDir in it: no control character of it gets into a
  // status message, a record or the runner's end line as it is.
  if (task.detail) out.m = escapeControls(task.detail);
  if (task.onHost) out.h = 1;
  if (task.lostContainer) out.k = task.lostContainer;
  if (task.cpuSeconds !== undefined) out.cpu = Math.max(0, Math.round(task.cpuSeconds * 1000));
  if (task.peakMemoryBytes !== undefined) out.mem = Math.max(0, Math.round(task.peakMemoryBytes / 1024));
  if (task.longestSilenceMs !== undefined) {
    out.ls = Math.min(MAX_TASK_OFFSET_MS, Math.max(0, Math.round(task.longestSilenceMs)));
  }
  return out;
}

/** Index of the task that decided the run's outcome (the last one that ran), or -1. */
export function decidingIndex(phases: readonly TaskPhase[]): number {
  for (let i = phases.length - 1; i >= 0; i--) {
    if (phases[i] !== "Skipped" && phases[i] !== "Pending") return i;
  }
  return -1;
}

/**
 * Encodes the outcome as compact JSON of at most 4096 bytes. Detail is given up in steps —
 * messages shortened, then other tasks' messages and times dropped, then the deciding task's
 * message shortened — before any structure is lost.
 */
export function encodeReport(outcome: RunOutcome, maxBytes = REPORT_MAX_BYTES): string {
  const start = outcome.startTime.getTime();
  const base: RunnerReport = {
    v: 1,
    phase: outcome.phase,
    reason: outcome.reason,
    start: outcome.startTime.toISOString(),
    end: outcome.completionTime.toISOString(),
    tasks: outcome.tasks.map((task) => toReportTask(task, start)),
    ...(outcome.finally ? { fin: outcome.finally.map((task) => toReportTask(task, start)) } : {}),
    ...(outcome.containment ? { ct: outcome.containment } : {}),
    ...(outcome.left ? { left: truncate(escapeControls(outcome.left), 300) } : {}),
  };
  const fits = (report: RunnerReport) => Buffer.byteLength(JSON.stringify(report)) <= maxBytes;
  if (fits(base)) return JSON.stringify(base);
  // The main tasks and the finally tasks are compacted as one list; the finally task that failed a
  // run whose main tasks succeeded is the one that decided it.
  const mainCount = base.tasks.length;
  const rows = { ...base, tasks: [...base.tasks, ...(base.fin ?? [])] };
  const split = (report: RunnerReport): RunnerReport =>
    base.fin
      ? { ...report, tasks: report.tasks.slice(0, mainCount), fin: report.tasks.slice(mainCount) }
      : report;
  const fitsSplit = (report: RunnerReport) => fits(split(report));
  const deciding = decidingRow(base);
  const steps: ((task: ReportTask, index: number) => ReportTask)[] = [
    (task) => (task.m ? { ...task, m: truncate(task.m, 120) } : task),
    (task, i) => (i === deciding ? task : { ...task, m: undefined }),
    (task, i) =>
      i === deciding
        ? task
        : { ...task, t: undefined, cpu: undefined, mem: undefined, ls: undefined, la: undefined },
  ];
  let report = rows;
  for (const [level, step] of steps.entries()) {
    report = { ...report, c: level + 1, tasks: report.tasks.map(step).map(dropUndefined) };
    if (fitsSplit(report)) return JSON.stringify(split(report));
  }
  // Then: shorten the deciding task's message until the whole report fits.
  const shortened = shortenDecidingMessage(report, deciding, steps.length + 1, fitsSplit);
  if (shortened) return JSON.stringify(split(shortened));
  // Last, rather than no report at all: other tasks' attempt counts (read back as 1). Many
  // retried tasks need this; it keeps each task's phase.
  report = {
    ...report,
    tasks: report.tasks.map((task, i) => (i === deciding ? task : dropUndefined({ ...task, a: undefined }))),
  };
  const withoutAttempts = shortenDecidingMessage(report, deciding, steps.length + 2, fitsSplit);
  if (withoutAttempts) return JSON.stringify(split(withoutAttempts));
  throw new Error(
    `the report does not fit in ${maxBytes} bytes even without messages (${outcome.tasks.length} tasks)`,
  );
}

/**
 * The row (main tasks, then finally tasks, as one list) whose message the report keeps longest:
 * the main task that ended the run, or the finally task that failed a run whose main tasks succeeded.
 */
function decidingRow(report: RunnerReport): number {
  const main = report.tasks.every((task) => task.p === "Succeeded");
  const failedFinally = (report.fin ?? []).findIndex(
    (task) => task.p !== "Succeeded" && task.p !== "Skipped",
  );
  if (main && failedFinally >= 0) return report.tasks.length + failedFinally;
  return decidingIndex(report.tasks.map((task) => task.p));
}

/** The report at compaction `level`, with the deciding task's message halved until it fits, or null. */
function shortenDecidingMessage(
  report: RunnerReport,
  deciding: number,
  level: number,
  fits: (report: RunnerReport) => boolean,
): RunnerReport | null {
  const whole: RunnerReport = { ...report, c: level };
  if (fits(whole)) return whole;
  const last = report.tasks[deciding];
  if (!last?.m) return null;
  let keep = last.m.length;
  while (keep > 0) {
    keep = Math.floor(keep / 2);
    const tasks = report.tasks.slice();
    tasks[deciding] = dropUndefined({ ...last, m: keep > 0 ? truncate(last.m, keep) : undefined });
    const candidate: RunnerReport = { ...whole, tasks };
    if (fits(candidate)) return candidate;
  }
  return null;
}

function dropUndefined(task: ReportTask): ReportTask {
  return Object.fromEntries(Object.entries(task).filter(([, v]) => v !== undefined)) as ReportTask;
}

export class InvalidReportError extends Error {}

/**
 * Parses and validates a report read from a termination message or a file. Messages complete
 * "the report is ...": the controller settles RunnerLost with them.
 */
export function decodeReport(text: string, taskCount?: number, finallyCount = 0): RunnerReport {
  const bytes = Buffer.byteLength(text);
  if (bytes > REPORT_MAX_BYTES) {
    // The runner never writes more; a kubelet would have cut it, so this is not the runner's.
    throw new InvalidReportError(
      `${bytes} bytes, more than the ${REPORT_MAX_BYTES} a termination message holds`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new InvalidReportError(`not JSON: ${truncate(escapeControls(text.trim()), 200) || "(empty)"}`);
  }
  if (json !== null && typeof json === "object" && !Array.isArray(json)) {
    const version = (json as { v?: unknown }).v;
    if (version !== REPORT_VERSION) {
      const shown = version === undefined ? "(none)" : truncate(JSON.stringify(version), 40);
      throw new InvalidReportError(
        `of report version ${shown}; this controller reads version ${REPORT_VERSION}`,
      );
    }
  }
  const parsed = RunnerReportSchema.safeParse(json);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    throw new InvalidReportError(
      `invalid: it does not match the report schema at ${first?.path.join(".") || "(root)"}: ${first?.message}`,
    );
  }
  if (taskCount !== undefined && parsed.data.tasks.length !== taskCount) {
    throw new InvalidReportError(
      `invalid: it lists ${parsed.data.tasks.length} tasks, the plan has ${taskCount}`,
    );
  }
  if (taskCount !== undefined && (parsed.data.fin?.length ?? 0) !== finallyCount) {
    throw new InvalidReportError(
      `invalid: it lists ${parsed.data.fin?.length ?? 0} finally tasks, the plan has ${finallyCount}`,
    );
  }
  const contradiction = contradictionIn(parsed.data);
  if (contradiction) throw new InvalidReportError(`self-contradictory: ${contradiction}`);
  return parsed.data;
}

const RUNNER_LIMITS: readonly string[] = RUN_TASK_LIMITS;
/** The limits a finally task may end on: its own, or the finally ceiling (never the run's). */
const FINALLY_LIMITS: readonly string[] = ["TaskTimeout", "StallLimit", "FinallyCeiling"];

/**
 * What the runner never writes: a reason its phase or its tasks do not bear out. The runner runs
 * tasks in order until the first that does not succeed, and that task's phase gives the reason;
 * then every finally task in order, which decide the reason only of a run whose main tasks all
 * succeeded (a failed or timed-out one makes it TaskFailed, a cancelled one Cancelled).
 */
function contradictionIn(report: RunnerReport): string | undefined {
  const phase = report.reason === "Succeeded" || report.reason === "Cancelled" ? report.reason : "Failed";
  if (report.phase !== phase) return `phase ${report.phase} does not go with reason ${report.reason}`;
  for (const [index, task] of report.tasks.entries()) {
    if (task.l && task.p !== "TimedOut") return `task ${index} names limit ${task.l} but is ${task.p}`;
    if (task.l && !RUNNER_LIMITS.includes(task.l)) return `task ${index} names limit ${task.l}`;
    if (task.k && task.p !== "Failed") return `task ${index} names lost container ${task.k} but is ${task.p}`;
  }
  const fin = report.fin ?? [];
  for (const [index, task] of fin.entries()) {
    if (task.l && task.p !== "TimedOut")
      return `finally task ${index} names limit ${task.l} but is ${task.p}`;
    if (task.l && !FINALLY_LIMITS.includes(task.l)) return `finally task ${index} names limit ${task.l}`;
    if (task.k && task.p !== "Failed")
      return `finally task ${index} names lost container ${task.k} but is ${task.p}`;
  }
  const mainSucceeded = report.tasks.every((task) => task.p === "Succeeded");
  if (mainSucceeded) {
    const ended = fin.find((task) => task.p !== "Succeeded" && task.p !== "Skipped");
    const expected = !ended
      ? "Succeeded"
      : ended.p === "Cancelled"
        ? "Cancelled"
        : ended.p === "Failed" || ended.p === "TimedOut"
          ? "TaskFailed"
          : null;
    if (expected === null) return `a finally task is ${ended?.p} at the run's end`;
    if (report.reason !== expected) {
      return ended
        ? `reason ${report.reason} but the main tasks succeeded and a finally task is ${ended.p}`
        : `reason ${report.reason} but every task succeeded`;
    }
    return undefined;
  }
  if (report.reason === "Succeeded") {
    const index = report.tasks.findIndex((task) => task.p !== "Succeeded");
    const task = report.tasks[index];
    return task ? `it says the run Succeeded but task ${index} is ${task.p}` : undefined;
  }
  const deciding = decidingIndex(report.tasks.map((task) => task.p));
  const task = report.tasks[deciding];
  if (!task) return `reason ${report.reason} but no task ran`;
  const expected =
    report.reason === "TaskFailed" ? "Failed" : report.reason === "Cancelled" ? "Cancelled" : "TimedOut";
  const limitMatches = !RUNNER_LIMITS.includes(report.reason) || (task.l ?? "RunCeiling") === report.reason;
  if (task.p !== expected || !limitMatches) {
    return `reason ${report.reason} but the task that ended the run (${deciding}) is ${task.p}${task.l ? ` by ${task.l}` : ""}`;
  }
  const early = report.tasks.findIndex((t, i) => i < deciding && t.p !== "Succeeded");
  if (early >= 0) return `task ${early} is ${report.tasks[early]?.p}, yet a later task ran`;
  return undefined;
}
/**
 * A failed task's last line as the runner puts it in the report (`m`), naming its stream:
 * `stderr: "curl: (6) Could not resolve host"`. Its message reads `exited with code 6 (stderr: "...")`.
 */
export function quoteLastLine(last: { stream: "stdout" | "stderr"; line: string }): string {
  return `${last.stream}: "${last.line}"`;
}
