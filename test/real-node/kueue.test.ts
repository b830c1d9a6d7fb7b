// Real Kueue (tools/build.sh's build of sigs.k8s.io/kueue, its CRDs and webhooks from the same
// module) beside the real node's API server: plain pods labelled with a LocalQueue are gated by
// its webhook, get a Workload, and are admitted (the gate removed, the pod runs on the kubelet)
// when the ClusterQueue's quota has room; the second of two pods under a quota that fits one
// waits, gated, with Kueue's own reason, until the first ends; and a higher-priority pod
// preempts a lower one (Kueue's condition on the evicted pod, then its deletion). The `[kueue]`
// lines print what Kueue wrote, word for word, for the controller that reads it.
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  clusterClients,
  createTestNamespace,
  deleteTestNamespace,
  isNotFound,
  waitForPod,
} from "../harness/cluster-test.js";
import {
  ADMISSION_GATE,
  MANAGED_LABEL,
  PRIORITY_CLASS_LABEL,
  QUEUE_NAME_LABEL,
  TERMINATION_TARGET,
  TOPOLOGY_GATE,
} from "../harness/kueue.js";
import { conditionOf, startTestKueue, type TestKueue, waitForWorkloadOfPod } from "../harness/kueue-test.js";
import { runClusterTool, waitFor } from "../harness/processes.js";
import { BUSYBOX_IMAGE } from "../harness/real-node/images.js";

const { core } = clusterClients();
let kueue: TestKueue | undefined;
let namespace = "";
let flavor = "";

const say = (message: string): void => {
  process.stderr.write(`[kueue] ${message}\n`);
};

/** A plain busybox pod in a LocalQueue asking for 100m cpu and 16Mi memory: what the quota counts. */
function queuedPod(name: string, queue: string, script: string, labels: Record<string, string> = {}): V1Pod {
  return {
    metadata: { name, namespace, labels: { [QUEUE_NAME_LABEL]: queue, ...labels } },
    spec: {
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: "main",
          image: BUSYBOX_IMAGE,
          imagePullPolicy: "Never",
          command: ["sh", "-c", script],
          resources: { requests: { cpu: "100m", memory: "16Mi" }, limits: { memory: "16Mi" } },
        },
      ],
    },
  };
}

const gates = (pod: V1Pod): string[] => (pod.spec?.schedulingGates ?? []).map((gate) => gate.name);

async function queue(prefix: string, quota: { cpu: string; preemption?: Record<string, unknown> }) {
  if (!kueue) throw new Error("Kueue did not start");
  const clusterQueue = await kueue.createClusterQueue({ flavor, memory: "1Gi", ...quota }, prefix);
  return kueue.createLocalQueue(namespace, `${prefix}-queue`, clusterQueue);
}

beforeAll(async () => {
  kueue = await startTestKueue();
  namespace = await createTestNamespace(core, "rn-kueue", kueue.namespaceLabels);
  flavor = await kueue.createResourceFlavor("rn-kueue");
});
afterAll(async () => {
  if (namespace) await deleteTestNamespace(core, namespace);
  if (namespace)
    await waitFor(
      `namespace ${namespace} to be gone`,
      async () =>
        core.readNamespace({ name: namespace }).then(
          () => undefined,
          (error) => (isNotFound(error) ? true : undefined),
        ),
      { timeoutMs: 60_000, intervalMs: 200 },
    ).catch((error) => say(String(error)));
  await kueue?.stop();
});

describe("Kueue beside the real node's API server", () => {
  it("gates a pod labelled with a LocalQueue, makes its Workload and admits it when the quota is free; the pod runs", async () => {
    if (!kueue) throw new Error("Kueue did not start");
    const localQueue = await queue("free", { cpu: "1" });
    const created = await core.createNamespacedPod({
      namespace,
      body: queuedPod("free", localQueue, "echo admitted"),
    });
    // What the webhook did, in the API server's answer to the create.
    // With its topology gate too: TopologyAwareScheduling is on by default; admission removes both.
    expect(gates(created)).toEqual([ADMISSION_GATE, TOPOLOGY_GATE]);
    expect(created.metadata?.labels?.[MANAGED_LABEL]).toBe("true");
    expect(created.metadata?.finalizers).toContain(MANAGED_LABEL);
    say(
      `pod as created: labels ${JSON.stringify(created.metadata?.labels)}, annotations ${JSON.stringify(created.metadata?.annotations ?? {})}, finalizers ${JSON.stringify(created.metadata?.finalizers)}, schedulingGates ${JSON.stringify(created.spec?.schedulingGates)}`,
    );

    const admitted = await waitForWorkloadOfPod(
      kueue.custom,
      created,
      "to be admitted",
      (workload) => conditionOf(workload, "Admitted")?.status === "True",
    );
    expect(admitted.spec?.queueName).toBe(localQueue);
    expect(conditionOf(admitted, "QuotaReserved")).toMatchObject({ status: "True" });
    say(`Workload ${admitted.metadata.name} admitted: ${JSON.stringify(admitted.status?.conditions)}`);

    const ungated = await waitForPod(
      core,
      namespace,
      "free",
      "to lose its admission gate",
      (pod) => gates(pod).length === 0,
    );
    say(
      `pod admitted: labels ${JSON.stringify(ungated.metadata?.labels)}, annotations ${JSON.stringify(ungated.metadata?.annotations ?? {})}, nodeSelector ${JSON.stringify(ungated.spec?.nodeSelector ?? {})}`,
    );
    const done = await waitForPod(
      core,
      namespace,
      "free",
      "to succeed on the node",
      (pod) => pod.status?.phase === "Succeeded",
      90_000,
    );
    expect(done.spec?.nodeName).toBeTruthy();
    const finished = await waitForWorkloadOfPod(
      kueue.custom,
      created,
      "to be Finished",
      (workload) => conditionOf(workload, "Finished")?.status === "True",
    );
    say(`Workload finished: ${JSON.stringify(conditionOf(finished, "Finished"))}`);
  });

  it("keeps the second pod gated, its Workload saying it waits for quota, until the first pod ends", async () => {
    if (!kueue) throw new Error("Kueue did not start");
    // Room for one 100m pod, not two.
    const localQueue = await queue("one", { cpu: "150m" });
    const first = await core.createNamespacedPod({
      namespace,
      body: queuedPod("first", localQueue, "until [ -e /tmp/done ]; do sleep 0.2; done; echo first done"),
    });
    await waitForPod(core, namespace, "first", "to run", (pod) => pod.status?.phase === "Running", 90_000);
    const second = await core.createNamespacedPod({
      namespace,
      body: queuedPod("second", localQueue, "echo second ran"),
    });

    const waiting = await waitForWorkloadOfPod(kueue.custom, second, "to say why it waits", (workload) =>
      Boolean(conditionOf(workload, "QuotaReserved")?.message),
    );
    const quotaReserved = conditionOf(waiting, "QuotaReserved");
    say(`second Workload waiting: ${JSON.stringify(waiting.status?.conditions)}`);
    expect(quotaReserved).toMatchObject({ status: "False", reason: "Pending" });
    expect(quotaReserved?.message).toMatch(/insufficient unused quota for cpu in flavor/);
    expect(conditionOf(waiting, "Admitted")?.status ?? "False").toBe("False");
    expect(gates(await core.readNamespacedPod({ namespace, name: "second" }))).toContain(ADMISSION_GATE);

    // The first pod ends on its own: its Workload finishes and frees the quota.
    const touched = await runClusterTool(
      path.join(inject("binDir"), "kubectl"),
      ["-n", namespace, "exec", "first", "--", "touch", "/tmp/done"],
      inject("kubeconfig"),
    );
    expect(touched.stderr).toBe("");
    await waitForPod(
      core,
      namespace,
      "first",
      "to succeed",
      (pod) => pod.status?.phase === "Succeeded",
      60_000,
    );
    await waitForPod(core, namespace, "second", "to be admitted", (pod) => gates(pod).length === 0, 60_000);
    await waitForPod(
      core,
      namespace,
      "second",
      "to succeed",
      (pod) => pod.status?.phase === "Succeeded",
      90_000,
    );
    expect(first.metadata?.uid).toBeTruthy();
  });

  it("preempts a lower-priority pod for a higher one: TerminationTarget on the pod, then its deletion", async () => {
    if (!kueue) throw new Error("Kueue did not start");
    const localQueue = await queue("preempt", {
      cpu: "150m",
      preemption: { withinClusterQueue: "LowerPriority" },
    });
    const low = await kueue.createWorkloadPriorityClass(100, "low");
    const high = await kueue.createWorkloadPriorityClass(1000, "high");
    const lowPod = await core.createNamespacedPod({
      namespace,
      body: queuedPod("low", localQueue, "exec sleep 3600", { [PRIORITY_CLASS_LABEL]: low }),
    });
    await waitForPod(core, namespace, "low", "to run", (pod) => pod.status?.phase === "Running", 90_000);
    await core.createNamespacedPod({
      namespace,
      body: queuedPod("high", localQueue, "echo high ran", { [PRIORITY_CLASS_LABEL]: high }),
    });

    const targeted = await waitForPod(core, namespace, "low", "to be marked TerminationTarget", (pod) =>
      (pod.status?.conditions ?? []).some((condition) => condition.type === TERMINATION_TARGET),
    );
    const condition = (targeted.status?.conditions ?? []).find((c) => c.type === TERMINATION_TARGET);
    say(
      `preempted pod's condition: ${JSON.stringify(condition)}; deletionTimestamp ${String(targeted.metadata?.deletionTimestamp)}`,
    );
    expect(condition).toMatchObject({ status: "True", reason: "WorkloadEvictedDueToPreempted" });
    const evicted = await waitForWorkloadOfPod(
      kueue.custom,
      lowPod,
      "to be evicted",
      (workload) => conditionOf(workload, "Evicted")?.status === "True",
    );
    say(`preempted Workload: ${JSON.stringify(evicted.status?.conditions)}`);
    await waitFor(
      "the preempted pod to be deleted",
      async () =>
        core.readNamespacedPod({ namespace, name: "low" }).then(
          () => undefined,
          (error) => (isNotFound(error) ? true : undefined),
        ),
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    await waitForPod(
      core,
      namespace,
      "high",
      "to succeed",
      (pod) => pod.status?.phase === "Succeeded",
      90_000,
    );
  });
});
