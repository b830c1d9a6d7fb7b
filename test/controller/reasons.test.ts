// Every reason of docs/design.md's table, produced by a real run: the controller, the real API server,
// the process node and the real pod runner.
import { rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace, deleteTestNamespace, losePod, marker } from "../harness/cluster-test.js";
import {
  describeReasonTable,
  killAll,
  type NodeValues,
  realNode,
  runnerOf,
  type TableContext,
} from "./reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  kubectl,
  kubectlResult,
  patchSpec,
  playbookManifest,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
const table = {} as TableContext;
/** The process node's values; realNode's when PLAYBOOK_TEST_NODE=real runs this file on a real kubelet. */
const node: NodeValues =
  inject("nodeKind") === "real"
    ? realNode
    : {
        // The process node starts a runner as a plain process in well under a second.
        taskStartMs: 30_000,
        finishMs: 60_000,
        // Short, so the table stays quick: a runner that starts as a process is well inside them.
        runCeilingSeconds: 3,
        podDeadlineCeilingSeconds: 6,
        controller: {},
      };

beforeAll(async () => {
  table.namespace = await createTestNamespace(core, "pb-reasons");
  table.controller = startController([table.namespace], node.controller);
});
afterAll(async () => {
  await table.controller?.stop();
  await deleteTestNamespace(core, table.namespace);
});

describeReasonTable("each reason of the Succeeded condition comes from a real run", node, table);

describe("a pod lost with its node", () => {
  it("is re-created with the ceiling still counted from the run's start, and the run settles", async () => {
    const mark = marker();
    const name = "lost-once";
    try {
      await createPlaybook(table.namespace, name, {
        ceiling: "90s",
        backoffLimit: 1,
        tasks: [{ name: "naps", run: `sleep 4 # ${mark}` }],
      });
      await runnerOf(mark);
      const [first] = await podsOf(table.namespace, name);
      const firstDeadline = first?.spec?.activeDeadlineSeconds ?? 0;
      // The test controller's default killGrace is 2s.
      expect(firstDeadline).toBe(90 + 2 + 5);
      await new Promise((resolve) => setTimeout(resolve, 2000));
      await losePod(table.namespace, `${name}-1`);
      const second = await eventually("pod lost-once-2", async () =>
        (await podsOf(table.namespace, name)).find((p) => p.metadata?.name === `${name}-2`),
      );
      expect(second.spec?.activeDeadlineSeconds).toBeLessThan(firstDeadline - 1);
      expect(second.metadata?.annotations?.["playbook.dev/run-start-time"]).toBe(
        first?.metadata?.annotations?.["playbook.dev/run-start-time"],
      );
      const playbook = await waitForFinished(table.namespace, name, 60_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
      const reasons = (await eventsOf(table.namespace, name, ["PodLost"])).map((e) => e.reason);
      expect(reasons).toContain("PodLost");
    } finally {
      killAll(mark);
    }
  });
});

describe.concurrent("a pod taken away while its run is live", () => {
  it.each([
    {
      how: "deleted (kubectl delete pod)",
      take: (pod: string) => kubectl(["-n", table.namespace, "delete", "pod", pod, "--wait=false"]),
    },
    {
      how: "evicted through the Eviction API",
      take: (pod: string) =>
        core.createNamespacedPodEviction({
          namespace: table.namespace,
          name: pod,
          body: {
            apiVersion: "policy/v1",
            kind: "Eviction",
            metadata: { name: pod, namespace: table.namespace },
          },
        }),
    },
  ])("is re-created when $how", async ({ how, take }) => {
    const mark = marker();
    const name = `taken-${how.split(" ")[0]}`;
    try {
      await createPlaybook(table.namespace, name, {
        ceiling: "90s",
        killGrace: "1s",
        tasks: [{ name: "naps", run: `sleep 3 # ${mark}` }],
      });
      await runnerOf(mark);
      await take(`${name}-1`);
      const playbook = await waitForFinished(table.namespace, name, 60_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
      const lost = (await eventsOf(table.namespace, name, ["PodLost"])).find((e) => e.reason === "PodLost");
      expect(lost?.message).toContain(`${name}-2`);
    } finally {
      killAll(mark);
    }
  });
});

describe("examples/cancel-me.yaml", () => {
  it("prints its stopping line when cancelled, and the pod keeps it for kubectl logs", async () => {
    const logs = () =>
      kubectl(["-n", table.namespace, "logs", "cancel-me-1"]).then(
        (r) => r.stdout,
        () => "",
      );
    await kubectl([
      "-n",
      table.namespace,
      "apply",
      "-f",
      path.join(repoRoot(), "examples", "cancel-me.yaml"),
    ]);
    await eventually("the task's first line", async () =>
      (await logs()).includes("waiting;") ? true : undefined,
    );
    await patchSpec(table.namespace, "cancel-me", { cancel: true });
    const playbook = await waitForFinished(table.namespace, "cancel-me", 60_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "wait", phase: "Cancelled", ending: "Exited" });
    expect(await logs()).toContain("saw the cancel file, stopping cleanly");
  });
});

describe("the largest Playbook the CRD admits", () => {
  it("runs to Succeeded: its plan reaches the pod", async () => {
    // 204800 characters as the CRD counts them: 96 per task plus its name and run script.
    const fill = (name: string, size: number) => ({ name, run: `: ${"x".repeat(size - 2)}` });
    const tasks = [
      fill("a", 65_536),
      fill("b", 65_536),
      fill("c", 65_536),
      fill("d", 204_800 - 3 * 65_633 - 97),
    ];
    await createPlaybook(table.namespace, "largest", { ceiling: "1m", tasks });
    const tooLarge = await kubectlResult(
      ["-n", table.namespace, "create", "-f", "-"],
      JSON.stringify(
        playbookManifest("too-large", {
          tasks: [...tasks.slice(0, 3), fill("d", 204_800 - 3 * 65_633 - 96)],
        }),
      ),
    );
    expect(tooLarge.stderr).toContain("spec.tasks is too large to run");
    const playbook = await waitForFinished(table.namespace, "largest", 60_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual([
      "Succeeded",
      "Succeeded",
      "Succeeded",
      "Succeeded",
    ]);
  });
});

// Process node only: these release their task through a flag file in this machine's /tmp, which a
// container on the real node cannot see.
describe("a running Playbook", () => {
  it("refuses an edit of its tasks and keeps running what its pod was started with", async () => {
    const mark = marker();
    const flag = path.join(os.tmpdir(), `release-${mark}`);
    const waits = { name: "waits", run: `until [ -e ${flag} ]; do sleep 0.2; done # ${mark}` };
    try {
      await createPlaybook(table.namespace, "running-edit", { ceiling: "1m", tasks: [waits] });
      await runnerOf(mark);
      await waitForPlaybook(table.namespace, "running-edit", "to have started", (p) => !!p.status?.startTime);
      const edit = await kubectlResult([
        ...["-n", table.namespace, "patch", "pb", "running-edit", "--type=merge"],
        ...["-p", JSON.stringify({ spec: { tasks: [waits, { name: "more", run: "true" }] } })],
      ]);
      expect(edit.stderr).toContain(
        "spec.tasks: Forbidden: spec.tasks cannot change once the run has started (status.startTime is set); only spec.cancel may",
      );
      writeFileSync(flag, "");
      const playbook = await waitForFinished(table.namespace, "running-edit", 60_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status?.tasks?.map((t) => t.name)).toEqual(["waits"]);
    } finally {
      killAll(mark);
      rmSync(flag, { force: true });
    }
  });
});

describe("a run whose spec changed after its pod started", () => {
  it("is decided against its pod's plan", async () => {
    // Admission freezes the spec once status.startTime is set; between the pod's creation and
    // that status write an edit still gets through, which this test makes by removing startTime
    // while no controller runs.
    const ns = await createTestNamespace(core, "pb-plan");
    const mark = marker();
    const flag = path.join(os.tmpdir(), `release-${mark}`);
    let second: RunningController | undefined;
    const first = startController([ns]);
    try {
      await createPlaybook(ns, "edited", {
        ceiling: "1m",
        tasks: [{ name: "waits", run: `until [ -e ${flag} ]; do sleep 0.2; done # ${mark}` }],
      });
      await runnerOf(mark);
      await first.stop();
      await kubectl([
        ...["-n", ns, "patch", "pb", "edited", "--subresource=status", "--type=json"],
        ...["-p", JSON.stringify([{ op: "remove", path: "/status/startTime" }])],
      ]);
      // A ceiling the controller refuses and a task the pod never heard of.
      await patchSpec(ns, "edited", {
        ceiling: "48h",
        tasks: [
          { name: "waits", run: `until [ -e ${flag} ]; do sleep 0.2; done # ${mark}` },
          { name: "later", run: "true" },
        ],
      });
      second = startController([ns]);
      writeFileSync(flag, "");
      const playbook = await waitForFinished(ns, "edited", 60_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status?.tasks?.map((t) => t.name)).toEqual(["waits"]);
      expect(playbook.status?.limits?.ceiling).toEqual({ value: "1m", source: "spec" });
      // The edit made generation 2; the run applied generation 1's spec.
      expect(playbook.metadata.generation).toBe(2);
      expect(playbook.status?.observedGeneration).toBe(1);
      expect(condition(playbook, "Succeeded")?.observedGeneration).toBe(1);
    } finally {
      killAll(mark);
      rmSync(flag, { force: true });
      await first.stop();
      await second?.stop();
      await deleteTestNamespace(core, ns);
    }
  });
});

describe("kubectl", () => {
  it("waits for --for=condition=Succeeded of a successful run", async () => {
    await createPlaybook(table.namespace, "waited", {
      ceiling: "1m",
      tasks: [{ name: "a", run: "sleep 1" }],
    });
    const { stdout } = await kubectl([
      "-n",
      table.namespace,
      "wait",
      "--for=condition=Succeeded",
      "playbook/waited",
      "--timeout=60s",
    ]);
    expect(stdout).toContain("condition met");
  });

  it("shows phase, reason, the task that ended the run and age in `kubectl get pb`", async () => {
    await createPlaybook(table.namespace, "shown", {
      ceiling: "1m",
      killGrace: "1s",
      tasks: [{ name: "slow", run: "sleep 30", timeout: "1s" }],
    });
    await waitForPlaybook(
      table.namespace,
      "shown",
      "to time out",
      (p) => condition(p, "Succeeded")?.status === "False",
    );
    const { stdout } = await kubectl(["-n", table.namespace, "get", "pb", "shown"]);
    const [header, row] = stdout.trim().split("\n");
    expect(header?.split(/\s+/)).toEqual(["NAME", "PHASE", "REASON", "TASK", "AGE"]);
    expect(row?.split(/\s+/).slice(0, 4)).toEqual(["shown", "Failed", "TaskTimeout", "slow"]);
  });
});
