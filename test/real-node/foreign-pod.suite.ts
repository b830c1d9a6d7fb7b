// A pod the controller did not create is never adopted, on the real kubelet (issue 41 item 5): the
// proof of test/controller/foreign-adoption.test.ts with pods that really run. While a run waits
// for its namespace's runningPlaybooks slot (a holder run keeps it), anyone who may create pods
// there makes one under the run's name, built as the controller builds the run's first attempt but
// for one field: the agent's volume from an image of the attacker's making, an init container, a
// task container as the runner's user. The pod runs, and its runner reports an outcome of the
// attacker's choosing. The run never reads it: it stays Queued while the holder runs, a Warning
// names the pod and the field, and once the slot frees it runs on its alternate name and ends with
// its true outcome (its task exits 7: TaskFailed), the foreign pod left as it was. The
// controller's own pod, made before its record by a controller no longer running, is adopted, and
// it is so on its node as the scheduler bound it. Nor does a choice of the pod's creator widen what
// may differ (issue 53 item 1): Kueue's label with a node selector on a run that names no queue, a
// CPU limit that throttles the runner; each such pod runs the run's true task, and is still never
// the run's.
// Every namespace enforces restricted Pod Security, as the controller's pods pass it: each change
// passes it too (no root, no added capability), so what refuses the pod is the controller's
// comparison, not admission. Run once per agent layout (foreign-pod-image-volume.test.ts,
// foreign-pod-post-start.test.ts); the cases share one controller and run side by side, each in a
// namespace of its own.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { decodeReport } from "../../src/api/report.js";
import {
  controllerInputs,
  podTheControllerBuilds,
  startedControllerSettings,
} from "../controller/built-pods.js";
import { type Json, RUNNER_CPU_LIMIT } from "../controller/foreign-changes.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  getPlaybook,
  kubectl,
  type PlaybookObject,
  patchSpec,
  podsOf,
  type RunningController,
  runnerLogs,
  startController,
  taskLines,
  waitForFinished,
  waitForPlaybook,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { importForeignAgentImage } from "../harness/real-node/foreign-agent-image.js";
import type { AgentLayout } from "../harness/task-images.js";

const { core } = clients();
const log = (message: string) => process.stderr.write(`[foreign-pod] ${message}\n`);
const RESTRICTED = {
  "pod-security.kubernetes.io/enforce": "restricted",
  "pod-security.kubernetes.io/enforce-version": "latest",
};
/** Each case's Playbooks, their pods and the foreign pod's run: minutes on a loaded node. */
const CASE_MS = 420_000;

/**
 * The run the foreign pod is made for. Its task is a build step with a cache: it exits 7 unless
 * the workspace already holds its result. The true outcome is TaskFailed (exit 7); a Succeeded
 * could come only from a pod that skipped or faked the task.
 */
const GATE = {
  ceiling: "3m",
  killGrace: "2s",
  tasks: [
    {
      name: "build",
      run: [
        'if [ -f /workspace/.cache/built ]; then echo "cached"; exit 0; fi',
        'echo "building"',
        "exit 7",
      ].join("\n"),
    },
  ],
};
/** Keeps the namespace's one slot until the test cancels it. */
const HOLDER = { ceiling: "10m", tasks: [{ name: "hold", run: "sleep 600" }] };

interface ForeignCase {
  kind: string;
  change: (pod: Json) => void;
  /** What the ForeignPod warning says of the field. */
  says: string;
  /** What the foreign pod's own runner reported, had anyone believed it. */
  forged: (pod: V1Pod) => void | Promise<void>;
}

function runnerOfPod(pod: V1Pod) {
  return pod.status?.containerStatuses?.find((s) => s.name === "runner");
}

export function foreignPodSuite({ setting, delivery }: AgentLayout): void {
  const namespaces: string[] = [];
  const controllers: RunningController[] = [];
  let foreignAgent = "";
  /** The namespace of each foreign case, made in beforeAll so that one controller watches them all. */
  const caseNamespace = new Map<string, string>();

  const FOREIGN: ForeignCase[] = [
    {
      kind: "its agent volume from an image of the attacker's",
      change: (pod) => {
        const agent = pod.spec.volumes.find((v) => v.name === "playbook-agent") as Json;
        delete agent.emptyDir;
        agent.image = { reference: foreignAgent };
      },
      says: "spec.volumes[playbook-agent].",
      forged: async (pod) => {
        const runner = runnerOfPod(pod);
        if (delivery === "image-volume") {
          // The real agent, from the attacker's image, ran every task with /bin/true: the
          // runner, which proved it the container's own agent, reports a success.
          expect(runner?.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
          expect(decodeReport(runner?.state?.terminated?.message ?? "", 1).reason).toBe("Succeeded");
        } else {
          // The runner's postStart hook cannot place the agent on a read-only image volume: the
          // kubelet stops the runner (which, when it is up by then, reports Cancelled), and the
          // task container starts the attacker's agent, which no runner answers.
          expect(runner?.state?.terminated?.exitCode).not.toBe(0);
          const { items } = await core.listNamespacedEvent({
            namespace: pod.metadata?.namespace ?? "",
            fieldSelector: `involvedObject.uid=${pod.metadata?.uid},reason=FailedPostStartHook`,
          });
          expect(items.map((e) => e.involvedObject.fieldPath)).toContain("spec.containers{runner}");
        }
      },
    },
    {
      kind: "an init container",
      change: (pod) => {
        // It plants the task's result in the workspace before any task runs.
        pod.spec.initContainers = [
          {
            name: "plant",
            image: inject("runnerImage"),
            command: ["/bin/sh", "-c", "mkdir -p /workspace/.cache && touch /workspace/.cache/built"],
            volumeMounts: [{ name: "workspace", mountPath: "/workspace" }],
            securityContext: {
              allowPrivilegeEscalation: false,
              capabilities: { drop: ["ALL"] },
              runAsUser: 1000,
              runAsGroup: 1000,
            },
          },
        ];
      },
      says: "spec.initContainers is [",
      forged: (pod) => {
        const runner = runnerOfPod(pod);
        expect(runner?.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
        expect(decodeReport(runner?.state?.terminated?.message ?? "", 1).reason).toBe("Succeeded");
      },
    },
    {
      kind: "a task container as the runner's user",
      change: (pod) => {
        const task = pod.spec.containers.find((c) => c.name === "task-1") as Json;
        task.securityContext = { ...(task.securityContext as Json), runAsUser: 65532 };
      },
      says: "spec.containers[task-1].securityContext.runAsUser is 65532, the controller builds 1000",
      forged: (pod) => {
        // The runner proves each agent's user: it refused task-1's, and ran no task.
        const report = decodeReport(runnerOfPod(pod)?.state?.terminated?.message ?? "", 1);
        expect(report.tasks[0]?.m).toBe(
          `container task-1 (image ${inject("runnerImage")}): its agent did not connect; the task was not run`,
        );
      },
    },
    {
      kind: "Kueue's managed label and a node selector, though the run names no queue",
      change: (pod) => {
        (pod.metadata as { labels: Record<string, string> }).labels["kueue.x-k8s.io/managed"] = "true";
        pod.spec.nodeSelector = { "kubernetes.io/os": "linux" };
      },
      says: 'metadata.labels.kueue.x-k8s.io/managed is "true", the controller sets none',
      forged: (pod) => {
        // It ran the run's own task, where its creator chose: the outcome is true, the pod not the run's.
        expect(decodeReport(runnerOfPod(pod)?.state?.terminated?.message ?? "", 1).reason).toBe("TaskFailed");
      },
    },
    {
      ...RUNNER_CPU_LIMIT,
      forged: (pod) => {
        expect(decodeReport(runnerOfPod(pod)?.state?.terminated?.message ?? "", 1).reason).toBe("TaskFailed");
      },
    },
  ];

  describe(`with the agent delivered by ${delivery}`, () => {
    let controller: RunningController | undefined;

    beforeAll(async () => {
      foreignAgent = await importForeignAgentImage(inject("kubeconfig"), log);
      for (const { kind } of FOREIGN) {
        const ns = await createTestNamespace(core, "rn-foreign", RESTRICTED);
        namespaces.push(ns);
        caseNamespace.set(kind, ns);
        const policy = {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: "PlaybookPolicy",
          metadata: { name: "default", namespace: ns },
          spec: { maximums: { runningPlaybooks: 1 } },
        };
        await kubectl(["apply", "--server-side", "-f", "-"], { input: JSON.stringify(policy) });
      }
      controller = startController(namespaces.slice(), { ...realNode.controller, agentDelivery: setting });
      controllers.push(controller);
    });
    afterAll(async () => {
      await Promise.all(controllers.map((c) => c.stop()));
      await Promise.all(namespaces.map((ns) => deleteTestNamespace(core, ns)));
    });

    it.concurrent.each(FOREIGN)(
      "a pod under the run's name with $kind, made while the run waits for its slot, runs and is never read: the run takes the alternate name and ends TaskFailed",
      async ({ kind, change, says, forged }) => {
        const ns = caseNamespace.get(kind) as string;
        const running = controller as RunningController;
        await createPlaybook(ns, "holder", HOLDER);
        await waitForPlaybook(
          ns,
          "holder",
          "to run",
          (p) => p.status?.phase === "Running",
          realNode.finishMs,
        );
        const created = await createPlaybook(ns, "gate", GATE);
        const uid = created.metadata.uid;
        await waitForPlaybook(
          ns,
          "gate",
          "to wait for a slot",
          (p) => condition(p, "Succeeded")?.reason === "Queued",
        );

        // The pod the controller would build for gate's first attempt, with one field changed.
        const { settings, rules } = controllerInputs(running, ns);
        const built = await podTheControllerBuilds(ns, "gate", settings, rules);
        const agentVolume = (built.spec.volumes as Json[]).find((v) => v.name === "playbook-agent");
        expect(agentVolume?.[delivery === "image-volume" ? "image" : "emptyDir"]).toBeDefined();
        const pod = structuredClone(built) as unknown as Json;
        change(pod);
        const made = await core.createNamespacedPod({ namespace: ns, body: pod as unknown as V1Pod });

        // It runs on the kubelet to its runner's end, while the holder keeps the slot.
        const ended = await eventually(
          "the foreign pod's runner to end",
          async () => {
            const now = await core.readNamespacedPod({ namespace: ns, name: "gate-1" });
            return runnerOfPod(now)?.state?.terminated ? now : undefined;
          },
          realNode.finishMs,
        );
        log(`${delivery}, ${kind}: the foreign pod's runner ${JSON.stringify(runnerOfPod(ended)?.state)}`);

        // Never read: the run still waits for its slot, and a Warning names the pod and the field.
        // Until the controller has judged it: it warned about it, or (believing it) took it.
        const seen = await eventually("the foreign pod judged", async () => {
          const { items } = await core.listNamespacedEvent({
            namespace: ns,
            fieldSelector: `involvedObject.uid=${uid},reason=ForeignPod`,
          });
          const playbook = await getPlaybook(ns, "gate");
          return items[0] || playbook.status?.podName ? { warning: items[0], playbook } : undefined;
        });
        const shown = JSON.stringify(seen.playbook.status);
        expect(condition(seen.playbook, "Succeeded"), shown).toMatchObject({
          status: "Unknown",
          reason: "Queued",
        });
        expect(seen.playbook.status?.podName, shown).toBeUndefined();
        expect(seen.warning?.type).toBe("Warning");
        expect(seen.warning?.message).toContain(
          "Pod gate-1 carries this Playbook's controller reference, but the controller did not create it (it is not built as the controller builds its attempt: ",
        );
        expect(seen.warning?.message).toContain(says);
        // What it would have made the run report.
        await forged(ended);
        expect((await getPlaybook(ns, "holder")).status?.phase).toBe("Running");

        // The slot frees: the run makes its own pod under the alternate name, and its task decides.
        await patchSpec(ns, "holder", { cancel: true });
        const finished: PlaybookObject = await waitForFinished(ns, "gate", realNode.finishMs * 2);
        const alternate = `gate-1-${uid.replace(/-/g, "").slice(0, 8)}`;
        expect(condition(finished, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
        expect(finished.status?.tasks?.[0]).toMatchObject({ name: "build", phase: "Failed", exitCode: 7 });
        expect(finished.status).toMatchObject({ podName: alternate, podAttempts: 1 });
        expect(finished.status?.podUID).not.toBe(made.metadata?.uid);
        expect(taskLines(await kubectlLogs(ns, alternate), "build")).toEqual(["building"]);
        // The foreign pod is left as it was: not deleted, not adopted.
        const still = await core.readNamespacedPod({ namespace: ns, name: "gate-1" });
        expect(still.metadata?.uid).toBe(made.metadata?.uid);
        expect(still.metadata?.deletionTimestamp).toBeUndefined();
      },
      CASE_MS,
    );

    it.concurrent(
      "the controller's own pod, made before its record by a controller no longer running, is adopted and runs to its outcome",
      async () => {
        const ns = await createTestNamespace(core, "rn-own-adopt", RESTRICTED);
        namespaces.push(ns);
        await createPlaybook(ns, "own", { ceiling: "3m", tasks: [{ name: "own", run: 'echo "ran"' }] });
        // What a controller stopped between its create and its record left: its own decision's pod.
        const overrides = { ...realNode.controller };
        const settings = startedControllerSettings([ns], delivery, overrides);
        const made = await core.createNamespacedPod({
          namespace: ns,
          body: (await podTheControllerBuilds(ns, "own", settings)) as unknown as V1Pod,
        });
        controllers.push(startController([ns], { ...overrides, agentDelivery: setting }));
        const finished = await waitForFinished(ns, "own", realNode.finishMs * 2);
        expect(condition(finished, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
        expect(finished.status).toMatchObject({
          podName: "own-1",
          podUID: made.metadata?.uid,
          podAttempts: 1,
        });
        expect(taskLines(await runnerLogs(ns, "own"), "own")).toEqual(["ran"]);
        const { items } = await core.listNamespacedEvent({
          namespace: ns,
          fieldSelector: "reason=ForeignPod",
        });
        expect(items).toEqual([]);
        expect((await podsOf(ns, "own")).map((p) => p.metadata?.name)).toEqual(["own-1"]);
      },
      CASE_MS,
    );
  });
}

/** The runner's log of one pod, by its name. */
async function kubectlLogs(ns: string, pod: string): Promise<string> {
  const { stdout } = await kubectl(["-n", ns, "logs", pod, "-c", "runner"]);
  return stdout;
}
