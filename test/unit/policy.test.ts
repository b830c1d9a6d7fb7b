// The namespace policy as pure decisions: the cascade with source policy, what it refuses and
// how, the running-Playbooks cap's queue, and the pod the policy's defaults build.
import { describe, expect, it } from "vitest";
import { PLAN_ANNOTATION, parsePlan } from "../../src/api/plan.js";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { clusterRules, imageAllowed, PolicySpecSchema } from "../../src/api/policy.js";
import { policyProblems } from "../../src/api/policy-consistency.js";
import { quantityValue } from "../../src/api/quantity.js";
import { loadControllerConfig } from "../../src/controller/config.js";
import { ControllerMetrics } from "../../src/controller/metrics.js";
import type { StoredPlaybook } from "../../src/controller/objects.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { slotState } from "../../src/controller/policy/policy-queue.js";
import {
  CLUSTER,
  createdPod,
  governed,
  playbook,
  recordedStatus,
  SETTINGS,
  succeeded,
  T0,
} from "./controller-fixtures.js";

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

describe("a Playbook under its namespace's policy", () => {
  const rules = governed({
    defaults: {
      ceiling: "20m",
      stall: "2m",
      killGrace: "3s",
      startTimeout: "90s",
      backoffLimit: 0,
      serviceAccountName: "runner",
      image: "registry.example/tools:1",
      resources: { limits: { cpu: "1", memory: "1Gi" } },
    },
    maximums: {
      ceiling: "1h",
      killGrace: "1m",
      taskTimeout: "15m",
      resources: { limits: { cpu: "2", memory: "4Gi" } },
    },
    allowedServiceAccounts: ["default", "runner", "deployer"],
    allowedImages: ["registry.example/*"],
  });

  it("gets the policy's defaults for what it leaves out, each with source policy", () => {
    const decision = decide(input({ playbook: playbook({ ceiling: undefined }), rules }));
    expect((decision.status ?? decision.pending)?.limits).toEqual({
      ceiling: { value: "20m", source: "policy" },
      stall: { value: "2m", source: "policy" },
      killGrace: { value: "3s", source: "policy" },
      startTimeout: { value: "1m30s", source: "policy" },
      // maximums.taskTimeout: the timeout of the fixture's task that sets none.
      taskTimeout: { value: "15m", source: "policy" },
    });
    const pod = createdPod(decision.actions);
    expect(pod.spec).toMatchObject({
      serviceAccountName: "runner",
      automountServiceAccountToken: false,
      // The runner's image is the controller's; the policy's default image is the tasks'.
      containers: [
        { name: "runner", image: "runner:test" },
        {
          name: "task-1",
          image: "registry.example/tools:1",
          resources: { limits: { cpu: "1", memory: "1Gi" } },
        },
      ],
    });
  });

  it("keeps its own values over the policy's, with source spec", () => {
    const decision = decide(input({ playbook: playbook({ ceiling: "30m", stall: "5m" }), rules }));
    expect((decision.status ?? decision.pending)?.limits?.ceiling).toEqual({ value: "30m", source: "spec" });
    expect((decision.status ?? decision.pending)?.limits?.stall).toEqual({ value: "5m", source: "spec" });
  });

  it("carries the policy's limit defaults in the pod's plan, so that a later edit of the policy changes nothing", () => {
    const decision = decide(input({ playbook: playbook({ ceiling: undefined }), rules }));
    const plan = parsePlan(createdPod(decision.actions).metadata.annotations[PLAN_ANNOTATION] ?? "");
    expect(plan.ok && plan.plan.defaults.policy).toMatchObject({ ceilingMs: 1_200_000, stallMs: 120_000 });
  });

  it.each([
    {
      name: "a ceiling over the maximum",
      spec: { ceiling: "2h" },
      says: "spec.ceiling: 2h is longer than the namespace's maximum ceiling 1h (PlaybookPolicy default, spec.maximums.ceiling)",
    },
    {
      name: "a killGrace over the maximum",
      spec: { killGrace: "1000h" },
      says: "spec.killGrace: 1000h is longer than the namespace's maximum killGrace 1m (PlaybookPolicy default, spec.maximums.killGrace)",
    },
    {
      name: "a task timeout over the maximum",
      spec: { tasks: [{ name: "build", run: "make", timeout: "20m" }] },
      says: "spec.tasks[0].timeout: 20m is longer than the namespace's maximum task timeout 15m (PlaybookPolicy default, spec.maximums.taskTimeout)",
    },
    {
      name: "a service account outside the allowlist",
      spec: { serviceAccountName: "admin" },
      says: 'spec.serviceAccountName: "admin" is not an allowed service account: PlaybookPolicy default allows default, runner, deployer',
    },
    {
      name: "an image outside the allowlist",
      spec: { image: "docker.io/evil:latest" },
      says: 'spec.image: "docker.io/evil:latest" is not an allowed image: PlaybookPolicy default allows registry.example/*',
    },
    {
      name: "a task image outside the allowlist",
      spec: {
        tasks: [
          { name: "a", run: "true", image: "registry.example/tools:2" },
          { name: "b", run: "true", image: "docker.io/evil:latest" },
        ],
      },
      says: 'spec.tasks[1].image: "docker.io/evil:latest" is not an allowed image: PlaybookPolicy default allows registry.example/*',
    },
    {
      name: "a memory limit over the maximum",
      spec: { resources: { limits: { memory: "8Gi" } } },
      says: "spec.resources.limits.memory: 8Gi is more than the namespace's maximum 4Gi (PlaybookPolicy default, spec.maximums.resources.limits.memory)",
    },
  ])("refuses $name: InvalidSpec naming the field, the value and the bound, and no pod", ({ spec, says }) => {
    const decision = decide(input({ playbook: playbook(spec), rules }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(decision.status)?.message).toContain(says);
    expect(decision.actions).toEqual([]);
    expect(decision.finished?.policyRefusals?.length).toBe(1);
  });

  it("allows names and images the policy lists, and prefixes ending in *", () => {
    const decision = decide(
      input({
        playbook: playbook({ serviceAccountName: "deployer", image: "registry.example/x/y:2" }),
        rules,
      }),
    );
    expect(createdPod(decision.actions).spec).toMatchObject({ serviceAccountName: "deployer" });
    const ownDefault = governed({
      defaults: { serviceAccountName: "robot" },
      allowedServiceAccounts: ["default"],
    });
    const named = decide(input({ playbook: playbook({ serviceAccountName: "robot" }), rules: ownDefault }));
    expect(createdPod(named.actions).spec).toMatchObject({ serviceAccountName: "robot" });
    expect(imageAllowed("registry.example/a", ["registry.example/*"])).toBe(true);
    expect(imageAllowed("registry.example.evil/a", ["registry.example/*"])).toBe(false);
    expect(imageAllowed("busybox:1", ["busybox"])).toBe(false);
  });

  it("does not refuse a running pod under a policy edited after its start", () => {
    const first = decide(input({ playbook: playbook({ ceiling: "30m" }), rules }));
    const status = recordedStatus(first);
    const built = createdPod(first.actions);
    const running = {
      ...built,
      metadata: { ...built.metadata, uid: "pod-uid-1" },
      status: { phase: "Running" },
    };
    const stricter = governed({ maximums: { ceiling: "10m" } });
    const later = decide(
      input({ playbook: playbook({ ceiling: "30m" }, status), pods: [running], rules: stricter }),
    );
    expect(succeeded(later.status ?? status)?.reason).toBe("Running");
    expect(later.actions).toEqual([]);
  });

  it("checks a pod re-created after a loss against the policy as it is then: one no longer allowed is not created", () => {
    const first = decide(input({ playbook: playbook({ serviceAccountName: "deployer" }), rules }));
    const status = recordedStatus(first);
    expect(status.planDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const narrower = governed({ allowedServiceAccounts: ["default"] });
    const lost = decide(
      input({
        playbook: playbook({ serviceAccountName: "deployer" }, status),
        rules: narrower,
        now: new Date(T0.getTime() + 60_000),
      }),
    );
    expect(lost.actions).toEqual([]);
    expect(succeeded(lost.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(lost.status)?.message).toBe(
      "pod nightly-2 (attempt 2) was not created: the namespace's policy refuses the run's plan: spec.serviceAccountName: \"deployer\" is not an allowed service account: PlaybookPolicy default allows default (spec.allowedServiceAccounts)",
    );
    expect(lost.finished?.policyRefusals).toEqual(["spec.serviceAccountName"]);
  });
});

describe("a run whose pod was lost after its policy changed", () => {
  it("re-creates the pod with the policy's limits the run started with", () => {
    const before = governed({ defaults: { ceiling: "20m", stall: "2m" } });
    const first = decide(input({ playbook: playbook({ ceiling: undefined }), rules: before }));
    const status = recordedStatus(first);
    const after = governed({ defaults: { ceiling: "5m", stall: "10s" } });
    const decision = decide(
      input({
        playbook: playbook({ ceiling: undefined }, status),
        rules: after,
        now: new Date(T0.getTime() + 60_000),
      }),
    );
    expect((decision.status ?? decision.pending)?.limits?.ceiling).toEqual({
      value: "20m",
      source: "policy",
    });
    const plan = parsePlan(createdPod(decision.actions).metadata.annotations[PLAN_ANNOTATION] ?? "");
    expect(plan.ok && plan.plan.defaults.policy).toMatchObject({ ceilingMs: 1_200_000, stallMs: 120_000 });
  });
});

describe("a Playbook in a namespace without a policy", () => {
  const rules = clusterRules(CLUSTER);

  it("may name only the default service account and the runner image", () => {
    expect(
      decide(input({ playbook: playbook({ serviceAccountName: "default", image: "runner:test" }), rules }))
        .actions,
    ).toHaveLength(1);
    const refused = decide(input({ playbook: playbook({ serviceAccountName: "reader" }), rules }));
    expect(succeeded(refused.status)?.message).toContain(
      'spec.serviceAccountName: "reader" is not an allowed service account: without a PlaybookPolicy named default only default',
    );
    const image = decide(input({ playbook: playbook({ image: "busybox" }), rules }));
    expect(succeeded(image.status)?.message).toContain('spec.image: "busybox" is not an allowed image');
  });

  it("may name what the controller's --allowed-service-accounts and --allowed-images allow", () => {
    const wider = clusterRules({
      ...CLUSTER,
      allowedServiceAccounts: ["reader"],
      allowedImages: ["ghcr.io/x/*"],
    });
    const decision = decide(
      input({ playbook: playbook({ serviceAccountName: "reader", image: "ghcr.io/x/y:1" }), rules: wider }),
    );
    expect(createdPod(decision.actions).spec).toMatchObject({ serviceAccountName: "reader" });
  });

  it("gets no service account token unless it names a service account", () => {
    const pod = createdPod(decide(input({ rules })).actions);
    expect(pod.spec.automountServiceAccountToken).toBe(false);
    expect(pod.spec.serviceAccountName).toBeUndefined();
  });
});

describe("the running-Playbooks cap", () => {
  const stored = (name: string, second: number, status?: PlaybookStatus): StoredPlaybook => {
    const p = playbook({}, status);
    return {
      ...p,
      metadata: {
        ...p.metadata,
        name,
        uid: `uid-${name}`,
        creationTimestamp: new Date(T0.getTime() + second * 1000).toISOString(),
      },
    };
  };
  const running: PlaybookStatus = { phase: "Running", startTime: T0.toISOString(), podAttempts: 1 };

  it("lets the first created start and queues the rest in creation order", () => {
    const all = [stored("c", 2), stored("a", 1), stored("b", 1), stored("r", 0, running)];
    expect(slotState("ops/a", all, [], 2, "here")).toMatchObject({ running: 1, ahead: 0, free: true });
    expect(slotState("ops/b", all, [], 2, "here")).toMatchObject({ running: 1, ahead: 1, free: false });
    expect(slotState("ops/c", all, [], 3, "here")).toMatchObject({ ahead: 2, free: false });
  });

  it("takes no slot from a run that has not started for a pod naming it its controller (a foreign one)", () => {
    // Someone's pod under "a"'s controller reference, made while "a" waits: "a" does not follow it,
    // so it neither passes the queue with it nor waits behind it for ever.
    const foreign = {
      metadata: {
        name: "a-1",
        namespace: "ops",
        ownerReferences: [
          {
            apiVersion: "playbook.dev/v1alpha1",
            kind: "Playbook",
            name: "a",
            uid: "uid-a",
            controller: true,
          },
        ],
      },
      status: { phase: "Running" },
    };
    const all = [stored("a", 1), stored("r", 0, running)];
    expect(slotState("ops/a", all, [foreign], 1, "here")).toMatchObject({ running: 2, free: false });
    expect(slotState("ops/a", [stored("a", 1)], [foreign], 1, "here")).toMatchObject({ free: true });
  });

  it("holds a finished run's slot until its pod's phase is terminal, not when its runner container ends", () => {
    // The runner reported and the run is settled, but a task container still stops: the kubelet
    // keeps the pod Running and the scheduler counts its requests until the phase turns terminal.
    const pod = (phase: string) => ({
      metadata: {
        name: "r-1",
        namespace: "ops",
        ownerReferences: [
          {
            apiVersion: "playbook.dev/v1alpha1",
            kind: "Playbook",
            name: "r",
            uid: "uid-r",
            controller: true,
          },
        ],
      },
      status: {
        phase,
        containerStatuses: [{ name: "runner", state: { terminated: { exitCode: 0 } } }],
      },
    });
    const finished: PlaybookStatus = {
      ...running,
      phase: "Succeeded",
      completionTime: T0.toISOString(),
      conditions: [
        {
          type: "Succeeded",
          status: "True",
          reason: "Succeeded",
          message: "",
          lastTransitionTime: T0.toISOString(),
        },
      ],
    };
    const all = [stored("r", 0, finished), stored("a", 1)];
    expect(slotState("ops/a", all, [pod("Running")], 1, "here")).toMatchObject({ running: 1, free: false });
    expect(slotState("ops/a", all, [pod("Succeeded")], 1, "here")).toMatchObject({ running: 0, free: true });
    expect(slotState("ops/a", all, [pod("Failed")], 1, "here")).toMatchObject({ running: 0, free: true });
    expect(slotState("ops/a", all, [], 1, "here")).toMatchObject({ running: 0, free: true });
  });

  it("counts a pod toward its run by its owner's UID, not its name", () => {
    // A pod still running for a deleted Playbook "a" (another UID) holds a slot of its own, not the
    // new "a"'s: the new "a" still waits its turn behind it, not as if it were already running.
    const lingering = {
      metadata: {
        name: "a-1",
        namespace: "ops",
        ownerReferences: [
          {
            apiVersion: "playbook.dev/v1alpha1",
            kind: "Playbook",
            name: "a",
            uid: "uid-old-a",
            controller: true,
          },
        ],
      },
      status: { phase: "Running" },
    };
    const all = [stored("a", 1), stored("b", 2)];
    expect(slotState("ops/a", all, [lingering], 2, "here")).toMatchObject({
      running: 1,
      ahead: 0,
      free: true,
    });
    expect(slotState("ops/b", all, [lingering], 2, "here")).toMatchObject({
      running: 1,
      ahead: 1,
      free: false,
    });
    expect(slotState("ops/a", all, [lingering], 1, "here")).toMatchObject({ running: 1, free: false });
  });

  it("queues a run Pending with reason Queued and no start time, and creates no pod", () => {
    const slots = {
      cap: 1,
      running: 1,
      ahead: 0,
      free: false,
      where: "PlaybookPolicy default, spec.maximums.runningPlaybooks",
    };
    const decision = decide(input({ rules: governed({ maximums: { runningPlaybooks: 1 } }), slots }));
    expect(decision.actions).toEqual([]);
    expect(decision.status?.phase).toBe("Pending");
    expect(decision.status?.startTime).toBeUndefined();
    expect(succeeded(decision.status)).toMatchObject({ status: "Unknown", reason: "Queued" });
    expect(succeeded(decision.status)?.message).toContain("spec.maximums.runningPlaybooks");
  });
});

describe("a policy's own consistency", () => {
  it("says which default passes which maximum", () => {
    const spec = PolicySpecSchema.parse({
      defaults: { ceiling: "3h", resources: { limits: { cpu: "4" } } },
      maximums: { ceiling: "2h", resources: { limits: { cpu: "2" } } },
    });
    expect(policyProblems({ name: "default", spec }, 86_400_000)).toEqual([
      "spec.defaults.ceiling: 3h is longer than spec.maximums.ceiling 2h",
      "spec.defaults.resources.limits.cpu: 4 is more than the maximum 2 (spec.maximums.resources)",
    ]);
  });

  it("says which killGrace default passes the policy's maximum or the controller's", () => {
    const spec = PolicySpecSchema.parse({ defaults: { killGrace: "10m" }, maximums: { killGrace: "1m" } });
    expect(policyProblems({ name: "default", spec }, 86_400_000, 300_000)).toEqual([
      "spec.defaults.killGrace: 10m is longer than spec.maximums.killGrace 1m",
      "spec.defaults.killGrace: 10m is longer than the controller's maximum killGrace 5m",
    ]);
  });

  it("reads quantities as the API server does", () => {
    expect(quantityValue("500m")).toBe(0.5);
    expect(quantityValue("1Gi")).toBe(2 ** 30);
    expect(quantityValue("1G")).toBe(1e9);
    expect(quantityValue("1e3")).toBe(1000);
    expect(quantityValue(2)).toBe(2);
  });

  it("refuses an image pattern with a * before its end", () => {
    expect(PolicySpecSchema.safeParse({ allowedImages: ["registry.*/x"] }).success).toBe(false);
  });

  it("admits under a /* prefix only names below that path, never a longer host or path segment", () => {
    const patterns = ["registry.example/*"];
    expect(imageAllowed("registry.example/a:1", patterns)).toBe(true);
    expect(imageAllowed(`registry.example/team/b@sha256:${"0".repeat(64)}`, patterns)).toBe(true);
    expect(imageAllowed("registry.example.evil/x", patterns)).toBe(false);
    expect(imageAllowed("registry.exampleX/y", patterns)).toBe(false);
    expect(imageAllowed("registry.example/", patterns)).toBe(false);
    expect(imageAllowed("registry.example", patterns)).toBe(false);
    expect(imageAllowed("registry.example/tools/x:1", ["registry.example/tools/*"])).toBe(true);
    expect(imageAllowed("registry.example/toolsX/x:1", ["registry.example/tools/*"])).toBe(false);
  });

  it("admits nothing through a * that does not end a path: such a pattern matches no image", () => {
    const patterns = ["registry.example.com*"];
    expect(imageAllowed("registry.example.com.evil.io/x", patterns)).toBe(false);
    expect(imageAllowed("registry.example.com/x", patterns)).toBe(false);
    expect(imageAllowed("registry.example.com*", patterns)).toBe(false);
    expect(imageAllowed("anything", ["*"])).toBe(false);
    expect(imageAllowed("registry.example/x:1", ["registry.example/x:*"])).toBe(false);
    // An exact reference still admits exactly itself.
    expect(imageAllowed("registry.example/x:1", ["registry.example/x:1"])).toBe(true);
    expect(imageAllowed("registry.example/x:10", ["registry.example/x:1"])).toBe(false);
  });

  it("refuses a * that does not end in /*, naming the index and the value", () => {
    for (const bad of ["registry.example.com*", "*", "registry.example/x:*", "/*x"]) {
      const parsed = PolicySpecSchema.safeParse({ allowedImages: ["ok/x:1", "ok/*", bad] });
      expect(parsed.success, bad).toBe(false);
      const issue = parsed.error?.issues[0];
      expect(issue?.path).toEqual(["allowedImages", 2]);
      expect(issue?.message).toBe(`${JSON.stringify(bad)} must be an exact image or end in "/*"`);
    }
    expect(PolicySpecSchema.safeParse({ allowedImages: ["registry.example/*", "a/b:1"] }).success).toBe(true);
  });
});

describe("the policy's metrics", () => {
  it("counts a refusal by namespace and field, from 0 once a run of the namespace started", async () => {
    const metrics = new ControllerMetrics({ defaults: false });
    metrics.recordStarted({ namespace: "ops" });
    const before = await metrics.registry.getSingleMetricAsString("playbook_policy_refusals_total");
    expect(before).toContain('playbook_policy_refusals_total{namespace="ops",field="spec.image"} 0');
    const refused = decide(input({ playbook: playbook({ image: "busybox" }), rules: clusterRules(CLUSTER) }));
    if (!refused.finished) throw new Error("not finished");
    metrics.recordFinished(refused.finished, { namespace: "ops" });
    const after = await metrics.registry.getSingleMetricAsString("playbook_policy_refusals_total");
    expect(after).toContain('playbook_policy_refusals_total{namespace="ops",field="spec.image"} 1');
  });
});

describe("the controller's cluster-wide allowances", () => {
  it("reads --allowed-service-accounts and --allowed-images as comma-separated lists", () => {
    const config = loadControllerConfig(
      { allowedServiceAccounts: "reader, deployer", allowedImages: "ghcr.io/x/*" },
      {},
    );
    expect(config.allowedServiceAccounts).toEqual(["reader", "deployer"]);
    expect(config.allowedImages).toEqual(["ghcr.io/x/*"]);
    expect(loadControllerConfig({}, {}).allowedServiceAccounts).toEqual([]);
  });

  it("refuses a name that is not a service account's, or a * before an image pattern's end, naming the flag", () => {
    expect(() => loadControllerConfig({ allowedServiceAccounts: "Bad_Name" }, {})).toThrow(
      /--allowed-service-accounts \(\$PLAYBOOK_ALLOWED_SERVICE_ACCOUNTS\): .*service account names/,
    );
    expect(() => loadControllerConfig({ allowedImages: "ghcr.io/*/x" }, {})).toThrow(
      /--allowed-images \(\$PLAYBOOK_ALLOWED_IMAGES\): .*"ghcr.io\/\*\/x" must be an exact image or end in "\/\*"/,
    );
    expect(() => loadControllerConfig({ allowedImages: "ghcr.io/x/*, registry.example.com*" }, {})).toThrow(
      /--allowed-images \(\$PLAYBOOK_ALLOWED_IMAGES\): .*"registry.example.com\*" must be an exact image or end in "\/\*"/,
    );
  });
});
