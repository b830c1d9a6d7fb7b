// `npm run cluster:up -- --with-object-store` (test/harness/dev-cluster.ts), on a cluster of its
// own with the scripted node: SeaweedFS's S3 server is up with its bucket, the credentials Secret
// the chart's logArchive.credentialsSecret names holds the store's keys, the controller archives
// to it (a deleted Playbook's objects go, which needs the bucket, the endpoint, path-style and the
// keys in its env), and `cluster:down`'s stop (stopDevCluster) stops the store with the rest.
import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { CoreV1Api, CustomObjectsApi, KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOG_ARCHIVE_FINALIZER } from "../../src/api/log-archive.js";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { attemptLogKey, runPrefix } from "../../src/controller/log-archive/archive-keys.js";
import { repoRoot } from "../harness/binaries.js";
import {
  DEV_ARCHIVE_SECRET,
  type DevCluster,
  startDevCluster,
  stopDevCluster,
} from "../harness/dev-cluster.js";
import { keepOrRemoveClusterState, suiteOutcome, whyKeepLogs } from "../harness/log-retention.js";
import { isRunning, runClusterTool, waitFor } from "../harness/processes.js";

const stateDir = path.join(repoRoot(), ".cluster", `object-store-${randomBytes(3).toString("hex")}`);
let cluster: DevCluster | undefined;

beforeAll(async () => {
  await mkdir(path.dirname(stateDir), { recursive: true });
  cluster = await startDevCluster({
    stateDir,
    daemon: false,
    install: false,
    node: "scripted",
    startController: true,
    objectStore: true,
    log: () => {},
  });
}, 180_000);
// biome-ignore lint/correctness/noEmptyPattern: no fixture is used here
afterAll(async ({}, suite) => {
  await cluster?.stop();
  await keepOrRemoveClusterState(stateDir, whyKeepLogs(suiteOutcome(suite)), (m) =>
    process.stderr.write(`${m}\n`),
  );
});

describe("cluster:up --with-object-store", () => {
  it("starts the store with its bucket and Secret, runs the controller against it, and cluster:down stops it", async () => {
    const store = cluster?.objectStore;
    if (!cluster || !store) throw new Error("no object store started");
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(cluster.state.kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const custom = kubeConfig.makeApiClient(CustomObjectsApi);

    const secret = await core.readNamespacedSecret(DEV_ARCHIVE_SECRET);
    const decoded = Object.fromEntries(
      Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]),
    );
    expect(decoded).toEqual({
      AWS_ACCESS_KEY_ID: store.accessKeyId,
      AWS_SECRET_ACCESS_KEY: store.secretAccessKey,
    });

    await core.createNamespace({ body: { metadata: { name: "archived" } } });
    const created = (await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      plural: PLURAL,
      namespace: "archived",
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "Playbook",
        metadata: { name: "run" },
        spec: { tasks: [{ name: "a", run: "true" }] },
      },
    })) as { metadata: { uid: string } };
    const read = () =>
      custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        plural: PLURAL,
        namespace: "archived",
        name: "run",
      }) as Promise<{ metadata: { finalizers?: string[] } }>;
    await waitFor(
      "the archive's finalizer",
      async () => ((await read()).metadata.finalizers?.includes(LOG_ARCHIVE_FINALIZER) ? true : undefined),
      { timeoutMs: 30_000 },
    );
    const client = store.client();
    const run = { namespace: "archived", name: "run", uid: created.metadata.uid };
    await client.putObject(attemptLogKey("", run, 1), "[a] done\n", "text/plain");
    // Read back through the API server, as `playbook logs` reads it once the pod is gone.
    const raw = await runClusterTool(
      path.join(cluster?.state.binDir ?? "", "kubectl"),
      ["get", "--raw", "/apis/logs.playbook.dev/v1alpha1/namespaces/archived/playbooklogs/run/log?attempt=1"],
      cluster?.state.kubeconfig ?? "",
    );
    expect(raw).toMatchObject({ code: 0, stdout: "[a] done\n" });
    await custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      plural: PLURAL,
      namespace: "archived",
      name: "run",
    });
    await waitFor(
      "the Playbook to be gone",
      async () => {
        try {
          await read();
          return undefined;
        } catch {
          return true;
        }
      },
      { timeoutMs: 30_000 },
    );
    expect(await client.listKeys(runPrefix("", run))).toEqual([]);
    client.destroy();

    const serving = store.process();
    expect(serving && isRunning(serving)).toBe(true);
    // What `npm run cluster:down` does: the processes recorded in the state folder, stopped (the
    // scripted node lives in this process, not in the record).
    await cluster.scriptedNode?.stop();
    expect(await stopDevCluster(stateDir, () => {})).toBe(true);
    expect(serving && isRunning(serving)).toBe(false);
    await expect(fetch(store.endpoint)).rejects.toThrow();
  }, 120_000);
});
