// The controller's life around a run: the pod it creates, the writes it spares, restarts,
// replicas, the Lease and the pods it cleans up. The pods are bound to the scripted node (no
// kubelet runs them): each test writes its pod's life through the API.
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  exceedDeadline,
  reportFor,
  reportPod,
  scheduledPod,
  scriptManually,
  startPod,
} from "../harness/scripted-node.js";
import { type FreezableProxy, startFreezableProxy } from "./freezable-proxy.js";
import {
  clients,
  condition,
  counterValue,
  createPlaybook,
  eventsOf,
  eventually,
  kubectl,
  podsOf,
  type RunningController,
  reconciledAgain,
  reconcilePasses,
  runsCounted,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core, kubeConfig } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];
const proxies: FreezableProxy[] = [];

async function namespace(prefix: string, labels: Record<string, string> = {}) {
  const name = await createTestNamespace(core, prefix, labels);
  namespaces.push(name);
  return name;
}

function controllerFor(
  ns: string[],
  overrides: Record<string, string | boolean> = {},
  through?: FreezableProxy,
) {
  const running = startController(ns, overrides, through?.kubeConfig);
  controllers.push(running);
  return running;
}

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

/** The run's pod started, seen Running by the controller. */
async function started(ns: string, name: string, attempt = 1): Promise<V1Pod> {
  const pod = await scheduledPod(core, ns, `${name}-${attempt}`);
  await startPod(core, pod);
  await waitForPlaybook(ns, name, "to be Running", (p) => p.status?.phase === "Running", 30_000);
  return pod;
}

/** The run's pod started and its runner reported every task Succeeded. */
async function succeeds(ns: string, name: string): Promise<V1Pod> {
  const pod = await started(ns, name);
  return reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
}

describe("in a namespace enforcing the restricted Pod Security Standard", () => {
  let ns: string;
  let running: RunningController;
  beforeAll(async () => {
    ns = await namespace("pb-restricted", { "pod-security.kubernetes.io/enforce": "restricted" });
    running = controllerFor([ns]);
  });

  it("a valid Playbook gets exactly one pod with the expected deadline, owner and security context", async () => {
    const created = await createPlaybook(ns, "nightly", {
      ceiling: "2m",
      killGrace: "3s",
      tasks: [{ name: "build", run: "make" }],
    });
    // Created at all: the API server's restricted admission took the pod as the controller built it.
    await succeeds(ns, "nightly");
    const playbook = await waitForFinished(ns, "nightly", 30_000);
    expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
    const pods = await podsOf(ns, "nightly");
    expect(pods.map((p) => p.metadata?.name)).toEqual(["nightly-1"]);
    const [pod] = pods;
    expect(pod?.spec?.activeDeadlineSeconds).toBe(120 + 3 + 5);
    expect(pod?.spec?.terminationGracePeriodSeconds).toBe(3 + 5);
    expect(pod?.spec?.restartPolicy).toBe("Never");
    expect(pod?.spec?.shareProcessNamespace).toBe(true);
    expect(pod?.metadata?.ownerReferences).toEqual([
      {
        apiVersion: "playbook.dev/v1alpha1",
        kind: "Playbook",
        name: "nightly",
        uid: created.metadata.uid,
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    expect(pod?.metadata?.labels).toMatchObject({
      "playbook.dev/name": "nightly",
      "playbook.dev/pod-attempt": "1",
      "app.kubernetes.io/managed-by": "playbook-controller",
    });
    expect(pod?.spec?.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 65535,
      runAsGroup: 65535,
      seccompProfile: { type: "RuntimeDefault" },
    });
    // The runner, then the task container the agent runs the task in; every one restricted.
    expect(pod?.spec?.containers.map((c) => c.name)).toEqual(["runner", "task-1"]);
    for (const container of [...(pod?.spec?.initContainers ?? []), ...(pod?.spec?.containers ?? [])]) {
      expect(container.securityContext).toMatchObject({
        allowPrivilegeEscalation: false,
        capabilities: { drop: ["ALL"] },
      });
    }
    const container = pod?.spec?.containers[0];
    expect(container?.securityContext?.runAsUser).toBe(65532);
    expect(container?.terminationMessagePolicy).toBe("File");
    const reasons = (await eventsOf(ns, "nightly", ["PodCreated", "RunSucceeded"])).map((e) => e.reason);
    expect(reasons).toEqual(expect.arrayContaining(["PodCreated", "RunSucceeded"]));
    await runsCounted(running, ns, 1);
  });
});

describe("status writes", () => {
  it("are one per change: none when nothing changed, none for a finished run", async () => {
    const ns = await namespace("pb-writes");
    const running = controllerFor([ns]);
    await createPlaybook(ns, "counted", { ceiling: "1m", tasks: [{ name: "a", run: "make" }] });
    await succeeds(ns, "counted");
    await waitForFinished(ns, "counted", 30_000);
    await eventually("the run counted", async () =>
      (await counterValue(running, "runsTotal")) === 1 ? true : undefined,
    );
    const afterRun = await counterValue(running, "statusWrites");
    // Running, with the run's start, pod and plan riding on it (the pod ran within 3 s of its
    // create, so no Pending was written), and Succeeded.
    expect(afterRun).toBe(2);
    for (let i = 0; i < 3; i++) await reconciledAgain(running, ns);
    expect(await counterValue(running, "statusWrites")).toBe(afterRun);
    expect(await counterValue(running, "runsTotal")).toBe(1);
  });
});

describe("a run that has not started", () => {
  it("shows Pending in kubectl get's PHASE and REASON before the controller wrote anything", async () => {
    const ns = await namespace("pb-unwritten");
    await createPlaybook(ns, "early", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    // No controller watches this namespace yet: what a watcher's first row shows.
    const table = (await kubectl(["-n", ns, "get", "pb", "early", "--no-headers"])).stdout;
    expect(table.trim().split(/\s+/).slice(0, 3)).toEqual(["early", "Pending", "Pending"]);
    const running = controllerFor([ns]);
    await succeeds(ns, "early");
    const finished = await waitForFinished(ns, "early", 30_000);
    expect(condition(finished, "Succeeded")?.reason).toBe("Succeeded");
    // The controller took the schema's default for no status at all: its own conditions, its own times.
    expect(condition(finished, "Succeeded")?.lastTransitionTime).not.toMatch(/^1970-/);
    await runsCounted(running, ns, 1);
    expect(await counterValue(running, "statusWrites")).toBeLessThanOrEqual(3);
  });

  it("says within seconds what holds its pod, in the scheduler's words", async () => {
    const ns = await namespace("pb-held");
    const running = controllerFor([ns]);
    const t0 = performance.now();
    await createPlaybook(ns, "held", {
      ceiling: "5m",
      resources: { requests: { cpu: "1000" } },
      tasks: [{ name: "never", run: "true" }],
    });
    const held = await waitForPlaybook(
      ns,
      "held",
      "to say why its pod waits",
      (p) => /Unschedulable/.test(condition(p, "Succeeded")?.message ?? ""),
      30_000,
    );
    expect(performance.now() - t0).toBeLessThan(10_000);
    expect(held.status?.phase).toBe("Pending");
    expect(condition(held, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Pending" });
    expect(condition(held, "Succeeded")?.message).toMatch(
      /^pod held-1 is pending \(attempt 1\): Unschedulable: 0\/1 nodes are available: 1 Insufficient cpu/,
    );
    // Written once for the hold, not again by the passes that see it still held.
    const writes = await counterValue(running, "statusWrites");
    for (let i = 0; i < 3; i++) await reconciledAgain(running, ns);
    const [pod] = await podsOf(ns, "held");
    expect(pod?.status?.conditions?.find((c) => c.type === "PodScheduled")).toMatchObject({
      status: "False",
      reason: "Unschedulable",
    });
    expect(await counterValue(running, "statusWrites")).toBe(writes);
  });
});

describe("a pod the API server will not create", () => {
  it("leaves the run Pending with the server's reason, then ends it when the ceiling passes", async () => {
    const ns = await namespace("pb-nosa");
    // Allowed, so that the API server (not the controller's allowlist) is what refuses it.
    controllerFor([ns], { allowedServiceAccounts: "missing" });
    await createPlaybook(ns, "nosa", {
      ceiling: "8s",
      serviceAccountName: "missing",
      tasks: [{ name: "a", run: "true" }],
    });
    const pending = await waitForPlaybook(
      ns,
      "nosa",
      "to say why its pod is not there",
      (p) => /missing/.test(condition(p, "Succeeded")?.message ?? ""),
      30_000,
    );
    expect(pending.status?.phase).toBe("Pending");
    expect(condition(pending, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Pending" });
    expect(condition(pending, "Succeeded")?.message).toMatch(
      /could not create pod nosa-1: 403 .*serviceaccount/,
    );
    const events = await eventsOf(ns, "nosa", ["FailedCreate"]);
    expect(events.find((e) => e.reason === "FailedCreate")?.message).toMatch(
      /serviceaccount "missing" not found/,
    );
    const playbook = await waitForFinished(ns, "nosa", 60_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "RunCeiling" });
    expect(condition(playbook, "Succeeded")?.message).toMatch(
      /ceiling .* passed before its pod could be created/,
    );
    expect(
      Date.parse(playbook.status?.completionTime ?? "") - Date.parse(playbook.status?.startTime ?? ""),
    ).toBeLessThan(30_000);
    expect(await podsOf(ns, "nosa")).toEqual([]);
  });
});

describe("a controller restarted in the middle of a run", () => {
  it("creates no second pod and the run still settles", async () => {
    const ns = await namespace("pb-restart");
    const first = controllerFor([ns]);
    await createPlaybook(ns, "survivor", { ceiling: "1m", tasks: [{ name: "a", run: "make" }] });
    const pod = await started(ns, "survivor");
    await first.stop();
    const second = controllerFor([ns]);
    // The new controller has looked at the running pod (a whole pass) before the runner reports.
    await eventually("the second controller to lead", async () =>
      (await second.controller.metrics.isLeader.get()).values[0]?.value === 1 ? true : undefined,
    );
    await reconciledAgain(second, ns);
    expect((await podsOf(ns, "survivor")).map((p) => p.metadata?.name)).toEqual(["survivor-1"]);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const playbook = await waitForFinished(ns, "survivor", 30_000);
    expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
    expect(playbook.status?.podAttempts).toBe(1);
    expect((await podsOf(ns, "survivor")).map((p) => p.metadata?.name)).toEqual(["survivor-1"]);
    await runsCounted(second, ns, 1);
  });
});

describe("two controller replicas", () => {
  it("never both reconcile, and the standby takes over when the leader stops", async () => {
    const ns = await namespace("pb-replicas");
    const a = controllerFor([ns]);
    const b = controllerFor([ns]);
    const names = ["one", "two", "three", "four"];
    await Promise.all(
      names.map((n) => createPlaybook(ns, n, { ceiling: "1m", tasks: [{ name: "a", run: "make" }] })),
    );
    await Promise.all(names.map((n) => succeeds(ns, n)));
    for (const n of names) await waitForFinished(ns, n, 30_000);
    const writes = [await counterValue(a, "statusWrites"), await counterValue(b, "statusWrites")];
    expect(writes.filter((w) => w === 0)).toHaveLength(1);
    const [leader, standby] = writes[0] === 0 ? [b, a] : [a, b];
    // Every pass the leader makes after the runs finished has made its pods, if it makes any.
    await reconciledAgain(leader, ns);
    for (const n of names) {
      expect((await podsOf(ns, n)).map((p) => p.metadata?.name)).toEqual([`${n}-1`]);
      expect((await waitForFinished(ns, n)).status?.podAttempts).toBe(1);
    }
    expect(await reconcilePasses(standby)).toBe(0);
    const coordination = kubeConfig.makeApiClient(
      (await import("@kubernetes/client-node")).CoordinationV1Api,
    );
    const leaseName = `playbook-controller-${ns}`;
    expect(
      (await coordination.readNamespacedLease({ namespace: ns, name: leaseName })).spec?.holderIdentity,
    ).toBe(leader.identity);

    await leader.stop();
    await eventually("the standby to hold the Lease", async () => {
      const lease = await coordination.readNamespacedLease({ namespace: ns, name: leaseName });
      return lease.spec?.holderIdentity === standby.identity ? true : undefined;
    });
    await createPlaybook(ns, "five", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await succeeds(ns, "five");
    const playbook = await waitForFinished(ns, "five", 30_000);
    expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
    await runsCounted(standby, ns, 1);
  });
});

describe("a leader whose connection to the API server freezes", () => {
  it("stops reconciling within its renew deadline, and the standby takes over", async () => {
    const ns = await namespace("pb-frozen");
    const proxy = await startFreezableProxy(kubeConfig);
    proxies.push(proxy);
    const leader = controllerFor([ns], {}, proxy);
    const coordination = kubeConfig.makeApiClient(
      (await import("@kubernetes/client-node")).CoordinationV1Api,
    );
    const leaseName = `playbook-controller-${ns}`;
    const holder = async () =>
      (await coordination.readNamespacedLease({ namespace: ns, name: leaseName })).spec?.holderIdentity;
    await eventually("the first replica to lead", async () =>
      (await holder().catch(() => undefined)) === leader.identity ? true : undefined,
    );
    const standby = controllerFor([ns]);
    await createPlaybook(ns, "before", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await succeeds(ns, "before");
    await waitForFinished(ns, "before", 30_000);
    await runsCounted(leader, ns, 1);

    proxy.freeze();
    const frozenAt = Date.now();
    // renewDeadline is 3s: a renew hanging on the frozen connection must not hold the lead past it.
    const leading = async () => (await leader.controller.metrics.isLeader.get()).values[0]?.value;
    const stoppedAfter = await eventually(
      "the frozen leader to stop leading",
      async () => ((await leading()) === 0 ? Date.now() - frozenAt : undefined),
      20_000,
    );
    expect(stoppedAfter).toBeLessThan(3000 + 1500);
    expect(
      await leader.done.then(
        () => "resolved",
        (error: Error) => error.message,
      ),
    ).toBe("lost the leader Lease");
    const leaderWrites = await counterValue(leader, "statusWrites");

    await eventually("the standby to hold the Lease", async () =>
      (await holder()) === standby.identity ? true : undefined,
    );
    await createPlaybook(ns, "after", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await succeeds(ns, "after");
    const playbook = await waitForFinished(ns, "after", 30_000);
    expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
    await runsCounted(standby, ns, 1);
    expect(await counterValue(leader, "statusWrites")).toBe(leaderWrites);
  });
});

describe("pods of finished runs", () => {
  it("are kept for their logs until ttlSecondsAfterFinished, then deleted", async () => {
    const ns = await namespace("pb-ttl");
    controllerFor([ns]);
    await createPlaybook(ns, "brief", {
      ceiling: "1m",
      ttlSecondsAfterFinished: 3,
      tasks: [{ name: "a", run: "echo bye" }],
    });
    await succeeds(ns, "brief");
    await waitForFinished(ns, "brief", 30_000);
    expect(await podsOf(ns, "brief")).toHaveLength(1);
    await eventually(
      "the pod to be deleted",
      async () => ((await podsOf(ns, "brief")).length === 0 ? true : undefined),
      30_000,
    );
    const playbook = await waitForFinished(ns, "brief");
    expect(condition(playbook, "Succeeded")?.reason).toBe("Succeeded");
  });
});

describe("examples/cancel-me.yaml", () => {
  it("ends Cancelled as its comment says: the runner reports the task stopped within the grace", async () => {
    const ns = await namespace("pb-example");
    controllerFor([ns]);
    await kubectl(["-n", ns, "apply", "-f", path.join(repoRoot(), "examples", "cancel-me.yaml")]);
    const pod = await scheduledPod(core, ns, "cancel-me-1");
    // The test, not the node, ends the pod at the lowered deadline: with the runner's report.
    await scriptManually(core, pod);
    await started(ns, "cancel-me");
    const deadline = pod.spec?.activeDeadlineSeconds ?? 0;
    await kubectl(["-n", ns, "patch", "pb", "cancel-me", "--type=merge", "-p", '{"spec":{"cancel":true}}']);
    await eventually("the controller to lower the pod's deadline", async () => {
      const current = await core.readNamespacedPod({ namespace: ns, name: "cancel-me-1" });
      return (current.spec?.activeDeadlineSeconds ?? deadline) < deadline ? true : undefined;
    });
    await exceedDeadline(core, pod, reportFor(pod, { reason: "Cancelled", at: 0 }));
    const playbook = await waitForFinished(ns, "cancel-me", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(playbook.status?.phase).toBe("Cancelled");
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "wait", phase: "Cancelled", ending: "Exited" });
    // A cancel is what was asked for, not a failure; the grace it names is the task's killGrace.
    const events = await eventsOf(ns, "cancel-me", ["Cancelling", "RunCancelled"]);
    expect(events.filter((e) => e.reason === "RunCancelled").map((e) => e.type)).toEqual(["Normal"]);
    expect(events.map((e) => e.reason)).not.toContain("RunFailed");
    const cancelling = events.find((e) => e.reason === "Cancelling");
    expect(cancelling?.type).toBe("Normal");
    expect(cancelling?.message).toContain("killGrace 5s (spec.killGrace)");
    // Kept for its logs (what the task printed is the real node's and the runner's tests' to see).
    expect((await podsOf(ns, "cancel-me")).map((p) => p.metadata?.deletionTimestamp)).toEqual([undefined]);
  });
});
