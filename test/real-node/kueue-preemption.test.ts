// Preemption on the real kubelet with real Kueue (issue 43): under a ClusterQueue whose quota fits
// one run's pod, a higher-priority run preempts a lower one. Kueue marks the lower run's pod
// (TerminationTarget) and deletes it; the runner takes the SIGTERM as a cancel and reports; the
// controller's finalizer keeps the pod until the controller has read that, then comes off.
// onPreemption Requeue: the lower run queues again in a new pod that spends no attempt of
// backoffLimit (0 here: a lost pod would end it PodLost), runs again and succeeds. Fail: it ends
// Preempted with Kueue's reason and message. maxPreemptions 1: the second stop ends the run
// Preempted, naming the count. No pod is left terminating.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
import { createTestNamespace, deleteTestNamespace, isNotFound } from "../harness/cluster-test.js";
import { startTestKueue, type TestKueue } from "../harness/kueue-test.js";
import { waitFor } from "../harness/processes.js";

const FINALIZER = "playbook.dev/read-before-delete";
const { core } = clients();
let kueue: TestKueue | undefined;
let controller: RunningController | undefined;
let namespace = "";
let localQueue = "";
let low = "";
let high = "";

const say = (message: string): void => {
  process.stderr.write(`[kueue-preemption] ${message}\n`);
};

beforeAll(async () => {
  kueue = await startTestKueue();
  namespace = await createTestNamespace(core, "rn-kueue-preempt", kueue.namespaceLabels);
  const flavor = await kueue.createResourceFlavor("rn-preempt");
  // A run's pod asks 150m cpu (runner 50m, one task container 100m): room for one, not two.
  const clusterQueue = await kueue.createClusterQueue(
    { flavor, cpu: "200m", memory: "2Gi", preemption: { withinClusterQueue: "LowerPriority" } },
    "rn-preempt",
  );
  localQueue = await kueue.createLocalQueue(namespace, "preempt-queue", clusterQueue);
  low = await kueue.createWorkloadPriorityClass(100, "low");
  high = await kueue.createWorkloadPriorityClass(1000, "high");
  controller = startController([namespace], realNode.controller);
}, 180_000);
afterAll(async () => {
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
  await kueue?.stop();
});

/** A low-priority run: a first task, then one that holds long enough to be preempted. */
function lowRun(onPreemption: "Requeue" | "Fail", extra: Record<string, unknown> = {}) {
  return {
    queueName: localQueue,
    priorityClassName: low,
    onPreemption,
    backoffLimit: 0,
    ceiling: "5m",
    tasks: [
      { name: "first", run: "echo first done" },
      { name: "hold", run: "sleep 20; echo held" },
    ],
    ...extra,
  };
}

const highRun = () => ({
  queueName: localQueue,
  priorityClassName: high,
  ceiling: "2m",
  tasks: [{ name: "quick", run: "echo high ran" }],
});

/** Runs the low run until its pod runs, then the high one that takes its place. */
async function preemptLow(name: string, onPreemption: "Requeue" | "Fail"): Promise<string[]> {
  await createPlaybook(namespace, name, lowRun(onPreemption));
  const running = await waitForPlaybook(
    namespace,
    name,
    "to run",
    (pb) => pb.status?.phase === "Running",
    120_000,
  );
  const [pod] = await podsOf(namespace, name);
  say(
    `${name} running in ${running.status?.podName}; finalizers ${JSON.stringify(pod?.metadata?.finalizers)}`,
  );
  await createPlaybook(namespace, `${name}-high`, highRun());
  return pod?.metadata?.finalizers ?? [];
}

/** The pod is gone: Kueue's deletion went through once the controller's finalizer came off. */
async function podGone(name: string): Promise<void> {
  await waitFor(
    `pod ${namespace}/${name} to be gone`,
    async () =>
      core.readNamespacedPod({ namespace, name }).then(
        () => undefined,
        (error) => (isNotFound(error) ? true : undefined),
      ),
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

/** Waits (2 min at most) for the run `run` to finish, and expects it Succeeded. */
async function endsSucceeded(run: string): Promise<void> {
  const done = await waitForFinished(namespace, run, 120_000);
  expect(condition(done, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
}

/** Waits (2 min at most) for the run `run` to finish, says how, and expects it ended Preempted. */
async function endsPreempted(run: string) {
  const ended = await waitForFinished(namespace, run, 120_000);
  const succeeded = condition(ended, "Succeeded");
  say(`ended: ${succeeded?.reason}: ${succeeded?.message}`);
  expect(succeeded).toMatchObject({ status: "False", reason: "Preempted" });
  return { ended, succeeded };
}

describe("a higher-priority run preempts a lower one under a quota that fits one, on the real node", () => {
  it("Requeue: the lower run queues again in a new pod, spending no attempt, then runs again and succeeds", async () => {
    const name = "low-requeue";
    const finalizers = await preemptLow(name, "Requeue");
    const requeued = await waitForPlaybook(
      namespace,
      name,
      "to be Queued again in a second pod (or to end)",
      (pb) =>
        (pb.status?.podName === `${name}-2` && condition(pb, "Succeeded")?.reason === "Queued") ||
        condition(pb, "Succeeded")?.status === "False",
      120_000,
    );
    say(`requeued: ${condition(requeued, "Succeeded")?.message}`);
    // Not lost, not a task's failure: the run goes on.
    expect(condition(requeued, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Queued" });
    expect(requeued.status).toMatchObject({ podAttempts: 2, preemptions: 1, phase: "Pending" });
    const [event] = (await eventsOf(namespace, name, ["Preempted"])).filter((e) => e.reason === "Preempted");
    say(`event: ${event?.message}`);
    expect(event?.type).toBe("Warning");
    expect(event?.message).toMatch(
      new RegExp(
        String.raw`^Kueue stopped pod ${name}-1 \(attempt 1\): WorkloadEvictedDueToPreempted: Preempted to accommodate a workload .*; created pod ${name}-2 \(attempt 2\), which queues again`,
      ),
    );
    // The first pod is not left terminating on the controller's finalizer.
    await podGone(`${name}-1`);
    // The controller's finalizer was on the pod while it ran.
    expect(finalizers).toContain(FINALIZER);

    await endsSucceeded(`${name}-high`);
    const done: PlaybookObject = await waitForFinished(namespace, name, 180_000);
    say(`ended: ${condition(done, "Succeeded")?.reason}: ${condition(done, "Succeeded")?.message}`);
    expect(condition(done, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(done.status).toMatchObject({ podName: `${name}-2`, podAttempts: 2, preemptions: 1 });
    expect(done.status?.tasks?.map((task) => [task.name, task.phase, task.attempts])).toEqual([
      ["first", "Succeeded", 1],
      ["hold", "Succeeded", 1],
    ]);
    // The finished run's pod keeps no finalizer of the controller's.
    await waitFor(
      `pod ${name}-2 to lose the controller's finalizer`,
      async () => {
        const pod = await core.readNamespacedPod({ namespace, name: `${name}-2` });
        return (pod.metadata?.finalizers ?? []).includes(FINALIZER) ? undefined : true;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  });

  it("Fail: the lower run ends Preempted with Kueue's reason and message, its tasks as far as they got", async () => {
    const name = "low-fail";
    const finalizers = await preemptLow(name, "Fail");
    const { ended, succeeded } = await endsPreempted(name);
    expect(succeeded?.message).toMatch(
      new RegExp(
        String.raw`^Kueue stopped pod ${name}-1 \(attempt 1\): WorkloadEvictedDueToPreempted: Preempted to accommodate a workload \(UID: [^)]*\) due to prioritization in the ClusterQueue.*; spec\.onPreemption is Fail; 1 of 2 tasks had succeeded$`,
      ),
    );
    expect(condition(ended, "LimitExceeded")?.status ?? "False").toBe("False");
    expect(ended.status).toMatchObject({ phase: "Failed", podAttempts: 1 });
    expect(ended.status?.tasks?.map((task) => [task.name, task.phase])).toEqual([
      ["first", "Succeeded"],
      ["hold", "Cancelled"],
    ]);
    const [event] = (await eventsOf(namespace, name, ["Preempted"])).filter((e) => e.reason === "Preempted");
    expect(event?.message).toMatch(/the run ends Preempted \(spec\.onPreemption: Fail\)$/);
    await podGone(`${name}-1`);
    expect(finalizers).toContain(FINALIZER);
    await endsSucceeded(`${name}-high`);
  });

  it("maxPreemptions 1: the lower run requeues once, and the second stop ends it Preempted, naming the count", async () => {
    const name = "low-capped";
    // The held task outlasts both preemptions whatever the machine's load: they end it, not its sleep.
    await createPlaybook(
      namespace,
      name,
      lowRun("Requeue", {
        maxPreemptions: 1,
        tasks: [
          { name: "first", run: "echo first done" },
          { name: "hold", run: "sleep 240; echo held" },
        ],
      }),
    );
    const runningIn = async (pod: string) =>
      waitForPlaybook(
        namespace,
        name,
        `to run in pod ${pod}`,
        (pb) =>
          (pb.status?.podName === pod && pb.status?.phase === "Running") ||
          condition(pb, "Succeeded")?.status === "False",
        180_000,
      );
    const first = await runningIn(`${name}-1`);
    expect(first.status?.limits?.maxPreemptions).toEqual({ value: 1, source: "spec" });
    await createPlaybook(namespace, `${name}-high-1`, highRun());
    const second = await runningIn(`${name}-2`);
    say(`requeued: ${condition(second, "Succeeded")?.message}`);
    expect(second.status).toMatchObject({ podAttempts: 2, preemptions: 1, phase: "Running" });
    await createPlaybook(namespace, `${name}-high-2`, highRun());
    const { ended, succeeded } = await endsPreempted(name);
    expect(succeeded?.message).toMatch(
      new RegExp(
        String.raw`^Kueue stopped pod ${name}-2 \(attempt 2\): WorkloadEvictedDueToPreempted: Preempted to accommodate a workload .*; [01] of 2 tasks had succeeded; preempted 2 times, past maxPreemptions 1 \(spec\)$`,
      ),
    );
    expect(ended.status).toMatchObject({ phase: "Failed", podAttempts: 2, preemptions: 1 });
    const events = (await eventsOf(namespace, name, ["Preempted"])).filter((e) => e.reason === "Preempted");
    expect(events.map((e) => e.message)).toContainEqual(
      expect.stringMatching(/; the run ends Preempted: preempted 2 times, past maxPreemptions 1 \(spec\)$/),
    );
    // No third pod: the cap ended the run.
    expect((await podsOf(namespace, name)).map((pod) => pod.metadata?.name)).not.toContain(`${name}-3`);
    await podGone(`${name}-2`);
    for (const high of [`${name}-high-1`, `${name}-high-2`]) await endsSucceeded(high);
  });

  it("a stopped pod's finally tasks run told Cancelled, and end at finallyCeiling however they hold on", async () => {
    const name = "low-finally";
    await createPlaybook(
      namespace,
      name,
      lowRun("Fail", {
        killGrace: "1s",
        finallyCeiling: "3s",
        tasks: [{ name: "hold", run: "echo up; sleep 300" }],
        // A cleanup deaf to SIGTERM that would keep the stopped pod, and its quota, for 5 minutes.
        finally: [
          { name: "unlock", run: `echo "outcome=$PLAYBOOK_OUTCOME"; trap '' TERM; sleep 300` },
          { name: "after", run: "echo after" },
        ],
      }),
    );
    await waitForPlaybook(namespace, name, "to run", (pb) => pb.status?.phase === "Running", 120_000);
    await createPlaybook(namespace, `${name}-high`, highRun());
    // Well before the cleanup's 300 s: the pod's grace (killGrace + finallyCeiling + killGrace + 5 s) ends it.
    const { ended } = await endsPreempted(name);
    expect(ended.status?.tasks?.map((task) => task.phase)).toEqual(["Cancelled"]);
    expect(ended.status?.finally?.map((task) => [task.name, task.phase, task.limit])).toEqual([
      ["unlock", "TimedOut", "FinallyCeiling"],
      ["after", "Skipped", undefined],
    ]);
    await podGone(`${name}-1`);
    await endsSucceeded(`${name}-high`);
  });
});
