// Every reason of DESIGN.md's table, produced by a real run: the controller, the real API server,
// the process node and the real pod runner.
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import {
  createTestNamespace,
  deleteTestNamespace,
  losePod,
  marker,
  processesWithMarker,
} from "../harness/cluster-test.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  kubectl,
  kubectlResult,
  type PlaybookObject,
  patchSpec,
  playbookManifest,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
let namespace: string;
let controller: RunningController;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-reasons");
  controller = startController([namespace]);
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

/** The pod runner of the task whose command line carries the marker: the task's parent. */
async function runnerOf(mark: string): Promise<number> {
  const task = await eventually(`a task process with ${mark}`, async () => processesWithMarker(mark)[0]);
  return parentOf(task);
}

function killAll(mark: string): void {
  for (const pid of processesWithMarker(mark)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Gone already.
    }
  }
}

interface ReasonCase {
  name: string;
  spec: (mark: string) => Record<string, unknown>;
  reason: string;
  phase: string;
  limit?: string;
  endingTask?: string;
  /** What happens to the run from outside while it runs. */
  meanwhile?: (playbook: string, mark: string) => Promise<void>;
  check?: (playbook: PlaybookObject, name: string, mark: string) => Promise<void>;
}

const cases: ReasonCase[] = [
  {
    name: "Succeeded",
    spec: (m) => ({
      ceiling: "1m",
      tasks: [
        { name: "build", run: `echo ${m}` },
        { name: "test", run: "true" },
      ],
    }),
    reason: "Succeeded",
    phase: "Succeeded",
  },
  {
    name: "TaskFailed",
    spec: (m) => ({
      ceiling: "1m",
      tasks: [
        { name: "build", run: `echo ${m}; exit 3`, retries: 1 },
        { name: "test", run: "true" },
      ],
    }),
    reason: "TaskFailed",
    phase: "Failed",
    endingTask: "build",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({ phase: "Failed", exitCode: 3, attempts: 2 });
      expect(playbook.status?.tasks?.[1]).toMatchObject({ phase: "Skipped" });
    },
  },
  {
    name: "TaskTimeout",
    spec: (m) => ({
      ceiling: "1m",
      killGrace: "1s",
      tasks: [{ name: "slow", run: `sleep 30 # ${m}`, timeout: "2s" }],
    }),
    reason: "TaskTimeout",
    phase: "Failed",
    limit: "TaskTimeout",
    endingTask: "slow",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({
        phase: "TimedOut",
        limit: "TaskTimeout",
        limitValue: "2s",
        limitSource: "task",
      });
    },
  },
  {
    name: "StallLimit",
    spec: (m) => ({
      ceiling: "1m",
      killGrace: "1s",
      stall: "2s",
      tasks: [{ name: "quiet", run: `echo start; sleep 30 # ${m}` }],
    }),
    reason: "StallLimit",
    phase: "Failed",
    limit: "StallLimit",
    endingTask: "quiet",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({
        limit: "StallLimit",
        limitValue: "2s",
        limitSource: "spec",
      });
    },
  },
  {
    name: "RunCeiling",
    spec: (m) => ({
      ceiling: "3s",
      killGrace: "1s",
      tasks: [
        { name: "long", run: `sleep 30 # ${m}` },
        { name: "after", run: "true" },
      ],
    }),
    reason: "RunCeiling",
    phase: "Failed",
    limit: "RunCeiling",
    endingTask: "long",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["TimedOut", "Skipped"]);
    },
  },
  {
    name: "PodDeadlineExceeded (the runner stopped hard, only the kubelet's backstop fires)",
    spec: (m) => ({ ceiling: "6s", killGrace: "1s", tasks: [{ name: "held", run: `sleep 60 # ${m}` }] }),
    reason: "PodDeadlineExceeded",
    phase: "Failed",
    limit: "PodDeadlineExceeded",
    meanwhile: async (_name, mark) => {
      process.kill(await runnerOf(mark), "SIGSTOP");
    },
    check: async (_playbook, name) => {
      const [pod] = await podsOf(namespace, name);
      expect(pod?.status?.reason).toBe("DeadlineExceeded");
      expect(pod?.spec?.activeDeadlineSeconds).toBe(6 + 1 + 5);
    },
  },
  {
    name: "Cancelled",
    spec: (m) => ({ ceiling: "1m", killGrace: "1s", tasks: [{ name: "waits", run: `sleep 60 # ${m}` }] }),
    reason: "Cancelled",
    phase: "Cancelled",
    // The runner reports the cancellation: its pod is stopped, not deleted.
    endingTask: "waits",
    meanwhile: async (name, mark) => {
      await runnerOf(mark);
      await patchSpec(namespace, name, { cancel: true });
    },
    check: async (playbook, name, mark) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "waits", phase: "Cancelled" });
      await eventually("the task's processes to be gone", async () =>
        processesWithMarker(mark).length === 0 ? true : undefined,
      );
      // Kept for its logs like any finished run's pod.
      const [pod] = await podsOf(namespace, name);
      expect(pod?.metadata?.deletionTimestamp).toBeUndefined();
      expect(pod?.status?.reason).toBe("DeadlineExceeded");
      await expect(kubectl(["-n", namespace, "logs", `${name}-1`])).resolves.toBeDefined();
    },
  },
  {
    name: "RunnerLost (the runner killed as the OOM killer would, so no report)",
    spec: (m) => ({ ceiling: "1m", tasks: [{ name: "victim", run: `sleep 60 # ${m}` }] }),
    reason: "RunnerLost",
    phase: "Failed",
    meanwhile: async (_name, mark) => {
      process.kill(await runnerOf(mark), "SIGKILL");
    },
    check: async (playbook) => {
      const message = condition(playbook, "Succeeded")?.message ?? "";
      // What the kubelet said: the container state and exit code (the process node reports the
      // wrapper of its PID namespace, not 137).
      expect(message).toMatch(/ended without a valid runner report \(Error, exit code \d+/);
    },
  },
  {
    name: "PodLost (backoffLimit 0: the first loss ends the run)",
    spec: (m) => ({ ceiling: "1m", backoffLimit: 0, tasks: [{ name: "waits", run: `sleep 60 # ${m}` }] }),
    reason: "PodLost",
    phase: "Failed",
    meanwhile: async (name, mark) => {
      await runnerOf(mark);
      await losePod(namespace, `${name}-1`);
    },
  },
  {
    name: "StartTimeout (a pod no node can take: it asks for more cpu than any node has)",
    spec: (m) => ({
      ceiling: "1m",
      startTimeout: "3s",
      resources: { requests: { cpu: "1000" } },
      tasks: [{ name: "never", run: `echo ${m}` }],
    }),
    reason: "StartTimeout",
    phase: "Failed",
    limit: "StartTimeout",
    check: async (playbook, name, mark) => {
      const message = condition(playbook, "Succeeded")?.message ?? "";
      expect(message).toMatch(
        new RegExp(
          `^pod ${name}-1 \\(attempt 1\\) never started: its runner did not start within the 3s start timeout \\(spec.startTimeout\\); Unschedulable: 0/1 nodes are available: 1 Insufficient cpu`,
        ),
      );
      expect(playbook.status?.limits?.startTimeout).toEqual({ value: "3s", source: "spec" });
      // No runner ever started: no task began, nothing ran, and the pod is gone.
      expect(playbook.status?.tasks?.some((t) => t.startTime !== undefined) ?? false).toBe(false);
      expect(processesWithMarker(mark)).toEqual([]);
      await eventually("the pod to be deleted", async () =>
        (await podsOf(namespace, name)).length === 0 ? true : undefined,
      );
      await eventually("the run to be counted as StartTimeout", async () => {
        const text = await controller.controller.metrics.registry.metrics();
        return text.includes(`playbook_limit_fired_total{namespace="${namespace}",limit="StartTimeout"} 1`) &&
          text.includes(`playbook_runs_total{namespace="${namespace}",reason="StartTimeout"} 1`)
          ? true
          : undefined;
      });
    },
  },
  {
    name: "Succeeded (a start timeout the pod meets changes nothing)",
    spec: (m) => ({ ceiling: "1m", startTimeout: "30s", tasks: [{ name: "quick", run: `echo ${m}` }] }),
    reason: "Succeeded",
    phase: "Succeeded",
    check: async (playbook) => {
      expect(playbook.status?.limits?.startTimeout).toEqual({ value: "30s", source: "spec" });
      expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "quick", phase: "Succeeded" });
    },
  },
  {
    name: "InvalidSpec (a ceiling above the controller's maximum, which admission cannot know)",
    spec: () => ({ ceiling: "48h", tasks: [{ name: "a", run: "true" }] }),
    reason: "InvalidSpec",
    phase: "Failed",
    check: async (playbook, name) => {
      expect(condition(playbook, "Succeeded")?.message).toContain(
        "spec.ceiling: 48h is longer than the maximum ceiling 24h",
      );
      expect(await podsOf(namespace, name)).toEqual([]);
    },
  },
  {
    name: "InvalidSpec (a pod the API server refuses: requests above limits)",
    spec: () => ({
      ceiling: "1m",
      resources: { requests: { memory: "2Gi" }, limits: { memory: "1Gi" } },
      tasks: [{ name: "a", run: "true" }],
    }),
    reason: "InvalidSpec",
    phase: "Failed",
    check: async (playbook, name) => {
      expect(condition(playbook, "Succeeded")?.message).toContain(
        "must be less than or equal to memory limit",
      );
      const events = await eventsOf(namespace, name, ["FailedCreate"]);
      expect(events.find((e) => e.reason === "FailedCreate")?.type).toBe("Warning");
    },
  },
];

describe.concurrent("each reason of the Succeeded condition comes from a real run", () => {
  it.each(cases)("$name", async (c) => {
    const mark = marker();
    const name = `r-${c.reason.toLowerCase()}-${mark.slice(-4)}`;
    try {
      await createPlaybook(namespace, name, c.spec(mark));
      if (c.meanwhile) await c.meanwhile(name, mark);
      const playbook = await waitForFinished(namespace, name, 60_000);
      const succeeded = condition(playbook, "Succeeded");
      expect(succeeded, JSON.stringify(playbook.status)).toMatchObject({
        status: c.reason === "Succeeded" ? "True" : "False",
        reason: c.reason,
        observedGeneration: playbook.metadata.generation,
      });
      expect(playbook.status?.phase).toBe(c.phase);
      if (c.endingTask?.endsWith("?"))
        expect([undefined, c.endingTask.slice(0, -1)]).toContain(playbook.status?.endingTask);
      else expect(playbook.status?.endingTask).toBe(c.endingTask);
      if (c.limit) {
        expect(condition(playbook, "LimitExceeded")).toMatchObject({ status: "True", reason: c.limit });
        const events = await eventsOf(namespace, name, ["LimitFired"]);
        const fired = events.find((e) => e.reason === "LimitFired");
        expect(fired?.type).toBe("Warning");
        expect(fired?.message).toContain(c.limit);
      } else {
        expect(condition(playbook, "LimitExceeded")).toBeUndefined();
      }
      await c.check?.(playbook, name, mark);
    } finally {
      killAll(mark);
    }
  });
});

describe("a pod lost with its node", () => {
  it("is re-created with the ceiling still counted from the run's start, and the run settles", async () => {
    const mark = marker();
    const name = "lost-once";
    try {
      await createPlaybook(namespace, name, {
        ceiling: "90s",
        backoffLimit: 1,
        tasks: [{ name: "naps", run: `sleep 4 # ${mark}` }],
      });
      await runnerOf(mark);
      const [first] = await podsOf(namespace, name);
      const firstDeadline = first?.spec?.activeDeadlineSeconds ?? 0;
      // The test controller's default killGrace is 2s.
      expect(firstDeadline).toBe(90 + 2 + 5);
      await new Promise((resolve) => setTimeout(resolve, 2000));
      await losePod(namespace, `${name}-1`);
      const second = await eventually("pod lost-once-2", async () =>
        (await podsOf(namespace, name)).find((p) => p.metadata?.name === `${name}-2`),
      );
      expect(second.spec?.activeDeadlineSeconds).toBeLessThan(firstDeadline - 1);
      expect(second.metadata?.annotations?.["playbook.dev/run-start-time"]).toBe(
        first?.metadata?.annotations?.["playbook.dev/run-start-time"],
      );
      const playbook = await waitForFinished(namespace, name, 60_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
      const reasons = (await eventsOf(namespace, name, ["PodLost"])).map((e) => e.reason);
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
      take: (pod: string) => kubectl(["-n", namespace, "delete", "pod", pod, "--wait=false"]),
    },
    {
      how: "evicted through the Eviction API",
      take: (pod: string) =>
        core.createNamespacedPodEviction({
          namespace,
          name: pod,
          body: { apiVersion: "policy/v1", kind: "Eviction", metadata: { name: pod, namespace } },
        }),
    },
  ])("is re-created when $how", async ({ how, take }) => {
    const mark = marker();
    const name = `taken-${how.split(" ")[0]}`;
    try {
      await createPlaybook(namespace, name, {
        ceiling: "90s",
        killGrace: "1s",
        tasks: [{ name: "naps", run: `sleep 3 # ${mark}` }],
      });
      await runnerOf(mark);
      await take(`${name}-1`);
      const playbook = await waitForFinished(namespace, name, 60_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
      const lost = (await eventsOf(namespace, name, ["PodLost"])).find((e) => e.reason === "PodLost");
      expect(lost?.message).toContain(`${name}-2`);
    } finally {
      killAll(mark);
    }
  });
});

describe("examples/cancel-me.yaml", () => {
  it("prints its stopping line when cancelled, and the pod keeps it for kubectl logs", async () => {
    const logs = () =>
      kubectl(["-n", namespace, "logs", "cancel-me-1"]).then(
        (r) => r.stdout,
        () => "",
      );
    await kubectl(["-n", namespace, "apply", "-f", path.join(repoRoot(), "examples", "cancel-me.yaml")]);
    await eventually("the task's first line", async () =>
      (await logs()).includes("waiting;") ? true : undefined,
    );
    await patchSpec(namespace, "cancel-me", { cancel: true });
    const playbook = await waitForFinished(namespace, "cancel-me", 60_000);
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
    await createPlaybook(namespace, "largest", { ceiling: "1m", tasks });
    const tooLarge = await kubectlResult(
      ["-n", namespace, "create", "-f", "-"],
      JSON.stringify(
        playbookManifest("too-large", {
          tasks: [...tasks.slice(0, 3), fill("d", 204_800 - 3 * 65_633 - 96)],
        }),
      ),
    );
    expect(tooLarge.stderr).toContain("spec.tasks is too large to run");
    const playbook = await waitForFinished(namespace, "largest", 60_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual([
      "Succeeded",
      "Succeeded",
      "Succeeded",
      "Succeeded",
    ]);
  });
});

describe("a running Playbook", () => {
  it("refuses an edit of its tasks and keeps running what its pod was started with", async () => {
    const mark = marker();
    const flag = path.join(os.tmpdir(), `release-${mark}`);
    const waits = { name: "waits", run: `until [ -e ${flag} ]; do sleep 0.2; done # ${mark}` };
    try {
      await createPlaybook(namespace, "running-edit", { ceiling: "1m", tasks: [waits] });
      await runnerOf(mark);
      await waitForPlaybook(namespace, "running-edit", "to have started", (p) => !!p.status?.startTime);
      const edit = await kubectlResult([
        ...["-n", namespace, "patch", "pb", "running-edit", "--type=merge"],
        ...["-p", JSON.stringify({ spec: { tasks: [waits, { name: "more", run: "true" }] } })],
      ]);
      expect(edit.stderr).toContain(
        "spec.tasks: Forbidden: spec.tasks cannot change once the run has started (status.startTime is set); only spec.cancel may",
      );
      writeFileSync(flag, "");
      const playbook = await waitForFinished(namespace, "running-edit", 60_000);
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
    await createPlaybook(namespace, "waited", { ceiling: "1m", tasks: [{ name: "a", run: "sleep 1" }] });
    const { stdout } = await kubectl([
      "-n",
      namespace,
      "wait",
      "--for=condition=Succeeded",
      "playbook/waited",
      "--timeout=60s",
    ]);
    expect(stdout).toContain("condition met");
  });

  it("shows phase, reason, the task that ended the run and age in `kubectl get pb`", async () => {
    await createPlaybook(namespace, "shown", {
      ceiling: "1m",
      killGrace: "1s",
      tasks: [{ name: "slow", run: "sleep 30", timeout: "1s" }],
    });
    await waitForPlaybook(
      namespace,
      "shown",
      "to time out",
      (p) => condition(p, "Succeeded")?.status === "False",
    );
    const { stdout } = await kubectl(["-n", namespace, "get", "pb", "shown"]);
    const [header, row] = stdout.trim().split("\n");
    expect(header?.split(/\s+/)).toEqual(["NAME", "PHASE", "REASON", "TASK", "AGE"]);
    expect(row?.split(/\s+/).slice(0, 4)).toEqual(["shown", "Failed", "TaskTimeout", "slow"]);
  });
});
