// One attempt's output on its way into the archive: bytes in the order the log stream gives them,
// cut into parts of PART_BYTES for a multipart upload, hashed (sha256) as they are written. At most
// one part is being filled and one is in flight: write() waits while the part before is still
// uploading, so the caller stops reading the stream (the kubelet keeps the bytes in its files).
// Past the head the bytes go to temporary segments (archive-cap.ts) so the cap can keep the tail.
// Each store call is tried again with backoff within a bound; past it the upload throws
// ArchiveStoreError and the caller aborts it.
import { createHash, type Hash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import {
  type CapPlan,
  capPlan,
  LEFT_OUT_LINE_RESERVE,
  leftOutLine,
  PART_BYTES,
  segmentsOutOfWindow,
  tailSkip,
} from "./archive-cap.js";
import type { ArchiveStore, UploadedPart } from "./archive-store.js";

/** How store calls are tried again: this many tries, the waits between them doubling from `firstWaitMs`. */
export interface RetryBound {
  tries: number;
  firstWaitMs: number;
}

export const DEFAULT_RETRY: RetryBound = { tries: 3, firstWaitMs: 2_000 };

/**
 * A chunk smaller than this is copied into a block of this size rather than kept: a stream's
 * chunk is a slice of a larger read (a TLS record's buffer), and a part held as thousands of
 * slices would hold all their reads (some 16 KiB each) alive until it is uploaded.
 */
const BLOCK_BYTES = 64 * 1024;

/** The store did not answer or refused, past the retries. */
export class ArchiveStoreError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ArchiveStoreError";
  }
}

export interface UploadOutcome {
  /** Bytes in the object. */
  bytes: number;
  /** Hex sha256 of the object's bytes. */
  sha256: string;
  /** Bytes the cap left out (0: the object holds every byte that arrived). */
  leftOut: number;
  /** Bytes that arrived from the stream. */
  received: number;
}

interface Segment {
  key: string;
  bytes: number;
}

export class AttemptUpload {
  private readonly store: ArchiveStore;
  private readonly key: string;
  private readonly partBytes: number;
  private readonly plan: CapPlan;
  private readonly retry: RetryBound;
  private readonly signal: AbortSignal | undefined;
  private readonly hash: Hash = createHash("sha256");
  private uploadId: string | undefined;
  private readonly parts: UploadedPart[] = [];
  private filling: Buffer[] = [];
  private fillingBytes = 0;
  /** The block small chunks are copied into, and how much of it is filled. */
  private block: Buffer | undefined;
  private blockBytes = 0;
  private inFlight: Promise<void> | undefined;
  private received = 0;
  /** Bytes in the object's parts (and in the part in flight). */
  private written = 0;
  private readonly segments: Segment[] = [];
  private segmentCount = 0;
  /** Bytes of tail segments deleted as they fell out of the window. */
  private dropped = 0;

  constructor(args: {
    store: ArchiveStore;
    key: string;
    capBytes: number;
    partBytes?: number;
    retry?: RetryBound;
    signal?: AbortSignal;
  }) {
    this.store = args.store;
    this.key = args.key;
    this.partBytes = args.partBytes ?? PART_BYTES;
    this.plan = capPlan(args.capBytes, this.partBytes);
    this.retry = args.retry ?? DEFAULT_RETRY;
    this.signal = args.signal;
  }

  /** Bytes taken from the stream so far. */
  get receivedBytes(): number {
    return this.received;
  }

  /** The temporary tail segments' keys start with this (deleted with the upload's end). */
  get segmentPrefix(): string {
    return `${this.key}.tail/`;
  }

  /** Takes a chunk of the stream; resolves once the caller may read on. */
  async write(chunk: Buffer): Promise<void> {
    this.received += chunk.length;
    let rest = chunk;
    while (rest.length > 0) {
      const room = this.partBytes - this.fillingBytes;
      const taken = rest.subarray(0, room);
      this.append(taken);
      rest = rest.subarray(taken.length);
      if (this.fillingBytes === this.partBytes) await this.flushPart();
    }
  }

  /** Bytes into the part being filled (they fit): a small chunk copied into the block, a large one kept. */
  private append(bytes: Buffer): void {
    this.fillingBytes += bytes.length;
    if (bytes.length >= BLOCK_BYTES) {
      this.sealBlock();
      this.filling.push(bytes);
      return;
    }
    let rest = bytes;
    while (rest.length > 0) {
      if (this.block === undefined) {
        this.block = Buffer.allocUnsafeSlow(BLOCK_BYTES);
        this.blockBytes = 0;
      }
      const copied = rest.copy(this.block, this.blockBytes);
      this.blockBytes += copied;
      rest = rest.subarray(copied);
      if (this.blockBytes === BLOCK_BYTES) this.sealBlock();
    }
  }

  /** The block's filled bytes join the part; the next small chunk starts a new block. */
  private sealBlock(): void {
    if (this.block !== undefined && this.blockBytes > 0)
      this.filling.push(this.block.subarray(0, this.blockBytes));
    this.block = undefined;
    this.blockBytes = 0;
  }

  /** The stream ended: the object is completed from what arrived; resolves with what it holds. */
  async finish(): Promise<UploadOutcome> {
    await this.inFlight;
    this.inFlight = undefined;
    if (this.segments.length > 0 || this.dropped > 0) await this.foldTail();
    const last = this.takeFilling();
    if (this.uploadId === undefined) {
      this.hash.update(last);
      this.written += last.length;
      await this.call(`put ${this.key}`, () => this.store.putObject(this.key, last, "text/plain"));
    } else {
      if (last.length > 0) await this.uploadPart(last);
      const uploadId = this.uploadId;
      await this.call(`complete ${this.key}`, () =>
        this.store.completeUpload(this.key, uploadId, this.parts),
      );
    }
    const leftOut = this.received - (this.written - this.leftOutLineBytes);
    return { bytes: this.written, sha256: this.hash.digest("hex"), leftOut, received: this.received };
  }

  /** Ends the upload without an object: the parts and segments go (best effort, once each). */
  async abort(): Promise<void> {
    await this.inFlight?.catch(() => undefined);
    const uploadId = this.uploadId;
    this.uploadId = undefined;
    if (uploadId !== undefined) await this.store.abortUpload(this.key, uploadId).catch(() => undefined);
    await this.store.deletePrefix(this.segmentPrefix, { uploads: false }).catch(() => undefined);
  }

  private leftOutLineBytes = 0;

  private takeFilling(): Buffer {
    this.sealBlock();
    const buffer = Buffer.concat(this.filling, this.fillingBytes);
    this.filling = [];
    this.fillingBytes = 0;
    return buffer;
  }

  /** A full part: into the object while the head lasts, else a tail segment. Waits for the one in flight. */
  private async flushPart(): Promise<void> {
    await this.inFlight;
    const part = this.takeFilling();
    const inHead = this.written < this.plan.headBytes && this.segments.length === 0 && this.dropped === 0;
    this.inFlight = inHead ? this.uploadPart(part) : this.putSegment(part);
    // A failure surfaces at the next write or at finish; keep it from being unhandled meanwhile.
    this.inFlight.catch(() => undefined);
  }

  private async uploadPart(part: Buffer): Promise<void> {
    this.hash.update(part);
    this.written += part.length;
    if (this.uploadId === undefined)
      this.uploadId = await this.call(`start ${this.key}`, () =>
        this.store.startUpload(this.key, "text/plain"),
      );
    const uploadId = this.uploadId;
    const number = this.parts.length + 1;
    this.parts.push(
      await this.call(`part ${number} of ${this.key}`, () =>
        this.store.uploadPart(this.key, uploadId, number, part),
      ),
    );
  }

  private async putSegment(part: Buffer): Promise<void> {
    const key = `${this.segmentPrefix}${String(this.segmentCount++).padStart(8, "0")}`;
    await this.call(`put ${key}`, () => this.store.putObject(key, part, "application/octet-stream"));
    this.segments.push({ key, bytes: part.length });
    const drop = segmentsOutOfWindow(
      this.segments.map((s) => s.bytes),
      0,
      this.plan.tailBytes,
    );
    for (const segment of this.segments.splice(0, drop)) {
      this.dropped += segment.bytes;
      await this.call(`delete ${segment.key}`, () => this.store.deleteObject(segment.key));
    }
  }

  /**
   * The output went past the head: the segments (and the bytes in memory after them) are read
   * back into the object, past the cap only the tail's, after the left-out line.
   */
  private async foldTail(): Promise<void> {
    const pending = this.takeFilling();
    const kept = this.segments.reduce((sum, s) => sum + s.bytes, 0) + pending.length;
    const afterHead = this.dropped + kept;
    let skip = 0;
    if (afterHead > this.plan.tailBytes + LEFT_OUT_LINE_RESERVE) {
      skip = tailSkip(kept, this.plan.tailBytes);
      const line = Buffer.from(leftOutLine(this.dropped + skip, this.plan));
      this.leftOutLineBytes = line.length;
      await this.pushFinal(line);
    }
    for (const segment of this.segments) {
      const body = await this.readSegment(segment.key);
      const from = Math.min(skip, body.length);
      skip -= from;
      await this.pushFinal(body.subarray(from));
    }
    await this.pushFinal(pending.subarray(Math.min(skip, pending.length)));
    await this.store.deletePrefix(this.segmentPrefix, { uploads: false }).catch(() => undefined);
    this.segments.length = 0;
  }

  /** Bytes for the object during foldTail: into full parts as they fill, the rest left in `filling`. */
  private async pushFinal(bytes: Buffer): Promise<void> {
    let rest = bytes;
    while (rest.length > 0) {
      const taken = rest.subarray(0, this.partBytes - this.fillingBytes);
      this.append(taken);
      rest = rest.subarray(taken.length);
      if (this.fillingBytes === this.partBytes) await this.uploadPart(this.takeFilling());
    }
  }

  private async readSegment(key: string): Promise<Buffer> {
    return this.call(`read ${key}`, async () => {
      const object = await this.store.getObject(key);
      if (!object) throw new Error(`segment ${key} is missing`);
      const chunks: Buffer[] = [];
      for await (const chunk of object.body) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks);
    });
  }

  /** One store call, tried again with backoff within the bound. */
  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    let wait = this.retry.firstWaitMs;
    for (let attempt = 1; ; attempt++) {
      if (this.signal?.aborted) throw new ArchiveStoreError(`${what}: stopped`);
      try {
        return await fn();
      } catch (error) {
        if (attempt >= this.retry.tries)
          throw new ArchiveStoreError(
            `${what} failed ${attempt} times: ${error instanceof Error ? error.message : String(error)}`,
          );
      }
      await sleep(wait, undefined, this.signal ? { signal: this.signal } : {}).catch(() => undefined);
      wait *= 2;
    }
  }
}
