// Placement and pod metadata on the real API server and the scripted node (issue 56): the CRD
// refuses a toleration operator a Pod's validation refuses, the controller a reserved pod key; the
// controller puts the spec's fields and the namespace policy's enforced ones on the pod, which the
// real scheduler places and the run's report decides; and before any pod exists it ends InvalidSpec
// a spec that conflicts with an enforced entry, a runtime class the policy does not allow, and a
// key the policy forbids. The controller's own placed pod, left unrecorded, is still adopted (the
// API server's default tolerations beside the run's are not someone else's choice).
import { ApiException, NodeV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  reportFor,
  reportPod,
  SCRIPTED_NODE_NAME,
  scheduledPod,
  startPod,
} from "../harness/scripted-node.js";
import { podTheControllerBuilds, startedControllerSettings } from "./built-pods.js";
import {
  clients,
  condition,
  createPlaybook,
  kubectl,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core, kubeConfig } = clients();
/** A RuntimeClass the policy allows (its handler runc: on the scripted node nothing runs it). */
const SANDBOXED = `pb-place-sandboxed-${process.pid}`;
const namespaces: string[] = [];
const controllers: RunningController[] = [];

beforeAll(async () => {
  await kubeConfig
    .makeApiClient(NodeV1Api)
    .createRuntimeClass({ body: { metadata: { name: SANDBOXED }, handler: "runc" } });
});

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
  await kubeConfig
    .makeApiClient(NodeV1Api)
    .deleteRuntimeClass({ name: SANDBOXED })
    .catch(() => {});
});

async function namespace(prefix: string, policy?: Record<string, unknown>): Promise<string> {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  if (policy) {
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "PlaybookPolicy",
      metadata: { name: "default", namespace: ns },
      spec: policy,
    };
    await kubectl(["apply", "--server-side", "-f", "-"], { input: JSON.stringify(body) });
  }
  return ns;
}

const RUN = { ceiling: "2m", killGrace: "1s", tasks: [{ name: "deploy", run: "make deploy" }] };
const ON_SCRIPTED_NODE = { "kubernetes.io/hostname": SCRIPTED_NODE_NAME };
const BATCH = { key: "dedicated", operator: "Equal", value: "batch", effect: "NoSchedule" };
const POLICY = {
  enforced: { nodeSelector: ON_SCRIPTED_NODE, tolerations: [BATCH] },
  allowedRuntimeClasses: [SANDBOXED],
  forbiddenAnnotationKeys: ["billing.example.com/*"],
};

async function refusedByApiServer(ns: string, spec: Record<string, unknown>): Promise<string> {
  try {
    await createPlaybook(ns, "refused", spec);
  } catch (error) {
    if (error instanceof ApiException) return (JSON.parse(String(error.body)) as { message: string }).message;
    throw error;
  }
  throw new Error("the API server admitted the Playbook");
}

describe("placement on the real API server", () => {
  it("the CRD refuses a toleration operator, naming the field", async () => {
    const ns = await namespace("pb-place-crd");
    expect(
      await refusedByApiServer(ns, { ...RUN, tolerations: [{ key: "k", operator: "Maybe" }] }),
    ).toContain('spec.tolerations[0].operator: Unsupported value: "Maybe"');
  });

  it("ends InvalidSpec for a reserved pod label or annotation, naming the key, before any pod", async () => {
    const ns = await namespace("pb-place-reserved");
    controllers.push(startController([ns], { agentDelivery: "image-volume" }));
    await createPlaybook(ns, "label", { ...RUN, podMetadata: { labels: { "playbook.dev/name": "other" } } });
    await createPlaybook(ns, "note", {
      ...RUN,
      podMetadata: { annotations: { "kueue.x-k8s.io/workload": "w" } },
    });
    for (const [name, says] of [
      [
        "label",
        'spec.podMetadata.labels.playbook.dev/name: "playbook.dev/name" is reserved (playbook.dev/*)',
      ],
      [
        "note",
        'spec.podMetadata.annotations.kueue.x-k8s.io/workload: "kueue.x-k8s.io/workload" is reserved (kueue.x-k8s.io/*)',
      ],
    ] as const) {
      const finished = await waitForFinished(ns, name, 30_000);
      expect(condition(finished, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
      expect(condition(finished, "Succeeded")?.message).toContain(says);
      expect(await podsOf(ns, name)).toEqual([]);
    }
  });

  it("puts the spec's annotations and the policy's enforced selector and toleration on the pod, which is scheduled and runs", async () => {
    const ns = await namespace("pb-place-on", POLICY);
    controllers.push(startController([ns], { agentDelivery: "image-volume" }));
    await createPlaybook(ns, "placed", {
      ...RUN,
      runtimeClassName: SANDBOXED,
      podMetadata: { annotations: { "sidecar.istio.io/inject": "false" }, labels: { team: "payments" } },
    });
    const pod = await startPod(core, await scheduledPod(core, ns, "placed-1"));
    expect(pod.spec?.nodeName).toBe(SCRIPTED_NODE_NAME);
    expect(pod.spec?.nodeSelector).toEqual(ON_SCRIPTED_NODE);
    expect(pod.spec?.tolerations).toContainEqual(BATCH);
    expect(pod.spec?.runtimeClassName).toBe(SANDBOXED);
    expect(pod.metadata?.annotations?.["sidecar.istio.io/inject"]).toBe("false");
    expect(pod.metadata?.labels?.team).toBe("payments");
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const finished = await waitForFinished(ns, "placed", 30_000);
    expect(condition(finished, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
  });

  it.each([
    {
      name: "a node selector entry that conflicts with the enforced one",
      spec: { nodeSelector: { "kubernetes.io/hostname": "elsewhere" } },
      says: `spec.nodeSelector.kubernetes.io/hostname: kubernetes.io/hostname=elsewhere conflicts with kubernetes.io/hostname=${SCRIPTED_NODE_NAME}, which PlaybookPolicy default enforces on every pod (spec.enforced.nodeSelector)`,
    },
    {
      name: "a runtime class outside allowedRuntimeClasses",
      spec: { runtimeClassName: "runc-privileged" },
      says: `spec.runtimeClassName: "runc-privileged" is not an allowed runtime class: PlaybookPolicy default allows ${SANDBOXED} (spec.allowedRuntimeClasses)`,
    },
    {
      name: "an annotation key the policy forbids",
      spec: { podMetadata: { annotations: { "billing.example.com/owner": "me" } } },
      says: 'spec.podMetadata.annotations.billing.example.com/owner: "billing.example.com/owner" is a key PlaybookPolicy default does not let a Playbook set (spec.forbiddenAnnotationKeys: billing.example.com/*)',
    },
  ])("ends InvalidSpec for $name, naming it, before any pod", async ({ spec, says }) => {
    const ns = await namespace("pb-place-refused", POLICY);
    controllers.push(startController([ns], { agentDelivery: "image-volume" }));
    await createPlaybook(ns, "refused", { ...RUN, ...spec });
    const finished = await waitForFinished(ns, "refused", 30_000);
    expect(condition(finished, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(finished, "Succeeded")?.message).toContain(says);
    expect(await podsOf(ns, "refused")).toEqual([]);
  });

  it("adopts the controller's own placed pod, left unrecorded, beside the API server's default tolerations", async () => {
    const ns = await namespace("pb-place-adopt");
    const spec = {
      ...RUN,
      nodeSelector: ON_SCRIPTED_NODE,
      tolerations: [BATCH],
      podMetadata: { annotations: { "sidecar.istio.io/inject": "false" } },
    };
    await createPlaybook(ns, "gate", spec);
    const settings = startedControllerSettings([ns], "image-volume");
    const made = await core.createNamespacedPod({
      namespace: ns,
      body: (await podTheControllerBuilds(ns, "gate", settings)) as unknown as V1Pod,
    });
    // DefaultTolerationSeconds added its two after the run's own.
    expect(made.spec?.tolerations?.length).toBe(3);
    controllers.push(startController([ns], { agentDelivery: "image-volume" }));
    const pod = await startPod(core, await scheduledPod(core, ns, "gate-1"));
    const adopted = await waitForPlaybook(
      ns,
      "gate",
      "to run on its pod",
      (p) => p.status?.phase === "Running",
    );
    expect(adopted.status).toMatchObject({ podName: "gate-1", podUID: made.metadata?.uid, podAttempts: 1 });
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const finished = await waitForFinished(ns, "gate", 30_000);
    expect(condition(finished, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const { items } = await core.listNamespacedEvent({ namespace: ns, fieldSelector: "reason=ForeignPod" });
    expect(items).toEqual([]);
  });

  it("adopts the controller's own pod under a RuntimeClass whose overhead and scheduling the API server added", async () => {
    const ns = await namespace("pb-place-adopt-rc");
    const nodeApi = kubeConfig.makeApiClient(NodeV1Api);
    const name = `pb-place-overhead-${process.pid}`;
    await nodeApi.createRuntimeClass({
      body: {
        metadata: { name },
        handler: "runc",
        overhead: { podFixed: { cpu: "100m", memory: "32Mi" } },
        scheduling: {
          nodeSelector: ON_SCRIPTED_NODE,
          tolerations: [{ key: "sandbox", operator: "Exists", effect: "NoSchedule" }],
        },
      },
    });
    try {
      await createPlaybook(ns, "gate", { ...RUN, runtimeClassName: name });
      const settings = startedControllerSettings([ns], "image-volume");
      const made = await core.createNamespacedPod({
        namespace: ns,
        body: (await podTheControllerBuilds(ns, "gate", settings)) as unknown as V1Pod,
      });
      // What the RuntimeClass admission added to the pod the controller built.
      expect(made.spec?.overhead).toEqual({ cpu: "100m", memory: "32Mi" });
      expect(made.spec?.nodeSelector).toEqual(ON_SCRIPTED_NODE);
      controllers.push(startController([ns], { agentDelivery: "image-volume" }));
      const pod = await startPod(core, await scheduledPod(core, ns, "gate-1"));
      const adopted = await waitForPlaybook(
        ns,
        "gate",
        "to run on its pod",
        (p) => p.status?.phase === "Running",
      );
      expect(adopted.status).toMatchObject({ podName: "gate-1", podUID: made.metadata?.uid, podAttempts: 1 });
      await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
      const finished = await waitForFinished(ns, "gate", 30_000);
      expect(condition(finished, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    } finally {
      await nodeApi.deleteRuntimeClass({ name }).catch(() => {});
    }
  });
});
