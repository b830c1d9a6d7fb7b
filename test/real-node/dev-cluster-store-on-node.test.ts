// `npm run cluster:up -- --with-object-store` with its real node (test/harness/dev-cluster.ts), on
// a cluster of its own: the store is published to the node's pods at NODE_API_ADDRESS on its own
// port (store-on-node.ts), the controller runs with that as --log-archive-pod-endpoint, a pod
// PUTs through a URL presigned for it and the object holds its body, and `cluster:down`'s stop
// (stopDevCluster) stops the relays with the rest.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace } from "../harness/cluster-test.js";
import { readClusterState } from "../harness/control-plane.js";
import { type DevCluster, startDevCluster, stopDevCluster } from "../harness/dev-cluster.js";
import { keepOrRemoveClusterState, suiteOutcome, whyKeepLogs } from "../harness/log-retention.js";
import { isRunning } from "../harness/processes.js";
import { NODE_API_ADDRESS } from "../harness/real-node/real-node.js";
import { putFromPod } from "../support/put-from-pod.js";

const stateDir = path.join(repoRoot(), ".cluster", `store-on-node-${randomBytes(3).toString("hex")}`);
let cluster: DevCluster | undefined;

beforeAll(async () => {
  await mkdir(path.dirname(stateDir), { recursive: true });
  cluster = await startDevCluster({
    stateDir,
    daemon: false,
    install: false,
    node: "real",
    startController: true,
    objectStore: true,
    log: (message) => process.stderr.write(`[store-on-node] ${message}\n`),
  });
}, 300_000);
// biome-ignore lint/correctness/noEmptyPattern: no fixture is used here
afterAll(async ({}, suite) => {
  await cluster?.stop();
  await keepOrRemoveClusterState(stateDir, whyKeepLogs(suiteOutcome(suite)), (m) =>
    process.stderr.write(`${m}\n`),
  );
});

/** The command line of the process recorded as `name` in the cluster's state.json. */
async function commandLineOf(name: string): Promise<string[]> {
  const recorded = (await readClusterState(stateDir))?.processes.find((p) => p.name === name);
  if (!recorded) throw new Error(`no ${name} recorded in ${stateDir}`);
  return readFileSync(`/proc/${recorded.pid}/cmdline`, "utf8").split("\0");
}

describe("cluster:up --with-object-store with a real node", () => {
  it("gives the node's pods the store at NODE_API_ADDRESS, the controller that endpoint, and cluster:down stops its relays", async () => {
    const store = cluster?.objectStore;
    const podEndpoint = cluster?.objectStorePodEndpoint;
    if (!cluster || !store || !podEndpoint) throw new Error("no object store published to the node");
    expect(podEndpoint).toBe(`http://${NODE_API_ADDRESS}:${new URL(store.endpoint).port}`);
    expect(cluster.controllerUrl, "the controller (dist/bin/playbook.js: npm run build)").toBeDefined();
    expect(await commandLineOf("controller")).toEqual(
      expect.arrayContaining([
        `--log-archive-endpoint=${store.endpoint}`,
        `--log-archive-pod-endpoint=${podEndpoint}`,
      ]),
    );

    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(cluster.state.kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const namespace = await createTestNamespace(core, "store-on-node");
    const signer = new ArchiveStore({
      endpoint: podEndpoint,
      bucket: store.bucket,
      region: store.region,
      prefix: "",
      forcePathStyle: true,
      credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
    });
    const reader = store.client();
    try {
      const url = await signer.presignPut("dev/attempt-1.log", 300);
      expect(await putFromPod(core, namespace, "put", url, "from the dev node\n")).toEqual({
        phase: "Succeeded",
        output: "status 200\n",
      });
      expect(await reader.readText("dev/attempt-1.log")).toBe("from the dev node\n");
    } finally {
      signer.destroy();
      reader.destroy();
    }

    const state = await readClusterState(stateDir);
    const relays = (state?.processes ?? []).filter((p) =>
      /^object-store-\d+-relay-(host|node)$/.test(p.name),
    );
    expect(relays.map((r) => [r.name.replace(/\d+/, "PORT"), isRunning(r)]).sort()).toEqual([
      ["object-store-PORT-relay-host", true],
      ["object-store-PORT-relay-node", true],
    ]);
    // What `npm run cluster:down` does: the processes recorded in the state folder, stopped.
    expect(await stopDevCluster(stateDir, () => {})).toBe(true);
    expect(relays.filter((r) => isRunning(r))).toEqual([]);
  }, 240_000);
});
