// A pod name held by a pod the Playbook does not control (issue 18 item 4): someone else's pod
// named like the run's first pod, or the lingering pod of a deleted Playbook of the same name.
// The run must still make its own pod (under its alternate name) and settle, with one PodCreated.
import { afterAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { reportFor, reportPod, scheduledPod, startPod } from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  getPlaybook,
  HOLD_FINALIZER,
  kubectl,
  type RunningController,
  releaseHeldPods,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core, custom } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];
/** Pods held by a test finalizer, released after the tests. */
const held: { namespace: string; name: string }[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await releaseHeldPods(held);
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

async function setUp(prefix: string): Promise<string> {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  controllers.push(startController([ns]));
  return ns;
}

/** The PodCreated events of one Playbook object (by UID: a deleted one of the same name had its own), counted. */
async function podCreatedCount(namespace: string, uid: string): Promise<number> {
  const events = await core.listNamespacedEvent({
    namespace,
    fieldSelector: `involvedObject.uid=${uid},reason=PodCreated`,
  });
  return events.items.reduce((sum, e) => sum + (e.count ?? 1), 0);
}

/** The run's pod (by name, once bound to the node) runs and its runner reports success. */
async function succeed(namespace: string, name: string): Promise<void> {
  const pod = await startPod(core, await scheduledPod(core, namespace, name));
  await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
}

async function podNames(namespace: string): Promise<string[]> {
  return (await core.listNamespacedPod({ namespace })).items.map((p) => p.metadata?.name ?? "").sort();
}

const SHORT_RUN = { ceiling: "90s", killGrace: "2s", tasks: [{ name: "build", run: "true" }] };

describe("a pod name held by a pod the Playbook does not control", () => {
  it("someone else's pod named <playbook>-1: the run uses <playbook>-1-<uid> and succeeds", async () => {
    const ns = await setUp("pb-name-foreign");
    // No node matches it: it stays Pending, holding the name (a pod bound to a node that does
    // not exist would be removed by the pod garbage collector after some 40 s).
    await core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: { name: "taken-1", labels: { app: "someone-else" } },
        spec: {
          nodeSelector: { "playbook.dev/test": "no-such-node" },
          containers: [{ name: "c", image: "example.invalid/app:1" }],
        },
      },
    });
    const created = await createPlaybook(ns, "taken", SHORT_RUN);
    const uid = created.metadata.uid;
    const alternate = `taken-1-${uid.replace(/-/g, "").slice(0, 8)}`;
    await succeed(ns, alternate);
    const playbook = await waitForFinished(ns, "taken", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status?.podName).toBe(alternate);
    expect(playbook.status?.podAttempts).toBe(1);
    expect(await podNames(ns)).toEqual([alternate, "taken-1"].sort());
    // The foreign pod is untouched: still someone else's, not deleted.
    const foreign = await core.readNamespacedPod({ namespace: ns, name: "taken-1" });
    expect(foreign.metadata?.ownerReferences).toBeUndefined();
    expect(foreign.metadata?.deletionTimestamp).toBeUndefined();
    const taken = await eventually("a PodNameTaken event", async () => {
      const events = await core.listNamespacedEvent({
        namespace: ns,
        fieldSelector: `involvedObject.uid=${uid},reason=PodNameTaken`,
      });
      return events.items[0];
    });
    expect(taken.message).toBe(
      `Pod name taken-1 is held by a pod this Playbook does not control; created pod ${alternate} (attempt 1) instead`,
    );
    await eventually("its PodCreated event", async () =>
      (await podCreatedCount(ns, uid)) > 0 ? true : undefined,
    );
    expect(await podCreatedCount(ns, uid)).toBe(1);
  });

  it("both names held: the run says Pending naming both pods, creates none, and ends RunCeiling at its ceiling", async () => {
    const ns = await createTestNamespace(core, "pb-name-both");
    namespaces.push(ns);
    // The Playbook first, with no controller yet, so that its UID (and so its alternate name) is known.
    const created = await createPlaybook(ns, "both", { ...SHORT_RUN, ceiling: "10s" });
    const uid = created.metadata.uid;
    const alternate = `both-1-${uid.replace(/-/g, "").slice(0, 8)}`;
    for (const name of ["both-1", alternate]) {
      await core.createNamespacedPod({
        namespace: ns,
        body: {
          metadata: { name },
          spec: {
            nodeSelector: { "playbook.dev/test": "no-such-node" },
            containers: [{ name: "c", image: "example.invalid/app:1" }],
          },
        },
      });
    }
    controllers.push(startController([ns]));
    const message = `pod names both-1 and ${alternate} are held by pods this Playbook does not control: attempt 1 cannot be created until one is removed or the run's ceiling passes`;
    const pending = await waitForPlaybook(
      ns,
      "both",
      "to say which pods hold its names",
      (p) => condition(p, "Succeeded")?.message === message,
      30_000,
    );
    expect(pending.status?.phase).toBe("Pending");
    const playbook = await waitForFinished(ns, "both", 40_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "RunCeiling" });
    expect(condition(playbook, "Succeeded")?.message).toContain(message);
    expect(await podNames(ns)).toEqual([alternate, "both-1"].sort());
    expect(await podCreatedCount(ns, uid)).toBe(0);
  });

  it("a Playbook deleted and re-created under the same name while its old pod lingers: the new run settles on its own pod", async () => {
    const ns = await setUp("pb-name-again");
    const old = await createPlaybook(ns, "again", {
      ...SHORT_RUN,
      tasks: [{ name: "long", run: "sleep 300" }],
    });
    await startPod(core, await scheduledPod(core, ns, "again-1"));
    // A finalizer keeps the old pod after its Playbook is gone, as a slow node or a tool would.
    await kubectl([
      "-n",
      ns,
      "patch",
      "pod",
      "again-1",
      "--type=merge",
      "-p",
      JSON.stringify({ metadata: { finalizers: [HOLD_FINALIZER] } }),
    ]);
    held.push({ namespace: ns, name: "again-1" });
    await custom.deleteNamespacedCustomObject({
      group: "playbook.dev",
      version: "v1alpha1",
      plural: "playbooks",
      namespace: ns,
      name: "again",
    });
    await eventually("the old Playbook gone", async () =>
      getPlaybook(ns, "again").then(
        () => undefined,
        () => true,
      ),
    );
    const created = await createPlaybook(ns, "again", SHORT_RUN);
    const uid = created.metadata.uid;
    expect(uid).not.toBe(old.metadata.uid);
    const alternate = `again-1-${uid.replace(/-/g, "").slice(0, 8)}`;
    await succeed(ns, alternate);
    const playbook = await waitForPlaybook(
      ns,
      "again",
      "to finish",
      (p) => (condition(p, "Succeeded")?.status ?? "Unknown") !== "Unknown",
      60_000,
    );
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status?.podName).toBe(alternate);
    const pod = await core.readNamespacedPod({ namespace: ns, name: alternate });
    expect(pod.metadata?.ownerReferences?.[0]).toMatchObject({ kind: "Playbook", uid, controller: true });
    // The old pod still holds its name and its old owner.
    const lingering = await core.readNamespacedPod({ namespace: ns, name: "again-1" });
    expect(lingering.metadata?.ownerReferences?.[0]?.uid).toBe(old.metadata.uid);
    await eventually("its PodCreated event", async () =>
      (await podCreatedCount(ns, uid)) > 0 ? true : undefined,
    );
    expect(await podCreatedCount(ns, uid)).toBe(1);
  });
});
