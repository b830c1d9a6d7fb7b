// Playbooks through real Kueue on the real node (issue 43), the controller started with --kueue
// and reading Kueue's Workloads: the second of two runs under a quota that fits one is Queued with
// Kueue's own words (in its condition, `kubectl get pb` and `playbook submit --watch`) until the
// first ends, then runs and succeeds; a run Kueue never admits ends QueueTimeout with Kueue's last
// word, its pod and its Workload gone; a run without a queue name is the run it always was; and a
// CronPlaybook's run takes its template's queue.
import { spawn } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  kubectl,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "../controller/support.js";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace, deleteTestNamespace, isNotFound } from "../harness/cluster-test.js";
import { KUEUE_GROUP, KUEUE_VERSION, QUEUE_NAME_LABEL } from "../harness/kueue.js";
import { startTestKueue, type TestKueue } from "../harness/kueue-test.js";
import { waitFor } from "../harness/processes.js";

const { core } = clients();
let kueue: TestKueue | undefined;
let controller: RunningController | undefined;
let namespace = "";
let flavor = "";
let dir = "";

const PLAYBOOK = path.join(repoRoot(), "dist", "bin", "playbook.js");
const say = (message: string): void => {
  process.stderr.write(`[kueue-playbook] ${message}\n`);
};

/**
 * A LocalQueue whose ClusterQueue has `cpu` of quota. A run's pod asks 150m: the runner's 50m and
 * its one task container's 100m (the defaults; docs/kueue.md).
 */
async function localQueue(prefix: string, cpu: string): Promise<string> {
  if (!kueue) throw new Error("Kueue did not start");
  const clusterQueue = await kueue.createClusterQueue({ flavor, cpu, memory: "2Gi" }, prefix);
  return kueue.createLocalQueue(namespace, `${prefix}-queue`, clusterQueue);
}

async function workloadsIn(ns: string): Promise<{ metadata: { name: string } }[]> {
  if (!kueue) throw new Error("Kueue did not start");
  const list = (await kueue.custom.listNamespacedCustomObject({
    group: KUEUE_GROUP,
    version: KUEUE_VERSION,
    namespace: ns,
    plural: "workloads",
  })) as { items: { metadata: { name: string } }[] };
  return list.items;
}

function cli(args: string[]): { output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, [PLAYBOOK, ...args], {
    env: { ...process.env, KUBECONFIG: inject("kubeconfig") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let text = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { output: () => text, exited };
}

beforeAll(async () => {
  kueue = await startTestKueue();
  namespace = await createTestNamespace(core, "rn-kueue-pb", kueue.namespaceLabels);
  flavor = await kueue.createResourceFlavor("rn-kueue-pb");
  controller = startController([namespace], { ...realNode.controller, kueue: true });
  dir = path.join(repoRoot(), ".cluster", `kueue-playbook-${process.pid}`);
  mkdirSync(dir, { recursive: true });
});
afterAll(async () => {
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
  if (namespace)
    await waitFor(
      `namespace ${namespace} to be gone`,
      async () =>
        core.readNamespace({ name: namespace }).then(
          () => undefined,
          (error) => (isNotFound(error) ? true : undefined),
        ),
      { timeoutMs: 60_000, intervalMs: 200 },
    ).catch((error) => say(String(error)));
  await kueue?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("Playbooks through Kueue on the real node", () => {
  it("queues the second of two runs under a quota that fits one with Kueue's words until the first ends, then runs it", async () => {
    // Room for one 150m pod, not two.
    const queue = await localQueue("one", "200m");
    await createPlaybook(namespace, "first", {
      queueName: queue,
      ceiling: "3m",
      tasks: [{ name: "hold", run: "sleep 25; echo first done" }],
    });
    await waitForPlaybook(namespace, "first", "to run", (p) => p.status?.phase === "Running", 120_000);

    const file = path.join(dir, "second.yaml");
    writeFileSync(
      file,
      stringify({
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "Playbook",
        metadata: { name: "second" },
        spec: { queueName: queue, ceiling: "3m", tasks: [{ name: "after", run: "echo second ran" }] },
      }),
    );
    const watch = cli(["submit", "-f", file, "--watch", "-n", namespace]);
    const kueueWords = new RegExp(
      String.raw`^pod second-1 \(attempt 1\) waits for Kueue's admission in LocalQueue ${queue}: Pending: couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor ${flavor}, \S+ more needed; queued \S+ \(since \S+\)$`,
    );
    const queued = await waitForPlaybook(
      namespace,
      "second",
      "to be Queued with Kueue's words",
      (p) => kueueWords.test(condition(p, "Succeeded")?.message ?? ""),
      60_000,
    );
    say(`queued: ${condition(queued, "Succeeded")?.message}`);
    expect(condition(queued, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Queued" });
    expect(queued.status?.queuedSince).toBeTruthy();
    const first = await kubectl(["-n", namespace, "get", "playbook", "first", "-o", "json"]);
    expect(JSON.parse(first.stdout).status.phase).toBe("Running");
    const row = await kubectl(["-n", namespace, "get", "pb", "second"]);
    expect(row.stdout).toMatch(/\nsecond\s+Pending\s+Queued\s/);

    const firstDone = await waitForFinished(namespace, "first", 120_000);
    expect(condition(firstDone, "Succeeded")?.reason).toBe("Succeeded");
    const second = await waitForFinished(namespace, "second", 120_000);
    expect(condition(second, "Succeeded")?.reason).toBe("Succeeded");
    expect(second.status).not.toHaveProperty("queuedSince");
    // Kueue admitted the second only after the first's pod ended: its task began after the first's ended.
    const firstEnd = Date.parse(firstDone.status?.tasks?.[0]?.completionTime ?? "");
    const secondStart = Date.parse(second.status?.tasks?.[0]?.startTime ?? "");
    expect(secondStart).toBeGreaterThan(firstEnd);

    expect(await watch.exited).toBe(0);
    say(`submit --watch printed:\n${watch.output()}`);
    // Once Kueue has spoken, each later Queued line carries its words (the reservation, the
    // admission before the gate goes), never "no word from Kueue".
    const afterWords = watch.output().split("couldn't assign flavors").slice(1).join("");
    expect(afterWords).not.toContain("has no word from Kueue yet");
    expect(watch.output()).toMatch(
      new RegExp(
        String.raw`playbook: ${namespace}/second Queued: pod second-1 \(attempt 1\) waits for Kueue's admission in LocalQueue ${queue}: Pending: couldn't assign flavors`,
      ),
    );
  }, 360_000);

  it("ends a run Kueue does not admit within queueTimeout QueueTimeout with Kueue's last word; its pod and Workload go", async () => {
    // Less than the pod asks: Kueue never admits it.
    const queue = await localQueue("never", "100m");
    await createPlaybook(namespace, "starved", {
      queueName: queue,
      queueTimeout: "15s",
      tasks: [{ name: "never", run: "echo never" }],
    });
    const ended = await waitForFinished(namespace, "starved", 90_000);
    say(`ended: ${condition(ended, "Succeeded")?.message}`);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "QueueTimeout" });
    expect(condition(ended, "LimitExceeded")).toMatchObject({ status: "True", reason: "QueueTimeout" });
    expect(condition(ended, "Succeeded")?.message).toMatch(
      new RegExp(
        String.raw`^pod starved-1 \(attempt 1\) was not admitted by Kueue within its 15s queue timeout \(spec\.queueTimeout\) in LocalQueue ${queue}; Kueue's last word: Pending: couldn't assign flavors to pod set main: `,
      ),
    );
    expect(ended.status?.limits?.queueTimeout).toMatchObject({ value: "15s", source: "spec" });
    expect(ended.status).not.toHaveProperty("queuedSince");
    await eventually("the run's pod to be gone", async () =>
      (await podsOf(namespace, "starved")).length === 0 ? true : undefined,
    );
    await eventually(
      "the run's Workload to be gone",
      async () => {
        const left = (await workloadsIn(namespace)).filter((w) => w.metadata.name.includes("starved"));
        return left.length === 0 ? true : undefined;
      },
      60_000,
    );
  }, 180_000);

  it("leaves a run without a queue name as it always was: no Kueue label, no gate, it runs", async () => {
    await createPlaybook(namespace, "plain", { tasks: [{ name: "hello", run: "echo plain" }] });
    const pod = await eventually("the run's pod", async () => (await podsOf(namespace, "plain"))[0]);
    const kueueKeys = Object.keys(pod.metadata?.labels ?? {}).filter((k) => k.startsWith("kueue.x-k8s.io/"));
    expect(kueueKeys).toEqual([]);
    expect(pod.spec?.schedulingGates ?? []).toEqual([]);
    const done = await waitForFinished(namespace, "plain", 120_000);
    expect(condition(done, "Succeeded")?.reason).toBe("Succeeded");
    expect(done.status).not.toHaveProperty("queue");
  }, 180_000);

  it("gives a CronPlaybook's run its template's queue: the run's pod carries Kueue's queue label", async () => {
    const queue = await localQueue("cron", "1");
    const cron = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "CronPlaybook",
      metadata: { name: "nightly", namespace },
      spec: {
        schedule: "0 3 * * *",
        template: { spec: { queueName: queue, tasks: [{ name: "hello", run: "echo from cron" }] } },
      },
    };
    const applied = await kubectl(["apply", "--server-side", "-f", "-"], { input: JSON.stringify(cron) });
    expect(applied.stderr).toBe("");
    const trigger = cli(["cron", "trigger", "nightly", "-n", namespace]);
    expect(await trigger.exited).toBe(0);
    say(`cron trigger: ${trigger.output().trim()}`);
    const run = await eventually("the CronPlaybook's run", async () => {
      const list = await kubectl([
        "-n",
        namespace,
        "get",
        "playbooks",
        "-l",
        "playbook.dev/cron-playbook=nightly",
        "-o",
        "json",
      ]);
      return (JSON.parse(list.stdout) as { items: { metadata: { name: string } }[] }).items[0];
    });
    const pod = await eventually(
      "the run's pod",
      async () => (await podsOf(namespace, run.metadata.name))[0],
    );
    expect(pod.metadata?.labels?.[QUEUE_NAME_LABEL]).toBe(queue);
    const done = await waitForFinished(namespace, run.metadata.name, 120_000);
    expect(condition(done, "Succeeded")?.reason).toBe("Succeeded");
    expect(done.status?.queue).toMatchObject({ name: queue, source: "spec" });
  }, 180_000);
});
