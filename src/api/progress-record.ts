// The runner's live progress: one line in the runner container's log, written by the pod runner
// at each task's start and end (and again while a task prints, so a tail of the log always holds
// a recent one), read by the controller through the pods/log API and by `playbook logs` and
// `submit --watch`, which hide it.
//
// Why a task cannot write one (docs/design.md, "Live progress"): the runner container's log is
// its stdout and stderr, pipes only the runner's own processes hold; tasks run in other
// containers under other UIDs and reach that log only through the runner, which starts every
// task line with "[task] ". A line of the log that starts with PROGRESS_MARKER is the runner's.
// The runner writes everything (its progress lines, the records, task output) to one stream,
// ends an open task line before a record, and cuts a task line at 8 KiB (prefix again), so the
// runtime's cut of long lines into entries (16 KiB) never puts a task's bytes at an entry's
// start either. The controller still takes a record only within what it knows of the run
// (src/controller/playbook/progress-bounds.ts). A record is progress only: the run's outcome
// still comes from the runner's report alone.
import { z } from "zod";
import { ReportTaskSchema } from "./report.js";

export const PROGRESS_MARKER = "playbook.dev/progress ";
export const PROGRESS_VERSION = 1;
/** A record longer than this is not the runner's (it compacts to fit): it is not read. */
export const PROGRESS_MAX_BYTES = 16 * 1024;

/** Ten years in ms, as the report bounds its offsets. */
const MAX_OFFSET_MS = 10 * 366 * 24 * 3_600_000;

/** A task as the record shows it: the report's task, and for the running one, its start. */
export const ProgressTaskSchema = ReportTaskSchema.extend({
  /** Running only: ms after the record's start that the current attempt started */
  s: z.number().int().min(0).max(MAX_OFFSET_MS).optional(),
});
export type ProgressTask = z.infer<typeof ProgressTaskSchema>;

export const ProgressRecordSchema = z.strictObject({
  v: z.literal(PROGRESS_VERSION),
  /** the run's start as the runner counts it (the report's `start`) */
  start: z.iso.datetime(),
  /** how many records the runner wrote before this one: a reader keeps the highest */
  seq: z.number().int().min(0),
  /** every task of the plan, in order: Pending until it starts */
  tasks: z.array(ProgressTaskSchema),
});
export type ProgressRecord = z.infer<typeof ProgressRecordSchema>;

/** The record as one log line (without its newline), compacted to PROGRESS_MAX_BYTES. */
export function encodeProgressRecord(record: ProgressRecord): string {
  const line = (r: ProgressRecord) => `${PROGRESS_MARKER}${JSON.stringify(r)}`;
  let text = line(record);
  if (Buffer.byteLength(text) <= PROGRESS_MAX_BYTES) return text;
  // Messages go first, then finished tasks' times and figures: the running task stays whole.
  const withoutMessages = { ...record, tasks: record.tasks.map(({ m: _m, ...task }) => task) };
  text = line(withoutMessages);
  if (Buffer.byteLength(text) <= PROGRESS_MAX_BYTES) return text;
  const bare = {
    ...withoutMessages,
    tasks: withoutMessages.tasks.map(({ t: _t, cpu: _c, mem: _k, ls: _l, la: _a, ...task }) => task),
  };
  return line(bare);
}

/**
 * The record a log line carries, or null: a line that does not start with the marker, does not
 * parse, or names another number of tasks than the plan has is not a record (never an error a
 * task could provoke into the controller's log).
 */
export function parseProgressLine(line: string, taskCount?: number): ProgressRecord | null {
  if (!line.startsWith(PROGRESS_MARKER)) return null;
  if (Buffer.byteLength(line) > PROGRESS_MAX_BYTES + 1) return null;
  let json: unknown;
  try {
    json = JSON.parse(line.slice(PROGRESS_MARKER.length));
  } catch {
    return null;
  }
  const parsed = ProgressRecordSchema.safeParse(json);
  if (!parsed.success) return null;
  if (taskCount !== undefined && parsed.data.tasks.length !== taskCount) return null;
  const running = parsed.data.tasks.filter((task) => task.p === "Running");
  if (running.length > 1) return null;
  return parsed.data;
}
