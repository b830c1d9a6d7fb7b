// A pod the controller did not create is never the run's (issue 33 item 1), on the real API
// server: anyone who may create pods in the namespace can give one the run's label, a controller
// ownerReference to the Playbook and the real pod's plan annotation, and end it with a runner
// report of success. The controller reads only the pod whose UID it recorded (status.podUID),
// names the forged one in a Warning event once, and never counts it as an attempt.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  MANUAL,
  reportFor,
  reportPod,
  SCRIPTED_NODE_NAME,
  scheduledPod,
  startPod,
} from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  getPlaybook,
  type RunningController,
  reconciledAgain,
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

const LONG_RUN = { ceiling: "60s", killGrace: "1s", tasks: [{ name: "deploy", run: "make deploy" }] };

/** The issue's forged pod: the real pod's label, owner and plan, its runner from another image. */
function forgedPod(real: V1Pod, name: string, attempt: number): V1Pod {
  return {
    metadata: {
      name,
      labels: { ...real.metadata?.labels, "playbook.dev/pod-attempt": String(attempt) },
      annotations: {
        "playbook.dev/plan": real.metadata?.annotations?.["playbook.dev/plan"] ?? "",
        // The scripted node leaves it alone: the test writes its whole life.
        [MANUAL]: "true",
      },
      ownerReferences: real.metadata?.ownerReferences ?? [],
    },
    spec: {
      nodeName: SCRIPTED_NODE_NAME,
      restartPolicy: "Never",
      containers: [{ name: "runner", image: "attacker/anything:1", command: ["sh", "-c", "true"] }],
    },
  };
}

describe("a pod the controller did not create", () => {
  it("is not believed: a forged pod's Succeeded report does not end the run, and a Warning names it once", async () => {
    const ns = await createTestNamespace(core, "pb-forged-pod");
    namespaces.push(ns);
    const running = startController([ns]);
    controllers.push(running);
    await createPlaybook(ns, "deploy-gate", LONG_RUN);
    const real = await scheduledPod(core, ns, "deploy-gate-1");
    await startPod(core, real);
    await waitForPlaybook(ns, "deploy-gate", "to run", (p) => p.status?.phase === "Running", 30_000);

    const forged = await core.createNamespacedPod({
      namespace: ns,
      body: forgedPod(real, "deploy-gate-9", 9),
    });
    await startPod(core, forged);
    // Its runner "ends on its own" with a report of success for the run's own plan.
    await reportPod(core, forged, reportFor(forged, { reason: "Succeeded" }));

    // Until the controller has seen the forged pod: it warned about it, or (believing it) ended the run.
    const seen = await eventually("the forged pod seen", async () => {
      const playbook = await getPlaybook(ns, "deploy-gate");
      if (condition(playbook, "Succeeded")?.status !== "Unknown") return playbook;
      const { items } = await core.listNamespacedEvent({ namespace: ns });
      return items.some((e) => e.reason === "ForeignPod") ? playbook : undefined;
    });
    expect(condition(seen, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Running" });
    const events = await eventsOf(ns, "deploy-gate", ["ForeignPod"]);
    const warning = events.filter((e) => e.reason === "ForeignPod");
    expect(warning).toHaveLength(1);
    expect(warning[0]?.type).toBe("Warning");
    expect(warning[0]?.message).toMatch(
      /^Pod deploy-gate-9 carries this Playbook's controller reference, but the controller did not create it \(.+\): it is not read, adopted or counted$/,
    );
    // Whatever passes come, the forged pod decides nothing and counts as no attempt.
    for (let i = 0; i < 3; i++) await reconciledAgain(running, ns);
    const still = await getPlaybook(ns, "deploy-gate");
    expect(condition(still, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Running" });
    expect(still.status).toMatchObject({
      phase: "Running",
      podName: "deploy-gate-1",
      podUID: real.metadata?.uid,
      podAttempts: 1,
    });
    // Named once, not on every pass.
    const again = (await eventsOf(ns, "deploy-gate", ["ForeignPod"])).filter(
      (e) => e.reason === "ForeignPod",
    );
    expect(again).toHaveLength(1);
    expect(again[0]?.count ?? 1).toBe(1);

    // The real pod's own report is the run's outcome.
    await reportPod(
      core,
      await core.readNamespacedPod({ namespace: ns, name: "deploy-gate-1" }),
      reportFor(real, { reason: "TaskFailed" }),
    );
    const finished = await waitForFinished(ns, "deploy-gate", 30_000);
    expect(condition(finished, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(finished.status?.podAttempts).toBe(1);
  });
});
