// spec.finally against a real API server, the scripted node standing in for the kubelet: the pod
// the controller builds for a run with finally tasks (their containers, a deadline and a grace
// that leave them their ceiling), status.finally and status.limits.finallyCeiling with their
// sources, the namespace policy's maximum, and the controller's own.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PLAN_ANNOTATION, parsePlan } from "../../src/api/plan.js";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  exceedDeadline,
  reportFor,
  reportPod,
  scheduledPod,
  scriptManually,
  startPod,
} from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  getPlaybook,
  kubectlResult,
  patchSpec,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
let governed: string;
let bare: string;
let controller: RunningController;

const PAGER = "registry.example/pager:1";

beforeAll(async () => {
  governed = await createTestNamespace(core, "finally");
  bare = await createTestNamespace(core, "finally-bare");
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace: governed },
    spec: {
      defaults: { finallyCeiling: "40s" },
      maximums: { finallyCeiling: "1m" },
      allowedImages: ["registry.example/*"],
    },
  };
  const applied = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(policy));
  expect(applied.stderr).toBe("");
  controller = startController([governed, bare], {
    defaultFinallyCeiling: "1m",
    maxFinallyCeiling: "2m",
    defaultKillGrace: "3s",
  });
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, governed);
  if (bare) await deleteTestNamespace(core, bare);
});

/** The policy reached the controller: a Playbook created now is judged by it. */
async function policyGoverns(namespace: string): Promise<void> {
  await eventually(`the PlaybookPolicy of ${namespace} to be Ready`, async () => {
    const read = await kubectlResult(["-n", namespace, "get", "playbookpolicy", "default", "-o", "json"]);
    const policy = JSON.parse(read.stdout || "{}") as {
      status?: { conditions?: { type: string; status: string }[] };
    };
    return policy.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") || undefined;
  });
}

const containersOf = (pod: V1Pod) => (pod.spec?.containers ?? []).map((c) => [c.name, c.image]);

describe("a Playbook with finally tasks on a cluster", () => {
  it("gets a pod that holds their image and leaves them their ceiling, and shows them in status.finally with the policy's ceiling", async () => {
    await policyGoverns(governed);
    await createPlaybook(governed, "cleanup", {
      ceiling: "1m",
      killGrace: "5s",
      tasks: [
        { name: "lock", run: "take-lock" },
        { name: "migrate", run: "migrate" },
      ],
      finally: [
        { name: "unlock", run: "release-lock" },
        { name: "page", run: 'page "$PLAYBOOK_OUTCOME"', image: PAGER },
      ],
    });
    const pod = await scheduledPod(core, governed, "cleanup-1");
    // One container per distinct image of the main and the finally tasks.
    expect(containersOf(pod).slice(1)).toEqual([
      ["task-1", expect.any(String)],
      ["task-2", PAGER],
    ]);
    const plan = parsePlan(pod.metadata?.annotations?.[PLAN_ANNOTATION] ?? "");
    expect(plan.ok && plan.plan.finally).toEqual([{ container: "task-1" }, { container: "task-2" }]);
    // The ceiling and killGrace, then the finally ceiling (the policy's 40s) and killGrace, and 5s.
    expect(pod.spec?.activeDeadlineSeconds).toBeGreaterThan(40 + 5 + 5);
    expect(pod.spec?.activeDeadlineSeconds).toBeLessThanOrEqual(60 + 5 + 40 + 5 + 5);
    expect(pod.spec?.terminationGracePeriodSeconds).toBe(5 + 40 + 5 + 5);

    await startPod(core, pod);
    await waitForPlaybook(governed, "cleanup", "to be Running", (p) => p.status?.phase === "Running");
    await reportPod(core, pod, reportFor(pod, { reason: "TaskFailed", at: 1 }));
    const playbook = await waitForFinished(governed, "cleanup", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(playbook.status?.endingTask).toBe("migrate");
    expect(playbook.status?.limits?.finallyCeiling).toEqual({ value: "40s", source: "policy" });
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Succeeded", "Failed"]);
    expect(playbook.status?.finally).toMatchObject([
      { name: "unlock", phase: "Succeeded", attempts: 1 },
      { name: "page", phase: "Succeeded", attempts: 1, image: PAGER },
    ]);
  });

  it("turns a success into TaskFailed when a finally task fails, naming it", async () => {
    await createPlaybook(bare, "unlock-fails", {
      ceiling: "1m",
      finallyCeiling: "30s",
      tasks: [{ name: "build", run: "make" }],
      finally: [{ name: "unlock", run: "release-lock" }],
    });
    const pod = await scheduledPod(core, bare, "unlock-fails-1");
    await startPod(core, pod);
    await waitForPlaybook(bare, "unlock-fails", "to be Running", (p) => p.status?.phase === "Running");
    await reportPod(
      core,
      pod,
      reportFor(pod, {
        reason: "TaskFailed",
        // The main task succeeded; the finally task failed the run.
        tasks: { 0: { phase: "Succeeded", exitCode: 0 } },
        finally: { 0: { phase: "Failed", exitCode: 4 } },
      }),
    );
    const playbook = await waitForFinished(bare, "unlock-fails", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(condition(playbook, "Succeeded")?.message).toMatch(/^finally task unlock .*exit.*4/);
    expect(playbook.status?.endingTask).toBe("unlock");
    expect(playbook.status?.limits?.finallyCeiling).toEqual({ value: "30s", source: "spec" });
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Succeeded"]);
    expect(playbook.status?.finally?.map((t) => t.phase)).toEqual(["Failed"]);
  });

  it("keeps the finally window in the grace a cancel's stop gives the pod", async () => {
    await createPlaybook(bare, "cancelled", {
      ceiling: "1m",
      killGrace: "2s",
      finallyCeiling: "20s",
      tasks: [{ name: "wait", run: "sleep 60" }],
      finally: [{ name: "unlock", run: "release-lock" }],
    });
    const pod = await scheduledPod(core, bare, "cancelled-1");
    expect(pod.spec?.terminationGracePeriodSeconds).toBe(2 + 20 + 2 + 5);
    // The test is the kubelet here: it stops the pod at the lowered deadline, with the runner's report.
    await scriptManually(core, pod);
    await startPod(core, pod);
    await waitForPlaybook(bare, "cancelled", "to be Running", (p) => p.status?.phase === "Running");
    await patchSpec(bare, "cancelled", { cancel: true });
    const lowered = await eventually("the cancel to lower the pod's deadline", async () => {
      const read = await core.readNamespacedPod({ namespace: bare, name: "cancelled-1" });
      return (read.spec?.activeDeadlineSeconds ?? 0) < 60 ? read : undefined;
    });
    expect(lowered.spec?.terminationGracePeriodSeconds).toBe(2 + 20 + 2 + 5);
    // The runner ran its finally task after the cancel, within the pod's grace, and reported.
    await exceedDeadline(
      core,
      lowered,
      reportFor(lowered, { reason: "Cancelled", at: 0, finally: { 0: { phase: "Succeeded", exitCode: 0 } } }),
    );
    const playbook = await waitForFinished(bare, "cancelled", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(playbook.status?.finally).toMatchObject([{ name: "unlock", phase: "Succeeded" }]);
  });
});

describe("the maximum finallyCeiling", () => {
  it.each([
    {
      where: "the namespace's policy",
      namespace: () => governed,
      spec: { finallyCeiling: "90s" },
      says: "spec.finallyCeiling: 1m30s is longer than the namespace's maximum finallyCeiling 1m (PlaybookPolicy default, spec.maximums.finallyCeiling)",
    },
    {
      where: "the controller's --max-finally-ceiling",
      namespace: () => bare,
      spec: { finallyCeiling: "3m" },
      says: "spec.finallyCeiling: 3m is longer than the maximum finallyCeiling 2m (the controller's --max-finally-ceiling)",
    },
  ])(
    "set by $where refuses a longer one: InvalidSpec naming the field, the value and the bound, and no pod",
    async ({ namespace, spec, says }) => {
      const ns = namespace();
      const name = `over-${ns === governed ? "policy" : "flag"}`;
      await createPlaybook(ns, name, {
        ...spec,
        tasks: [{ name: "build", run: "make" }],
        finally: [{ name: "unlock", run: "release-lock" }],
      });
      const playbook = await waitForFinished(ns, name, 30_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
      expect(condition(playbook, "Succeeded")?.message).toContain(says);
      expect(playbook.status?.podAttempts ?? 0).toBe(0);
      expect(
        (await core.listNamespacedPod({ namespace: ns })).items.map((p) => p.metadata?.name),
      ).not.toContain(`${name}-1`);
      expect((await getPlaybook(ns, name)).status?.finally).toBeUndefined();
    },
  );
});
