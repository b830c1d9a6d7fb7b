// The log archive's store (src/controller/log-archive/archive-store.ts) against SeaweedFS's S3
// server as the tests and the dev cluster run it (test/harness/object-store.ts): an attempt's
// multipart upload, the run's folder deleted with its uploads in progress, a key not the
// archive's refused, a presigned PUT bound to its one key, an object composed of others by the
// store, and a store that goes away answered within the call's deadline.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { attemptLogKey, runPrefix } from "../../src/controller/log-archive/archive-keys.js";
import { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { type ObjectStore, startObjectStore } from "../harness/object-store.js";

let stateDir = "";
let store: ObjectStore;
const run = { namespace: "team-a", name: "nightly", uid: "0b9c6f2e-1111-4a4a-9c9c-000000000001" };

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(tmpdir(), "object-store-"));
  store = await startObjectStore({ binDir: inject("binDir"), stateDir });
});
afterAll(async () => {
  await store?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

describe("the archive's store on SeaweedFS", () => {
  it("keeps an attempt's parts as one object, and deletes the run's folder with its uploads in progress", async () => {
    const client = store.client("logs/");
    const key = attemptLogKey(client.prefix, run, 1);
    const upload = await client.startUpload(key, "text/plain");
    const head = Buffer.alloc(5 << 20, "a");
    const parts = [
      await client.uploadPart(key, upload, 1, head),
      await client.uploadPart(key, upload, 2, Buffer.from("end\n")),
    ];
    await client.completeUpload(key, upload, parts);
    expect(await client.headObject(key)).toEqual({ bytes: head.length + 4 });

    const second = attemptLogKey(client.prefix, run, 2);
    await client.startUpload(second, "text/plain");
    expect((await client.listUploads(runPrefix(client.prefix, run))).map((u) => u.key)).toEqual([second]);

    expect(await client.deletePrefix(runPrefix(client.prefix, run))).toBe(1);
    expect(await client.listKeys(runPrefix(client.prefix, run))).toEqual([]);
    expect(await client.listUploads(runPrefix(client.prefix, run))).toEqual([]);
    client.destroy();
  });

  it("refuses a key that is not the archive's", async () => {
    const stranger = new ArchiveStore({
      endpoint: store.endpoint,
      bucket: store.bucket,
      region: store.region,
      prefix: "",
      forcePathStyle: true,
      credentials: { accessKeyId: "AKSTRANGER", secretAccessKey: "not-the-archive-key" },
    });
    await expect(
      stranger.putObject("team-b/other/x/attempt-1.log", "overwritten", "text/plain"),
    ).rejects.toMatchObject({
      $metadata: { httpStatusCode: 403 },
    });
    stranger.destroy();
  });

  it("lets a presigned URL's holder PUT its one object, and no other key with the same signature", async () => {
    const client = store.client("logs/");
    const key = attemptLogKey(client.prefix, run, 3);
    const url = await client.presignPut(`${key}.seg/00000`, 600);
    expect((await fetch(url, { method: "PUT", body: "first\n" })).status).toBe(200);
    // The same key again: the holder replaces what it put (the runner's growing last segment).
    expect((await fetch(url, { method: "PUT", body: "first\nsecond\n" })).status).toBe(200);
    expect(await client.readText(`${key}.seg/00000`)).toBe("first\nsecond\n");

    const other = attemptLogKey(client.prefix, { ...run, name: "other-run" }, 1);
    const forged = url.replace(encodeURI(`${key}.seg/00000`), encodeURI(other));
    expect(forged).not.toBe(url);
    const refused = await fetch(forged, { method: "PUT", body: "overwritten" });
    expect(refused.status).toBe(403);
    expect(await client.headObject(other)).toBeUndefined();
    // Nor a read of its own object: the signature is for PUT.
    expect((await fetch(url)).status).toBe(403);
    client.destroy();
  });

  it("composes an object of others in order, copied by the store", async () => {
    const client = store.client("logs/");
    const key = attemptLogKey(client.prefix, run, 4);
    const first = Buffer.alloc(5 << 20, "a");
    await client.putObject(`${key}.seg/00000`, first, "text/plain");
    await client.putObject(`${key}.seg/00001`, "tail\n", "text/plain");
    await client.composeObject(
      key,
      [
        { key: `${key}.seg/00000` },
        { bytes: Buffer.from("middle\n".repeat(800_000)) },
        { key: `${key}.seg/00001` },
      ],
      "text/plain",
    );
    const whole = await client.readText(key);
    expect(whole).toBe(`${first.toString()}${"middle\n".repeat(800_000)}tail\n`);
    await expect(
      client.composeObject(`${key}.none`, [{ key: `${key}.seg/99999` }], "text/plain"),
    ).rejects.toThrow();
    expect(await client.listUploads(`${key}.none`)).toEqual([]);
    client.destroy();
  });

  it("answers within the call's deadline while the store is down, and works again once it is back", async () => {
    const client = store.client();
    await store.stop();
    const down = Date.now();
    await expect(client.putObject("probe", Buffer.from("x"), "text/plain")).rejects.toThrow();
    expect(Date.now() - down).toBeLessThan(5000 + 2000);
    await store.start();
    await client.putObject("probe", Buffer.from("x"), "text/plain");
    expect(await client.headObject("probe")).toEqual({ bytes: 1 });
    client.destroy();
  });
});
