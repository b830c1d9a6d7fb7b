// The runner's own upload of its log (src/pod-runner/log-upload.ts) against SeaweedFS's S3 server,
// through URLs presigned by the archive's store as the controller will hand them out: the head's
// segments in order, a growing segment that shows in the store before the run ends, the tail's
// slots reused in turn, a refused signature given up at once, and a store that goes away while
// the run writes on without waiting and without holding more than its waiting segments and two.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  type LogUploadIndex,
  LogUploadIndexSchema,
  type LogUploadPlan,
  MIN_SEGMENT_BYTES,
} from "../../src/api/log-upload.js";
import type { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { type PutBytes, putBytes } from "../../src/pod-runner/http-put.js";
import { LogUploader } from "../../src/pod-runner/log-upload.js";
import { type ObjectStore, startObjectStore } from "../harness/object-store.js";

const SEGMENT = MIN_SEGMENT_BYTES;
const FLUSH_MS = 200;
const LINE_BYTES = 100;

let stateDir = "";
let store: ObjectStore;
let client: ArchiveStore;

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(tmpdir(), "log-upload-"));
  store = await startObjectStore({ binDir: inject("binDir"), stateDir });
  client = store.client("logs/");
});
afterAll(async () => {
  client?.destroy();
  await store?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

interface PlannedKeys {
  head: string[];
  tail: string[];
  index: string;
}

/** A plan for one attempt's folder, its URLs presigned by the archive's store. */
async function planFor(folder: string, slots: { head: number; tail: number }) {
  const base = `${client.prefix}${folder}/attempt-1.log.seg`;
  const keys: PlannedKeys = {
    head: Array.from({ length: slots.head }, (_, i) => `${base}/h-${String(i).padStart(5, "0")}`),
    tail: Array.from({ length: slots.tail }, (_, i) => `${base}/t-${String(i).padStart(3, "0")}`),
    index: `${base}/index.json`,
  };
  const presign = (key: string) => client.presignPut(key, 600);
  const plan: LogUploadPlan = {
    v: 1,
    segmentBytes: SEGMENT,
    flushMs: FLUSH_MS,
    head: await Promise.all(keys.head.map(presign)),
    tail: await Promise.all(keys.tail.map(presign)),
    index: await presign(keys.index),
  };
  return { plan, keys };
}

/** Numbered 100-byte lines, `bytes` long (a multiple of 100). */
function numberedLines(bytes: number): Buffer {
  const data = Buffer.alloc(bytes);
  const filler = "x".repeat(LINE_BYTES - 11);
  for (let i = 0; i * LINE_BYTES < bytes; i++)
    data.write(`${String(i).padStart(9, "0")} ${filler}\n`, i * LINE_BYTES, "latin1");
  return data;
}

/** A fixed pseudo-random source (mulberry32), so that a failure can be replayed. */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The data cut into chunks of 1 B .. 100 KiB. */
function* randomChunks(data: Buffer, random: () => number): Generator<Buffer> {
  let at = 0;
  while (at < data.length) {
    const size = 1 + Math.floor(random() * 100 * 1024);
    yield data.subarray(at, at + size);
    at += size;
  }
}

/**
 * Writes as a runner's output arrives, some 25 MiB/s: a turn of the event loop after each chunk
 * and a pause after each MiB. `after` sees the uploader after every write.
 */
async function writeAsOutput(
  uploader: LogUploader,
  data: Buffer,
  options: { seed: number; pauseMs?: number; after?: (writeMs: number) => void },
): Promise<void> {
  let sincePause = 0;
  for (const chunk of randomChunks(data, seeded(options.seed))) {
    const started = performance.now();
    uploader.write(chunk);
    options.after?.(performance.now() - started);
    sincePause += chunk.length;
    await new Promise((resolve) => setImmediate(resolve));
    if (sincePause >= 1 << 20) {
      sincePause = 0;
      await sleep(options.pauseMs ?? 40);
    }
  }
}

async function readObject(key: string): Promise<Buffer | undefined> {
  const object = await client.getObject(key);
  if (!object) return undefined;
  const chunks: Buffer[] = [];
  for await (const chunk of object.body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

async function readIndex(key: string): Promise<LogUploadIndex | undefined> {
  const text = await client.readText(key);
  return text === undefined ? undefined : LogUploadIndexSchema.parse(JSON.parse(text));
}

/** The uploader's PUT, noting each URL it PUTs to. */
function countingPut(): { put: PutBytes; calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    put: (url, body, contentType, signal) => {
      calls.push(url);
      return putBytes(url, body, contentType, signal);
    },
  };
}

describe("the runner's log upload through presigned URLs", () => {
  it("puts the head's segments in order and ends with an index that says done", async () => {
    const { plan, keys } = await planFor("team-a/head-only/uid-1", { head: 6, tail: 0 });
    const data = numberedLines(178_258 * LINE_BYTES);
    const uploader = new LogUploader(plan, { retry: { tries: 3, firstWaitMs: 200 } });
    await writeAsOutput(uploader, data, { seed: 1 });
    const index = await uploader.finish(30_000);

    const full = 3;
    const last = data.length - full * SEGMENT;
    expect(index).toEqual({ v: 1, segments: 4, bytes: data.length, lastSegmentBytes: last, done: true });
    expect(await readIndex(keys.index)).toEqual(index);
    const stored = await Promise.all(keys.head.slice(0, 4).map(readObject));
    expect(stored.map((b) => b?.length)).toEqual([SEGMENT, SEGMENT, SEGMENT, last]);
    expect(Buffer.concat(stored as Buffer[]).equals(data)).toBe(true);
    expect(await client.headObject(keys.head[4] as string)).toBeUndefined();
  });

  it("shows a growing segment and its index in the store within a few flushes, before the run ends", async () => {
    const { plan, keys } = await planFor("team-a/flush/uid-2", { head: 2, tail: 0 });
    const uploader = new LogUploader(plan);
    const first = numberedLines(10 * LINE_BYTES);
    uploader.write(first);
    const written = Date.now();
    const seen = async (bytes: number) => {
      for (;;) {
        const index = await readIndex(keys.index);
        if (index?.lastSegmentBytes === bytes) return index;
        if (Date.now() - written > 10_000) return index;
        await sleep(FLUSH_MS / 4);
      }
    };
    expect(await seen(first.length)).toEqual({
      v: 1,
      segments: 1,
      bytes: first.length,
      lastSegmentBytes: first.length,
      done: false,
    });
    expect(Date.now() - written).toBeLessThan(10 * FLUSH_MS);
    expect((await readObject(keys.head[0] as string))?.equals(first)).toBe(true);

    // It grows in place: the next flush replaces the object with more of the same segment.
    const more = numberedLines(20 * LINE_BYTES).subarray(first.length);
    uploader.write(more);
    expect((await seen(first.length + more.length))?.segments).toBe(1);
    expect((await readObject(keys.head[0] as string))?.equals(Buffer.concat([first, more]))).toBe(true);

    const index = await uploader.finish(10_000);
    expect(index).toMatchObject({ segments: 1, lastSegmentBytes: first.length + more.length, done: true });
    expect(await readIndex(keys.index)).toEqual(index);
  });

  it("keeps the head and reuses the tail's slots in turn", async () => {
    const { plan, keys } = await planFor("team-a/tail/uid-3", { head: 2, tail: 2 });
    const data = numberedLines(((6 * SEGMENT + 1_000_000) / LINE_BYTES) * LINE_BYTES);
    const uploader = new LogUploader(plan, { retry: { tries: 3, firstWaitMs: 200 } });
    await writeAsOutput(uploader, data, { seed: 3 });
    const index = await uploader.finish(30_000);

    const segment = (n: number) => data.subarray(n * SEGMENT, (n + 1) * SEGMENT);
    expect(index).toEqual({ v: 1, segments: 7, bytes: data.length, lastSegmentBytes: 1_000_000, done: true });
    expect(await readIndex(keys.index)).toEqual(index);
    expect((await readObject(keys.head[0] as string))?.equals(segment(0))).toBe(true);
    expect((await readObject(keys.head[1] as string))?.equals(segment(1))).toBe(true);
    // Segments 2, 3, 4 came and went: slot 0 holds segment 6, slot 1 segment 5.
    expect((await readObject(keys.tail[0] as string))?.equals(segment(6))).toBe(true);
    expect((await readObject(keys.tail[1] as string))?.equals(segment(5))).toBe(true);
  });

  it("gives up at once when the store refuses a URL's signature (403)", async () => {
    const { plan, keys } = await planFor("team-a/forged/uid-4", { head: 2, tail: 0 });
    // The signature of h-00000 on another key's path: the store refuses it.
    const forged = (plan.head[0] as string).replace("/h-00000", "/h-00001");
    expect(forged).not.toBe(plan.head[0]);
    const counted = countingPut();
    const logged: string[] = [];
    const uploader = new LogUploader(
      { ...plan, head: [forged, plan.head[1] as string] },
      { put: counted.put, retry: { tries: 3, firstWaitMs: 200 }, log: (line) => logged.push(line) },
    );
    uploader.write(numberedLines(10 * LINE_BYTES));
    const started = Date.now();
    const index = await uploader.finish(10_000);

    // One PUT of the segment, none again, and no wait for a retry.
    expect(counted.calls.filter((url) => url === forged)).toHaveLength(1);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(index.failed).toMatch(/^the store refused the PUT of segment 0: 403 /);
    expect(index.done).toBe(false);
    expect(logged).toHaveLength(1);
    expect(await client.headObject(keys.head[1] as string)).toBeUndefined();
    expect(await readIndex(keys.index)).toMatchObject({ segments: 0, done: false, failed: index.failed });
    // Given up: later output is counted, not kept.
    uploader.write(Buffer.from("after\n"));
    expect(uploader.heldBytes).toBe(0);
    expect(uploader.index.bytes).toBe(10 * LINE_BYTES + 6);
  });

  it("counts what comes past the head when the plan has no tail, and keeps the head", async () => {
    const { plan, keys } = await planFor("team-a/no-tail/uid-9", { head: 1, tail: 0 });
    const data = numberedLines(SEGMENT + 10 * LINE_BYTES);
    const uploader = new LogUploader(plan);
    await writeAsOutput(uploader, data, { seed: 9 });
    // The head's one segment (its PUT may still be in flight), and no buffer for what follows it.
    expect(uploader.heldBytes).toBeLessThanOrEqual(SEGMENT);
    const index = await uploader.finish(10_000);
    expect(uploader.heldBytes).toBe(0);
    expect(index).toEqual({ v: 1, segments: 1, bytes: data.length, lastSegmentBytes: SEGMENT, done: true });
    expect((await readObject(keys.head[0] as string))?.equals(data.subarray(0, SEGMENT))).toBe(true);
  });

  it("ends an empty log with an index of no segments", async () => {
    const { plan, keys } = await planFor("team-a/empty/uid-8", { head: 1, tail: 0 });
    const index = await new LogUploader(plan).finish(10_000);
    expect(index).toEqual({ v: 1, segments: 0, bytes: 0, lastSegmentBytes: 0, done: true });
    expect(await readIndex(keys.index)).toEqual(index);
    expect(await client.headObject(keys.head[0] as string)).toBeUndefined();
  });

  // Last: the store goes away, and comes back in the last case.
  describe("with the store gone", () => {
    it("never makes the run wait nor holds more than its waiting segments and two, and ends failed", async () => {
      const { plan } = await planFor("team-a/down/uid-5", { head: 16, tail: 4 });
      await store.stop();
      // The default retries (1 s, then 2 s): the writer fills segments faster than they run out.
      const uploader = new LogUploader(plan, { maxWaiting: 1 });
      let mostHeld = 0;
      let slowestWriteMs = 0;
      const loop = performance.now();
      await writeAsOutput(uploader, numberedLines(40 * 1024 * 1024), {
        seed: 5,
        pauseMs: 5,
        after: (writeMs) => {
          mostHeld = Math.max(mostHeld, uploader.heldBytes);
          slowestWriteMs = Math.max(slowestWriteMs, writeMs);
        },
      });
      const loopMs = performance.now() - loop;

      expect(mostHeld).toBeLessThanOrEqual(3 * SEGMENT);
      expect(slowestWriteMs).toBeLessThan(50);
      expect(loopMs).toBeLessThan(15_000);
      expect(uploader.index.failed).toMatch(
        /^the store did not keep up: \d+ bytes of the log were waiting for it, the oldest since \S+ \(\d+ ms\)$/,
      );
      expect(uploader.heldBytes).toBe(0);
      const finishing = Date.now();
      const index = await uploader.finish(2000);
      expect(Date.now() - finishing).toBeLessThan(2500);
      expect(index).toMatchObject({ bytes: 40 * 1024 * 1024, done: false, segments: 0 });
    });

    it("gives up within finish's bound when the store does not take the last bytes", async () => {
      const { plan } = await planFor("team-a/down/uid-6", { head: 2, tail: 0 });
      const uploader = new LogUploader(plan);
      uploader.write(numberedLines(10 * LINE_BYTES));
      const finishing = Date.now();
      const index = await uploader.finish(2000);
      expect(Date.now() - finishing).toBeLessThan(2500);
      expect(index).toMatchObject({ segments: 0, bytes: 1000, done: false });
      expect(index.failed).toBe("the store did not take the last 1000 bytes within 2000 ms");
    });

    it("loses nothing when the store is back within the retries", async () => {
      const { plan, keys } = await planFor("team-a/back/uid-7", { head: 2, tail: 0 });
      const counted = countingPut();
      // Waits of 1, 2, 4, 8, 16 and 32 s: a minute for the store to come back.
      const uploader = new LogUploader(plan, {
        put: counted.put,
        retry: { tries: 7, firstWaitMs: 1000 },
      });
      const data = numberedLines(10 * LINE_BYTES);
      uploader.write(data);
      const finishing = uploader.finish(100_000);
      await sleep(500);
      await store.start();
      const index = await finishing;

      expect(index).toEqual({
        v: 1,
        segments: 1,
        bytes: data.length,
        lastSegmentBytes: data.length,
        done: true,
      });
      expect(counted.calls.filter((url) => url === plan.head[0]).length).toBeGreaterThan(1);
      expect((await readObject(keys.head[0] as string))?.equals(data)).toBe(true);
      expect(await readIndex(keys.index)).toEqual(index);
    });
  });
});
