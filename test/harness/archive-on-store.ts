// The log archive on SeaweedFS for a test that runs a controller: the store started in a folder of
// its own, its keys in the test process's environment (the controller's, as the chart gives
// them), the controller's archive settings, and reading an object back whole.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { type ObjectStore, startObjectStore } from "./object-store.js";

export interface ArchiveOnStore {
  store: ObjectStore;
  /** The store's folder, the test's to use for other state too. */
  stateDir: string;
  /** startController's settings that turn the archive on, into this store. */
  controllerOptions: Record<string, string | boolean>;
  /** The object at this key (the bucket's root), whole; empty when there is none. */
  readObject(key: string): Promise<Buffer>;
  /** Stops the store and removes its folder. */
  stop(): Promise<void>;
}

export async function startArchiveOnStore(binDir: string, name: string): Promise<ArchiveOnStore> {
  const stateDir = mkdtempSync(path.join(tmpdir(), `${name}-`));
  const store = await startObjectStore({ binDir, stateDir });
  process.env.AWS_ACCESS_KEY_ID = store.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = store.secretAccessKey;
  return {
    store,
    stateDir,
    controllerOptions: {
      logArchiveBucket: store.bucket,
      logArchiveEndpoint: store.endpoint,
      logArchiveRegion: store.region,
      logArchiveForcePathStyle: true,
    },
    async readObject(key) {
      const client = store.client();
      try {
        const object = await client.getObject(key);
        const chunks: Buffer[] = [];
        for await (const chunk of object?.body ?? []) chunks.push(chunk as Buffer);
        return Buffer.concat(chunks);
      } finally {
        client.destroy();
      }
    },
    async stop() {
      await store.stop();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
