// Placement on the real kubelet and scheduler (issue 56 section 4): a node selector no node
// matches ends the run StartTimeout with the scheduler's reason; the same run with the node's own
// label runs; the namespace policy's enforced node selector and toleration are on the pod that
// runs; an allowed RuntimeClass (handler runc) is on the pod, which runs under it; a runtime class
// outside the policy's list ends InvalidSpec; podMetadata annotations reach the pod, and a reserved
// key is refused. (The refusals need no kubelet: test/controller/placement.test.ts has the rest.)
import { NodeV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  kubectlResult,
  podsOf,
  type RunningController,
  runnerLogs,
  startController,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";

const { core, kubeConfig } = clients();
/** A RuntimeClass whose handler is the node's runc, as a sandboxing class would name its own. */
const RUNTIME_CLASS = `rn-place-runc-${process.pid}`;
const TOLERATION = { key: "example.com/batch", operator: "Exists", effect: "NoSchedule" };
let open = "";
let governed = "";
let hostname = "";
let controller: RunningController | undefined;

beforeAll(async () => {
  const { items } = await core.listNode();
  hostname = items[0]?.metadata?.labels?.["kubernetes.io/hostname"] ?? "";
  expect(hostname).not.toBe("");
  await kubeConfig
    .makeApiClient(NodeV1Api)
    .createRuntimeClass({ body: { metadata: { name: RUNTIME_CLASS }, handler: "runc" } });
  open = await createTestNamespace(core, "rn-place");
  governed = await createTestNamespace(core, "rn-place-policy");
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace: governed },
    spec: {
      enforced: { nodeSelector: { "kubernetes.io/hostname": hostname }, tolerations: [TOLERATION] },
      allowedRuntimeClasses: [RUNTIME_CLASS],
    },
  };
  const applied = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(policy));
  expect(applied.stderr).toBe("");
  controller = startController([open, governed], realNode.controller);
});
afterAll(async () => {
  await controller?.stop();
  for (const ns of [open, governed]) if (ns) await deleteTestNamespace(core, ns);
  await kubeConfig
    .makeApiClient(NodeV1Api)
    .deleteRuntimeClass({ name: RUNTIME_CLASS })
    .catch(() => {});
});

const TASKS = [{ name: "hello", run: "echo placed-and-ran" }];

describe("placement on the real node", () => {
  it("ends a run whose node selector no node matches StartTimeout, naming the scheduler's reason", async () => {
    await createPlaybook(open, "nowhere", {
      startTimeout: "10s",
      nodeSelector: { "example.com/pool": "nowhere" },
      tasks: TASKS,
    });
    const ended = await waitForFinished(open, "nowhere", 90_000);
    const succeeded = condition(ended, "Succeeded");
    process.stderr.write(`[placement] nowhere: ${succeeded?.message}\n`);
    expect(succeeded).toMatchObject({ status: "False", reason: "StartTimeout" });
    expect(succeeded?.message).toMatch(
      /Unschedulable: 0\/1 nodes are available: .*didn't match Pod's node affinity\/selector/,
    );
  });

  it("runs the same Playbook with a node selector its node matches, annotations on the pod", async () => {
    await createPlaybook(open, "somewhere", {
      nodeSelector: { "kubernetes.io/hostname": hostname },
      podMetadata: { annotations: { "example.com/cost-center": "42" }, labels: { team: "payments" } },
      tasks: TASKS,
    });
    const ended = await waitForFinished(open, "somewhere", realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(await runnerLogs(open, "somewhere")).toContain("placed-and-ran");
    const [pod] = await podsOf(open, "somewhere");
    expect(pod?.spec?.nodeSelector).toEqual({ "kubernetes.io/hostname": hostname });
    expect(pod?.metadata?.annotations?.["example.com/cost-center"]).toBe("42");
    expect(pod?.metadata?.labels?.team).toBe("payments");
  });

  it("ends InvalidSpec for a reserved annotation key, naming it, with no pod", async () => {
    await createPlaybook(open, "reserved", {
      podMetadata: { annotations: { "playbook.dev/plan": "{}" } },
      tasks: TASKS,
    });
    const ended = await waitForFinished(open, "reserved", 60_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(ended, "Succeeded")?.message).toContain(
      'spec.podMetadata.annotations.playbook.dev/plan: "playbook.dev/plan" is reserved (playbook.dev/*)',
    );
    expect(await podsOf(open, "reserved")).toEqual([]);
  });

  it("puts the policy's enforced node selector and toleration and the allowed RuntimeClass on the pod, which runs under runc", async () => {
    await createPlaybook(governed, "sandboxed", { runtimeClassName: RUNTIME_CLASS, tasks: TASKS });
    const ended = await waitForFinished(governed, "sandboxed", realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(await runnerLogs(governed, "sandboxed")).toContain("placed-and-ran");
    const [pod] = await podsOf(governed, "sandboxed");
    expect(pod?.spec?.runtimeClassName).toBe(RUNTIME_CLASS);
    expect(pod?.spec?.nodeSelector).toEqual({ "kubernetes.io/hostname": hostname });
    expect(pod?.spec?.tolerations).toContainEqual(TOLERATION);
  });

  it.each([
    {
      name: "a runtime class outside allowedRuntimeClasses",
      spec: { runtimeClassName: "runc-unlisted" },
      says: `spec.runtimeClassName: "runc-unlisted" is not an allowed runtime class: PlaybookPolicy default allows ${RUNTIME_CLASS} (spec.allowedRuntimeClasses)`,
    },
    {
      name: "a node selector that conflicts with the enforced one",
      spec: { nodeSelector: { "kubernetes.io/hostname": "another-node" } },
      says: "spec.nodeSelector.kubernetes.io/hostname: kubernetes.io/hostname=another-node conflicts with kubernetes.io/hostname=",
    },
  ])("ends InvalidSpec for $name, naming it, with no pod", async ({ spec, says }) => {
    const name = `refused-${spec.runtimeClassName ? "class" : "selector"}`;
    await createPlaybook(governed, name, { ...spec, tasks: TASKS });
    const ended = await waitForFinished(governed, name, 60_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition(ended, "Succeeded")?.message).toContain(says);
    expect(await podsOf(governed, name)).toEqual([]);
  });
});
