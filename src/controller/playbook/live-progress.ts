// What a running run's status says of its tasks, from the runner's newest progress record
// (src/api/progress-record.ts): status.tasks as the report would give them so far, and
// status.currentTask. A pure decision over (the status, the plan's limits, the record's lines).
// A record is progress only: the run's phase, conditions and outcome are never taken from it, and
// a record that is not the recorded pod's, names another number of tasks than the plan, claims
// what the controller knows it cannot (progress-bounds.ts), or goes back on what status already
// says is ignored.
import type { ResolvedLimits } from "../../api/limits.js";
import type { PlaybookStatus, TaskStatus } from "../../api/playbook.js";
import { type ProgressRecord, type ProgressTask, parseProgressLine } from "../../api/progress-record.js";
import type { TaskPhase } from "../../api/reasons.js";
import type { RunnerReport } from "../../api/report.js";
import { expandReport } from "../../api/report-expand.js";
import { CLOCK_SLACK_MS } from "../pods/report-trust.js";
import {
  eventRecordsOf,
  latestTimeOf,
  type RecordBounds,
  recordOutOfBounds,
  type TakenRecord,
} from "./progress-bounds.js";

/** What one look at the runner's log found, for the pass that decides on it. */
export interface ProgressLook {
  /** The UID of the pod whose log was read. */
  podUID: string;
  /** The log's lines that start with the progress marker, oldest first. */
  lines: readonly string[];
  /** The record taken from this pod before: a lower seq is not news, a far higher one is no record. */
  last?: TakenRecord;
}

/** What the controller knows of the run and its pod when it looks (RecordBounds without the plan's part). */
export type RunKnown = Pick<RecordBounds, "runStart" | "runnerStartedAt" | "now">;

export type LiveProgress =
  | { ok: true; tasks: TaskStatus[]; currentTask?: string; taken: TakenRecord }
  | { ok: false; why: string };

/** Where a phase stands in a task's life: a task never goes back. */
function rankOf(phase: TaskPhase): number {
  if (phase === "Pending") return 0;
  if (phase === "Running") return 1;
  return 2;
}

/**
 * The run's tasks as the newest record of the recorded pod tells them, or why the look says
 * nothing: the status keeps what it said.
 */
export function liveProgress(
  status: PlaybookStatus,
  limits: ResolvedLimits,
  look: ProgressLook,
  known: RunKnown,
  images: readonly (string | undefined)[] = [],
): LiveProgress {
  if (status.podUID === undefined || look.podUID !== status.podUID) {
    return { ok: false, why: `the log read is of pod ${look.podUID}, not the recorded ${status.podUID}` };
  }
  const count = limits.tasks.length;
  const bounds: RecordBounds = {
    ...known,
    eventRecords: eventRecordsOf(limits),
    ...(look.last ? { last: look.last } : {}),
  };
  const found = newestWithinBounds(look.lines, count, bounds);
  if ("why" in found) return { ok: false, why: found.why };
  const { record } = found;
  const disorder = outOfOrder(record.tasks);
  if (disorder) return { ok: false, why: disorder };
  const tasks = expandRecord(record, limits, images);
  const previous = status.tasks ?? [];
  for (const [index, task] of tasks.entries()) {
    const before = previous[index];
    if (!before) continue;
    if (rankOf(task.phase) < rankOf(before.phase)) {
      return { ok: false, why: `task ${index} would go back from ${before.phase} to ${task.phase}` };
    }
    if (rankOf(before.phase) === 2 && task.phase !== before.phase) {
      return { ok: false, why: `task ${index} ended ${before.phase}, the record says ${task.phase}` };
    }
  }
  const running = record.tasks.findIndex((task) => task.p === "Running");
  const current = tasks[running];
  return {
    ok: true,
    tasks,
    taken: {
      seq: record.seq,
      writtenAfter: Math.max(latestTimeOf(record), known.runnerStartedAt - CLOCK_SLACK_MS),
    },
    ...(current ? { currentTask: `${running + 1}/${count} ${current.name}` } : {}),
  };
}

/**
 * The newest record among the lines (highest seq; the later line on a tie) of those within what
 * the controller knows; or why there is none, naming the newest one refused.
 */
function newestWithinBounds(
  lines: readonly string[],
  count: number,
  bounds: RecordBounds,
): { record: ProgressRecord } | { why: string } {
  let newest: ProgressRecord | undefined;
  let refused: { seq: number; why: string } | undefined;
  for (const line of lines) {
    const record = parseProgressLine(line, count);
    if (!record) continue;
    const why = recordOutOfBounds(record, bounds);
    if (why !== undefined) {
      if (!refused || record.seq >= refused.seq) refused = { seq: record.seq, why };
    } else if (!newest || record.seq >= newest.seq) newest = record;
  }
  if (newest) return { record: newest };
  return { why: refused?.why ?? `no progress record of ${count} tasks in the log's tail` };
}

/**
 * What the runner never writes: tasks run in order, so none has started after one that has not,
 * and nothing after the running one has started.
 */
function outOfOrder(tasks: readonly ProgressTask[]): string | undefined {
  const waiting = tasks.findIndex((task) => task.p === "Pending" || task.p === "Running");
  if (waiting < 0) return undefined;
  const index = tasks.findIndex((task, i) => i > waiting && task.p !== "Pending");
  return index < 0
    ? undefined
    : `task ${index} is ${tasks[index]?.p} after task ${waiting}, which has not ended`;
}

/**
 * The record's tasks as status.tasks, expanded as the final report's are, the running one with
 * its start, each marked `verified: false`.
 */
function expandRecord(
  record: ProgressRecord,
  limits: ResolvedLimits,
  images: readonly (string | undefined)[],
): TaskStatus[] {
  const report: RunnerReport = {
    v: 1,
    phase: "Succeeded",
    reason: "Succeeded",
    start: record.start,
    end: record.start,
    tasks: record.tasks.map(({ s: _s, ...task }) => task),
  };
  const start = Date.parse(record.start);
  const expanded = expandReport(report, limits, images.length > 0 ? { images } : {}).tasks;
  // Every row is marked: it is progress, not an outcome, until the trusted report replaces it.
  return expanded.map((task, index): TaskStatus => {
    if (task.phase !== "Running") return { ...task, verified: false };
    const { exitCode: _x, signal: _sig, completionTime: _end, ...running } = task;
    const offset = record.tasks[index]?.s;
    const startTime = offset === undefined ? {} : { startTime: new Date(start + offset).toISOString() };
    return { ...running, ...startTime, verified: false };
  });
}
