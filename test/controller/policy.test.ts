// The namespace policy on the real API server and the scripted node (the tests write each pod's
// life): defaults with source policy, refusals before any pod, the running-Playbooks cap under a
// burst, a policy edited mid-run, the policy's status, and who may do what with the chart's
// aggregated ClusterRoles (impersonation). That the runner enforces the limits its plan carries
// is the runner's tests' concern (test/runner/cli.test.ts, "playbook pod-runner").
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type KubernetesObject, type V1Pod, Watch } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { PLAN_ANNOTATION, parsePlan } from "../../src/api/plan.js";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { DEADLINE_MARGIN_SECONDS } from "../../src/controller/pods/pod-builder.js";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { reportFor, reportPod, scheduledPod, startPod } from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  getPlaybook,
  helm,
  kubectl,
  kubectlResult,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core, custom, kubeConfig } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];

async function namespace(prefix: string): Promise<string> {
  const name = await createTestNamespace(core, prefix);
  namespaces.push(name);
  return name;
}

function controllerFor(ns: string, overrides: Record<string, string | boolean> = {}): RunningController {
  // A burst of pods loads this 2-core machine for seconds: a 4s Lease can be lost mid-test, which
  // stops a controller for good.
  const running = startController([ns], {
    leaseDuration: "20s",
    renewDeadline: "15s",
    retryPeriod: "2s",
    ...overrides,
  });
  controllers.push(running);
  return running;
}

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

interface PolicyObject {
  metadata: { name: string; generation: number };
  spec?: { allowedImages?: string[] };
  status?: {
    observedGeneration?: number;
    governed?: number;
    conditions?: { type: string; status: string; reason: string; message: string }[];
  };
}

async function applyPolicy(ns: string, spec: Record<string, unknown>, name = "default"): Promise<void> {
  const body = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name, namespace: ns },
    spec,
  };
  const result = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(body));
  expect(result.stderr).toBe("");
}

async function getPolicy(ns: string, name = "default"): Promise<PolicyObject> {
  return (await custom.getNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: "playbookpolicies",
    namespace: ns,
    name,
  })) as PolicyObject;
}

async function policyReady(ns: string, name = "default"): Promise<PolicyObject> {
  return eventually(`PlaybookPolicy ${ns}/${name} to have a Ready condition for its generation`, async () => {
    const policy = await getPolicy(ns, name);
    const ready = policy.status?.conditions?.find((c) => c.type === "Ready");
    return ready && policy.status?.observedGeneration === policy.metadata.generation ? policy : undefined;
  });
}

/** The plan a pod carries, as its runner reads it. */
function planOf(pod: V1Pod) {
  const read = parsePlan(pod.metadata?.annotations?.[PLAN_ANNOTATION] ?? "");
  if (!read.ok) throw new Error(`pod ${pod.metadata?.name} carries no plan: ${read.problem}`);
  return read.plan;
}

async function metricText(running: RunningController): Promise<string> {
  return running.controller.metrics.registry.metrics();
}

describe("a namespace with a PlaybookPolicy", () => {
  let ns: string;
  let running: RunningController;

  beforeAll(async () => {
    ns = await namespace("pb-policy");
    await applyPolicy(ns, {
      defaults: { ceiling: "2m", stall: "2s", killGrace: "1s" },
      maximums: { ceiling: "5m", killGrace: "5s", taskTimeout: "1m" },
      allowedServiceAccounts: ["default"],
      allowedImages: ["registry.example/*"],
    });
    running = controllerFor(ns, { maxKillGrace: "1m" });
  });

  it("is documented for kubectl explain", async () => {
    const { stdout } = await kubectl(["explain", "playbookpolicies.spec.maximums.runningPlaybooks"]);
    expect(stdout.replace(/\s+/g, " ")).toContain("start in creation order when a slot frees");
    const top = await kubectl(["explain", "playbookpolicies"]);
    // kubectl wraps descriptions: compared with runs of white space as one.
    expect(top.stdout).toMatch(/KIND:\s+PlaybookPolicy/);
    expect(top.stdout.replace(/\s+/g, " ")).toContain('Only the one named "default" governs its namespace');
  });

  it("marks the policy Ready and counts the Playbooks it governs", async () => {
    const policy = await policyReady(ns);
    expect(policy.status?.conditions?.find((c) => c.type === "Ready")).toMatchObject({
      status: "True",
      reason: "Governing",
    });
    expect(policy.status?.governed).toBeGreaterThanOrEqual(0);
  });

  it("gives its defaults to a Playbook that sets none, each shown with source policy", async () => {
    await createPlaybook(ns, "quiet", { tasks: [{ name: "silent", run: "sleep 30" }] });
    const pod = await scheduledPod(core, ns, "quiet-1");
    // The runner is handed the policy's defaults in its plan; it stops the silent task at the stall.
    // maximums.taskTimeout is the timeout of its task, which sets none.
    expect(planOf(pod).defaults.policy).toEqual({
      ceilingMs: 120_000,
      stallMs: 2_000,
      killGraceMs: 1_000,
      taskTimeoutMs: 60_000,
    });
    await startPod(core, pod);
    await reportPod(core, pod, reportFor(pod, { reason: "StallLimit", at: 0 }));
    const playbook = await waitForFinished(ns, "quiet", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "StallLimit" });
    expect(playbook.status?.limits).toMatchObject({
      ceiling: { value: "2m", source: "policy" },
      stall: { value: "2s", source: "policy" },
      killGrace: { value: "1s", source: "policy" },
    });
    expect(playbook.status?.tasks?.[0]).toMatchObject({
      name: "silent",
      phase: "TimedOut",
      limit: "StallLimit",
      limitValue: "2s",
      limitSource: "policy",
    });
  });

  it.each([
    {
      name: "over-ceiling",
      spec: { ceiling: "10m" },
      says: "spec.ceiling: 10m is longer than the namespace's maximum ceiling 5m (PlaybookPolicy default, spec.maximums.ceiling)",
      field: "spec.ceiling",
    },
    {
      name: "over-grace",
      spec: { ceiling: "3s", killGrace: "1m" },
      says: "spec.killGrace: 1m is longer than the namespace's maximum killGrace 5s (PlaybookPolicy default, spec.maximums.killGrace)",
      field: "spec.killGrace",
    },
    {
      name: "over-timeout",
      spec: { ceiling: "5m", tasks: [{ name: "a", run: "true", timeout: "2m" }] },
      says: "spec.tasks[0].timeout: 2m is longer than the namespace's maximum task timeout 1m",
      field: "spec.tasks[].timeout",
    },
    {
      // The policy sets no maximums.finallyCeiling: its maximum ceiling holds the finally window too.
      name: "over-whole-bound",
      spec: { ceiling: "5m", finallyCeiling: "1h", finally: [{ name: "cleanup", run: "true" }] },
      says: "spec.finallyCeiling: the ceiling 5m (spec.ceiling) plus the finally tasks' window, finallyCeiling 1h (spec.finallyCeiling) and killGrace 1s (the namespace policy's default kill grace), is 1h5m1s, longer than the namespace's maximum ceiling 5m (PlaybookPolicy default, spec.maximums.ceiling), which bounds the finally tasks too: the policy sets no spec.maximums.finallyCeiling",
      field: "spec.finallyCeiling",
    },
    {
      name: "other-account",
      spec: { serviceAccountName: "builder" },
      says: 'spec.serviceAccountName: "builder" is not an allowed service account: PlaybookPolicy default allows default',
      field: "spec.serviceAccountName",
    },
    {
      name: "other-image",
      spec: { image: "docker.io/library/busybox:1" },
      says: 'spec.image: "docker.io/library/busybox:1" is not an allowed image: PlaybookPolicy default allows registry.example/*',
      field: "spec.image",
    },
    {
      name: "other-task-image",
      spec: {
        tasks: [
          { name: "a", run: "true", image: "registry.example/tools:1" },
          { name: "b", run: "true", image: "docker.io/library/busybox:1" },
        ],
      },
      says: 'spec.tasks[1].image: "docker.io/library/busybox:1" is not an allowed image: PlaybookPolicy default allows registry.example/*',
      field: "spec.tasks[].image",
    },
  ])("refuses $name: InvalidSpec with the field, the value and the bound, and no pod", async (c) => {
    await createPlaybook(ns, c.name, { tasks: [{ name: "a", run: "true" }], ...c.spec });
    const playbook = await waitForFinished(ns, c.name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(playbook, "Succeeded")?.message).toContain(c.says);
    expect(playbook.status?.startTime).toBeUndefined();
    expect(await podsOf(ns, c.name)).toEqual([]);
    await eventually(`playbook_policy_refusals_total for ${c.field}`, async () =>
      (await metricText(running)).includes(
        `playbook_policy_refusals_total{namespace="${ns}",field="${c.field}"} 1`,
      )
        ? true
        : undefined,
    );
  });

  it("refuses a killGrace over the controller's maximum too, naming it and its level", async () => {
    await createPlaybook(ns, "over-controller-grace", {
      ceiling: "3s",
      killGrace: "1000h",
      tasks: [{ name: "hold", run: "trap '' TERM; sleep 300" }],
    });
    const playbook = await waitForFinished(ns, "over-controller-grace", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(playbook, "Succeeded")?.message).toContain(
      "spec.killGrace: 1000h is longer than the maximum killGrace 1m (the controller's --max-kill-grace)",
    );
    expect(await podsOf(ns, "over-controller-grace")).toEqual([]);
  });

  it("gives a pod at both maximums an activeDeadlineSeconds within the maximum ceiling, the maximum grace and the margin", async () => {
    await createPlaybook(ns, "at-maximums", {
      ceiling: "5m",
      killGrace: "5s",
      tasks: [{ name: "a", run: "true" }],
    });
    const pod = await scheduledPod(core, ns, "at-maximums-1");
    expect(pod.spec?.activeDeadlineSeconds).toBeGreaterThan(0);
    expect(pod.spec?.activeDeadlineSeconds).toBeLessThanOrEqual(300 + 5 + DEADLINE_MARGIN_SECONDS);
    await startPod(core, pod);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    await waitForFinished(ns, "at-maximums", 30_000);
  });

  it("gives a pod with finally tasks an activeDeadlineSeconds within the maximum ceiling, the maximum grace and the margin, and a task without a timeout the maximum task timeout", async () => {
    await createPlaybook(ns, "finally-within", {
      ceiling: "3m",
      killGrace: "5s",
      finallyCeiling: "1m",
      tasks: [{ name: "wait", run: "sleep 600" }],
      finally: [{ name: "cleanup", run: "true" }],
    });
    const pod = await scheduledPod(core, ns, "finally-within-1");
    expect(pod.spec?.activeDeadlineSeconds).toBe(180 + 5 + 60 + 5 + DEADLINE_MARGIN_SECONDS);
    expect(pod.spec?.activeDeadlineSeconds).toBeLessThanOrEqual(300 + 5 + DEADLINE_MARGIN_SECONDS);
    expect(planOf(pod).defaults.policy).toMatchObject({ taskTimeoutMs: 60_000 });
    await startPod(core, pod);
    await reportPod(core, pod, reportFor(pod, { reason: "TaskTimeout", at: 0 }));
    const playbook = await waitForFinished(ns, "finally-within", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskTimeout" });
    expect(condition(playbook, "Succeeded")?.message).toContain(
      "exceeded its 1m timeout (the namespace policy's maximum task timeout)",
    );
    // Kept by the API server (the CRD names it), so a pod re-created after a loss rebuilds the plan.
    expect(playbook.status?.limits?.taskTimeout).toEqual({ value: "1m", source: "policy" });
    expect(playbook.status?.tasks?.[0]).toMatchObject({
      name: "wait",
      phase: "TimedOut",
      limit: "TaskTimeout",
      limitValue: "1m",
      limitSource: "policy",
    });
  });

  it("is refused by the API server with a default killGrace over its own maximum", async () => {
    const result = await kubectlResult(
      ["apply", "--server-side", "-f", "-"],
      JSON.stringify({
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "PlaybookPolicy",
        metadata: { name: "loose", namespace: ns },
        spec: { defaults: { killGrace: "10m" }, maximums: { killGrace: "1m" } },
      }),
    );
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain("spec.defaults.killGrace: 10m is longer than spec.maximums.killGrace 1m");
  });

  it("says a policy not named default governs nothing", async () => {
    await applyPolicy(ns, { maximums: { ceiling: "1s" } }, "team-b");
    const policy = await policyReady(ns, "team-b");
    expect(policy.status?.conditions?.find((c) => c.type === "Ready")).toMatchObject({
      status: "False",
      reason: "NotDefault",
    });
    expect(policy.status?.governed).toBe(0);
  });
});

/**
 * Rewrites a stored policy's spec in etcd itself, as a policy written before the CRD's rules were
 * tightened is stored: the API server refuses the value on create and update, but serves what etcd holds.
 */
async function storeSpecUnchecked(ns: string, name: string, spec: Record<string, unknown>): Promise<void> {
  const stateDir = path.dirname(inject("kubeconfig"));
  const state = JSON.parse(readFileSync(path.join(stateDir, "state.json"), "utf8")) as {
    ports: Record<string, number>;
  };
  const etcd = `http://127.0.0.1:${state.ports.etcd}`;
  const key = Buffer.from(`/registry/${GROUP}/playbookpolicies/${ns}/${name}`).toString("base64");
  const range = (await (
    await fetch(`${etcd}/v3/kv/range`, { method: "POST", body: JSON.stringify({ key }) })
  ).json()) as { kvs?: { value: string }[] };
  const stored = range.kvs?.[0];
  if (!stored) throw new Error(`PlaybookPolicy ${ns}/${name} is not in etcd`);
  const object = JSON.parse(Buffer.from(stored.value, "base64").toString("utf8")) as Record<string, unknown>;
  const meta = object.metadata as { generation: number };
  const value = JSON.stringify({ ...object, metadata: { ...meta, generation: meta.generation + 1 }, spec });
  const put = await fetch(`${etcd}/v3/kv/put`, {
    method: "POST",
    body: JSON.stringify({ key, value: Buffer.from(value).toString("base64") }),
  });
  expect(put.status).toBe(200);
}

describe("a policy stored with an image pattern the CRD now refuses", () => {
  it("is flagged InvalidPolicy naming the pattern, and admits nothing through it", async () => {
    const ns = await namespace("pb-policy-star");
    await applyPolicy(ns, { allowedImages: ["registry.example/*"] });
    controllerFor(ns);
    await policyReady(ns);
    await storeSpecUnchecked(ns, "default", { allowedImages: ["registry.example.com*"] });
    const policy = await eventually("the policy flagged for registry.example.com*", async () => {
      const current = await getPolicy(ns);
      const ready = current.status?.conditions?.find((c) => c.type === "Ready");
      return ready?.status === "False" ? { current, ready } : undefined;
    });
    expect(policy.current.spec?.allowedImages).toEqual(["registry.example.com*"]);
    expect(policy.ready.reason).toBe("InvalidPolicy");
    expect(policy.ready.message).toBe(
      'spec.allowedImages[0]: "registry.example.com*" must be an exact image or end in "/*"',
    );

    await createPlaybook(ns, "evil", {
      image: "registry.example.com.evil.io/x",
      tasks: [{ name: "a", run: "true" }],
    });
    const playbook = await waitForFinished(ns, "evil", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(playbook, "Succeeded")?.message).toContain(
      'PlaybookPolicy default cannot be read: spec.allowedImages[0]: "registry.example.com*" must be an exact image or end in "/*"',
    );
    expect(await podsOf(ns, "evil")).toEqual([]);
  });
});

describe("a policy edited during a run", () => {
  it("changes nothing for the run that started: it keeps the limits it started with", async () => {
    const ns = await namespace("pb-policy-edit");
    await applyPolicy(ns, { defaults: { ceiling: "2m", stall: "30s" } });
    controllerFor(ns);
    await policyReady(ns);
    await createPlaybook(ns, "steady", { tasks: [{ name: "quiet", run: "sleep 6; echo done" }] });
    const pod = await scheduledPod(core, ns, "steady-1");
    await startPod(core, pod);
    await waitForPlaybook(ns, "steady", "to run", (p) => p.status?.phase === "Running", 30_000);
    // Tighter than the run could finish under, and a maximum the run would break.
    await applyPolicy(ns, { defaults: { ceiling: "20s", stall: "1s" }, maximums: { ceiling: "30s" } });
    await policyReady(ns);
    // The controller has seen the edit (the policy's status is its write): the run's pod and the
    // plan its runner holds are the ones it started with.
    const kept = await core.readNamespacedPod({ namespace: ns, name: "steady-1" });
    expect(kept.metadata?.uid).toBe(pod.metadata?.uid);
    expect(kept.metadata?.deletionTimestamp).toBeUndefined();
    expect(planOf(kept).defaults.policy).toEqual({ ceilingMs: 120_000, stallMs: 30_000 });
    expect((await getPlaybook(ns, "steady")).status?.phase).toBe("Running");
    await reportPod(core, kept, reportFor(kept, { reason: "Succeeded" }));
    const playbook = await waitForFinished(ns, "steady", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status?.podAttempts).toBe(1);
    expect(playbook.status?.limits).toMatchObject({
      ceiling: { value: "2m", source: "policy" },
      stall: { value: "30s", source: "policy" },
    });
    // A Playbook created after the edit is held to it.
    await createPlaybook(ns, "after", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    const after = await waitForFinished(ns, "after", 30_000);
    expect(condition(after, "Succeeded")?.reason).toBe("InvalidSpec");
    expect(condition(after, "Succeeded")?.message).toContain(
      "spec.ceiling: 1m is longer than the namespace's maximum ceiling 30s",
    );
  });
});

/**
 * How long each pod of the burst runs (scripted): long enough for the runs to overlap, and for the
 * burst (about 7 rounds of 3) to outlast the policy's status interval (5 s), so that a write comes
 * while runs are governed (at 500 ms a burst could end before the first write: CI saw it count none).
 */
const RUN_MS = 1500;

/**
 * Plays every pod of the namespace as a kubelet and a runner that succeeds would: Running once
 * the scheduler bound it, then the runner's Succeeded report `runMs` later. Problems are kept
 * for the test to show, not thrown from the background.
 */
function runEachPod(ns: string, runMs: number) {
  const seen = new Set<string>();
  const problems: string[] = [];
  const pending = new Set<Promise<void>>();
  let stopped = false;
  const play = async (pod: V1Pod) => {
    const started = await startPod(core, pod);
    await sleep(runMs);
    await reportPod(core, started, reportFor(started, { reason: "Succeeded" }));
  };
  const loop = (async () => {
    while (!stopped) {
      const pods = await core.listNamespacedPod({ namespace: ns }).then(
        (list) => list.items,
        (error: unknown) => {
          problems.push(`listing pods: ${String(error)}`);
          return [];
        },
      );
      for (const pod of pods) {
        const uid = pod.metadata?.uid ?? "";
        if (!pod.spec?.nodeName || pod.metadata?.deletionTimestamp || seen.has(uid)) continue;
        seen.add(uid);
        const running = play(pod).catch((error: unknown) => {
          problems.push(`${pod.metadata?.name}: ${String(error)}`);
        });
        pending.add(running);
        void running.finally(() => pending.delete(running));
      }
      await sleep(100);
    }
  })();
  return {
    problems: () => [...problems],
    async stop() {
      stopped = true;
      await loop;
      await Promise.all(pending);
    },
  };
}

describe("the cap on running Playbooks", () => {
  it("never runs more pods than the cap under a burst of 20, across a controller restart, and starts them all in creation order", async () => {
    const ns = await namespace("pb-policy-cap");
    const cap = 3;
    await applyPolicy(ns, { maximums: { runningPlaybooks: cap } });
    const running = controllerFor(ns);
    await policyReady(ns);

    // Every pod not ended, as the watch reports each change: the most seen at once.
    const live = new Set<string>();
    let most = 0;
    const watch = await new Watch(kubeConfig).watch(
      `/api/v1/namespaces/${ns}/pods`,
      {},
      (
        type: string,
        pod: KubernetesObject & {
          status?: { phase?: string; containerStatuses?: { state?: { terminated?: unknown } }[] };
        },
      ) => {
        const name = pod.metadata?.name ?? "";
        // Ended: its phase says so, or its runner (the one container) has ended.
        const ended =
          pod.status?.phase === "Succeeded" ||
          pod.status?.phase === "Failed" ||
          pod.status?.containerStatuses?.[0]?.state?.terminated !== undefined;
        if (type === "DELETED" || ended) live.delete(name);
        else live.add(name);
        most = Math.max(most, live.size);
      },
      () => {},
    );
    // Each pod's run: started once scheduled, succeeded a moment later.
    const runs = runEachPod(ns, RUN_MS);
    try {
      const names = Array.from({ length: 20 }, (_, i) => `burst-${String(i).padStart(2, "0")}`);
      for (const name of names) {
        await createPlaybook(ns, name, { ceiling: "3m", tasks: [{ name: "a", run: "sleep 1" }] });
      }
      const queued = await waitForPlaybook(
        ns,
        "burst-19",
        "to wait for a slot",
        (p) => condition(p, "Succeeded")?.reason === "Queued",
      );
      expect(queued.status?.phase).toBe("Pending");
      expect(condition(queued, "Succeeded")?.message).toContain(
        `waiting for one of the namespace's ${cap} running-Playbook slots (PlaybookPolicy default, spec.maximums.runningPlaybooks)`,
      );
      expect(await metricText(running)).toMatch(
        new RegExp(`playbook_queued_runs\\{namespace="${ns}"\\} [1-9]`),
      );
      // The policy counts what it governs, in a write every few seconds, not one per Playbook.
      await eventually("the policy to count the burst", async () => {
        const governed = (await getPolicy(ns)).status?.governed ?? 0;
        return governed > 0 ? true : undefined;
      });
      const writes = (await running.controller.metrics.policyStatusWrites.get()).values[0]?.value ?? 0;
      expect(writes).toBeLessThan(10);

      // A controller restarted mid-burst counts the slots from what the API server shows, not
      // from the memory of the one before.
      await waitForFinished(ns, "burst-04", 60_000);
      await running.stop();
      controllerFor(ns);
      const done = [];
      for (const name of names) done.push(await waitForFinished(ns, name, 60_000));
      expect(runs.problems()).toEqual([]);
      for (const playbook of done) expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
      expect(most).toBeLessThanOrEqual(cap);
      expect(most).toBeGreaterThan(0);
      const starts = done.map((p) => Date.parse(p.status?.startTime ?? ""));
      expect(starts).toEqual([...starts].sort((a, b) => a - b));
      await eventually("the policy to govern nothing once all finished", async () =>
        (await getPolicy(ns)).status?.governed === 0 ? true : undefined,
      );
    } finally {
      await runs.stop();
      watch.abort();
    }
  });
});

describe("the chart's aggregated ClusterRoles", () => {
  const suffix = randomBytes(3).toString("hex");
  const renamed = (name: string) => `${name}-${suffix}`;

  afterAll(async () => {
    await kubectlResult([
      "delete",
      "clusterrole",
      "--ignore-not-found",
      ...["playbook-edit", "playbook-view", "playbook-admin"].map(renamed),
    ]);
  });

  it("let a namespace editor create Playbooks but not pods or policies, and a viewer read policies", async () => {
    const ns = await namespace("pb-policy-rbac");
    // The chart's roles under names of this test's own (another test installs the chart itself),
    // without the aggregation labels, which would widen the cluster's built-in roles.
    const rendered = await helm([
      "template",
      "pbc",
      path.join(repoRoot(), "charts", "playbook-controller"),
      "--show-only",
      "templates/rbac.yaml",
      "--set",
      "rbac.create=false",
    ]);
    expect(rendered.stderr).toBe("");
    const roles = parseAllDocuments(rendered.stdout)
      .map(
        (doc) => doc.toJS() as { kind: string; metadata: { name: string; labels?: Record<string, string> } },
      )
      .filter((o) => o?.kind === "ClusterRole");
    expect(roles.map((r) => r.metadata.name).sort()).toEqual([
      "playbook-admin",
      "playbook-edit",
      "playbook-view",
    ]);
    for (const role of roles) {
      role.metadata = { name: renamed(role.metadata.name) };
    }
    const applied = await kubectlResult(
      ["apply", "-f", "-"],
      JSON.stringify({ apiVersion: "v1", kind: "List", items: roles }),
    );
    expect(applied.stderr).toBe("");
    await kubectl([
      "-n",
      ns,
      "create",
      "rolebinding",
      "alice-edit",
      `--clusterrole=${renamed("playbook-edit")}`,
      "--user=alice",
    ]);
    await kubectl([
      "-n",
      ns,
      "create",
      "rolebinding",
      "bob-view",
      `--clusterrole=${renamed("playbook-view")}`,
      "--user=bob",
    ]);
    await kubectl([
      "-n",
      ns,
      "create",
      "rolebinding",
      "carol-admin",
      `--clusterrole=${renamed("playbook-admin")}`,
      "--user=carol",
    ]);

    const can = async (user: string, verb: string, resource: string) =>
      (await kubectlResult(["--as", user, "-n", ns, "auth", "can-i", verb, resource])).stdout.trim();
    expect(await can("alice", "create", "playbooks.playbook.dev")).toBe("yes");
    expect(await can("alice", "create", "pods")).toBe("no");
    expect(await can("alice", "create", "playbookpolicies.playbook.dev")).toBe("no");
    expect(await can("alice", "update", "playbookpolicies.playbook.dev")).toBe("no");
    expect(await can("alice", "get", "playbookpolicies.playbook.dev")).toBe("yes");
    expect(await can("bob", "get", "playbookpolicies.playbook.dev")).toBe("yes");
    expect(await can("bob", "create", "playbooks.playbook.dev")).toBe("no");
    expect(await can("carol", "create", "playbookpolicies.playbook.dev")).toBe("yes");

    // What the API server actually does, not only what it says it would.
    const playbook = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "Playbook",
      metadata: { name: "by-alice", namespace: ns },
      spec: { tasks: [{ name: "a", run: "true" }] },
    };
    const created = await kubectlResult(["--as", "alice", "create", "-f", "-"], JSON.stringify(playbook));
    expect(created.stderr).toBe("");
    const pod = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "by-alice", namespace: ns },
      spec: { containers: [{ name: "c", image: "busybox" }] },
    };
    const podRefused = await kubectlResult(["--as", "alice", "create", "-f", "-"], JSON.stringify(pod));
    expect(podRefused.code).not.toBe(0);
    expect(podRefused.stderr).toMatch(/forbidden: User "alice" cannot create resource "pods"/);
    const policy = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "PlaybookPolicy",
      metadata: { name: "default", namespace: ns },
      spec: { allowedServiceAccounts: ["admin"] },
    };
    const policyRefused = await kubectlResult(["--as", "alice", "create", "-f", "-"], JSON.stringify(policy));
    expect(policyRefused.code).not.toBe(0);
    expect(policyRefused.stderr).toMatch(/forbidden: User "alice" cannot create resource "playbookpolicies"/);
    const byAdmin = await kubectlResult(["--as", "carol", "create", "-f", "-"], JSON.stringify(policy));
    expect(byAdmin.stderr).toBe("");
  });
});
