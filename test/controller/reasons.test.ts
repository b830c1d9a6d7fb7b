// Every reason of DESIGN.md's table, produced by a real run: the controller, the real API server,
// the process node and the real pod runner.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
  type PlaybookObject,
  patchSpec,
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
    // The task when the runner reported the cancellation; none when the pod was gone first.
    endingTask: "waits?",
    meanwhile: async (name, mark) => {
      await runnerOf(mark);
      await patchSpec(namespace, name, { cancel: true });
    },
    check: async (_playbook, _name, mark) => {
      await eventually("the task's processes to be gone", async () =>
        processesWithMarker(mark).length === 0 ? true : undefined,
      );
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
