// The pod runner's progress records (src/api/progress-record.ts): what the run's tasks are doing
// now, kept from the run's events and given out as one encoded line per record, each with the
// next seq. Where and when a record is written is the pod's log's (pod-log.ts).
import {
  encodeProgressRecord,
  PROGRESS_VERSION,
  type ProgressRecord,
  type ProgressTask,
} from "../api/progress-record.js";
import { toReportTask } from "../api/report.js";
import { showWait } from "./retry-wait.js";
import type { RunEvent } from "./run.js";

export class ProgressRecorder {
  private readonly start: Date;
  private readonly tasks: ProgressTask[];
  private seq = 0;

  /** `start`: the run's start as its report counts it (the report's `start`). */
  constructor(taskCount: number, start: Date) {
    this.start = start;
    this.tasks = Array.from({ length: taskCount }, () => ({ p: "Pending" }));
  }

  /** Takes a run event in; says whether it changed a task (a record is due). */
  event(event: RunEvent, now: number = Date.now()): boolean {
    // The record shows the main tasks (the finally tasks' index counts on after them).
    if ("index" in event && event.index >= this.tasks.length) return false;
    switch (event.type) {
      case "task-started": {
        const task: ProgressTask = { p: "Running", s: Math.max(0, now - this.start.getTime()) };
        if (event.attempt !== 1) task.a = event.attempt;
        this.tasks[event.index] = task;
        return true;
      }
      case "task-retrying": {
        // Still its own: Running between two attempts, saying when the next one starts.
        const task: ProgressTask = {
          ...this.tasks[event.index],
          p: "Running",
          m: `retrying in ${showWait(event.delayMs)} (attempt ${event.attempt}/${event.attempts})`,
        };
        if (event.attempt - 1 !== 1) task.a = event.attempt - 1;
        this.tasks[event.index] = task;
        return true;
      }
      case "task-finished":
        this.tasks[event.index] = toReportTask(event.outcome, this.start.getTime());
        return true;
      default:
        return false;
    }
  }

  /** The tasks as they are now: what a record written behind what is queued now shows. */
  snapshot(): ProgressTask[] {
    return this.tasks.map((task) => ({ ...task }));
  }

  /** A record of `tasks` (a snapshot), with the next seq. */
  next(tasks: ProgressTask[] = this.snapshot()): ProgressRecord {
    return { v: PROGRESS_VERSION, start: this.start.toISOString(), seq: this.seq++, tasks };
  }

  /** The record of `tasks` as its log line (without the newline), with the next seq. */
  line(tasks: ProgressTask[]): string {
    return encodeProgressRecord(this.next(tasks));
  }
}
