// The pod runner's log: its container's stdout, written by one ordered writer. Task output (with
// its `[task] ` prefixes), the runner's progress lines and its progress records all go through
// one queue to one stream, so that the runner knows at each byte whether a line is open and whose:
//
// - every line starts with a task's prefix or is the runner's own (a progress line or a record):
//   before a line of its own the runner ends an open task line with "\n", and the task's next
//   bytes, which its prefixer took for the rest of that line, get their prefix again; a chunk of
//   one task stream that comes while another's line is open starts a line of its own too;
// - a record is written at the run's begin and at each task's start and end (the recorder asks),
//   and while a task prints: right after its 50th line since the newest record (a chunk is cut
//   there), and 1 s after the newest record when output came since. So no 50 task lines and no
//   second of output go without a record after them (docs/design.md, "Live progress").
import { Writable } from "node:stream";
import type { ProgressTask } from "../api/progress-record.js";
import { type ChunkLines, type LinePrefixer, linesOf, writeThenRelease } from "./output.js";

/** A record is due once this many task lines were written since the newest one. */
export const RECORD_EVERY_LINES = 50;
/** ... or once this long passed since the newest one, with output written since. */
export const RECORD_EVERY_MS = 1000;

const NEWLINE = Buffer.from("\n");
/** The owner of an open line that no prefixer wrote (bytes the log was not told about). */
const UNTOLD = Symbol("untold");

/** Buffers written to the sink that are the runner's own text, or a record of the tasks as they were then. */
const runnerText = new WeakSet<Uint8Array>();
const recordRequests = new WeakMap<Uint8Array, ProgressTask[]>();

export interface PodLogOptions {
  target: NodeJS.WritableStream;
  /** the tasks at the run's begin (all Pending) */
  tasks: ProgressTask[];
  /** the record of these tasks, as its line without the newline (each call is a new seq) */
  record: (tasks: ProgressTask[]) => string;
  now?: () => number;
}

export class PodLog {
  /** where task output goes (runPlaybook's sink), and through it everything else, in order */
  readonly sink: Writable;
  /** where the runner's progress lines go: whole lines, written in order with the rest */
  readonly lines: Writable;
  private readonly options: PodLogOptions;
  private readonly now: () => number;
  /** whose line is open at the stream's end (null: it is at a line start) */
  private open: LinePrefixer | typeof UNTOLD | null = null;
  private linesSinceRecord = 0;
  private outputSinceRecord = false;
  private lastRecordAt: number;
  /** the tasks as of the stream's end: every record written there shows them */
  private tasks: ProgressTask[];
  private timer: NodeJS.Timeout | undefined;
  private bytes = 0;
  private broken = false;
  private closed = false;

  constructor(options: PodLogOptions) {
    this.options = options;
    this.now = options.now ?? (() => performance.now());
    this.lastRecordAt = this.now();
    this.tasks = options.tasks;
    options.target.on("error", () => {
      this.broken = true;
    });
    this.sink = new Writable({
      highWaterMark: 1 << 16,
      write: (chunk: Buffer, _encoding, callback) => this.take(chunk, callback),
    });
    this.lines = new Writable({
      write: (chunk: Buffer, _encoding, callback) => {
        const text = Buffer.from(chunk);
        runnerText.add(text);
        this.sink.write(text);
        callback();
      },
    });
  }

  /** Bytes of task output written so far. */
  outputBytes(): number {
    return this.bytes;
  }

  /**
   * A record of `tasks` (the recorder's snapshot now), in order behind what is queued: from there
   * on, the records by lines and by the clock show these tasks too. Without tasks, the latest.
   */
  requestRecord(tasks?: ProgressTask[]): void {
    if (this.closed) return;
    const request = Buffer.alloc(0);
    recordRequests.set(request, tasks ?? this.tasks);
    this.sink.write(request);
  }

  /** No more records by the clock: the run is over. */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  /** Everything queued is written out. */
  async flushed(): Promise<void> {
    while (this.sink.writableLength > 0 || this.lines.writableLength > 0) {
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
  }

  private take(chunk: Buffer, callback: () => void): void {
    const out: Buffer[] = [];
    const tasks = recordRequests.get(chunk);
    if (tasks) {
      this.tasks = tasks;
      this.record(out);
    } else if (runnerText.has(chunk)) {
      this.endOpenLine(out);
      out.push(chunk);
      this.open = chunk.length > 0 && chunk[chunk.length - 1] !== 0x0a ? UNTOLD : null;
    } else this.task(chunk, linesOf(chunk), out);
    this.flush(out, callback);
  }

  /** Ends an open line; a task's line so ended counts, and may make a record due. */
  private endOpenLine(out: Buffer[], recordIfDue = true): void {
    if (this.open === null) return;
    out.push(NEWLINE);
    const taskLine = this.open !== UNTOLD;
    this.open = null;
    if (taskLine) this.linesSinceRecord += 1;
    if (recordIfDue && this.linesSinceRecord >= RECORD_EVERY_LINES) this.record(out);
  }

  private record(out: Buffer[]): void {
    this.endOpenLine(out, false);
    out.push(Buffer.from(`${this.options.record(this.tasks)}\n`));
    this.linesSinceRecord = 0;
    this.outputSinceRecord = false;
    this.lastRecordAt = this.now();
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private task(chunk: Buffer, lines: ChunkLines | undefined, out: Buffer[]): void {
    if (chunk.length === 0) return;
    this.bytes += chunk.length;
    if (!lines) {
      // Not a prefixer's: written as it is (a run without prefixes).
      out.push(chunk);
      this.open = chunk[chunk.length - 1] === 0x0a ? null : UNTOLD;
      return;
    }
    const ownLine = lines.continues && this.open === lines.from;
    if (lines.continues && !ownLine) {
      // Its line was ended (by a record, a progress line or another stream): the prefixer's end of
      // line has nothing left to end, and anything else starts a line of its own, prefixed again.
      if (!lines.leavesOpen && chunk.length === 1 && chunk[0] === 0x0a) return;
      this.endOpenLine(out);
      out.push(lines.from.prefix);
    } else if (!lines.continues) this.endOpenLine(out);
    this.cutAtRecords(chunk, lines, out);
    this.outputSinceRecord = true;
    if (this.now() - this.lastRecordAt >= RECORD_EVERY_MS) this.record(out);
    else this.armClock();
  }

  /** Writes the chunk, with a record right after each line that makes RECORD_EVERY_LINES since the last. */
  private cutAtRecords(chunk: Buffer, lines: ChunkLines, out: Buffer[]): void {
    let from = 0;
    for (let at = chunk.indexOf(0x0a); at !== -1; at = chunk.indexOf(0x0a, at + 1)) {
      this.linesSinceRecord += 1;
      if (this.linesSinceRecord < RECORD_EVERY_LINES) continue;
      out.push(chunk.subarray(from, at + 1));
      from = at + 1;
      this.open = null;
      this.record(out);
    }
    if (from < chunk.length) out.push(from === 0 ? chunk : chunk.subarray(from));
    this.open = lines.leavesOpen ? lines.from : null;
  }

  /** A record RECORD_EVERY_MS after the newest, when output came since and no other came first. */
  private armClock(): void {
    if (this.timer !== undefined || this.closed) return;
    const wait = Math.max(0, this.lastRecordAt + RECORD_EVERY_MS - this.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.outputSinceRecord) this.requestRecord();
    }, wait);
    this.timer.unref();
  }

  private flush(out: Buffer[], callback: () => void): void {
    if (this.broken) {
      callback();
      return;
    }
    writeThenRelease(this.options.target, out, callback);
  }
}
