// The process node under faults, on a node of its own (tainted, so the scheduler leaves it to
// these tests; pods are bound to it by nodeName) in this test process, with faults injected
// where the shared node cannot have them: a slow resync list, an API server that goes away, a
// pod start that fails. Its log is kept and printed when a test fails.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type FreezableProxy, startFreezableProxy } from "../controller/freezable-proxy.js";
import {
  clusterClients,
  createTestNamespace,
  deleteTestNamespace,
  waitForPod,
} from "../harness/cluster-test.js";
import { defaultCommandMapping } from "../harness/process-node/mapping.js";
import { ProcessNode } from "../harness/process-node/process-node.js";
import { waitFor } from "../harness/processes.js";

const { kubeConfig, core } = clusterClients();
const nodeName = `process-node-faults-${randomBytes(3).toString("hex")}`;
let namespace: string;
let workDir: string;
let proxy: FreezableProxy;
let node: ProcessNode;
const logLines: { msg: string; pod?: unknown; err?: unknown }[] = [];

/** Set by a test: what the node's next resync does between its list and its use of it. */
let onResyncListed: (() => Promise<void>) | undefined;
/** Set by a test: fails the start of the pods it throws for. */
let onSetUp: ((pod: V1Pod) => void) | undefined;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pn-faults");
  workDir = await mkdtemp(path.join(os.tmpdir(), "pn-faults-"));
  proxy = await startFreezableProxy(kubeConfig);
  node = new ProcessNode({
    kubeConfig: proxy.kubeConfig,
    nodeName,
    workDir,
    mapping: defaultCommandMapping(),
    taints: [{ key: "playbook.dev/fault-tests", effect: "NoSchedule" }],
    faults: {
      resyncListed: async () => {
        const fault = onResyncListed;
        onResyncListed = undefined;
        await fault?.();
      },
      setUp: (pod) => onSetUp?.(pod),
    },
    log: (fields, msg) => logLines.push({ ...fields, msg }),
  });
  await node.start();
});

afterEach((context) => {
  if (context.task.result?.state === "fail")
    process.stderr.write(
      `[process-node-faults] node log:\n${logLines.map((l) => JSON.stringify(l)).join("\n")}\n`,
    );
});

afterAll(async () => {
  await proxy?.restore();
  await node?.stop();
  await proxy?.close();
  await core.deleteNode({ name: nodeName }).catch(() => {});
  await deleteTestNamespace(core, namespace);
  await rm(workDir, { recursive: true, force: true });
});

function boundPod(name: string, script: string): V1Pod {
  return {
    metadata: { name },
    spec: {
      nodeName,
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: "main", image: "ghcr.io/example/shell:1", command: ["sh", "-c", script] }],
    },
  };
}

const containerRunning = (pod: V1Pod) =>
  pod.status?.phase === "Running" && pod.status.containerStatuses?.[0]?.state?.running !== undefined;

/** Waits for the pod to end; the node has reported its container completed by then. */
async function expectCompleted(name: string, what: string, timeoutMs = 30_000): Promise<V1Pod> {
  const pod = await waitForPod(
    core,
    namespace,
    name,
    what,
    (p) => p.status?.phase === "Succeeded" || p.status?.phase === "Failed",
    timeoutMs,
  );
  expect(pod.status?.phase).toBe("Succeeded");
  return pod;
}

const logged = (msg: string, pod: string) =>
  waitFor(
    `the node to log "${msg}" for ${pod}`,
    async () => (logLines.some((l) => l.msg === msg && l.pod === pod) ? true : undefined),
    {
      timeoutMs: 30_000,
      intervalMs: 50,
    },
  );

describe("the process node under faults", () => {
  it("runs a pod the watch admitted while a resync's list was in flight, instead of taking it for gone", async () => {
    let entered: () => void = () => {};
    const listHeld = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    onResyncListed = async () => {
      entered();
      await released;
    };
    // The next resync has listed the node's pods: this one is not among them.
    await listHeld;
    await core.createNamespacedPod({ namespace, body: boundPod("during-list", "sleep 2; echo done") });
    await waitForPod(core, namespace, "during-list", "to run", containerRunning, 30_000);
    release();

    const pod = await expectCompleted("during-list", "to finish");
    expect(pod.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 0,
      reason: "Completed",
    });
  });

  it("reports a pod that ended while the API server was unreachable once it is back", async () => {
    await core.createNamespacedPod({ namespace, body: boundPod("ends-in-outage", "sleep 2; echo done") });
    await waitForPod(core, namespace, "ends-in-outage", "to run", containerRunning, 30_000);
    await proxy.cut();
    try {
      await logged("Container exited", "ends-in-outage");
      // Its status write has failed at least once against the missing API server.
      await waitFor(
        "a failed status write",
        async () =>
          logLines.some((l) => l.pod === "ends-in-outage" && l.msg.startsWith("Failed to write pod status"))
            ? true
            : undefined,
        { timeoutMs: 30_000, intervalMs: 50 },
      );
    } finally {
      await proxy.restore();
    }
    const pod = await expectCompleted("ends-in-outage", "to be reported finished");
    expect(pod.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 0,
      reason: "Completed",
    });
  });

  it("retries a pod start that failed, its container saying why it waits meanwhile", async () => {
    let failures = 0;
    onSetUp = (pod) => {
      if (pod.metadata?.name !== "flaky-start" || failures >= 2) return;
      failures += 1;
      throw new Error(`injected setup failure ${failures}`);
    };
    try {
      await core.createNamespacedPod({ namespace, body: boundPod("flaky-start", "echo started") });
      const waiting = await waitForPod(
        core,
        namespace,
        "flaky-start",
        "to say why its container waits",
        (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === "CreateContainerError",
        30_000,
      );
      expect(waiting.status?.containerStatuses?.[0]?.state?.waiting?.message).toMatch(
        /^injected setup failure/,
      );
      await expectCompleted("flaky-start", "to finish", 60_000);
      expect(failures).toBe(2);
    } finally {
      onSetUp = undefined;
    }
  });
});
