// The pod runner's log: its container's stdout, written by one ordered writer. Task output (with
// its `[task] ` prefixes), the runner's progress lines and its progress records all go through
// one queue to one stream, so that the runner knows at each byte whether a line is open and whose:
//
// - every line starts with a task's prefix or is the runner's own (a progress line or a record):
//   before a line of its own the runner ends an open task line with "\n", and the task's next
//   bytes, which its prefixer took for the rest of that line, get their prefix again; a chunk of
//   one task stream that comes while another's line is open starts a line of its own too;
// - no task line is longer than MAX_LINE_BYTES, its prefix included: a longer one is ended there
//   and goes on behind its prefix again. The runtime cuts lines into entries of 16 KiB (containerd)
//   and a tail counts entries; as no line reaches that, every entry is a whole line, and no byte
//   of a task starts one;
// - a record is written at the run's begin and at each task's start and end (the recorder asks),
//   and while a task prints: right after its 50th line since the newest record (a chunk is cut
//   there), and 1 s after the newest record when output came since. So no 50 task lines and no
//   second of output go without a record after them (docs/design.md, "Live progress").
import { Writable } from "node:stream";
import type { ProgressTask } from "../api/progress-record.js";
import { type ChunkLines, type LinePrefixer, linesOf, writeThenRelease } from "./output.js";
import { placeTaskChunk } from "./task-lines.js";

/** A record is due once this many task lines were written since the newest one. */
export const RECORD_EVERY_LINES = 50;
/** ... or once this long passed since the newest one, with output written since. */
export const RECORD_EVERY_MS = 1000;
/**
 * The longest task line the log holds, its prefix included, newline not counted: half of
 * containerd's 16 KiB cut (max_container_log_line_size), so that no runtime's cut falls inside one.
 * A longer line is ended here, or up to 3 bytes before where a UTF-8 character would cross it,
 * and goes on behind its prefix again. Never after, whatever the bytes and however they come.
 */
export const MAX_LINE_BYTES = 8 * 1024;

/** How many bytes the UTF-8 character that `lead` starts has (1 for a byte that starts none). */
function utf8Length(lead: number): number {
  if (lead >= 0xf8) return 1;
  if (lead >= 0xf0) return 4;
  if (lead >= 0xe0) return 3;
  return lead >= 0xc0 ? 2 : 1;
}

/**
 * Where in `chunk[from..end)` a character that reaches `end` starts, when its lead byte is among
 * the last 3 bytes before `end` and the character goes on past `end` (it is not whole before it);
 * else -1. Invalid UTF-8 (a continuation byte with no lead within 3 bytes) starts none.
 */
function characterAcross(chunk: Buffer, from: number, end: number): number {
  for (let at = end - 1; at >= Math.max(from, end - 3); at--) {
    const byte = chunk[at] as number;
    if ((byte & 0xc0) !== 0x80) return utf8Length(byte) > end - at ? at : -1;
  }
  return -1;
}

const NEWLINE = Buffer.from("\n");
/** More pieces than this from one chunk are written corked (one writev). */
const MAX_PIECES_PER_WRITE = 4;
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
  /** the bytes of that open line so far, its prefix included */
  private openBytes = 0;
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
      this.openBytes = this.open === null ? 0 : chunk.length - chunk.lastIndexOf(0x0a) - 1;
    } else this.task(chunk, linesOf(chunk), out);
    this.flush(out, callback);
  }

  /** Ends an open line; a task's line so ended counts, and may make a record due. */
  private endOpenLine(out: Buffer[], recordIfDue = true): void {
    if (this.open === null) return;
    out.push(NEWLINE);
    const taskLine = this.open !== UNTOLD;
    this.open = null;
    this.openBytes = 0;
    if (taskLine) this.linesSinceRecord += 1;
    if (recordIfDue && this.linesSinceRecord >= RECORD_EVERY_LINES) this.record(out);
  }

  private record(out: Buffer[]): void {
    this.endOpenLine(out, false);
    this.openBytes = 0;
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
      this.openBytes = this.open === null ? 0 : this.openBytes + chunk.length;
      return;
    }
    // Its line ended by a record, a progress line or another stream: it goes on behind its prefix.
    const place = placeTaskChunk(this.open, lines, chunk);
    if (place === "skip") return;
    if (place !== "as-is") this.endOpenLine(out);
    if (place === "prefix-again") {
      out.push(lines.from.prefix);
      this.openBytes = lines.from.prefix.length;
    }
    this.writeLines(chunk, lines, out);
    this.outputSinceRecord = true;
    if (this.now() - this.lastRecordAt >= RECORD_EVERY_MS) this.record(out);
    else this.armClock();
  }

  /**
   * Writes the chunk: a line longer than MAX_LINE_BYTES is ended there and goes on behind its
   * prefix, and a record comes right after each line that makes RECORD_EVERY_LINES since the last.
   * The work is per line and per cut, never per byte.
   *
   * No line is longer, whatever the bytes: the open line is never longer at a chunk's end, and a
   * cut is at the limit or before it. It falls before a UTF-8 character that would cross the limit
   * (its lead is at most 3 bytes back). A character that the chunk's end leaves unfinished and
   * that would cross the limit is cut before at once: once written, its lead could not be taken
   * back to the next piece. So valid UTF-8 is never cut inside a character however it comes in.
   */
  private writeLines(chunk: Buffer, lines: ChunkLines, out: Buffer[]): void {
    const prefix = lines.from.prefix;
    // Where in the chunk the open line started (before the chunk when it goes on from the last)
    // and what of the chunk is not written out yet.
    let lineStart = -this.openBytes;
    let from = 0;
    let at = chunk.indexOf(0x0a);
    for (;;) {
      const end = at === -1 ? chunk.length : at;
      while (end - lineStart > MAX_LINE_BYTES) {
        const limit = lineStart + MAX_LINE_BYTES;
        const across = characterAcross(chunk, from, limit);
        const cut = across === -1 ? limit : across;
        this.cut(chunk, from, cut, prefix, out);
        from = cut;
        lineStart = cut - prefix.length;
      }
      if (at === -1) {
        // The chunk leaves a character unfinished that would cross the limit: cut before it now.
        if (end - lineStart > MAX_LINE_BYTES - 3) {
          const across = characterAcross(chunk, from, end);
          if (across !== -1 && across + utf8Length(chunk[across] as number) - lineStart > MAX_LINE_BYTES) {
            this.cut(chunk, from, across, prefix, out);
            from = across;
            lineStart = across - prefix.length;
          }
        }
        break;
      }
      lineStart = at + 1;
      this.linesSinceRecord += 1;
      if (this.linesSinceRecord >= RECORD_EVERY_LINES) {
        out.push(chunk.subarray(from, at + 1));
        from = at + 1;
        this.open = null;
        this.record(out);
      }
      at = chunk.indexOf(0x0a, at + 1);
    }
    if (from < chunk.length) out.push(from === 0 ? chunk : chunk.subarray(from));
    this.open = lines.leavesOpen ? lines.from : null;
    this.openBytes = lines.leavesOpen ? chunk.length - lineStart : 0;
  }

  /** Ends the open line at `cut` (the chunk's bytes from `from` before it) and opens the next behind `prefix`. */
  private cut(chunk: Buffer, from: number, cut: number, prefix: Buffer, out: Buffer[]): void {
    out.push(chunk.subarray(from, cut), NEWLINE);
    this.open = null;
    this.openBytes = 0;
    this.linesSinceRecord += 1;
    if (this.linesSinceRecord >= RECORD_EVERY_LINES) this.record(out);
    out.push(prefix);
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
    // A chunk in many pieces (records, a long line's 8 KiB pieces with their newlines and
    // prefixes) goes out in one writev where the target can: a write per piece costs more.
    const target = this.options.target as Partial<Writable>;
    if (out.length > MAX_PIECES_PER_WRITE && target.cork && target.uncork) {
      target.cork();
      writeThenRelease(this.options.target, out, callback);
      target.uncork();
    } else writeThenRelease(this.options.target, out, callback);
  }
}
