// The reason table of docs/design.md as real runs on the real kubelet (test/real-node/reasons.test.ts):
// the runner's own limits, its report in the termination message, the kubelet's deadline and the
// kill of a pod's processes. The controller's decisions for each reason, from pod status the test
// writes, are test/controller/reasons.test.ts (the scripted node). The timings a real node needs
// are one named set of values (NodeValues).
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { losePod, marker, processesWithMarker } from "../harness/cluster-test.js";
import {
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  kubectl,
  type PlaybookObject,
  patchSpec,
  podsOf,
  type RunningController,
  waitForFinished,
} from "./support.js";

/** The timings of real runs on a node, each value with why. */
export interface NodeValues {
  /** How long a task process may take to appear after the Playbook is created. */
  taskStartMs: number;
  /** How long a run may take from its creation to its terminal condition. */
  finishMs: number;
  /** spec.ceiling (seconds) of the RunCeiling case: the runner must start and report inside it. */
  runCeilingSeconds: number;
  /** spec.ceiling (seconds) of the PodDeadlineExceeded case: the runner must start before it to be stopped. */
  podDeadlineCeilingSeconds: number;
  /** startController's overrides for the table's controller. */
  controller: Record<string, string>;
}

/** The real kubelet's values (test/real-node/). */
export const realNode: NodeValues = {
  // Containers take seconds to start on a loaded 2-core machine, a dozen of them at once longer.
  taskStartMs: 60_000,
  finishMs: 120_000,
  // Not shorter: a runner container slow to start that has not reported by ceiling + killGrace
  // + 5s is the kubelet's (PodDeadlineExceeded), not RunCeiling.
  runCeilingSeconds: 10,
  // Long enough that a runner slow to start is still stopped before its ceiling.
  podDeadlineCeilingSeconds: 15,
  // Starting a dozen containers at once loads this 2-core machine for seconds: a 4s Lease (the
  // cluster tests') was lost mid-run, which stops a controller for good.
  controller: { leaseDuration: "20s", renewDeadline: "15s", retryPeriod: "2s" },
};

/** Filled in by the test file's beforeAll. */
export interface TableContext {
  namespace: string;
  controller: RunningController;
}

/** A process's parent, from /proc. */
export function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

/**
 * The pod runner of the task whose command line carries the marker, seen from this machine: the
 * `playbook pod-runner` process in the task's process namespace (the pod's: the task's parent is
 * its container's agent, the runner has a container of its own).
 */
export async function runnerOf(mark: string, timeoutMs?: number): Promise<number> {
  const task = await eventually(
    `a task process with ${mark}`,
    async () => processesWithMarker(mark)[0],
    timeoutMs,
  );
  const namespaceOf = (pid: number | string) => {
    try {
      return readlinkSync(`/proc/${pid}/ns/pid`);
    } catch {
      return undefined;
    }
  };
  const pods = namespaceOf(task);
  const runner = readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry) && namespaceOf(entry) === pods)
    .find((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("pod-runner");
      } catch {
        return false;
      }
    });
  if (runner === undefined) throw new Error(`no pod runner shares the process namespace of task ${task}`);
  return Number(runner);
}

export function killAll(mark: string): void {
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

function reasonCases(node: NodeValues, ctx: TableContext): ReasonCase[] {
  const runner = (mark: string) => runnerOf(mark, node.taskStartMs);
  return [
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
      check: async (_playbook, name, mark) => {
        expect((await kubectl(["-n", ctx.namespace, "logs", `${name}-1`])).stdout).toContain(mark);
      },
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
        ceiling: `${node.runCeilingSeconds}s`,
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
      spec: (m) => ({
        ceiling: `${node.podDeadlineCeilingSeconds}s`,
        killGrace: "1s",
        tasks: [{ name: "held", run: `sleep 60 # ${m}` }],
      }),
      reason: "PodDeadlineExceeded",
      phase: "Failed",
      limit: "PodDeadlineExceeded",
      meanwhile: async (_name, mark) => {
        process.kill(await runner(mark), "SIGSTOP");
      },
      check: async (_playbook, name) => {
        const [pod] = await podsOf(ctx.namespace, name);
        expect(pod?.status?.reason).toBe("DeadlineExceeded");
        // The remaining ceiling + killGrace + the controller's 5s for the runner's report.
        expect(pod?.spec?.activeDeadlineSeconds).toBe(node.podDeadlineCeilingSeconds + 1 + 5);
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
        await runner(mark);
        await patchSpec(ctx.namespace, name, { cancel: true });
      },
      check: async (playbook, name, mark) => {
        expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "waits", phase: "Cancelled" });
        await eventually("the task's processes to be gone", async () =>
          processesWithMarker(mark).length === 0 ? true : undefined,
        );
        // Kept for its logs like any finished run's pod.
        const [pod] = await podsOf(ctx.namespace, name);
        expect(pod?.metadata?.deletionTimestamp).toBeUndefined();
        expect(pod?.status?.reason).toBe("DeadlineExceeded");
        await expect(kubectl(["-n", ctx.namespace, "logs", `${name}-1`])).resolves.toBeDefined();
      },
    },
    {
      name: "RunnerLost (the runner SIGKILLed as the OOM killer would, so no report)",
      spec: (m) => ({ ceiling: "1m", tasks: [{ name: "victim", run: `sleep 60 # ${m}` }] }),
      reason: "RunnerLost",
      phase: "Failed",
      meanwhile: async (_name, mark) => {
        process.kill(await runner(mark), "SIGKILL");
      },
      check: async (playbook) => {
        // What the kubelet said: the container state and its exit code, 128 + SIGKILL (the process
        // node reports it as the kubelet does).
        expect(condition(playbook, "Succeeded")?.message ?? "").toMatch(
          /ended without a valid runner report \(Error, exit code 137\b/,
        );
      },
    },
    {
      name: "PodLost (backoffLimit 0: the first loss ends the run)",
      spec: (m) => ({ ceiling: "1m", backoffLimit: 0, tasks: [{ name: "waits", run: `sleep 60 # ${m}` }] }),
      reason: "PodLost",
      phase: "Failed",
      meanwhile: async (name, mark) => {
        await runner(mark);
        await losePod(ctx.namespace, `${name}-1`);
      },
      check: async (_playbook, _name, mark) => {
        await eventually("the lost pod's processes to be killed by the node", async () =>
          processesWithMarker(mark).length === 0 ? true : undefined,
        );
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
            `^pod ${name}-1 \\(attempt 1\\) never started: its containers did not all start within the 3s start timeout \\(spec.startTimeout\\); Unschedulable: 0/1 nodes are available: 1 Insufficient cpu`,
          ),
        );
        expect(playbook.status?.limits?.startTimeout).toEqual({ value: "3s", source: "spec" });
        // No runner ever started: no task began, nothing ran, and the pod is gone.
        expect(playbook.status?.tasks?.some((t) => t.startTime !== undefined) ?? false).toBe(false);
        expect(processesWithMarker(mark)).toEqual([]);
        await eventually("the pod to be deleted", async () =>
          (await podsOf(ctx.namespace, name)).length === 0 ? true : undefined,
        );
        await eventually("the run to be counted as StartTimeout", async () => {
          const text = await ctx.controller.controller.metrics.registry.metrics();
          return text.includes(
            `playbook_limit_fired_total{namespace="${ctx.namespace}",limit="StartTimeout"} 1`,
          ) && text.includes(`playbook_runs_total{namespace="${ctx.namespace}",reason="StartTimeout"} 1`)
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
        expect(await podsOf(ctx.namespace, name)).toEqual([]);
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
        const events = await eventsOf(ctx.namespace, name, ["FailedCreate"]);
        expect(events.find((e) => e.reason === "FailedCreate")?.type).toBe("Warning");
      },
    },
  ];
}

/** Registers the table: one concurrent test per reason case, each a real run on the node. */
export function describeReasonTable(title: string, node: NodeValues, ctx: TableContext): void {
  describe.concurrent(title, () => {
    it.each(reasonCases(node, ctx))("$name", async (c) => {
      const mark = marker();
      const name = `r-${c.reason.toLowerCase()}-${mark.slice(-4)}`;
      try {
        await createPlaybook(ctx.namespace, name, c.spec(mark));
        if (c.meanwhile) await c.meanwhile(name, mark);
        const playbook = await waitForFinished(ctx.namespace, name, node.finishMs);
        expect(condition(playbook, "Succeeded"), JSON.stringify(playbook.status)).toMatchObject({
          status: c.reason === "Succeeded" ? "True" : "False",
          reason: c.reason,
          observedGeneration: playbook.metadata.generation,
        });
        expect(playbook.status?.phase).toBe(c.phase);
        expect(playbook.status?.endingTask).toBe(c.endingTask);
        if (c.limit) {
          expect(condition(playbook, "LimitExceeded")).toMatchObject({ status: "True", reason: c.limit });
          const events = await eventsOf(ctx.namespace, name, ["LimitFired"]);
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
}
