// An attempt's upload (src/controller/log-archive/attempt-upload.ts) against SeaweedFS's S3
// server: the object holds the bytes in order with the sha256 they were written with; past the
// cap the head, one left-out line and the tail; a store that goes away ends it within its bound.
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { capPlan } from "../../src/controller/log-archive/archive-cap.js";
import { ArchiveStoreError, AttemptUpload } from "../../src/controller/log-archive/attempt-upload.js";
import { type ObjectStore, startObjectStore } from "../harness/object-store.js";

const MiB = 1024 * 1024;
let stateDir = "";
let store: ObjectStore;

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(tmpdir(), "archive-upload-"));
  store = await startObjectStore({ binDir: inject("binDir"), stateDir });
});
afterAll(async () => {
  await store?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

/** Output as a run prints it: numbered lines, in uneven chunks. */
function output(bytes: number): Buffer {
  const lines: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const line = `line ${i} ${"x".repeat(i % 97)}\n`;
    lines.push(line);
    size += line.length;
  }
  return Buffer.from(lines.join("")).subarray(0, bytes);
}

async function feed(upload: AttemptUpload, bytes: Buffer): Promise<void> {
  for (let at = 0, step = 1; at < bytes.length; at += step, step = ((step * 7 + 13) % (300 * 1024)) + 1)
    await upload.write(bytes.subarray(at, at + step));
}

async function read(key: string): Promise<Buffer> {
  const client = store.client();
  const object = await client.getObject(key);
  const chunks: Buffer[] = [];
  for await (const chunk of object?.body ?? []) chunks.push(chunk as Buffer);
  client.destroy();
  return Buffer.concat(chunks);
}

const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

describe("an attempt's upload", () => {
  it("keeps every byte in order, its sha256 the object's", async () => {
    const client = store.client();
    const bytes = output(19 * MiB + 12345);
    const upload = new AttemptUpload({ store: client, key: "whole/attempt-1.log", capBytes: 1024 ** 3 });
    await feed(upload, bytes);
    const outcome = await upload.finish();
    expect(outcome).toEqual({
      bytes: bytes.length,
      sha256: sha256(bytes),
      leftOut: 0,
      received: bytes.length,
    });
    expect(sha256(await read("whole/attempt-1.log"))).toBe(sha256(bytes));
    client.destroy();
  });

  it("keeps a small output as one object", async () => {
    const client = store.client();
    const upload = new AttemptUpload({ store: client, key: "small/attempt-1.log", capBytes: 1024 ** 3 });
    await upload.write(Buffer.from("hello\n"));
    expect((await upload.finish()).bytes).toBe(6);
    expect((await read("small/attempt-1.log")).toString()).toBe("hello\n");
    client.destroy();
  });

  it("past the cap keeps the head, one line saying how much was left out, and the tail", async () => {
    const client = store.client();
    const cap = 16 * MiB;
    const bytes = output(45 * MiB + 777);
    const key = "capped/attempt-1.log";
    const upload = new AttemptUpload({ store: client, key, capBytes: cap });
    await feed(upload, bytes);
    const outcome = await upload.finish();
    const object = await read(key);
    const plan = capPlan(cap);
    expect(object.length).toBe(outcome.bytes);
    expect(object.length).toBeLessThanOrEqual(cap);
    expect(sha256(object)).toBe(outcome.sha256);
    const leftOut = bytes.length - plan.headBytes - plan.tailBytes;
    expect(outcome.leftOut).toBe(leftOut);
    expect(object.subarray(0, plan.headBytes).equals(bytes.subarray(0, plan.headBytes))).toBe(true);
    expect(
      object.subarray(object.length - plan.tailBytes).equals(bytes.subarray(bytes.length - plan.tailBytes)),
    ).toBe(true);
    const line = object.subarray(plan.headBytes, object.length - plan.tailBytes).toString();
    expect(line).toContain(`${leftOut} bytes of output left out here`);
    // The temporary tail segments are gone.
    expect(await client.listKeys(`${key}.tail/`)).toEqual([]);
    client.destroy();
  });

  it("keeps an output between the head and the cap whole", async () => {
    const client = store.client();
    const bytes = output(15 * MiB);
    const upload = new AttemptUpload({ store: client, key: "under/attempt-1.log", capBytes: 16 * MiB });
    await feed(upload, bytes);
    const outcome = await upload.finish();
    expect(outcome.leftOut).toBe(0);
    expect(sha256(await read("under/attempt-1.log"))).toBe(sha256(bytes));
    client.destroy();
  });

  it("ends with ArchiveStoreError within its bound when the store goes away", async () => {
    const client = store.client();
    const upload = new AttemptUpload({
      store: client,
      key: "down/attempt-1.log",
      capBytes: 1024 ** 3,
      retry: { tries: 3, firstWaitMs: 500 },
    });
    await feed(upload, output(9 * MiB));
    await store.stop();
    const start = Date.now();
    try {
      await expect(
        (async () => {
          await feed(upload, output(17 * MiB));
          await upload.finish();
        })(),
      ).rejects.toBeInstanceOf(ArchiveStoreError);
      expect(Date.now() - start).toBeLessThan(60_000);
    } finally {
      await store.start();
      client.destroy();
    }
  }, 120_000);
});
