// Whether the log the controller followed is the one the runner wrote, read from the runner's own
// progress records in it (src/api/progress-record.ts): the runner numbers them (seq 0 at the
// run's begin, then one more each) and writes one at each task's start and end and at least every
// 50 task lines, so no stretch of the log longer than 50 lines (8 KiB each at most) is without
// one. The kubelet's follow reader, once it falls behind its own rotation by more than one file,
// goes on at the newest file and skips those between, or stops at the end of an old one when the
// container has ended (k8s.io/cri-client's ReadLogs): the stream ends cleanly all the same. A seq
// missing in the stream is such a skip; a runner that wrote its report but whose last record read
// still shows a task running lost its tail. Records a task prints cannot pass for the runner's:
// every task line starts with its "[task] " prefix.
import { PROGRESS_MARKER, PROGRESS_MAX_BYTES, parseProgressLine } from "../../api/progress-record.js";

const NEWLINE = 0x0a;
const MARKER = Buffer.from(PROGRESS_MARKER);
const LINE_MARKER = Buffer.from(`\n${PROGRESS_MARKER}`);
/** The longest record line read, its newline not counted (parseProgressLine's own bound). */
const MAX_RECORD_LINE = PROGRESS_MAX_BYTES + 1;

/** Records the stream did not hold: between `after` and `next` (none seen before: `after` -1). */
export interface RecordGap {
  after: number;
  next: number;
}

/** What the records in the stream say of it. */
export interface Continuity {
  /** Records read. */
  records: number;
  /** The first stretch of records missing, and how many are missing in all. */
  firstGap?: RecordGap;
  missing: number;
  /** The newest record's running task (its place in the plan, from 1), if one ran when it was written. */
  runningAtLast?: number;
}

/**
 * Reads the runner's records out of the log's bytes as they arrive, in any chunking: only lines
 * that start with the marker are looked at (found with Buffer.indexOf, so the cost is native),
 * each up to the record's bound.
 */
export class LogContinuity {
  /** The current line's bytes while it may be a record; undefined inside a line that is not one. */
  private open: Buffer[] | undefined = [];
  private openBytes = 0;
  private lastSeq = -1;
  private state: Continuity = { records: 0, missing: 0 };

  get result(): Continuity {
    return this.state;
  }

  feed(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.open) {
        const newline = chunk.indexOf(NEWLINE, at);
        const piece = chunk.subarray(at, newline === -1 ? chunk.length : newline);
        this.extend(piece);
        if (newline === -1) return;
        if (this.open && this.openBytes >= MARKER.length)
          this.take(Buffer.concat(this.open).toString("utf8"));
        this.open = [];
        this.openBytes = 0;
        at = newline + 1;
        continue;
      }
      // Inside a line that is not a record: on to the next line that starts with the marker, or
      // to the last line start in the chunk (a marker may begin there and go on in the next).
      const hit = chunk.indexOf(LINE_MARKER, at);
      if (hit !== -1) {
        at = hit + 1;
        this.open = [];
        this.openBytes = 0;
        continue;
      }
      const last = chunk.lastIndexOf(NEWLINE);
      if (last < at) return;
      at = last + 1;
      this.open = [];
      this.openBytes = 0;
    }
  }

  /** The current line goes on with `piece`: still a record's start and within its bound, or not. */
  private extend(piece: Buffer): void {
    if (!this.open) return;
    const checked = Math.min(piece.length, Math.max(0, MARKER.length - this.openBytes));
    const marker = MARKER.subarray(this.openBytes, this.openBytes + checked);
    if (!piece.subarray(0, checked).equals(marker) || this.openBytes + piece.length > MAX_RECORD_LINE) {
      this.open = undefined;
      return;
    }
    if (piece.length > 0) this.open.push(Buffer.from(piece));
    this.openBytes += piece.length;
  }

  private take(line: string): void {
    const record = parseProgressLine(line);
    if (!record || record.seq <= this.lastSeq) return;
    const state = this.state;
    if (record.seq !== this.lastSeq + 1) {
      state.missing += record.seq - this.lastSeq - 1;
      state.firstGap ??= { after: this.lastSeq, next: record.seq };
    }
    this.lastSeq = record.seq;
    state.records += 1;
    const running = record.tasks.findIndex((task) => task.p === "Running");
    if (running >= 0) state.runningAtLast = running + 1;
    else delete state.runningAtLast;
  }
}

/**
 * Why a log that ended cleanly is not the whole of what the runner wrote, in an operator's
 * words; undefined when its records show nothing missing. `runnerReported`: the runner container
 * ended with its report (it wrote every record before it), so a task still running in the last
 * record read means the tail is missing.
 */
export function continuityGap(continuity: Continuity, runnerReported: boolean): string | undefined {
  const { firstGap, missing } = continuity;
  if (firstGap) {
    const where =
      firstGap.after < 0
        ? `before its record ${firstGap.next}`
        : `between its records ${firstGap.after} and ${firstGap.next}`;
    return `the kubelet's log reader skipped part of the log (it fell behind the log's rotation): ${missing} of the runner's progress records are missing, the first ${where}; what the task printed there is not in it`;
  }
  if (!runnerReported) return undefined;
  if (continuity.records === 0)
    return "the log holds none of the runner's progress records although the runner ended with its report: the kubelet's log reader skipped it";
  if (continuity.runningAtLast !== undefined)
    return `the log ends while the plan's task ${continuity.runningAtLast} runs although the runner ended with its report: the kubelet's log reader stopped before the end of its rotated files, and the log's tail is not in it`;
  return undefined;
}
