// A cancelled run whose pod never goes away (issue 18 item 5): the pod has a deletionTimestamp
// but something holds it (here a finalizer, and no kubelet acts on it, as when its node is gone).
// The run must still settle Cancelled once the pod's grace and a margin passed, naming the pod.
import { afterAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  HOLD_FINALIZER,
  kubectl,
  patchSpec,
  type RunningController,
  releaseHeldPods,
  startController,
  waitForFinished,
} from "./support.js";

const { core } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];
const held: { namespace: string; name: string }[] = [];
const nodes: string[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await releaseHeldPods(held);
  // No kubelet confirms their deletion: the held pods go only when deleted at once.
  for (const pod of held) {
    await core.deleteNamespacedPod({ ...pod, gracePeriodSeconds: 0 }).catch(() => {});
  }
  await Promise.all(nodes.map((name) => core.deleteNode({ name }).catch(() => {})));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

describe("a cancelled run whose pod is stuck terminating", () => {
  it("settles Cancelled once the wait for its pod passed, naming the pod", async () => {
    const ns = await createTestNamespace(core, "pb-cancel-stuck");
    namespaces.push(ns);
    controllers.push(startController([ns]));
    // A node the API server knows and no kubelet runs, as when a node's machine is gone: nothing
    // confirms its pods' deletion (the pod garbage collector removes only pods of nodes that do
    // not exist), and the finalizer holds the pod should anything try.
    const node = `ghost-${ns}`;
    await core.createNode({ body: { metadata: { name: node, labels: { "playbook.dev/test": "ghost" } } } });
    nodes.push(node);
    // No node has room for it, so the scheduler leaves it to the test, which binds it to the ghost.
    await createPlaybook(ns, "stuck", {
      ceiling: "15s",
      killGrace: "1s",
      resources: { requests: { cpu: "1000" } },
      tasks: [{ name: "never", run: "true" }],
    });
    await eventually("the pod to exist", async () =>
      (await core.readNamespacedPod({ namespace: ns, name: "stuck-1" }).catch(() => undefined))
        ? true
        : undefined,
    );
    await kubectl([
      "-n",
      ns,
      "patch",
      "pod",
      "stuck-1",
      "--type=merge",
      "-p",
      JSON.stringify({ metadata: { finalizers: [HOLD_FINALIZER] } }),
    ]);
    held.push({ namespace: ns, name: "stuck-1" });
    await core.createNamespacedPodBinding({
      namespace: ns,
      name: "stuck-1",
      body: { metadata: { name: "stuck-1" }, target: { apiVersion: "v1", kind: "Node", name: node } },
    });
    await patchSpec(ns, "stuck", { cancel: true });

    // Its node never starts it: once the ceiling and killGrace passed, the controller deletes it,
    // and it stays terminating.
    const terminating = await eventually(
      "the pod to be terminating",
      async () => {
        const pod = await core.readNamespacedPod({ namespace: ns, name: "stuck-1" });
        return pod.metadata?.deletionTimestamp ? pod : undefined;
      },
      45_000,
    );
    expect(terminating.spec?.nodeName).toBe(node);
    expect(terminating.metadata?.finalizers).toEqual([HOLD_FINALIZER]);
    // The grace the controller gave the deletion: killGrace 1s plus its 5s margin.
    expect(terminating.metadata?.deletionGracePeriodSeconds).toBe(6);
    const requestedAt = new Date(terminating.metadata?.deletionTimestamp ?? "").getTime() - 6_000;
    const playbook = await waitForFinished(ns, "stuck", 75_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(playbook.status?.phase).toBe("Cancelled");
    expect(playbook.status?.podName).toBe("stuck-1");
    expect(condition(playbook, "Succeeded")?.message).toMatch(
      new RegExp(
        `^the run was cancelled \\(spec\\.cancel\\); pod stuck-1 did not end in time: it was still terminating \\d+s after its deletion was requested \\(.*finalizers test\\.playbook\\.dev/hold, node ${node}\\)`,
      ),
    );
    // Its grace (6s) and the controller's 30s for the node, and not long after.
    const settledAfter = Date.parse(playbook.status?.completionTime ?? "") - requestedAt;
    expect(settledAfter).toBeGreaterThanOrEqual(35_000);
    expect(settledAfter).toBeLessThan(50_000);
    const events = await eventsOf(ns, "stuck", ["RunCancelled"]);
    expect(events.find((e) => e.reason === "RunCancelled")?.message).toContain(
      "pod stuck-1 did not end in time",
    );
    // The pod is still there, held: the run settled without waiting for ever.
    const pod = await core.readNamespacedPod({ namespace: ns, name: "stuck-1" });
    expect(pod.metadata?.deletionTimestamp).toBeDefined();
  });
});
