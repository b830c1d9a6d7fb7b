// A pod found under a run's name before its UID is recorded is adopted only when it is, field for
// field, the pod the controller builds for that attempt (issue 41 item 5), on the real API server:
// what its defaulting and admission add is all that may differ. While a run waits for its
// namespace's runningPlaybooks slot, anyone who may create pods there can make one under the
// run's name with its label, controller reference and plan, and all containers as the controller
// builds them, but one other field: its agent volume from another image, an init container, the
// pod or a task container as root. Such a pod is foreign: named in a Warning, never read (its
// runner's report of success decides nothing), and the run takes its alternate name. The
// controller's own pod, left unrecorded by a controller stopped between its create and its
// record, is still adopted. Nor does anything the pod's creator chose widen what may differ
// (issue 53 item 1): Kueue's label on a run with no queue, a nodeName that skipped the scheduler,
// a priority class, a GPU, a CPU limit on the runner.
import { SchedulingV1Api, type V1Pod } from "@kubernetes/client-node";
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
import { controllerInputs, podTheControllerBuilds, startedControllerSettings } from "./built-pods.js";
import { type Json, RUNNER_CPU_LIMIT } from "./foreign-changes.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  getPlaybook,
  kubectl,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core, kubeConfig } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];

/** A node the scheduler places no run's pod on: its taint, which the run's pod does not tolerate. */
const TAINTED_NODE = `pb-foreign-tainted-${process.pid}`;
/** A PriorityClass above every run's pod, which the controller never names. */
const HIGH_PRIORITY = `pb-foreign-high-${process.pid}`;

beforeAll(async () => {
  await core.createNode({
    body: {
      metadata: { name: TAINTED_NODE, labels: { "kubernetes.io/hostname": TAINTED_NODE } },
      spec: { taints: [{ key: "dedicated", value: "secure", effect: "NoSchedule" }] },
    },
  });
  await kubeConfig
    .makeApiClient(SchedulingV1Api)
    .createPriorityClass({ body: { metadata: { name: HIGH_PRIORITY }, value: 1_000_000 } });
});

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
  await core.deleteNode({ name: TAINTED_NODE }).catch(() => {});
  await kubeConfig
    .makeApiClient(SchedulingV1Api)
    .deletePriorityClass({ name: HIGH_PRIORITY })
    .catch(() => {});
});

const DELIVERY = { agentDelivery: "image-volume" } as const;
const RUN = { ceiling: "2m", killGrace: "1s", tasks: [{ name: "deploy", run: "make deploy" }] };

async function capNamespace(prefix: string): Promise<string> {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace: ns },
    spec: { maximums: { runningPlaybooks: 1 } },
  };
  await kubectl(["apply", "--server-side", "-f", "-"], { input: JSON.stringify(policy) });
  return ns;
}

const FOREIGN: { kind: string; change: (pod: Json) => void; says: string }[] = [
  {
    kind: "its agent volume from another image",
    change: (pod) => {
      const agent = pod.spec.volumes.find((v) => v.name === "playbook-agent") as Json;
      agent.image = { reference: "attacker.example/agent:1" };
    },
    says: 'spec.volumes[playbook-agent].image.reference is "attacker.example/agent:1"',
  },
  {
    kind: "an init container",
    change: (pod) => {
      pod.spec.initContainers = [{ name: "setup", image: "attacker.example/setup:1", command: ["/setup"] }];
    },
    says: "spec.initContainers is [",
  },
  {
    kind: "the pod's security context as root",
    change: (pod) => {
      pod.spec.securityContext = { ...(pod.spec.securityContext as Json), runAsNonRoot: false, runAsUser: 0 };
    },
    says: "spec.securityContext.runAsNonRoot is false, the controller builds true",
  },
  {
    kind: "Kueue's managed label and a node selector, though the run names no queue",
    change: (pod) => {
      (pod.metadata as { labels: Record<string, string> }).labels["kueue.x-k8s.io/managed"] = "true";
      pod.spec.nodeSelector = { "kubernetes.io/os": "linux" };
    },
    says: 'metadata.labels.kueue.x-k8s.io/managed is "true", the controller sets none',
  },
  {
    kind: "a nodeName that skipped the scheduler, on a node whose taint keeps the run's pods off",
    change: (pod) => {
      pod.spec.nodeName = TAINTED_NODE;
    },
    says: `spec.nodeName is "${TAINTED_NODE}", the controller sets none`,
  },
  {
    kind: "a priority class",
    change: (pod) => {
      pod.spec.priorityClassName = HIGH_PRIORITY;
    },
    says: `spec.priorityClassName is "${HIGH_PRIORITY}", the controller sets none`,
  },
  {
    kind: "eight GPUs on a task container (placed on the node by hand: no node has GPUs to schedule it)",
    change: (pod) => {
      pod.spec.nodeName = SCRIPTED_NODE_NAME;
      const task = pod.spec.containers.find((c) => c.name === "task-1") as Json;
      task.resources = { limits: { "nvidia.com/gpu": "8" } };
    },
    says: 'spec.containers[task-1].resources is {"limits":{"nvidia.com/gpu":"8"}',
  },
  RUNNER_CPU_LIMIT,
  {
    kind: "a task container's security context as root",
    change: (pod) => {
      const task = pod.spec.containers.find((c) => c.name === "task-1") as Json;
      task.securityContext = { runAsUser: 0 };
    },
    says: "spec.containers[task-1].securityContext",
  },
];

describe("a pod under the run's name made while the run waits for its slot", () => {
  it.each(FOREIGN)(
    "with $kind is foreign: a Warning names it, its report is never read, and the run takes the alternate name",
    async ({ change, says }) => {
      const ns = await capNamespace("pb-foreign-adopt");
      const running = startController([ns], DELIVERY);
      controllers.push(running);
      // The slot's holder runs until the test ends it.
      await createPlaybook(ns, "holder", RUN);
      const holder = await startPod(core, await scheduledPod(core, ns, "holder-1"));
      const created = await createPlaybook(ns, "gate", RUN);
      const uid = created.metadata.uid;
      await waitForPlaybook(
        ns,
        "gate",
        "to wait for a slot",
        (p) => condition(p, "Succeeded")?.reason === "Queued",
      );

      // The pod the controller would build for gate's first attempt, with one field changed.
      const { settings, rules } = controllerInputs(running, ns);
      const forged = structuredClone(
        await podTheControllerBuilds(ns, "gate", settings, rules),
      ) as unknown as Json;
      change(forged);
      const made = await core.createNamespacedPod({ namespace: ns, body: forged as unknown as V1Pod });
      // Its runner "ends on its own" with a report of success for the run's own plan.
      await startPod(core, await scheduledPod(core, ns, "gate-1"));
      await reportPod(core, made, reportFor(made, { reason: "Succeeded" }));

      // Until the controller has seen it: it warned about it, or (believing it) took its report.
      const seen = await eventually("the pod under the run's name seen", async () => {
        const playbook = await getPlaybook(ns, "gate");
        const { items } = await core.listNamespacedEvent({
          namespace: ns,
          fieldSelector: `involvedObject.uid=${uid},reason=ForeignPod`,
        });
        if (condition(playbook, "Succeeded")?.reason !== "Queued") return { playbook, warning: items[0] };
        return items[0] ? { playbook, warning: items[0] } : undefined;
      });
      // Not read: its report of success ends nothing, and the run still waits for its slot.
      expect(condition(seen.playbook, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Queued" });
      expect(seen.playbook.status?.podName).toBeUndefined();
      const warning = seen.warning;
      if (!warning) throw new Error("no ForeignPod warning");
      expect(warning.type).toBe("Warning");
      expect(warning.message).toContain(
        "Pod gate-1 carries this Playbook's controller reference, but the controller did not create it (it is not built as the controller builds its attempt: ",
      );
      expect(warning.message).toContain(says);

      // The slot frees: the run makes its own pod under the alternate name, and its report decides.
      await reportPod(core, holder, reportFor(holder, { reason: "Succeeded" }));
      const alternate = `gate-1-${uid.replace(/-/g, "").slice(0, 8)}`;
      const own = await startPod(core, await scheduledPod(core, ns, alternate));
      await reportPod(core, own, reportFor(own, { reason: "TaskFailed" }));
      const finished = await waitForFinished(ns, "gate", 30_000);
      expect(condition(finished, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
      expect(finished.status).toMatchObject({
        podName: alternate,
        podUID: own.metadata?.uid,
        podAttempts: 1,
      });
      // The foreign pod is left as it was: not deleted, not adopted.
      const still = await core.readNamespacedPod({ namespace: ns, name: "gate-1" });
      expect(still.metadata?.uid).toBe(made.metadata?.uid);
      expect(still.metadata?.deletionTimestamp).toBeUndefined();
    },
  );
});

describe("the controller's own pod, left unrecorded by a controller stopped between its create and its record", () => {
  it.each(["image-volume", "post-start"] as const)(
    "is adopted (%s): the API server's defaults and admission's additions are all that differ",
    async (agentDelivery) => {
      const ns = await createTestNamespace(core, "pb-own-adopt");
      namespaces.push(ns);
      await createPlaybook(ns, "gate", RUN);
      // What the stopped controller created: its own decision's pod, sent as it sends it.
      const settings = startedControllerSettings([ns], agentDelivery);
      const made = await core.createNamespacedPod({
        namespace: ns,
        body: (await podTheControllerBuilds(ns, "gate", settings)) as unknown as V1Pod,
      });
      const running = startController([ns], { agentDelivery });
      controllers.push(running);
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
      expect((await core.listNamespacedPod({ namespace: ns })).items.map((p) => p.metadata?.name)).toEqual([
        "gate-1",
      ]);
    },
  );
});
