// A cancelled run whose pod never goes away (issue 18 item 5): its node never stops it, and once
// deleted the pod stays terminating, as when the node's machine is gone (the API server keeps a
// bound pod until its node confirms the deletion). The pods are scripted by hand (MANUAL): the
// scripted node neither stops them at a deadline nor confirms their deletion, and the test never
// ends them. The run must still settle Cancelled, in a bounded time, naming the pod.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, describe, expect, it } from "vitest";
import { BACKSTOP_SLACK_MS } from "../../src/controller/decision.js";
import { TERMINATING_SLACK_MS } from "../../src/controller/pods/terminating.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { SCRIPTED_NODE_NAME, scheduledPod, scriptManually, startPod } from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  patchSpec,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];
const stuck: { namespace: string; name: string }[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  // No node confirms their deletion: the stuck pods go only when deleted at once.
  for (const pod of stuck) {
    await core.deleteNamespacedPod({ ...pod, gracePeriodSeconds: 0 }).catch(() => {});
  }
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

/** killGrace 1s plus the controller's 5s margin for the report: the grace a cancel's deletion gives. */
const GRACE_SECONDS = 6;

/** A namespace, its controller, and the run's first pod, left to the test alone. */
async function stuckRun(prefix: string, spec: Record<string, unknown>): Promise<{ ns: string; pod: V1Pod }> {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  controllers.push(startController([ns]));
  await createPlaybook(ns, "stuck", {
    killGrace: "1s",
    tasks: [{ name: "never", run: "sleep 600" }],
    ...spec,
  });
  const pod = await scheduledPod(core, ns, "stuck-1");
  await scriptManually(core, pod);
  stuck.push({ namespace: ns, name: "stuck-1" });
  return { ns, pod };
}

/** The pod once the controller asked for its deletion, and when it asked. */
async function deletionRequested(ns: string, timeoutMs: number) {
  const pod = await eventually(
    "the pod to be terminating",
    async () => {
      const current = await core.readNamespacedPod({ namespace: ns, name: "stuck-1" });
      return current.metadata?.deletionTimestamp ? current : undefined;
    },
    timeoutMs,
  );
  expect(pod.spec?.nodeName).toBe(SCRIPTED_NODE_NAME);
  expect(pod.metadata?.deletionGracePeriodSeconds).toBe(GRACE_SECONDS);
  const requestedAt = new Date(pod.metadata?.deletionTimestamp ?? "").getTime() - GRACE_SECONDS * 1000;
  return { pod, requestedAt };
}

/** The run settled Cancelled naming the stuck pod, its grace and the node's margin after the deletion, and not much later. */
async function expectSettledNamingPod(ns: string, requestedAt: number) {
  const playbook = await waitForFinished(ns, "stuck", 75_000);
  expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
  expect(playbook.status?.phase).toBe("Cancelled");
  expect(playbook.status?.podName).toBe("stuck-1");
  expect(condition(playbook, "Succeeded")?.message).toMatch(
    new RegExp(
      `^the run was cancelled \\(spec\\.cancel\\); pod stuck-1 did not end in time: it was still terminating \\d+s after its deletion was requested \\(killGrace 1s \\(spec\\.killGrace\\), a margin for the report and 30s for its node; node ${SCRIPTED_NODE_NAME}\\), so the run ended without the runner's report$`,
    ),
  );
  const settledAfter = Date.parse(playbook.status?.completionTime ?? "") - requestedAt;
  expect(settledAfter).toBeGreaterThanOrEqual(GRACE_SECONDS * 1000 + TERMINATING_SLACK_MS - 1000);
  expect(settledAfter).toBeLessThan(GRACE_SECONDS * 1000 + TERMINATING_SLACK_MS + 14_000);
  const events = await eventsOf(ns, "stuck", ["RunCancelled"]);
  expect(events.find((e) => e.reason === "RunCancelled")?.message).toContain(
    "pod stuck-1 did not end in time",
  );
  // The pod is still there, terminating: the run settled without waiting for ever.
  const pod = await core.readNamespacedPod({ namespace: ns, name: "stuck-1" });
  expect(pod.metadata?.deletionTimestamp).toBeDefined();
  return events;
}

// Both wait out the controller's margins (30s each): they run side by side, each in its namespace.
describe.concurrent("a cancelled run whose pod never ends", () => {
  it("its node never started the pod: deleted once the ceiling and killGrace passed, and settled Cancelled once the wait for it passed, naming the pod", async () => {
    // Bound, and no word from its node: no status.startTime (a kubelet sets one as soon as it
    // admits a pod, before any image pull), as when the node went before it took the pod.
    const { ns, pod } = await stuckRun("pb-cancel-unstarted", { ceiling: "10s" });
    expect(pod.status?.startTime).toBeUndefined();
    await patchSpec(ns, "stuck", { cancel: true });
    const { requestedAt } = await deletionRequested(ns, 30_000);
    const started = Date.parse(
      (await waitForPlaybook(ns, "stuck", "to have started", (p) => !!p.status?.startTime)).status
        ?.startTime ?? "",
    );
    // Not before the run's ceiling and killGrace passed (timestamps in whole seconds).
    expect(requestedAt).toBeGreaterThanOrEqual(started + 11_000 - 1000);
    const events = await expectSettledNamingPod(ns, requestedAt);
    expect(events.map((e) => e.message)).toContainEqual(
      expect.stringMatching(/^Deleted pod stuck-1: spec\.cancel is true and its node never started it/),
    );
  });

  it("its node ignores the lowered deadline: deleted once the grace and a margin passed, and settled Cancelled once the wait for it passed, naming the pod", async () => {
    const { ns, pod } = await stuckRun("pb-cancel-running", { ceiling: "5m" });
    await startPod(core, pod);
    await waitForPlaybook(ns, "stuck", "to run", (p) => p.status?.phase === "Running", 30_000);
    const cancelledAt = Date.now();
    await patchSpec(ns, "stuck", { cancel: true });
    const lowered = await eventually("the pod's deadline lowered", async () => {
      const current = await core.readNamespacedPod({ namespace: ns, name: "stuck-1" });
      return (current.spec?.activeDeadlineSeconds ?? Infinity) < 60 ? current : undefined;
    });
    expect(lowered.metadata?.deletionTimestamp).toBeUndefined();
    const { requestedAt } = await deletionRequested(ns, GRACE_SECONDS * 1000 + BACKSTOP_SLACK_MS + 20_000);
    // The node had the grace and the controller's margin to stop it first.
    expect(requestedAt - cancelledAt).toBeGreaterThanOrEqual(GRACE_SECONDS * 1000 + BACKSTOP_SLACK_MS - 2000);
    const events = await expectSettledNamingPod(ns, requestedAt);
    expect(events.map((e) => e.message)).toContainEqual(
      expect.stringMatching(
        /^Deleted pod stuck-1: spec\.cancel is true and its node did not stop it at its lowered activeDeadlineSeconds/,
      ),
    );
  });
});
