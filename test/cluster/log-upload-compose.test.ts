// The attempt's log object composed of what its runner uploaded
// (src/controller/log-archive/upload-compose.ts), against SeaweedFS: the head and the tail slots
// in the runner's order, the cap's left-out line, an index the store does not bear out, an
// upload without an index, and the segments gone afterwards.
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { LOG_UPLOAD_VERSION, type LogUploadIndex } from "../../src/api/log-upload.js";
import {
  attemptLogKey,
  headSegmentKey,
  tailSlotKey,
  uploadIndexKey,
  uploadSegmentsPrefix,
} from "../../src/controller/log-archive/archive-keys.js";
import type { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { composeUploadedAttempt } from "../../src/controller/log-archive/upload-compose.js";
import { type ObjectStore, startObjectStore } from "../harness/object-store.js";

const MiB = 1024 * 1024;
const S = 5 * MiB;
let stateDir = "";
let server: ObjectStore;
let store: ArchiveStore;
let runs = 0;

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(tmpdir(), "upload-compose-"));
  server = await startObjectStore({ binDir: inject("binDir"), stateDir });
  store = server.client("logs/");
});
afterAll(async () => {
  store?.destroy();
  await server?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

/** A fresh attempt's key. */
function logKey(): string {
  runs += 1;
  return attemptLogKey("logs/", { namespace: "team-a", name: `run-${runs}`, uid: `uid-${runs}` }, 1);
}

/** Segment n's bytes: `size` bytes of lines that name it. */
function segment(n: number, size = S): Buffer {
  const line = `segment ${String(n).padStart(3, "0")} ${"x".repeat(80)}\n`;
  return Buffer.from(line.repeat(Math.ceil(size / line.length)).slice(0, size), "latin1");
}

/** The object past the cap: head segment 0, the left-out line, then the tail's kept bytes. */
function pastCap(leftOut: number, tail: Buffer[]): string {
  const kept = tail.reduce((sum, bytes) => sum + bytes.length, 0);
  const line = `\n[playbook-controller: ${leftOut} bytes of output left out here; the archive keeps the first ${S} and the last ${kept} bytes (maximums.archivedLogBytes)]\n`;
  return segment(0).toString("latin1") + line + Buffer.concat(tail).toString("latin1");
}

function index(segments: number, bytes: number, last: number, done = true): string {
  const body: LogUploadIndex = { v: LOG_UPLOAD_VERSION, segments, bytes, lastSegmentBytes: last, done };
  return JSON.stringify(body);
}

const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

describe("an attempt composed of its runner's upload", () => {
  it("holds the head segments in order, says their sha256, and removes the segments", async () => {
    const key = logKey();
    const parts = [segment(0), segment(1, 1234)];
    await store.putObject(headSegmentKey(key, 0), parts[0] as Buffer, "text/plain");
    await store.putObject(headSegmentKey(key, 1), parts[1] as Buffer, "text/plain");
    await store.putObject(uploadIndexKey(key), index(2, S + 1234, 1234), "application/json");
    const whole = Buffer.concat(parts);
    const composed = await composeUploadedAttempt(store, key, {
      head: 4,
      tail: 2,
      tailBytes: 2 * S,
      segmentBytes: S,
    });
    expect(composed).toMatchObject({
      bytes: whole.length,
      sha256: sha256(whole),
      leftOut: 0,
      short: undefined,
    });
    expect((await store.readBytes(key))?.equals(whole)).toBe(true);
    expect(await store.listKeys(uploadSegmentsPrefix(key))).toEqual([]);
  });

  it("past the cap keeps the head and the newest tail slots in order, the left-out line between", async () => {
    const key = logKey();
    // Head 1, tail 3: segment 1 was replaced in its slot by 4; segment 2's slot is the one
    // segment 5 goes to, never read.
    await store.putObject(headSegmentKey(key, 0), segment(0), "text/plain");
    await store.putObject(tailSlotKey(key, 1), segment(2), "text/plain");
    await store.putObject(tailSlotKey(key, 2), segment(3), "text/plain");
    await store.putObject(tailSlotKey(key, 0), segment(4, 999), "text/plain");
    await store.putObject(uploadIndexKey(key), index(5, 4 * S + 999, 999), "application/json");
    const composed = await composeUploadedAttempt(store, key, {
      head: 1,
      tail: 3,
      tailBytes: S + 999,
      segmentBytes: S,
    });
    expect(composed?.leftOut).toBe(2 * S);
    const text = (await store.readBytes(key))?.toString("latin1") ?? "";
    expect(text).toBe(pastCap(2 * S, [segment(3), segment(4, 999)]));
    expect(composed?.bytes).toBe(text.length);
  });

  it("fills the cap's tail with the end of the segment before the kept ones", async () => {
    const key = logKey();
    // Head 1, tail 4 slots: segment 1's slot went to segment 5; 2, 3, 4 and 5 are there, 2's
    // slot the one segment 6 goes to next.
    await store.putObject(headSegmentKey(key, 0), segment(0), "text/plain");
    await store.putObject(tailSlotKey(key, 1), segment(2), "text/plain");
    await store.putObject(tailSlotKey(key, 2), segment(3), "text/plain");
    await store.putObject(tailSlotKey(key, 3), segment(4), "text/plain");
    await store.putObject(tailSlotKey(key, 0), segment(5, 999), "text/plain");
    await store.putObject(uploadIndexKey(key), index(6, 5 * S + 999, 999), "application/json");
    const shape = { head: 1, tail: 4, tailBytes: S + 999 + 100, segmentBytes: S };
    const composed = await composeUploadedAttempt(store, key, shape);
    expect(composed?.leftOut).toBe(3 * S - 100);
    const text = (await store.readBytes(key))?.toString("latin1") ?? "";
    expect(text).toBe(pastCap(3 * S - 100, [segment(3).subarray(-100), segment(4), segment(5, 999)]));
  });

  it("never reads the slot the runner fills next: a pod lost between a segment's PUT and its index's left newer bytes there", async () => {
    const key = logKey();
    // Head 1, tail 3: the index names segments 0..3 (1 2 3 in slots 0 1 2); the runner then PUT
    // segment 4's first flush to slot 0, in place of segment 1, and was lost before its index.
    await store.putObject(headSegmentKey(key, 0), segment(0), "text/plain");
    await store.putObject(tailSlotKey(key, 0), segment(4, 500), "text/plain");
    await store.putObject(tailSlotKey(key, 1), segment(2), "text/plain");
    await store.putObject(tailSlotKey(key, 2), segment(3), "text/plain");
    await store.putObject(uploadIndexKey(key), index(4, 4 * S, S, false), "application/json");
    const composed = await composeUploadedAttempt(store, key, {
      head: 1,
      tail: 3,
      tailBytes: S + 999,
      segmentBytes: S,
    });
    expect(composed?.short).toBeUndefined();
    expect(composed?.leftOut).toBe(2 * S - 999);
    const text = (await store.readBytes(key))?.toString("latin1") ?? "";
    expect(text).toBe(pastCap(2 * S - 999, [segment(2).subarray(-999), segment(3)]));
  });

  it("ends the object where the store stops bearing the index out, and says which segment", async () => {
    const key = logKey();
    await store.putObject(headSegmentKey(key, 0), segment(0), "text/plain");
    await store.putObject(headSegmentKey(key, 2), segment(2, 10), "text/plain");
    await store.putObject(uploadIndexKey(key), index(3, 2 * S + 10, 10), "application/json");
    const composed = await composeUploadedAttempt(store, key, {
      head: 4,
      tail: 0,
      tailBytes: 0,
      segmentBytes: S,
    });
    expect(composed?.short).toBe("segment 1 is not in the store");
    expect(composed?.bytes).toBe(S);
    expect(composed?.received).toBe(2 * S + 10);
  });

  it("ends the object with a segment short of its size (its last flush), the segments after it left", async () => {
    const key = logKey();
    await store.putObject(headSegmentKey(key, 0), segment(0, 100), "text/plain");
    await store.putObject(headSegmentKey(key, 1), segment(1, 100), "text/plain");
    await store.putObject(uploadIndexKey(key), index(2, S + 100, 100), "application/json");
    const composed = await composeUploadedAttempt(store, key, {
      head: 4,
      tail: 0,
      tailBytes: 0,
      segmentBytes: S,
    });
    expect(composed?.short).toBe(`segment 0 holds 100 bytes, not ${S}`);
    expect((await store.readBytes(key))?.equals(segment(0, 100))).toBe(true);
  });

  it("without an index composes the head segments present from the first, and nothing when there are none", async () => {
    const key = logKey();
    await store.putObject(headSegmentKey(key, 0), segment(0), "text/plain");
    await store.putObject(headSegmentKey(key, 1), segment(1, 77), "text/plain");
    const composed = await composeUploadedAttempt(store, key, {
      head: 4,
      tail: 2,
      tailBytes: 2 * S,
      segmentBytes: S,
    });
    expect(composed).toMatchObject({ bytes: S + 77, index: undefined, short: undefined });
    expect(
      await composeUploadedAttempt(store, logKey(), { head: 4, tail: 2, tailBytes: 2 * S, segmentBytes: S }),
    ).toBeUndefined();
  });
});
