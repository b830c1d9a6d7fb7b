// The comparison adoption rests on (issue 41 item 5): a pod found under the run's name before its
// UID is recorded is the run's only when it is, field for field, the pod pod-builder builds, with
// nothing added but what the API server and its default admission add. What is allowed follows
// from the run's plan and what the controller observed, never from the found pod (issue 53 item 1):
// no placement, priority or resource of the pod creator's choosing passes.
import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { planDefaults } from "../../src/controller/plan-digest.js";
import type { AgentDelivery } from "../../src/controller/pods/agent-delivery.js";
import {
  builtPodDifference,
  defaultPullPolicy,
  type ObservedPlacement,
} from "../../src/controller/pods/built-pod-difference.js";
import { buildPod, type PodManifest } from "../../src/controller/pods/pod-builder.js";
import { SPEC, T0 } from "./controller-fixtures.js";

// biome-ignore lint/suspicious/noExplicitAny: the tests reach into the pod as JSON.
type Json = Record<string, any>;

function built(agentDelivery: AgentDelivery, spec: Record<string, unknown> = SPEC): PodManifest {
  const parsed = PlaybookSpecSchema.parse(spec);
  const limits = resolveLimits(parsed, {
    ceilingMs: 3_600_000,
    maxCeilingMs: 86_400_000,
    stallMs: 600_000,
    killGraceMs: 10_000,
  });
  return buildPod({
    playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
    spec: parsed,
    limits,
    defaults: planDefaults(limits),
    attempt: 1,
    runStart: T0,
    now: T0,
    runnerImage: "registry.example/playbook:1.2",
    agentDelivery,
  });
}

/** The pod as the API server hands it back: its defaults and default admission's additions. */
function asServed(pod: PodManifest): Json {
  // Through JSON, as over the wire: no object shared between containers.
  const served = JSON.parse(JSON.stringify(pod)) as Json;
  served.metadata = {
    ...served.metadata,
    uid: "pod-uid",
    resourceVersion: "7",
    creationTimestamp: T0.toISOString(),
  };
  const spec = served.spec;
  Object.assign(spec, {
    dnsPolicy: "ClusterFirst",
    schedulerName: "default-scheduler",
    serviceAccountName: "default",
    serviceAccount: "default",
    priority: 0,
    preemptionPolicy: "PreemptLowerPriority",
    nodeName: "node-a",
    tolerations: [
      ...(spec.tolerations ?? []),
      {
        key: "node.kubernetes.io/not-ready",
        operator: "Exists",
        effect: "NoExecute",
        tolerationSeconds: 300,
      },
      {
        key: "node.kubernetes.io/unreachable",
        operator: "Exists",
        effect: "NoExecute",
        tolerationSeconds: 300,
      },
    ],
  });
  for (const c of spec.containers) {
    c.terminationMessagePath = "/dev/termination-log";
    c.terminationMessagePolicy ??= "File";
    c.imagePullPolicy = defaultPullPolicy(c.image);
    c.resources ??= {};
  }
  for (const v of spec.volumes) {
    if (v.downwardAPI) {
      v.downwardAPI.defaultMode = 420;
      for (const item of v.downwardAPI.items) item.fieldRef.apiVersion = "v1";
    }
    if (v.image) v.image.pullPolicy = defaultPullPolicy(v.image.reference);
  }
  served.status = { phase: "Pending" };
  return served;
}

/** The node the served pod names, as the controller reads it: no taint, no label it needs. */
const NODE_A = { name: "node-a", labels: { "kubernetes.io/hostname": "node-a" }, taints: [] };
const OBSERVED: ObservedPlacement = { node: NODE_A };

const container = (pod: Json, name: string) => pod.spec.containers.find((c: Json) => c.name === name);
const volume = (pod: Json, name: string) => pod.spec.volumes.find((v: Json) => v.name === name);

const CHANGES: { name: string; change: (pod: Json) => void; says: string | RegExp }[] = [
  {
    name: "the agent's image volume pointing at another image",
    change: (pod) => {
      volume(pod, "playbook-agent").image = { reference: "attacker/agent:1", pullPolicy: "IfNotPresent" };
    },
    says: 'spec.volumes[playbook-agent].image.reference is "attacker/agent:1", the controller builds "registry.example/playbook:1.2"',
  },
  {
    name: "a volume of another source",
    change: (pod) => {
      volume(pod, "workspace").hostPath = { path: "/" };
      delete volume(pod, "workspace").emptyDir;
    },
    says: "spec.volumes[workspace].emptyDir is not set, the controller builds {}",
  },
  {
    name: "a volume added",
    change: (pod) => {
      pod.spec.volumes.push({ name: "extra", emptyDir: {} });
    },
    says: /^spec\.volumes is \[.*, extra\], the controller builds \[/,
  },
  {
    name: "an init container",
    change: (pod) => {
      pod.spec.initContainers = [{ name: "setup", image: "attacker/setup:1" }];
    },
    says: /^spec\.initContainers is \[\{"name":"setup".*, the controller sets none$/,
  },
  {
    name: "the pod's security context running as root",
    change: (pod) => {
      pod.spec.securityContext.runAsUser = 0;
      pod.spec.securityContext.runAsNonRoot = false;
    },
    says: "spec.securityContext.runAsNonRoot is false, the controller builds true",
  },
  {
    name: "a pod security context field added",
    change: (pod) => {
      pod.spec.securityContext.supplementalGroups = [0];
    },
    says: "spec.securityContext.supplementalGroups is [0], the controller sets none",
  },
  {
    name: "a task container's security context as root",
    change: (pod) => {
      container(pod, "task-1").securityContext.runAsUser = 0;
    },
    says: "spec.containers[task-1].securityContext.runAsUser is 0, the controller builds 1000",
  },
  {
    name: "a capability added",
    change: (pod) => {
      container(pod, "task-1").securityContext.capabilities.add = ["SYS_PTRACE"];
    },
    says: 'spec.containers[task-1].securityContext.capabilities.add is ["SYS_PTRACE"], the controller sets none',
  },
  {
    name: "a container's image",
    change: (pod) => {
      container(pod, "task-1").image = "attacker/task:1";
    },
    says: 'spec.containers[task-1].image is "attacker/task:1", the controller builds "registry.example/playbook:1.2"',
  },
  {
    name: "a pull policy other than the image's default",
    change: (pod) => {
      container(pod, "task-1").imagePullPolicy = "Never";
    },
    says: 'spec.containers[task-1].imagePullPolicy is "Never", the controller sets none',
  },
  {
    name: "the runner's termination message elsewhere",
    change: (pod) => {
      container(pod, "runner").terminationMessagePath = "/playbook/run/report";
    },
    says: 'spec.containers[runner].terminationMessagePath is "/playbook/run/report", the controller sets none',
  },
  {
    name: "a higher remaining ceiling",
    change: (pod) => {
      const env = container(pod, "runner").env.find((e: Json) => e.name === "PLAYBOOK_CEILING_LEFT_MS");
      env.value = String(Number(env.value) + 60_000);
    },
    says: /^spec\.containers\[runner\]\.env\[PLAYBOOK_CEILING_LEFT_MS\]\.value is "\d+", the controller builds "\d+"$/,
  },
  {
    name: "a later deadline",
    change: (pod) => {
      pod.spec.activeDeadlineSeconds += 60;
    },
    says: /^spec\.activeDeadlineSeconds is \d+, the controller builds \d+$/,
  },
  {
    name: "host PID",
    change: (pod) => {
      pod.spec.hostPID = true;
    },
    says: "spec.hostPID is true, the controller sets none",
  },
  {
    name: "a toleration of its own",
    change: (pod) => {
      pod.spec.tolerations.push({ key: "dedicated", operator: "Exists" });
    },
    says: /^spec\.tolerations is \[\{"key":"node\.kubernetes\.io\/not-ready".*, the controller sets none$/,
  },
  {
    name: "another service account",
    change: (pod) => {
      pod.spec.serviceAccountName = "admin";
      pod.spec.serviceAccount = "admin";
    },
    says: 'spec.serviceAccountName is "admin", the controller sets none',
  },
  {
    name: "a label added",
    change: (pod) => {
      pod.metadata.labels.extra = "1";
    },
    says: 'metadata.labels.extra is "1", the controller sets none',
  },
  {
    name: "an annotation added",
    change: (pod) => {
      pod.metadata.annotations["container.apparmor.security.beta.kubernetes.io/task-1"] = "unconfined";
    },
    says: 'metadata.annotations.container.apparmor.security.beta.kubernetes.io/task-1 is "unconfined", the controller sets none',
  },
  {
    name: "a second owner",
    change: (pod) => {
      pod.metadata.ownerReferences.push({ apiVersion: "v1", kind: "ConfigMap", name: "x", uid: "u" });
    },
    says: "metadata.ownerReferences is [nightly, x], the controller builds [nightly]",
  },
];

describe("a pod compared with the one pod-builder builds", () => {
  for (const delivery of ["image-volume", "post-start"] as const) {
    describe(`(${delivery})`, () => {
      it("is the pod built when the API server only added its defaults", () => {
        expect(
          builtPodDifference(asServed(built(delivery)), built(delivery), 2000, OBSERVED),
        ).toBeUndefined();
      });

      it.each(CHANGES.filter((c) => delivery === "image-volume" || !c.name.includes("image volume")))(
        "differs with $name",
        ({ change, says }) => {
          const pod = asServed(built(delivery));
          change(pod);
          const difference = builtPodDifference(pod, built(delivery), 2000, OBSERVED);
          if (typeof says === "string") expect(difference).toBe(says);
          else expect(difference).toMatch(says);
        },
      );
    });
  }

  it("takes lower remaining times (a sooner end) and higher ones within the slack", () => {
    const pod = asServed(built("post-start"));
    const env = container(pod, "runner").env.find((e: Json) => e.name === "PLAYBOOK_CEILING_LEFT_MS");
    env.value = String(Number(env.value) + 1500);
    pod.spec.activeDeadlineSeconds += 2;
    expect(builtPodDifference(pod, built("post-start"), 2000, OBSERVED)).toBeUndefined();
    env.value = "0";
    pod.spec.activeDeadlineSeconds = 1;
    expect(builtPodDifference(pod, built("post-start"), 2000, OBSERVED)).toBeUndefined();
    env.value = "-1";
    expect(builtPodDifference(pod, built("post-start"), 2000, OBSERVED)).toMatch(
      /PLAYBOOK_CEILING_LEFT_MS\]\.value is "-1"/,
    );
  });

  it("reads quantities as the API server writes them, and takes LimitRanger's additions", () => {
    const spec = { ...SPEC, resources: { limits: { cpu: "1000m", memory: "1024Mi" } } };
    const pod = asServed(built("post-start", spec));
    const task = container(pod, "task-1");
    task.resources = { limits: { cpu: "1", memory: "1Gi" }, requests: { cpu: "1", memory: "1Gi" } };
    expect(builtPodDifference(pod, built("post-start", spec), 2000, OBSERVED)).toBeUndefined();
    task.resources.limits.memory = "2Gi";
    expect(builtPodDifference(pod, built("post-start", spec), 2000, OBSERVED)).toBe(
      'spec.containers[task-1].resources.limits.memory is "2Gi", the controller builds "1024Mi"',
    );
  });

  it.each([
    ["busybox", "Always"],
    ["busybox:latest", "Always"],
    ["registry:5000/team/app", "Always"],
    ["registry:5000/team/app:1.2", "IfNotPresent"],
    ["app@sha256:0123", "IfNotPresent"],
    ["app:latest@sha256:0123", "Always"],
  ])("gives %s the default pull policy %s", (image, policy) => {
    expect(defaultPullPolicy(image)).toBe(policy);
  });
});

/** A pod creator's choices that widen what the run may use or where it runs (issue 53 item 1). */
const CHOSEN: { name: string; change: (pod: Json) => void; says: string | RegExp }[] = [
  {
    name: "Kueue's managed label and gate on a run with no queue",
    change: (pod) => {
      pod.metadata.labels["kueue.x-k8s.io/managed"] = "true";
      pod.spec.schedulingGates = [{ name: "kueue.x-k8s.io/admission" }];
    },
    says: 'metadata.labels.kueue.x-k8s.io/managed is "true", the controller sets none',
  },
  {
    name: "a node selector on a run with no queue",
    change: (pod) => {
      delete pod.spec.nodeName;
      pod.spec.nodeSelector = { "node-role.kubernetes.io/control-plane": "" };
    },
    says: 'spec.nodeSelector is {"node-role.kubernetes.io/control-plane":""}, the controller sets none',
  },
  {
    name: "a node the controller has not seen",
    change: (pod) => {
      pod.spec.nodeName = "node-b";
    },
    says: 'spec.nodeName is "node-b", the controller sets none',
  },
  {
    name: "a priority class",
    change: (pod) => {
      pod.spec.priorityClassName = "system-node-critical";
      pod.spec.priority = 2000001000;
    },
    says: /^spec\.(priority is 2000001000|priorityClassName is "system-node-critical"), the controller sets none$/,
  },
  {
    name: "a GPU on a task container",
    change: (pod) => {
      container(pod, "task-1").resources = { limits: { "nvidia.com/gpu": "8" } };
    },
    says: 'spec.containers[task-1].resources is {"limits":{"nvidia.com/gpu":"8"}}, the controller sets none',
  },
  {
    name: "a CPU limit that starves the runner",
    change: (pod) => {
      container(pod, "runner").resources.limits.cpu = "1m";
    },
    says: 'spec.containers[runner].resources.limits.cpu is "1m", the controller sets none',
  },
  {
    name: "ephemeral storage on the runner",
    change: (pod) => {
      container(pod, "runner").resources.requests["ephemeral-storage"] = "1Gi";
    },
    says: 'spec.containers[runner].resources.requests.ephemeral-storage is "1Gi", the controller sets none',
  },
];

describe("what the pod's creator chose, never allowed by the comparison", () => {
  it.each(CHOSEN)("refuses $name", ({ change, says }) => {
    const pod = asServed(built("image-volume"));
    change(pod);
    const difference = builtPodDifference(pod, built("image-volume"), 2000, OBSERVED);
    if (typeof says === "string") expect(difference).toBe(says);
    else expect(difference).toMatch(says);
  });

  it("refuses a request other than the limit the API server defaults it to", () => {
    const spec = { ...SPEC, resources: { limits: { cpu: "1" } } };
    const pod = asServed(built("post-start", spec));
    container(pod, "task-1").resources = { limits: { cpu: "1" }, requests: { cpu: "500m" } };
    expect(builtPodDifference(pod, built("post-start", spec), 2000, OBSERVED)).toBe(
      'spec.containers[task-1].resources.requests is {"cpu":"500m"}, the controller sets none',
    );
  });

  it("takes a LimitRange's defaults on a task container", () => {
    const pod = asServed(built("post-start"));
    container(pod, "task-1").resources = {
      limits: { cpu: "500m", memory: "512Mi", "ephemeral-storage": "1Gi" },
      requests: { cpu: "100m", memory: "256Mi" },
    };
    expect(builtPodDifference(pod, built("post-start"), 2000, OBSERVED)).toBeUndefined();
  });

  it("takes a nodeName only for a node seen, where the scheduler could have bound the pod", () => {
    const pod = asServed(built("post-start"));
    const tainted = (effect: string) => ({
      node: { ...NODE_A, taints: [{ key: "node-role.kubernetes.io/control-plane", effect }] },
    });
    expect(builtPodDifference(pod, built("post-start"), 2000, tainted("PreferNoSchedule"))).toBeUndefined();
    for (const effect of ["NoSchedule", "NoExecute"]) {
      expect(builtPodDifference(pod, built("post-start"), 2000, tainted(effect))).toBe(
        'spec.nodeName is "node-a", the controller sets none',
      );
    }
    // The node lifecycle controller's taint of a node gone silent, which the default toleration takes.
    const silent = {
      node: { ...NODE_A, taints: [{ key: "node.kubernetes.io/unreachable", effect: "NoExecute" }] },
    };
    expect(builtPodDifference(pod, built("post-start"), 2000, silent)).toBeUndefined();
    expect(builtPodDifference(pod, built("post-start"), 2000, {})).toBe(
      'spec.nodeName is "node-a", the controller sets none',
    );
    const unscheduled = asServed(built("post-start"));
    delete unscheduled.spec.nodeName;
    expect(builtPodDifference(unscheduled, built("post-start"), 2000, {})).toBeUndefined();
  });
});

describe("the placement and pod metadata the builder sets (issue 56)", () => {
  const PLACED = {
    ...SPEC,
    nodeSelector: { pool: "batch" },
    tolerations: [{ key: "dedicated", operator: "Equal", value: "batch", effect: "NoSchedule" }],
    affinity: {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{ matchExpressions: [{ key: "zone", operator: "In", values: ["a"] }] }],
        },
      },
    },
    runtimeClassName: "gvisor",
    imagePullSecrets: [{ name: "registry-cred" }],
    podMetadata: { labels: { team: "payments" }, annotations: { "sidecar.istio.io/inject": "false" } },
  };
  const placed = () => built("post-start", PLACED);
  const NODE_BATCH = {
    node: { ...NODE_A, labels: { ...NODE_A.labels, pool: "batch", zone: "a" } },
  };

  it("puts every field on the pod", () => {
    const pod = placed() as Json;
    expect(pod.spec.nodeSelector).toEqual({ pool: "batch" });
    expect(pod.spec.tolerations).toEqual(PLACED.tolerations);
    expect(pod.spec.affinity).toEqual(PLACED.affinity);
    expect(pod.spec.runtimeClassName).toBe("gvisor");
    expect(pod.spec.imagePullSecrets).toEqual([{ name: "registry-cred" }]);
    expect(pod.metadata.labels.team).toBe("payments");
    expect(pod.metadata.labels["playbook.dev/name"]).toBe("nightly");
    expect(pod.metadata.annotations["sidecar.istio.io/inject"]).toBe("false");
  });

  it("is the pod built when the API server added its default tolerations after the run's", () => {
    expect(builtPodDifference(asServed(placed()), placed(), 2000, NODE_BATCH)).toBeUndefined();
  });

  it.each([
    {
      name: "a node selector entry changed",
      change: (pod: Json) => {
        pod.spec.nodeSelector.pool = "gpu";
      },
      says: /^spec\.nodeSelector is \{"pool":"gpu"\}, the controller builds \{"pool":"batch"\}$/,
    },
    {
      name: "the run's toleration dropped",
      change: (pod: Json) => {
        pod.spec.tolerations.shift();
      },
      says: /^spec\.tolerations is .*, the controller builds \[\{"key":"dedicated"/,
    },
    {
      name: "a toleration added",
      change: (pod: Json) => {
        pod.spec.tolerations.push({ operator: "Exists" });
      },
      says: /^spec\.tolerations is /,
    },
    {
      name: "the affinity removed",
      change: (pod: Json) => {
        delete pod.spec.affinity;
      },
      says: /^spec\.affinity is not set, the controller builds/,
    },
    {
      name: "another runtime class",
      change: (pod: Json) => {
        pod.spec.runtimeClassName = "runc-privileged";
      },
      says: 'spec.runtimeClassName is "runc-privileged", the controller builds "gvisor"',
    },
    {
      name: "another pull secret",
      change: (pod: Json) => {
        pod.spec.imagePullSecrets = [{ name: "stolen" }];
      },
      says: "spec.imagePullSecrets[0] is stolen, the controller builds registry-cred",
    },
    {
      name: "a team label changed",
      change: (pod: Json) => {
        pod.metadata.labels.team = "other";
      },
      says: 'metadata.labels.team is "other", the controller builds "payments"',
    },
    {
      name: "a team annotation changed",
      change: (pod: Json) => {
        pod.metadata.annotations["sidecar.istio.io/inject"] = "true";
      },
      says: 'metadata.annotations.sidecar.istio.io/inject is "true", the controller builds "false"',
    },
  ])("refuses $name", ({ change, says }) => {
    const pod = asServed(placed());
    change(pod);
    const difference = builtPodDifference(pod, placed(), 2000, NODE_BATCH);
    if (typeof says === "string") expect(difference).toBe(says);
    else expect(difference).toMatch(says);
  });

  it("takes Kueue's flavor node selector and tolerations merged into the run's, only as its admission shows them", () => {
    const queued = { ...PLACED, queueName: "team-a" };
    const flavor = {
      nodeSelector: { "cloud.example/spot": "true" },
      tolerations: [{ key: "spot", operator: "Exists", effect: "NoSchedule" }],
    };
    const pod = asServed(built("post-start", queued));
    pod.spec.nodeSelector = { ...pod.spec.nodeSelector, ...flavor.nodeSelector };
    pod.spec.tolerations.push(...flavor.tolerations);
    pod.metadata.labels["kueue.x-k8s.io/managed"] = "true";
    const node = { ...NODE_BATCH.node, labels: { ...NODE_BATCH.node.labels, "cloud.example/spot": "true" } };
    node.taints = [];
    expect(
      builtPodDifference(pod, built("post-start", queued), 2000, { node, kueue: flavor }),
    ).toBeUndefined();
    // Without the admission observed, or on a run with no queue, the same additions are the creator's.
    expect(builtPodDifference(pod, built("post-start", queued), 2000, { node })).toMatch(
      /^spec\.(nodeSelector|tolerations) is /,
    );
  });

  it("takes the RuntimeClass admission's overhead, node selector and tolerations, only as the class read shows them", () => {
    const runtimeClass = {
      name: "gvisor",
      overhead: { cpu: "250m", memory: "120Mi" },
      nodeSelector: { "sandbox.example/gvisor": "true" },
      tolerations: [{ key: "sandbox", operator: "Exists", effect: "NoSchedule" }],
    };
    const pod = asServed(placed());
    pod.spec.overhead = { cpu: "250m", memory: "120Mi" };
    pod.spec.nodeSelector = { ...pod.spec.nodeSelector, ...runtimeClass.nodeSelector };
    pod.spec.tolerations.push(...runtimeClass.tolerations);
    const node = {
      ...NODE_BATCH.node,
      labels: { ...NODE_BATCH.node.labels, "sandbox.example/gvisor": "true" },
    };
    expect(builtPodDifference(pod, placed(), 2000, { node, runtimeClass })).toBeUndefined();
    // Not read, or another class than the run's: the same additions are the creator's.
    expect(builtPodDifference(pod, placed(), 2000, { node })).toMatch(
      /^spec\.(nodeSelector|tolerations|overhead) is /,
    );
    expect(
      builtPodDifference(pod, placed(), 2000, { node, runtimeClass: { ...runtimeClass, name: "kata" } }),
    ).toMatch(/^spec\.(nodeSelector|tolerations|overhead) is /);
    // More overhead than the class gives is not the admission's.
    pod.spec.overhead.cpu = "8";
    expect(builtPodDifference(pod, placed(), 2000, { node, runtimeClass })).toBe(
      'spec.overhead is {"cpu":"8","memory":"120Mi"}, the controller sets none',
    );
  });
});
