// The plan a run started with holds for every pod of the run (issue 18 items 1-3), on the real API
// server: the spec cannot change once the first pod exists, a pod re-created after a loss is built
// from the recorded plan, a plan rewritten on the pod is refused, and a first pod lost at once
// costs an attempt of backoffLimit. The pods' lives are written by the test (the scripted node);
// the runner's own refusal of a plan file that does not hash to $PLAYBOOK_PLAN_DIGEST is tested
// on a real runner process in test/runner/cli.test.ts ("playbook pod-runner").
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, describe, expect, inject, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { scheduledPod, startPod } from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  kubectl,
  kubectlResult,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

async function setUp(prefix: string): Promise<string> {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  controllers.push(startController([ns]));
  return ns;
}

/** The pod once it exists, polled often: the tests act in the moment after its create. */
async function podAsSoonAsItExists(namespace: string, name: string) {
  for (let i = 0; i < 1500; i++) {
    try {
      return await core.readNamespacedPod({ namespace, name });
    } catch {
      await sleep(20);
    }
  }
  throw new Error(`pod ${namespace}/${name} never appeared`);
}

const LONG_RUN = { ceiling: "60s", killGrace: "1s", tasks: [{ name: "waits", run: "sleep 40" }] };

describe("the plan a run started with", () => {
  it("freezes the spec from its start record on, and a pod re-created after a loss is built from it", async () => {
    const ns = await setUp("pb-plan-frozen");
    // A service account that exists, so that a pod naming it could be created at all.
    await core.createNamespacedServiceAccount({ namespace: ns, body: { metadata: { name: "admin" } } });
    await createPlaybook(ns, "frozen", { ...LONG_RUN, backoffLimit: 1 });
    await podAsSoonAsItExists(ns, "frozen-1");
    // The start record rides on the first status write after the create: a pod merely pending
    // gets it within 3 s (issue 33 item 8).
    await waitForPlaybook(
      ns,
      "frozen",
      "to record its start",
      (p) => p.status?.startTime !== undefined,
      10_000,
    );
    const edit = await kubectlResult([
      ...["-n", ns, "patch", "pb", "frozen", "--type=merge", "-p"],
      JSON.stringify({ spec: { serviceAccountName: "admin", image: "example.invalid/evil:1" } }),
    ]);
    expect(edit.code).not.toBe(0);
    expect(edit.stderr).toContain(
      "spec.serviceAccountName cannot change once the run has started (status.startTime is set); only spec.cancel may",
    );
    expect(edit.stderr).toContain("spec.image cannot change once the run has started");
    // The pod is lost: the next one is built from the plan the run started with.
    await core.deleteNamespacedPod({ namespace: ns, name: "frozen-1", gracePeriodSeconds: 0 });
    const second = await podAsSoonAsItExists(ns, "frozen-2");
    expect(second.spec?.serviceAccountName ?? "default").toBe("default");
    expect(second.spec?.automountServiceAccountToken).toBe(false);
    // The runner and the task container, both in the runner image: spec.image was not taken.
    expect(second.spec?.containers.map((c) => c.image)).toEqual([
      inject("runnerImage"),
      inject("runnerImage"),
    ]);
    const playbook = await waitForPlaybook(
      ns,
      "frozen",
      "to count its second pod",
      (p) => p.status?.podAttempts === 2,
    );
    expect(playbook.spec.serviceAccountName).toBeUndefined();
    expect(playbook.status?.planDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const events = await eventsOf(ns, "frozen", ["PodLost"]);
    expect(events.find((e) => e.reason === "PodLost")?.message).toMatch(
      /^Pod frozen-1 was deleted or lost with its node; created pod frozen-2 \(attempt 2 of 2\)/,
    );
    // The second pod runs; cancelled, its node stops it at the deadline the controller lowers.
    await startPod(core, await scheduledPod(core, ns, "frozen-2"));
    await kubectl(["-n", ns, "patch", "pb", "frozen", "--type=merge", "-p", '{"spec":{"cancel":true}}']);
    const cancelled = await waitForFinished(ns, "frozen", 30_000);
    expect(condition(cancelled, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
  });

  it("refuses a plan rewritten on the pod: the run ends RunnerLost naming the annotation, and the pod is deleted", async () => {
    const ns = await setUp("pb-plan-forged");
    await createPlaybook(ns, "forged", LONG_RUN);
    await startPod(core, await scheduledPod(core, ns, "forged-1"));
    const running = await waitForPlaybook(
      ns,
      "forged",
      "to run",
      (p) => p.status?.phase === "Running",
      30_000,
    );
    const digest = running.status?.planDigest;
    const pod = await core.readNamespacedPod({ namespace: ns, name: "forged-1" });
    const plan = JSON.parse(pod.metadata?.annotations?.["playbook.dev/plan"] ?? "{}");
    plan.spec.ceiling = "50m";
    plan.spec.tasks = [{ ...plan.spec.tasks[0], run: "echo forged" }];
    await kubectl([
      ...["-n", ns, "annotate", "pod", "forged-1", "--overwrite"],
      `playbook.dev/plan=${JSON.stringify(plan)}`,
    ]);
    const playbook = await waitForFinished(ns, "forged", 30_000);
    const succeeded = condition(playbook, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(succeeded?.message).toMatch(
      /^the playbook\.dev\/plan annotation of pod forged-1 is not the plan the run started with: it hashes to sha256:[0-9a-f]{64}, status\.planDigest is sha256:/,
    );
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(succeeded?.message).toContain(`status.planDigest is ${digest}`);
    // Nothing of the forged plan was carried on: not its ceiling, not another pod.
    expect(playbook.status?.limits?.ceiling).toEqual({ value: "1m", source: "spec" });
    expect(playbook.status?.podAttempts).toBe(1);
    await eventually("the pod deleted", async () => {
      const pods = (await core.listNamespacedPod({ namespace: ns })).items;
      return pods.every((p) => p.metadata?.name !== "forged-1" || p.metadata.deletionTimestamp)
        ? pods
        : undefined;
    });
    const pods = (await core.listNamespacedPod({ namespace: ns })).items.map((p) => p.metadata?.name);
    expect(pods).not.toContain("forged-2");
    const events = await eventsOf(ns, "forged", ["PlanRefused"]);
    expect(events.find((e) => e.reason === "PlanRefused")?.message).toMatch(
      /^The playbook\.dev\/plan annotation of pod forged-1 is not the plan the run started with/,
    );
  });

  it("counts a first pod lost at once against backoffLimit, the ceiling from its create", async () => {
    const ns = await setUp("pb-plan-lost");
    await createPlaybook(ns, "gone", { ...LONG_RUN, backoffLimit: 0 });
    const first = await podAsSoonAsItExists(ns, "gone-1");
    await core.deleteNamespacedPod({ namespace: ns, name: "gone-1", gracePeriodSeconds: 0 });
    const playbook = await waitForFinished(ns, "gone", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "PodLost" });
    expect(condition(playbook, "Succeeded")?.message).toBe(
      "pod gone-1 was deleted or lost with its node; the pod was lost 1 time, more than backoffLimit 0 allows",
    );
    expect(playbook.status?.podAttempts).toBe(1);
    // The run started with its first pod, not with a later one.
    const created = Date.parse(String(first.metadata?.creationTimestamp));
    expect(Date.parse(playbook.status?.startTime ?? "")).toBeLessThanOrEqual(created + 1000);
    const pods = (await core.listNamespacedPod({ namespace: ns })).items.map((p) => p.metadata?.name);
    expect(pods).toEqual([]);
  });
});
