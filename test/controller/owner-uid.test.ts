// A pod is a Playbook's by its controller reference's UID, never its name (issue 41 item 5), on
// the real API server with the scripted node. A Playbook deleted and made again under the same
// name is another owner: the old one's pod, still running, is neither read as the new run's nor
// counted for it (it holds a slot of its own). And a pod whose controller reference carries one
// Playbook's UID under another's name is the first one's, not the one it names: for the owner of
// the UID it is not the pod the controller builds (foreign: a Warning, never read, the alternate
// name), and the Playbook whose name it carries runs as if it were not there.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, describe, expect, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { reportFor, reportPod, scheduledPod, scriptManually, startPod } from "../harness/scripted-node.js";
import { podTheControllerBuilds, startedControllerSettings } from "./built-pods.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  getPlaybook,
  HOLD_FINALIZER,
  kubectl,
  type RunningController,
  releaseHeldPods,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core, custom } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];
/** Pods held by a test finalizer, released after the tests. */
const held: { namespace: string; name: string }[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await releaseHeldPods(held);
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

const RUN = { ceiling: "2m", killGrace: "1s", tasks: [{ name: "deploy", run: "make deploy" }] };
const alternateOf = (name: string, uid: string) => `${name}-1-${uid.replace(/-/g, "").slice(0, 8)}`;

async function namespaceCappedAt(prefix: string, runningPlaybooks?: number): Promise<string> {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  if (runningPlaybooks === undefined) return ns;
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace: ns },
    spec: { maximums: { runningPlaybooks } },
  };
  await kubectl(["apply", "--server-side", "-f", "-"], { input: JSON.stringify(policy) });
  return ns;
}

async function foreignPodEvents(ns: string, uid: string) {
  const { items } = await core.listNamespacedEvent({
    namespace: ns,
    fieldSelector: `involvedObject.uid=${uid},reason=ForeignPod`,
  });
  return items;
}

describe("a pod is a Playbook's by its controller's UID", () => {
  it("a deleted Playbook's pod, still running, is not the new Playbook of the same name's: never read, never counted for it", async () => {
    // Two slots: the old pod holds one of its own, the new run the other, and the next run waits.
    const ns = await namespaceCappedAt("pb-owner-again", 2);
    controllers.push(startController([ns]));
    const old = await createPlaybook(ns, "app", RUN);
    const oldPod = await startPod(core, await scheduledPod(core, ns, "app-1"));
    // The old pod runs on after its Playbook is gone (as on a slow node): the scripted node leaves
    // it to the test, and a finalizer keeps it after the garbage collector deletes it.
    await scriptManually(core, oldPod);
    await kubectl([
      ...["-n", ns, "patch", "pod", "app-1", "--type=merge", "-p"],
      JSON.stringify({ metadata: { finalizers: [HOLD_FINALIZER] } }),
    ]);
    held.push({ namespace: ns, name: "app-1" });
    await custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      plural: "playbooks",
      namespace: ns,
      name: "app",
    });
    await eventually("the old Playbook gone", async () =>
      getPlaybook(ns, "app").then(
        () => undefined,
        () => true,
      ),
    );
    const created = await createPlaybook(ns, "app", RUN);
    const uid = created.metadata.uid;
    expect(uid).not.toBe(old.metadata.uid);
    await createPlaybook(ns, "next", RUN);

    // The new run takes the second slot on its alternate name (the old pod holds the first name).
    const alternate = alternateOf("app", uid);
    const own = await startPod(core, await scheduledPod(core, ns, alternate));
    const running = await waitForPlaybook(ns, "app", "to run", (p) => p.status?.phase === "Running");
    expect(running.status).toMatchObject({ podName: alternate, podUID: own.metadata?.uid });
    // The old pod holds a slot of its own, not the new run's: the next run waits for one.
    await waitForPlaybook(
      ns,
      "next",
      "to wait for a slot",
      (p) => condition(p, "Succeeded")?.reason === "Queued",
    );
    const queued = (await eventsOf(ns, "next", ["Queued"])).find((e) => e.reason === "Queued");
    expect(queued?.message).toContain("Waiting for a slot: 2 of 2 running Playbooks");
    // The old pod's report of success is not the new run's: its own pod's decides.
    await reportPod(core, oldPod, reportFor(oldPod, { reason: "Succeeded" }));
    await reportPod(core, own, reportFor(own, { reason: "TaskFailed" }));
    const finished = await waitForFinished(ns, "app", 30_000);
    expect(condition(finished, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(finished.status).toMatchObject({ podName: alternate, podUID: own.metadata?.uid, podAttempts: 1 });
    expect(await foreignPodEvents(ns, uid)).toEqual([]);
    const lingering = await core.readNamespacedPod({ namespace: ns, name: "app-1" });
    expect(lingering.metadata?.ownerReferences?.[0]?.uid).toBe(old.metadata.uid);
  });

  it("a pod with one Playbook's UID under another's name is the first one's (foreign to it: not built so) and never the named one's", async () => {
    const ns = await namespaceCappedAt("pb-owner-name");
    const app = await createPlaybook(ns, "app", RUN);
    const other = await createPlaybook(ns, "other", RUN);
    // Before any controller runs: app's first pod as the controller builds it, but for the name
    // in its controller reference, which is the other Playbook's (app's UID kept).
    const built = await podTheControllerBuilds(ns, "app", startedControllerSettings([ns], "post-start"));
    const pod = structuredClone(built);
    const reference = pod.metadata.ownerReferences[0];
    if (!reference) throw new Error("the built pod has no owner reference");
    reference.name = "other";
    // Kubernetes' garbage collector finds its owner by name and UID too: to it the reference
    // dangles (other's UID is not app's), and it deletes the pod. A finalizer keeps it in sight.
    const body = { ...pod, metadata: { ...pod.metadata, finalizers: [HOLD_FINALIZER] } };
    const made = await core.createNamespacedPod({ namespace: ns, body: body as unknown as V1Pod });
    held.push({ namespace: ns, name: "app-1" });
    controllers.push(startController([ns], { agentDelivery: "post-start" }));

    // app finds it by its UID, and it is not the pod the controller builds: foreign, never read.
    const alternate = alternateOf("app", app.metadata.uid);
    // Until the controller has judged it: it warned about it, or (believing it) took it as app's.
    const seen = await eventually("app-1 judged", async () => {
      const [warning] = await foreignPodEvents(ns, app.metadata.uid);
      const playbook = await getPlaybook(ns, "app");
      const taken = playbook.status?.podName !== undefined && playbook.status.podName !== alternate;
      return warning || taken ? { warning, playbook } : undefined;
    }).catch(async (error: Error) => {
      const { status } = await getPlaybook(ns, "app");
      throw new Error(`${error.message}; app's status: ${JSON.stringify(status)}`, { cause: error });
    });
    expect(seen.playbook.status?.podName).not.toBe("app-1");
    expect(seen.warning?.message).toContain(
      "Pod app-1 carries this Playbook's controller reference, but the controller did not create it (it is not built as the controller builds its attempt: ",
    );
    expect(seen.warning?.message).toContain(
      "metadata.ownerReferences[0] is other, the controller builds app",
    );
    const own = await startPod(core, await scheduledPod(core, ns, alternate));
    await reportPod(core, own, reportFor(own, { reason: "TaskFailed" }));
    const appEnded = await waitForFinished(ns, "app", 30_000);
    expect(condition(appEnded, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(appEnded.status).toMatchObject({ podName: alternate, podUID: own.metadata?.uid, podAttempts: 1 });

    // The Playbook it names is not its owner: it runs on its own first pod, and warns of none.
    const otherPod = await startPod(core, await scheduledPod(core, ns, "other-1"));
    await reportPod(core, otherPod, reportFor(otherPod, { reason: "Succeeded" }));
    const otherEnded = await waitForFinished(ns, "other", 30_000);
    expect(condition(otherEnded, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(otherEnded.status).toMatchObject({ podName: "other-1", podUID: otherPod.metadata?.uid });
    expect(await foreignPodEvents(ns, other.metadata.uid)).toEqual([]);
    // Neither Playbook took it or made another pod under its name.
    const still = await core.readNamespacedPod({ namespace: ns, name: "app-1" });
    expect(still.metadata?.uid).toBe(made.metadata?.uid);
  });
});
