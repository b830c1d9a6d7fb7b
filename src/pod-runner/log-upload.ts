// The runner's own upload of its log (the contract is src/api/log-upload.ts): what the runner
// writes to its stdout is cut into segments PUT through the plan's presigned URLs, one PUT at a
// time and in order, each followed by the index. The run never waits for the store: write() only
// copies into memory, and a store that falls a whole segment behind makes the uploader give up
// (and count bytes from then on) rather than hold more.
//
// The index says what the store holds: `segments` and `lastSegmentBytes` describe the segments up
// to the last one PUT (each before it full), `bytes` what the runner wrote; a segment queued but
// not yet PUT is not counted, so that a reader of an index left by a lost pod never takes a slot's
// older segment, or a missing one, for part of the log.
import { LOG_UPLOAD_VERSION, type LogUploadIndex, type LogUploadPlan } from "../api/log-upload.js";
import { type PutAnswer, type PutBytes, putBytes } from "./http-put.js";

export interface LogUploadRetry {
  tries: number;
  /** The wait before the second try; each later wait doubles it. */
  firstWaitMs: number;
}

export interface LogUploaderOptions {
  /** How a PUT goes (putBytes unless told). */
  put?: PutBytes;
  /** Full segments that may wait for the store behind the one in flight (MAX_WAITING unless told). */
  maxWaiting?: number;
  retry?: LogUploadRetry;
  /** One line per give-up. */
  log?: (message: string) => void;
}

const DEFAULT_RETRY: LogUploadRetry = { tries: 3, firstWaitMs: 1000 };
/**
 * Full segments that may wait behind the one in flight: a task printing faster than the store
 * takes it for a while (a burst) is kept whole, and the runner holds at most this many + 2
 * segments (64 MiB of 8 MiB ones, in a container limited to 512 MiB).
 */
export const MAX_WAITING = 6;
const PUT_TIMEOUT_MS = 15_000;
const FAILED_MAX_CHARS = 500;
const BODY_EXCERPT_CHARS = 200;
const SEGMENT_TYPE = "text/plain; charset=utf-8";
const INDEX_TYPE = "application/json";

export interface SegmentSlot {
  part: "head" | "tail";
  slot: number;
}

/** Where segment n goes: head[n], then the tail's slots in turn; undefined past the head with no tail. */
export function segmentSlot(n: number, heads: number, tails: number): SegmentSlot | undefined {
  if (n < heads) return { part: "head", slot: n };
  if (tails === 0) return undefined;
  return { part: "tail", slot: (n - heads) % tails };
}

/** The URL segment n is PUT to; undefined when the plan keeps no such segment. */
export function segmentUrl(plan: Pick<LogUploadPlan, "head" | "tail">, n: number): string | undefined {
  const slot = segmentSlot(n, plan.head.length, plan.tail.length);
  if (!slot) return undefined;
  return slot.part === "head" ? plan.head[slot.slot] : plan.tail[slot.slot];
}

/** A segment's name in messages: "segment 7 (tail slot 1)". */
export function segmentName(plan: Pick<LogUploadPlan, "head" | "tail">, n: number): string {
  const slot = segmentSlot(n, plan.head.length, plan.tail.length);
  return slot?.part === "tail" ? `segment ${n} (tail slot ${slot.slot})` : `segment ${n}`;
}

/** A give-up reason as the index holds it (at most 500 characters). */
export function failedReason(reason: string): string {
  return reason.length <= FAILED_MAX_CHARS ? reason : `${reason.slice(0, FAILED_MAX_CHARS - 3)}...`;
}

/** The store refused a PUT, or did not take it in the tries allowed: no further try helps. */
class UploadGivenUp extends Error {}

interface Segment {
  n: number;
  url: string;
  /** plan.segmentBytes long. */
  buffer: Buffer;
  filled: number;
  /** Bytes of it the store holds (a flush PUT of a partial segment, or all). */
  stored: number;
  /** When it filled (Date.now()), for the give-up's sentence. */
  fullAt: number | undefined;
}

interface Job {
  segment: Segment;
  /** A view of the segment's first bytes: written once, they never change. */
  body: Buffer;
  /** The segment is full (else a flush of the one being filled): once stored, its buffer is free. */
  full: boolean;
}

export class LogUploader {
  private readonly plan: LogUploadPlan;
  private readonly putBytes: PutBytes;
  private readonly retry: LogUploadRetry;
  private readonly log: (message: string) => void;
  /** Aborts the PUT in flight and a retry's wait once the uploader gave up. */
  private readonly stopper = new AbortController();
  private readonly timer: NodeJS.Timeout;

  /** Bytes written to the log, kept or not. */
  private written = 0;
  /** Bytes copied into segments. */
  private kept = 0;
  private begun = 0;
  private filling: Segment | undefined;
  private inFlight: Segment | undefined;
  /** Full segments waiting for their PUT (one at most while the run writes). */
  private readonly waiting: Segment[] = [];
  /**
   * Buffers of segments the store holds, for the next segments: fresh 8 MiB buffers at 30 MiB/s
   * are memory the kernel must fault in and the collector chase. A buffer is only kept once no
   * segment needs it, and taken before any is made, so the held ones never outnumber the most
   * segments ever held at once.
   */
  private readonly spares: Buffer[] = [];
  /** The last segment PUT and how much of it the store holds. */
  private storedSegments = 0;
  private lastSegmentBytes = 0;
  private busy = false;
  private flushDue = false;
  private finishing = false;
  private doneWritten = false;
  private failed: string | undefined;
  /** The best-effort PUT of the index with `failed`. */
  private lastWord: Promise<void> | undefined;
  private finished: Promise<LogUploadIndex> | undefined;
  private readonly settled: Promise<void>;
  private settle: () => void = () => {};
  private readonly maxWaiting: number;
  /** The index with `failed` is in the store. */
  private failedSaid = false;

  constructor(plan: LogUploadPlan, options: LogUploaderOptions = {}) {
    this.plan = plan;
    this.putBytes = options.put ?? putBytes;
    this.retry = options.retry ?? DEFAULT_RETRY;
    this.maxWaiting = options.maxWaiting ?? MAX_WAITING;
    this.log = options.log ?? (() => {});
    this.settled = new Promise((resolve) => {
      this.settle = resolve;
    });
    this.timer = setInterval(() => this.flushTick(), plan.flushMs);
    this.timer.unref();
  }

  /** Bytes held in buffers now: the segment being filled, the one in flight, those waiting. */
  get heldBytes(): number {
    const held = new Set<Buffer>();
    for (const segment of [this.filling, this.inFlight, ...this.waiting])
      if (segment) held.add(segment.buffer);
    for (const spare of this.spares) held.add(spare);
    let bytes = 0;
    for (const buffer of held) bytes += buffer.length;
    return bytes;
  }

  get index(): LogUploadIndex {
    return this.indexOf(this.doneWritten);
  }

  /** Copies the bytes into the segment being filled. Never blocks, never throws, never waits. */
  write(chunk: Uint8Array): void {
    this.written += chunk.length;
    if (this.failed !== undefined || this.finishing) return;
    try {
      let at = 0;
      while (at < chunk.length) {
        const segment = this.filling ?? this.begin();
        if (!segment) return;
        const take = Math.min(chunk.length - at, segment.buffer.length - segment.filled);
        // Whole, as a chunk mostly is: no view to make (the runner writes millions of small ones).
        segment.buffer.set(take === chunk.length ? chunk : chunk.subarray(at, at + take), segment.filled);
        segment.filled += take;
        this.kept += take;
        at += take;
        if (segment.filled === segment.buffer.length) {
          this.filling = undefined;
          if (!this.queueFull(segment)) return;
        }
      }
    } catch (error) {
      this.giveUp(`the log upload failed: ${describeError(error)}`);
    }
  }

  /**
   * Queues what is not yet in the store and waits for it and the final index (`done`), within
   * `timeoutMs` in all. Returns the final index as written, or with `failed` when it was not.
   */
  finish(timeoutMs: number): Promise<LogUploadIndex> {
    this.finished ??= this.finishWithin(timeoutMs);
    return this.finished;
  }

  private async finishWithin(timeoutMs: number): Promise<LogUploadIndex> {
    const deadline = Date.now() + timeoutMs;
    this.finishing = true;
    clearInterval(this.timer);
    const last = this.filling;
    this.filling = undefined;
    if (this.failed === undefined && last && last.filled > last.stored) this.waiting.push(last);
    this.kick();
    let timer: NodeJS.Timeout | undefined;
    const outOfTime = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), timeoutMs);
    });
    try {
      if ((await Promise.race([this.settled, outOfTime])) === "late")
        this.giveUp(`the store did not take the last ${this.unstoredBytes()} bytes within ${timeoutMs} ms`);
      // The index with `failed`, if it goes, within what is left of the deadline: tried again when
      // the store refused it as the upload stopped (it was down then, and may be back now).
      if (this.failed !== undefined && this.lastWord) {
        const left = Math.max(0, deadline - Date.now());
        await Promise.race([this.lastWord, new Promise((resolve) => setTimeout(resolve, left).unref())]);
        if (!this.failedSaid && Date.now() < deadline) this.sayFailed();
      }
      if (this.lastWord) {
        clearTimeout(timer);
        const left = Math.max(0, deadline - Date.now());
        await Promise.race([this.lastWord, new Promise((resolve) => setTimeout(resolve, left).unref())]);
      }
    } finally {
      clearTimeout(timer);
      this.spares.length = 0;
    }
    return this.indexOf(this.doneWritten);
  }

  private begin(): Segment | undefined {
    const url = segmentUrl(this.plan, this.begun);
    // Past the head with no tail: the plan keeps nothing more, the bytes are only counted.
    if (url === undefined) return undefined;
    const segment: Segment = {
      n: this.begun,
      url,
      buffer: this.spares.pop() ?? Buffer.allocUnsafeSlow(this.plan.segmentBytes),
      filled: 0,
      stored: 0,
      fullAt: undefined,
    };
    this.begun += 1;
    this.filling = segment;
    return segment;
  }

  /** Queues a full segment for its PUT; false when the store is a segment behind already (given up). */
  private queueFull(segment: Segment): boolean {
    segment.fullAt = Date.now();
    if (this.waiting.length >= this.maxWaiting) {
      const oldest = this.inFlight?.fullAt ?? this.waiting[0]?.fullAt ?? segment.fullAt;
      this.giveUp(
        `the store did not keep up: ${this.unstoredBytes()} bytes of the log were waiting for it, the oldest since ${new Date(oldest).toISOString()} (${Date.now() - oldest} ms)`,
      );
      return false;
    }
    this.waiting.push(segment);
    this.kick();
    return true;
  }

  private flushTick(): void {
    if (this.busy || this.failed !== undefined || this.finishing) return;
    const segment = this.filling;
    if (!segment || segment.filled <= segment.stored) return;
    this.flushDue = true;
    this.kick();
  }

  private kick(): void {
    if (this.busy || this.failed !== undefined) return;
    this.busy = true;
    void this.drain();
  }

  /** The PUTs in order, one at a time, each segment's followed by the index. */
  private async drain(): Promise<void> {
    try {
      for (;;) {
        if (this.failed !== undefined) return;
        const job = this.nextJob();
        if (job) {
          const { segment, body } = job;
          this.inFlight = segment;
          await this.put(segment.url, body, SEGMENT_TYPE, segmentName(this.plan, segment.n));
          this.inFlight = undefined;
          if (job.full && this.failed === undefined) this.spares.push(segment.buffer);
          segment.stored = body.length;
          this.storedSegments = segment.n + 1;
          this.lastSegmentBytes = body.length;
          const done = this.finishing && this.waiting.length === 0;
          await this.put(this.plan.index, JSON.stringify(this.indexOf(done)), INDEX_TYPE, "the index");
          if (done) this.markDone();
          continue;
        }
        if (this.finishing && !this.doneWritten) {
          await this.put(this.plan.index, JSON.stringify(this.indexOf(true)), INDEX_TYPE, "the index");
          this.markDone();
        }
        return;
      }
    } catch (error) {
      this.giveUp(
        error instanceof UploadGivenUp ? error.message : `the log upload failed: ${describeError(error)}`,
      );
    } finally {
      // In the same turn as the last look at the queue: a segment queued after it finds no drain
      // still marked busy, and starts one.
      this.busy = false;
    }
  }

  private nextJob(): Job | undefined {
    const full = this.waiting.shift();
    if (full) return { segment: full, body: full.buffer.subarray(0, full.filled), full: true };
    const flush = this.flushDue ? this.filling : undefined;
    this.flushDue = false;
    if (flush && flush.filled > flush.stored)
      return { segment: flush, body: flush.buffer.subarray(0, flush.filled), full: false };
    return undefined;
  }

  private markDone(): void {
    this.doneWritten = true;
    this.settle();
  }

  /** One PUT, tried again on a network error or a 5xx; a 4xx or the last try gives up. */
  private async put(url: string, body: Buffer | string, contentType: string, what: string): Promise<void> {
    let last = "";
    for (let attempt = 1; attempt <= this.retry.tries; attempt++) {
      if (attempt > 1) await waitOrStop(this.retry.firstWaitMs * 2 ** (attempt - 2), this.stopper.signal);
      const outcome = await this.putOnce(url, body, contentType, this.stopper.signal);
      if (outcome.ok) return;
      last = outcome.problem;
      if (!outcome.retry) throw new UploadGivenUp(`the store refused the PUT of ${what}: ${last}`);
    }
    throw new UploadGivenUp(
      `the store did not take the PUT of ${what} in ${this.retry.tries} tries: ${last}`,
    );
  }

  private async putOnce(
    url: string,
    body: Buffer | string,
    contentType: string,
    stop: AbortSignal | undefined,
  ): Promise<{ ok: true } | { ok: false; retry: boolean; problem: string }> {
    const timeout = AbortSignal.timeout(PUT_TIMEOUT_MS);
    let answer: PutAnswer;
    try {
      answer = await this.putBytes(url, body, contentType, stop ? AbortSignal.any([timeout, stop]) : timeout);
    } catch (error) {
      if (stop?.aborted) throw error;
      return { ok: false, retry: true, problem: describeError(error) };
    }
    if (answer.status >= 200 && answer.status < 300) return { ok: true };
    const problem = `${answer.status} ${answer.text.slice(0, BODY_EXCERPT_CHARS)}`.trim();
    return { ok: false, retry: answer.status >= 500, problem };
  }

  /** Stops for good: buffers dropped, bytes only counted, the index with `failed` PUT once. */
  private giveUp(reason: string): void {
    if (this.failed !== undefined || this.doneWritten) return;
    this.failed = failedReason(reason);
    clearInterval(this.timer);
    this.stopper.abort();
    this.filling = undefined;
    this.inFlight = undefined;
    this.waiting.length = 0;
    this.spares.length = 0;
    this.log(`Gave up the log upload: ${this.failed}`);
    this.sayFailed();
    this.settle();
  }

  /** One PUT of the index with `failed`; at the end it is tried once more if it did not go. */
  private sayFailed(): void {
    const index = JSON.stringify(this.indexOf(false));
    this.lastWord = this.putOnce(this.plan.index, index, INDEX_TYPE, undefined).then(
      (result) => {
        if (result.ok) this.failedSaid = true;
      },
      () => undefined,
    );
  }

  private unstoredBytes(): number {
    const stored =
      this.storedSegments === 0
        ? 0
        : (this.storedSegments - 1) * this.plan.segmentBytes + this.lastSegmentBytes;
    return this.kept - stored;
  }

  private indexOf(done: boolean): LogUploadIndex {
    return {
      v: LOG_UPLOAD_VERSION,
      segments: this.storedSegments,
      bytes: this.written,
      lastSegmentBytes: this.lastSegmentBytes,
      done,
      ...(this.failed === undefined ? {} : { failed: this.failed }),
    };
  }
}

function waitOrStop(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** A network error, with its cause when it has one ("connect ECONNREFUSED 10.87.0.1:8333"). */
function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
  return `${error.message}${cause}`;
}
