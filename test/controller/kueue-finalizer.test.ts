// The controller's finalizer on the pods of runs that go through Kueue (issue 43), on the real API
// server with the scripted node (no Kueue: the pods are not gated, and the test plays Kueue's part
// where one is needed, as Kueue does it: the TerminationTarget condition, then the deletion). The
// finalizer keeps a stopped pod until the controller read it, and comes off at once after; no pod
// is left terminating: not a preempted one, not a finished run's, not a deleted Playbook's.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace, isNotFound } from "../harness/cluster-test.js";
import { reportFor, reportPod, scheduledPod, startPod, writePodStatus } from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const FINALIZER = "playbook.dev/read-before-delete";
const { core, custom } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

const RUN = {
  queueName: "team-a",
  backoffLimit: 0,
  ceiling: "2m",
  killGrace: "1s",
  tasks: [{ name: "deploy", run: "make deploy" }],
};

async function namespaceWithController(prefix: string): Promise<string> {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  controllers.push(startController([ns]));
  return ns;
}

/** The pod's state: gone, or its finalizers. */
async function finalizersOf(ns: string, name: string): Promise<string[] | "gone"> {
  try {
    return (await core.readNamespacedPod({ namespace: ns, name })).metadata?.finalizers ?? [];
  } catch (error) {
    if (isNotFound(error)) return "gone";
    throw error;
  }
}

/** Playbook app runs on its pod app-1, then is deleted: its pod is left to the garbage collector. */
async function runThenDelete(ns: string) {
  const playbook = await createPlaybook(ns, "app", RUN);
  await startPod(core, await scheduledPod(core, ns, "app-1"));
  await waitForPlaybook(ns, "app", "to run", (pb) => pb.status?.phase === "Running");
  await custom.deleteNamespacedCustomObject({
    group: "playbook.dev",
    version: "v1alpha1",
    namespace: ns,
    plural: "playbooks",
    name: "app",
  });
  return playbook;
}

async function appPodGone(ns: string): Promise<void> {
  await eventually(
    "the deleted Playbook's pod to be gone",
    async () => ((await finalizersOf(ns, "app-1")) === "gone" ? true : undefined),
    60_000,
  );
}

async function released(ns: string, name: string): Promise<void> {
  await eventually(`pod ${name} to lose the controller's finalizer`, async () => {
    const state = await finalizersOf(ns, name);
    return state === "gone" || !state.includes(FINALIZER) ? true : undefined;
  });
}

describe("the controller's finalizer on a pod that goes through Kueue", () => {
  it("keeps a pod Kueue stopped until the controller read it, then comes off: the run goes on in a new pod, no attempt spent", async () => {
    const ns = await namespaceWithController("pb-kueue-stop");
    await createPlaybook(ns, "app", RUN);
    const pod = await startPod(core, await scheduledPod(core, ns, "app-1"));
    expect(pod.metadata?.finalizers).toContain(FINALIZER);
    await waitForPlaybook(ns, "app", "to run", (pb) => pb.status?.phase === "Running");
    // Kueue's part: its condition on the pod, then its deletion (the node ends the pod, no report).
    await writePodStatus(core, pod, (current: V1Pod) => ({
      ...current.status,
      conditions: [
        ...(current.status?.conditions ?? []),
        {
          type: "TerminationTarget",
          status: "True",
          reason: "WorkloadEvictedDueToPreempted",
          message:
            "Preempted to accommodate a workload (UID: 1, JobUID: 2) due to prioritization in the ClusterQueue",
        },
      ],
    }));
    await core.deleteNamespacedPod({ namespace: ns, name: "app-1" });
    const requeued = await waitForPlaybook(
      ns,
      "app",
      "to go on in a second pod",
      (pb) => pb.status?.podName === "app-2",
    );
    expect(requeued.status).toMatchObject({ podAttempts: 2, preemptions: 1 });
    expect(condition(requeued, "Succeeded")?.status).toBe("Unknown");
    const events = await eventsOf(ns, "app", ["Preempted"]);
    expect(events.find((e) => e.reason === "Preempted")?.message).toMatch(
      /^Kueue stopped pod app-1 \(attempt 1\): WorkloadEvictedDueToPreempted: Preempted to accommodate/,
    );
    await eventually("pod app-1 to be gone", async () =>
      (await finalizersOf(ns, "app-1")) === "gone" ? true : undefined,
    );
  });

  it("ends the run Preempted at the stop past maxPreemptions, naming the count, and frees that pod too", async () => {
    const ns = await namespaceWithController("pb-kueue-cap");
    await createPlaybook(ns, "app", { ...RUN, maxPreemptions: 1 });
    /** Kueue's part on the run's pod `name`: its condition, then its deletion. */
    const stop = async (name: string) => {
      const pod = await startPod(core, await scheduledPod(core, ns, name));
      await waitForPlaybook(
        ns,
        "app",
        `to run in ${name}`,
        (pb) => pb.status?.podName === name && pb.status?.phase === "Running",
      );
      await writePodStatus(core, pod, (current: V1Pod) => ({
        ...current.status,
        conditions: [
          ...(current.status?.conditions ?? []),
          {
            type: "TerminationTarget",
            status: "True",
            reason: "WorkloadEvictedDueToPreempted",
            message: "Preempted",
          },
        ],
      }));
      await core.deleteNamespacedPod({ namespace: ns, name });
    };
    await stop("app-1");
    const requeued = await waitForPlaybook(
      ns,
      "app",
      "to go on in a second pod",
      (pb) => pb.status?.podName === "app-2",
    );
    expect(requeued.status?.limits?.maxPreemptions).toEqual({ value: 1, source: "spec" });
    await stop("app-2");
    const ended = await waitForFinished(ns, "app");
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "Preempted" });
    expect(condition(ended, "Succeeded")?.message).toMatch(
      /^Kueue stopped pod app-2 \(attempt 2\): WorkloadEvictedDueToPreempted: Preempted; .*; preempted 2 times, past maxPreemptions 1 \(spec\)$/,
    );
    expect(ended.status).toMatchObject({ podAttempts: 2, preemptions: 1 });
    const events = await eventsOf(ns, "app", ["Preempted"]);
    expect(events.map((e) => e.message)).toContainEqual(
      expect.stringMatching(/; the run ends Preempted: preempted 2 times, past maxPreemptions 1 \(spec\)$/),
    );
    await eventually("pod app-2 to be gone", async () =>
      (await finalizersOf(ns, "app-2")) === "gone" ? true : undefined,
    );
  });

  it("comes off a finished run's pod at once, which is kept for its logs until its TTL", async () => {
    const ns = await namespaceWithController("pb-kueue-done");
    await createPlaybook(ns, "app", RUN);
    const pod = await startPod(core, await scheduledPod(core, ns, "app-1"));
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const done = await waitForFinished(ns, "app");
    expect(condition(done, "Succeeded")?.reason).toBe("Succeeded");
    await released(ns, "app-1");
    expect(await finalizersOf(ns, "app-1")).not.toBe("gone");
  });

  it("comes off the pods of a deleted Playbook, which the garbage collector then removes", async () => {
    const ns = await namespaceWithController("pb-kueue-gone");
    await runThenDelete(ns);
    await appPodGone(ns);
  });
  it("comes off the pods of a deleted Playbook when a new one has taken its name at once", async () => {
    const ns = await namespaceWithController("pb-kueue-again");
    const old = await runThenDelete(ns);
    const again = await createPlaybook(ns, "app", RUN);
    expect(again.metadata.uid).not.toBe(old.metadata.uid);
    // The old pod is the old Playbook's (by UID): the new one neither reads it nor keeps it.
    await appPodGone(ns);
  });
});
