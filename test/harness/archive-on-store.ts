// The log archive on SeaweedFS for a test that runs a controller: the store started in a folder of
// its own, its keys in the test process's environment (the controller's, as the chart gives
// them), the controller's archive settings, and reading an object back whole.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { type ObjectStore, startObjectStore } from "./object-store.js";
import { publishStoreOnNode } from "./real-node/store-on-node.js";

export interface ArchiveOnStore {
  store: ObjectStore;
  /** The store's folder, the test's to use for other state too. */
  stateDir: string;
  /**
   * The store as the real node's pods reach it (store-on-node.ts), when `options.node` names a
   * cluster with a real node; then controllerOptions carry it as logArchivePodEndpoint.
   */
  podEndpoint?: string;
  /** startController's settings that turn the archive on, into this store. */
  controllerOptions: Record<string, string | boolean>;
  /** The object at this key (the bucket's root), whole; empty when there is none. */
  readObject(key: string): Promise<Buffer>;
  /** Stops the relays to the node, if any, and the store, and removes its folder. */
  stop(): Promise<void>;
}

export async function startArchiveOnStore(
  binDir: string,
  name: string,
  /** node: the state folder of the cluster whose real node's pods are to reach the store. */
  options: { node?: string } = {},
): Promise<ArchiveOnStore> {
  const stateDir = mkdtempSync(path.join(tmpdir(), `${name}-`));
  const store = await startObjectStore({ binDir, stateDir });
  process.env.AWS_ACCESS_KEY_ID = store.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = store.secretAccessKey;
  const onNode = options.node
    ? await publishStoreOnNode(options.node, store.endpoint).catch(async (error: unknown) => {
        await store.stop();
        throw error;
      })
    : undefined;
  return {
    store,
    stateDir,
    ...(onNode ? { podEndpoint: onNode.podEndpoint } : {}),
    controllerOptions: {
      logArchiveBucket: store.bucket,
      logArchiveEndpoint: store.endpoint,
      ...(onNode ? { logArchivePodEndpoint: onNode.podEndpoint } : {}),
      // The runner uploads where the node's pods reach the store; else the controller follows.
      logArchiveUpload: onNode ? "runner" : "follow",
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
      await onNode?.stop();
      await store.stop();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
