// Faults only a real node has, while a Playbook's pod runs on it: its kubelet or containerd
// killed (SIGKILL, as a crash) and started again with the same command line, and a kubelet that
// stops for good, so that the node stops reporting. Each test leaves the node Ready with both
// daemons running for the next file, whatever happens (restoreNode in afterEach).
import path from "node:path";
import { CoordinationV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  type PlaybookObject,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace, waitForPodGone } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import {
  type KilledDaemon,
  killRealNodeDaemon,
  REAL_NODE_NAME,
  type RealNodeDaemon,
  startRealNodeDaemon,
} from "../harness/real-node/real-node.js";

const { core, kubeConfig } = clients();
const coordination = kubeConfig.makeApiClient(CoordinationV1Api);
const stateDir = path.dirname(inject("kubeconfig"));
let namespace: string;
let controller: RunningController | undefined;
/** Daemons a test killed and has not started again yet. */
const down = new Map<RealNodeDaemon, KilledDaemon>();

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-faults");
  controller = startController([namespace], realNode.controller);
});
afterEach(async () => {
  await restoreNode();
});
afterAll(async () => {
  await restoreNode();
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

async function kill(name: RealNodeDaemon): Promise<number> {
  down.set(name, await killRealNodeDaemon(stateDir, name));
  return Date.now();
}

/** When the node's kubelet last renewed its Lease (every 10 s while it runs). */
async function leaseRenewedAt(): Promise<number> {
  const lease = await coordination.readNamespacedLease({
    name: REAL_NODE_NAME,
    namespace: "kube-node-lease",
  });
  return new Date(lease.spec?.renewTime ?? 0).getTime();
}

/** Starts containerd, then the kubelet, again if a test killed them; waits for the node to be Ready. */
async function restoreNode(): Promise<void> {
  if (down.size === 0) return;
  const since = Date.now();
  for (const name of ["containerd", "kubelet"] as const) {
    const killed = down.get(name);
    if (!killed) continue;
    await startRealNodeDaemon(stateDir, killed);
    down.delete(name);
  }
  await waitFor(
    `node ${REAL_NODE_NAME} Ready again, its Lease renewed by the kubelet`,
    async () => {
      const node = await core.readNode({ name: REAL_NODE_NAME });
      const ready = node.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
      return ready && (await leaseRenewedAt()) >= since - 1000 ? true : undefined;
    },
    { timeoutMs: 90_000, intervalMs: 250 },
  );
}

/** Waits for the run's pod to run; returns it. */
async function runningPod(name: string): Promise<V1Pod> {
  await waitForPlaybook(
    namespace,
    name,
    "to run",
    (p) => p.status?.phase === "Running",
    realNode.taskStartMs,
  );
  const [pod] = await podsOf(namespace, name);
  if (!pod) throw new Error(`no pod for ${name}`);
  return pod;
}

// A task that runs for a few seconds and prints, and one that passes its timeout: both end while
// the daemon is down, so their outcome reaches the API only through the restarted one.
const steady = {
  ceiling: "3m",
  killGrace: "0s",
  tasks: [{ name: "wait", run: "sleep 5; echo done after the restart" }],
};
const slow = {
  ceiling: "3m",
  killGrace: "0s",
  tasks: [
    { name: "slow", run: "sleep 60", timeout: "3s" },
    { name: "after", run: "echo never" },
  ],
};

/**
 * The run ended as it would have without the fault: its report read, its one pod, one attempt;
 * its container ended before `restartedAt`, while the daemon was down. containerd 2.x, restarted
 * after the container ended, has lost how: it shows exit 255, `Unknown`, finished when it came
 * back (report-trust.ts, exitLostByRuntime); then the report's last task end says when it ended.
 */
async function expectUndisturbed(name: string, before: V1Pod, restartedAt: number): Promise<PlaybookObject> {
  const playbook = await waitForFinished(namespace, name, realNode.finishMs);
  const pods = await podsOf(namespace, name);
  expect(pods.map((p) => p.metadata?.uid)).toEqual([before.metadata?.uid]);
  expect(playbook.status?.podAttempts).toBe(1);
  const runner = pods[0]?.status?.containerStatuses?.[0];
  // The same container (the shim kept it), never restarted.
  expect(runner?.containerID).toBe(before.status?.containerStatuses?.[0]?.containerID);
  expect(runner?.restartCount).toBe(0);
  const terminated = runner?.state?.terminated;
  const lost = terminated?.reason === "Unknown" && terminated.exitCode === 255;
  // The report's last task end, as status took it from the report.
  const reported = Math.max(
    0,
    ...(playbook.status?.tasks ?? []).map((t) => Date.parse(t.completionTime ?? "") || 0),
  );
  const finishedAt = lost ? reported : new Date(terminated?.finishedAt ?? 0).getTime();
  expect(finishedAt).toBeGreaterThan(0);
  expect(finishedAt).toBeLessThan(restartedAt);
  return playbook;
}

function expectSucceeded(playbook: PlaybookObject): void {
  expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
  expect(playbook.status?.tasks?.[0]).toMatchObject({
    name: "wait",
    phase: "Succeeded",
    exitCode: 0,
    attempts: 1,
  });
}

function expectTimedOut(playbook: PlaybookObject): void {
  expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskTimeout" });
  expect(playbook.status?.tasks?.[0]).toMatchObject({
    name: "slow",
    phase: "TimedOut",
    limit: "TaskTimeout",
    limitValue: "3s",
    attempts: 1,
  });
  expect(playbook.status?.tasks?.[1]).toMatchObject({ name: "after", phase: "Skipped" });
}

describe("a real node's daemons killed mid-run", () => {
  for (const daemon of ["kubelet", "containerd"] as const) {
    it(`${daemon} killed and started again while the tasks end: each run ends as it would have, from its runner's report, in its one pod`, async () => {
      await createPlaybook(namespace, `${daemon}-steady`, steady);
      await createPlaybook(namespace, `${daemon}-slow`, slow);
      const steadyPod = await runningPod(`${daemon}-steady`);
      const slowPod = await runningPod(`${daemon}-slow`);
      await kill(daemon);
      // Longer than the tasks take once their pods run: both end while the daemon is down.
      await new Promise((resolve) => setTimeout(resolve, 12_000));
      const restartedAt = Date.now();
      await restoreNode();
      expectSucceeded(await expectUndisturbed(`${daemon}-steady`, steadyPod, restartedAt));
      expectTimedOut(await expectUndisturbed(`${daemon}-slow`, slowPod, restartedAt));
    });
  }
});

describe("a node that stops reporting", () => {
  it("its pod is taken as lost once the node controller marked it not Ready and 30s passed: deleted and re-created, no task attempt consumed", async () => {
    const name = "silent-node";
    await createPlaybook(namespace, name, {
      ceiling: "5m",
      killGrace: "0s",
      backoffLimit: 1,
      tasks: [{ name: "wait", run: "sleep 5; echo done" }],
    });
    const first = await runningPod(name);
    const stoppedAt = await kill("kubelet");
    // kube-controller-manager marks the node Unknown after its 50 s grace; on a one-node cluster
    // it then evicts nothing ("master disruption mode"): the controller must decide by itself.
    const recreated = await waitForPlaybook(
      namespace,
      name,
      "to re-create its pod",
      (p) => (p.status?.podAttempts ?? 0) >= 2,
      150_000,
    );
    const tookMs = Date.now() - stoppedAt;
    process.stderr.write(`[faults] pod re-created ${tookMs} ms after the kubelet stopped\n`);
    // The node's grace (up to 50 s after its last renewal) plus the controller's 30 s.
    expect(tookMs).toBeLessThan(120_000);
    expect(recreated.status?.phase).toBe("Pending");
    const [event] = (await eventsOf(namespace, name, ["PodLost"])).filter((e) => e.reason === "PodLost");
    expect(event?.message).toMatch(
      new RegExp(
        `^Pod ${first.metadata?.name} was lost with its node ${REAL_NODE_NAME}, which stopped reporting: the pod was marked not Ready at \\S+ and its node said nothing for \\d+s since; created pod ${name}-2 \\(attempt 2 of 2\\)`,
      ),
    );
    const old = await core.readNamespacedPod({ namespace, name: first.metadata?.name ?? "" });
    // Deleted, so that its node stops it when it comes back; it stays until then.
    expect(old.metadata?.deletionTimestamp).toBeDefined();

    await restoreNode();
    const playbook = await waitForFinished(namespace, name, realNode.finishMs);
    // The whole condition and the run's events in the failure: which pod was taken for lost, and why.
    const events = (await eventsOf(namespace, name)).map((e) => `${e.reason}: ${e.message}`);
    expect(
      condition(playbook, "Succeeded"),
      JSON.stringify({ condition: condition(playbook, "Succeeded"), events }, null, 2),
    ).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "wait", phase: "Succeeded", attempts: 1 });
    // The kubelet, back, stopped the old pod and let it go.
    await waitForPodGone(core, namespace, first.metadata?.name ?? "", 60_000);
  });
});
