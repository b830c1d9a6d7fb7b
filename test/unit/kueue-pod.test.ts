// The pod of a run through Kueue (issue 43): Kueue's queue and priority labels, a request on every
// container and where each figure came from; what Kueue adds to the pod is not taken for a forgery;
// a run without a queue keeps the pod it always had.
import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { PolicySpecSchema, podSettings, policyRules } from "../../src/api/policy.js";
import {
  KUEUE_ADMISSION_GATE,
  KUEUE_MANAGED_LABEL,
  KUEUE_PRIORITY_LABEL,
  KUEUE_QUEUE_LABEL,
} from "../../src/controller/kueue/kueue-names.js";
import { DEFAULT_TASK_REQUESTS, queueStatus } from "../../src/controller/kueue/kueue-pod.js";
import { planDefaults } from "../../src/controller/plan-digest.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { builtPodDifference } from "../../src/controller/pods/built-pod-difference.js";
import { buildPod, type PodManifest, RUNNER_RESOURCES } from "../../src/controller/pods/pod-builder.js";
import { playbook, SETTINGS, SPEC, T0 } from "./controller-fixtures.js";

// biome-ignore lint/suspicious/noExplicitAny: the tests reach into the pod as JSON.
type Json = Record<string, any>;

const CLUSTER = {
  runnerImage: "runner:test",
  allowedServiceAccounts: [],
  allowedImages: ["registry.example/*"],
};

function podFor(spec: Record<string, unknown>, policy: Record<string, unknown> = {}): PodManifest {
  const parsed = PlaybookSpecSchema.parse(spec);
  const limits = resolveLimits(parsed, SETTINGS.defaults);
  const rules = policyRules({ name: "default", spec: PolicySpecSchema.parse(policy) }, CLUSTER);
  return buildPod({
    playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
    spec: parsed,
    limits,
    defaults: planDefaults(limits),
    attempt: 1,
    runStart: T0,
    now: T0,
    runnerImage: "runner:test",
    pod: podSettings(parsed, rules),
  });
}

const containers = (pod: PodManifest) => pod.spec.containers as Json[];
const twoImages = {
  ...SPEC,
  tasks: [
    { name: "build", run: "make" },
    { name: "db", run: "psql -c 'select 1'", image: "registry.example/postgres:16" },
  ],
};

describe("the pod of a run through Kueue", () => {
  it("carries the queue and the workload priority class labels Kueue reads", () => {
    const pod = podFor({ ...SPEC, queueName: "team-a", priorityClassName: "high" });
    expect(pod.metadata.labels).toMatchObject({
      [KUEUE_QUEUE_LABEL]: "team-a",
      [KUEUE_PRIORITY_LABEL]: "high",
    });
  });

  it("takes its queue from the policy when the spec names none", () => {
    const pod = podFor(SPEC, { defaults: { queueName: "team-b" } });
    expect(pod.metadata.labels?.[KUEUE_QUEUE_LABEL]).toBe("team-b");
  });

  it("gives every container a cpu and memory request: the runner's share, each task container the default", () => {
    const pod = podFor({ ...twoImages, queueName: "team-a" });
    const [runner, ...tasks] = containers(pod);
    expect(runner?.resources.requests).toEqual(RUNNER_RESOURCES.requests);
    expect(tasks).toHaveLength(2);
    for (const task of tasks) expect(task.resources.requests).toEqual(DEFAULT_TASK_REQUESTS);
  });

  it("keeps the spec's and the policy's figures, a limit alone standing for its request", () => {
    const pod = podFor(
      { ...SPEC, queueName: "team-a", resources: { limits: { memory: "2Gi" } } },
      { defaults: { resources: { requests: { cpu: "1" } } } },
    );
    const task = containers(pod)[1];
    expect(task?.resources).toEqual({ requests: { cpu: "1" }, limits: { memory: "2Gi" } });
  });

  it("shows each request with the level it came from in status.queue", () => {
    const spec = PlaybookSpecSchema.parse({
      ...twoImages,
      queueName: "team-a",
      resources: { requests: { memory: "1Gi" } },
    });
    const rules = policyRules({ name: "default", spec: PolicySpecSchema.parse({}) }, CLUSTER);
    const settings = podSettings(spec, rules);
    expect(
      queueStatus(
        settings.queue ?? { name: "missing", source: "default" },
        spec,
        settings.resources,
        RUNNER_RESOURCES.requests,
        2,
      ),
    ).toEqual({
      name: "team-a",
      source: "spec",
      requests: {
        runner: { cpu: "50m", memory: "128Mi" },
        task: { cpu: { value: "100m", source: "default" }, memory: { value: "1Gi", source: "spec" } },
        taskContainers: 2,
      },
    });
  });

  it("writes status.queue with the run's first status", () => {
    const decision = decide({
      playbook: playbook({ queueName: "team-a" }),
      pods: [],
      now: T0,
      settings: SETTINGS,
    });
    const status = decision.status ?? decision.pending;
    expect(status?.queue).toMatchObject({ name: "team-a", source: "spec", requests: { taskContainers: 1 } });
  });
});

describe("the pod of a run without a queue", () => {
  it("has no Kueue label and no request it was not given", () => {
    const pod = podFor(twoImages);
    expect(Object.keys(pod.metadata.labels ?? {}).filter((k) => k.startsWith("kueue.x-k8s.io/"))).toEqual([]);
    for (const task of containers(pod).slice(1)) expect(task.resources).toBeUndefined();
  });

  it("gets no priority label from a priority class alone: Kueue is not asked", () => {
    const pod = podFor({ ...SPEC, priorityClassName: "high" });
    expect(pod.metadata.labels?.[KUEUE_PRIORITY_LABEL]).toBeUndefined();
  });

  it("has no status.queue", () => {
    const decision = decide({ playbook: playbook(), pods: [], now: T0, settings: SETTINGS });
    expect((decision.status ?? decision.pending)?.queue).toBeUndefined();
  });
});

describe("what Kueue adds to a pod", () => {
  /** The flavor the pod's Workload was admitted with, as the controller observed it. */
  const FLAVOR = {
    nodeSelector: { "cloud.example/pool": "batch" },
    tolerations: [{ key: "batch", operator: "Exists", effect: "NoSchedule" }],
  };
  const ADMITTED = { kueue: FLAVOR };

  /** The pod as Kueue's webhook and its admission leave it. */
  function asKueueLeftIt(pod: PodManifest): Json {
    const served = JSON.parse(JSON.stringify(pod)) as Json;
    served.metadata.labels[KUEUE_MANAGED_LABEL] = "true";
    served.metadata.labels["kueue.x-k8s.io/podset"] = "main";
    served.metadata.annotations["kueue.x-k8s.io/workload"] = "pod-nightly-1-abcde";
    served.spec.schedulingGates = [{ name: KUEUE_ADMISSION_GATE }];
    served.spec.nodeSelector = { "cloud.example/pool": "batch" };
    served.spec.tolerations = [{ key: "batch", operator: "Exists", effect: "NoSchedule" }];
    return served;
  }

  it("is the controller's pod still: labels, annotations, the admission gate, the admitted flavor's node selector and tolerations", () => {
    const pod = podFor({ ...SPEC, queueName: "team-a" });
    expect(builtPodDifference(asKueueLeftIt(pod), pod, 0, ADMITTED)).toBeUndefined();
    // Gated, before the admission: nothing of the flavor yet.
    const gated = asKueueLeftIt(pod);
    delete gated.spec.nodeSelector;
    delete gated.spec.tolerations;
    expect(builtPodDifference(gated, pod, 0)).toBeUndefined();
  });

  it("is refused on a pod whose run names no queue, whatever the pod's labels say (manageJobsWithoutQueueName)", () => {
    const pod = podFor(SPEC);
    expect(builtPodDifference(asKueueLeftIt(pod), pod, 0, ADMITTED)).toBe(
      'metadata.labels.kueue.x-k8s.io/managed is "true", the controller sets none',
    );
  });

  it("takes placement only as the Workload's admitted flavor gives it", () => {
    const pod = podFor({ ...SPEC, queueName: "team-a" });
    expect(builtPodDifference(asKueueLeftIt(pod), pod, 0)).toBe(
      'spec.nodeSelector is {"cloud.example/pool":"batch"}, the controller sets none',
    );
    const other = { kueue: { ...FLAVOR, nodeSelector: { "cloud.example/pool": "gpu" } } };
    expect(builtPodDifference(asKueueLeftIt(pod), pod, 0, other)).toBe(
      'spec.nodeSelector is {"cloud.example/pool":"batch"}, the controller sets none',
    );
    const wider = asKueueLeftIt(pod);
    wider.spec.nodeSelector["kubernetes.io/hostname"] = "gpu-1";
    expect(builtPodDifference(wider, pod, 0, ADMITTED)).toMatch(/^spec\.nodeSelector is /);
    const tolerant = asKueueLeftIt(pod);
    tolerant.spec.tolerations.push({ operator: "Exists" });
    expect(builtPodDifference(tolerant, pod, 0, ADMITTED)).toMatch(/^spec\.tolerations is /);
  });

  it("does not let anything else through on a Kueue pod", () => {
    const pod = podFor({ ...SPEC, queueName: "team-a" });
    const found = asKueueLeftIt(pod);
    found.metadata.labels["example.com/owner"] = "me";
    expect(builtPodDifference(found, pod, 0, ADMITTED)).toMatch(
      /^metadata\.labels\.example\.com\/owner is "me"/,
    );
    const gated = asKueueLeftIt(pod);
    gated.spec.schedulingGates.push({ name: "example.com/hold" });
    expect(builtPodDifference(gated, pod, 0, ADMITTED)).toMatch(/^spec\.schedulingGates is /);
    // A key Kueue reads as the pod's own choice: a priority class the run did not ask for.
    const ranked = asKueueLeftIt(pod);
    ranked.metadata.labels[KUEUE_PRIORITY_LABEL] = "critical";
    expect(builtPodDifference(ranked, pod, 0, ADMITTED)).toBe(
      'metadata.labels.kueue.x-k8s.io/priority-class is "critical", the controller sets none',
    );
    const gpu = asKueueLeftIt(pod);
    gpu.spec.containers[1].resources.requests["nvidia.com/gpu"] = "8";
    expect(builtPodDifference(gpu, pod, 0, ADMITTED)).toBe(
      'spec.containers[task-1].resources.requests.nvidia.com/gpu is "8", the controller sets none',
    );
  });

  it("is refused on a pod neither built for a queue nor managed by Kueue", () => {
    const pod = podFor(SPEC);
    const found = JSON.parse(JSON.stringify(pod)) as Json;
    found.spec.schedulingGates = [{ name: KUEUE_ADMISSION_GATE }];
    expect(builtPodDifference(found, pod, 0)).toMatch(/^spec\.schedulingGates is /);
  });
});
