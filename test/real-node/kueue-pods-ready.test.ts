// Kueue's waitForPodsReady on, on the real kubelet (issue 43): Kueue evicts a workload whose pods
// are not all Ready within its timeout after admission. A healthy run's pod is Ready (every
// container running) within seconds, so a run that lasts past the timeout is never evicted and
// succeeds in its first pod. A run whose task container cannot start (its image is one no
// registry serves) is evicted by Kueue with PodsReadyTimeout, which the controller takes as it
// takes a preemption: onPreemption Fail ends it Preempted naming PodsReadyTimeout, Requeue
// starts a new pod that queues again, spending no attempt (backoffLimit 0: a lost pod would
// end it PodLost). The evicted runs show the timeout is live: the healthy one passing is not luck.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { TERMINATION_TARGET } from "../harness/kueue.js";
import { conditionOf, startTestKueue, type TestKueue, waitForWorkloadOfPod } from "../harness/kueue-test.js";

/** Kueue's timeout from admission to every pod of the workload Ready. */
const PODS_READY_TIMEOUT_S = 20;
/** No registry listens on port 9 of the node's loopback: the pull fails at once, nothing leaves the machine. */
const UNPULLABLE = "127.0.0.1:9/nothing/here:1";

const { core, custom } = clients();
let kueue: TestKueue | undefined;
let controller: RunningController | undefined;
let namespace = "";
let queue = "";

const say = (message: string): void => {
  process.stderr.write(`[kueue-pods-ready] ${message}\n`);
};

beforeAll(async () => {
  kueue = await startTestKueue({
    settings: {
      waitForPodsReady: {
        timeout: `${PODS_READY_TIMEOUT_S}s`,
        // Kueue's default backoff before an evicted workload queues again is 60 s and more.
        requeuingStrategy: { backoffBaseSeconds: 1, backoffMaxSeconds: 5 },
      },
    },
  });
  namespace = await createTestNamespace(core, "rn-kueue-ready", kueue.namespaceLabels);
  const flavor = await kueue.createResourceFlavor("rn-ready");
  // Room for all three runs at once (150m each): admission is never what they wait for.
  const clusterQueue = await kueue.createClusterQueue({ flavor, cpu: "2", memory: "4Gi" }, "rn-ready");
  queue = await kueue.createLocalQueue(namespace, "ready-queue", clusterQueue);
  controller = startController([namespace], {
    ...realNode.controller,
    kueue: true,
    allowedImages: UNPULLABLE,
  });
}, 180_000);
afterAll(async () => {
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
  await kueue?.stop();
});

/** A run whose task container's image cannot be pulled: its pod never becomes Ready. */
const unreadyRun = (onPreemption: "Requeue" | "Fail") => ({
  queueName: queue,
  image: UNPULLABLE,
  onPreemption,
  backoffLimit: 0,
  // Ours would end it StartTimeout: Kueue's timeout comes first.
  startTimeout: "3m",
  ceiling: "5m",
  tasks: [{ name: "never", run: "echo never" }],
});

describe("Kueue's waitForPodsReady on, on the real node", () => {
  it(`does not evict a healthy run that lasts past its ${PODS_READY_TIMEOUT_S}s timeout: it succeeds in its first pod`, async () => {
    const name = "healthy";
    await createPlaybook(namespace, name, {
      queueName: queue,
      backoffLimit: 0,
      ceiling: "3m",
      tasks: [
        { name: "first", run: "echo first done" },
        { name: "hold", run: `sleep ${PODS_READY_TIMEOUT_S + 5}; echo held` },
      ],
    });
    await waitForPlaybook(namespace, name, "to run", (pb) => pb.status?.phase === "Running", 120_000);
    const [pod] = await podsOf(namespace, name);
    if (!pod) throw new Error(`no pod for ${name}`);
    const ready = await waitForWorkloadOfPod(
      custom,
      pod,
      "to be PodsReady",
      (workload) => conditionOf(workload, "PodsReady")?.status === "True",
      60_000,
    );
    say(`Workload ${ready.metadata.name}: PodsReady ${JSON.stringify(conditionOf(ready, "PodsReady"))}`);
    const done = await waitForFinished(namespace, name, 120_000);
    say(`ended: ${condition(done, "Succeeded")?.reason}: ${condition(done, "Succeeded")?.message}`);
    expect(condition(done, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(done.status).toMatchObject({ podName: `${name}-1`, podAttempts: 1 });
    expect(done.status?.preemptions ?? 0).toBe(0);
    expect(done.status?.tasks?.map((task) => [task.name, task.phase])).toEqual([
      ["first", "Succeeded"],
      ["hold", "Succeeded"],
    ]);
    // Kueue never marked it for eviction.
    const [ended] = await podsOf(namespace, name);
    expect(ended?.status?.conditions?.find((c) => c.type === TERMINATION_TARGET)).toBeUndefined();
    expect((await eventsOf(namespace, name)).filter((e) => e.reason === "Preempted")).toEqual([]);
  });

  it("evicts a run whose pod never becomes Ready with PodsReadyTimeout, which ends it Preempted (Fail) or queues it again in a new pod (Requeue)", async () => {
    await createPlaybook(namespace, "unready-fail", unreadyRun("Fail"));
    await createPlaybook(namespace, "unready-requeue", unreadyRun("Requeue"));

    const ended = await waitForFinished(namespace, "unready-fail", 150_000);
    const succeeded = condition(ended, "Succeeded");
    say(`unready-fail ended: ${succeeded?.reason}: ${succeeded?.message}`);
    expect(succeeded).toMatchObject({ status: "False", reason: "Preempted" });
    expect(succeeded?.message).toMatch(
      /^Kueue stopped pod unready-fail-1 \(attempt 1\): WorkloadEvictedDueToPodsReadyTimeout: .*; spec\.onPreemption is Fail; /,
    );
    expect(ended.status).toMatchObject({ phase: "Failed", podAttempts: 1 });
    expect(condition(ended, "LimitExceeded")?.status ?? "False").toBe("False");

    const requeued = await waitForPlaybook(
      namespace,
      "unready-requeue",
      "to be in a second pod (or to end)",
      (pb) => pb.status?.podName === "unready-requeue-2" || condition(pb, "Succeeded")?.status === "False",
      150_000,
    );
    say(
      `unready-requeue: ${condition(requeued, "Succeeded")?.reason}: ${condition(requeued, "Succeeded")?.message}`,
    );
    expect(condition(requeued, "Succeeded")?.status).toBe("Unknown");
    expect(requeued.status).toMatchObject({ podName: "unready-requeue-2", podAttempts: 2, preemptions: 1 });
    const [event] = (await eventsOf(namespace, "unready-requeue", ["Preempted"])).filter(
      (e) => e.reason === "Preempted",
    );
    say(`event: ${event?.message}`);
    expect(event?.message).toMatch(
      /^Kueue stopped pod unready-requeue-1 \(attempt 1\): WorkloadEvictedDueToPodsReadyTimeout: .*; created pod unready-requeue-2 \(attempt 2\), which queues again/,
    );
  });
});
