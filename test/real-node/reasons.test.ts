// The reason table on the real node: the controller's pods run the project's image in containerd
// under a real kubelet, so the runner's limits, the report in the termination message, the
// kubelet's activeDeadlineSeconds backstop and the kill of a pod's processes are all the real ones.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
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
} from "../controller/support.js";
import {
  createTestNamespace,
  deleteTestNamespace,
  losePod,
  marker,
  processesWithMarker,
} from "../harness/cluster-test.js";

const { core } = clients();
let namespace: string;
let controller: RunningController;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-reasons");
  // Starting a dozen containers at once loads this 2-core machine for seconds: a 4s Lease (the
  // process node's tests') was lost mid-run, which stops a controller for good.
  controller = startController([namespace], {
    leaseDuration: "20s",
    renewDeadline: "15s",
    retryPeriod: "2s",
  });
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

function commandOf(pid: number): string {
  return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim();
}

/** The pod runner of the task whose command line carries the marker, seen from this machine. */
async function runnerOf(mark: string): Promise<number> {
  const task = await eventually(
    `a task process with ${mark}`,
    async () => processesWithMarker(mark)[0],
    60_000,
  );
  return parentOf(task);
}

interface ReasonCase {
  name: string;
  spec: (mark: string) => Record<string, unknown>;
  reason: string;
  phase: string;
  limit?: string;
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
    check: async (_playbook, name, mark) => {
      expect((await kubectl(["-n", namespace, "logs", `${name}-1`])).stdout).toContain(mark);
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
    check: async (playbook) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({
        phase: "TimedOut",
        limit: "TaskTimeout",
        limitValue: "2s",
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
  },
  {
    name: "RunCeiling",
    // Not shorter: under load a runner container can take seconds to start, and a pod whose
    // runner has not reported by ceiling + killGrace + 5s is the kubelet's (PodDeadlineExceeded).
    spec: (m) => ({
      ceiling: "10s",
      killGrace: "1s",
      tasks: [
        { name: "long", run: `sleep 30 # ${m}` },
        { name: "after", run: "true" },
      ],
    }),
    reason: "RunCeiling",
    phase: "Failed",
    limit: "RunCeiling",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["TimedOut", "Skipped"]);
    },
  },
  {
    name: "PodDeadlineExceeded (the runner stopped, so only the kubelet's activeDeadlineSeconds fires)",
    // A ceiling long enough that a runner slow to start on a loaded machine is still stopped before it.
    spec: (m) => ({ ceiling: "15s", killGrace: "1s", tasks: [{ name: "held", run: `sleep 60 # ${m}` }] }),
    reason: "PodDeadlineExceeded",
    phase: "Failed",
    limit: "PodDeadlineExceeded",
    meanwhile: async (_name, mark) => {
      process.kill(await runnerOf(mark), "SIGSTOP");
    },
    check: async (_playbook, name) => {
      const [pod] = await podsOf(namespace, name);
      expect(pod?.status?.reason).toBe("DeadlineExceeded");
      expect(pod?.spec?.activeDeadlineSeconds).toBe(15 + 1 + 5);
    },
  },
  {
    name: "Cancelled",
    spec: (m) => ({ ceiling: "1m", killGrace: "1s", tasks: [{ name: "waits", run: `sleep 60 # ${m}` }] }),
    reason: "Cancelled",
    phase: "Cancelled",
    meanwhile: async (name, mark) => {
      await runnerOf(mark);
      await patchSpec(namespace, name, { cancel: true });
    },
    check: async (playbook, name, mark) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "waits", phase: "Cancelled" });
      await eventually("the task's processes to be gone", async () =>
        processesWithMarker(mark).length === 0 ? true : undefined,
      );
      const [pod] = await podsOf(namespace, name);
      expect(pod?.metadata?.deletionTimestamp).toBeUndefined();
      expect(pod?.status?.reason).toBe("DeadlineExceeded");
    },
  },
  {
    name: "RunnerLost (the runner SIGKILLed as the OOM killer would, so no report)",
    spec: (m) => ({ ceiling: "1m", tasks: [{ name: "victim", run: `sleep 60 # ${m}` }] }),
    reason: "RunnerLost",
    phase: "Failed",
    meanwhile: async (_name, mark) => {
      process.kill(await runnerOf(mark), "SIGKILL");
    },
    check: async (playbook) => {
      // What the kubelet said: the container's own exit, 128 + SIGKILL.
      expect(condition(playbook, "Succeeded")?.message ?? "").toMatch(
        /ended without a valid runner report \(Error, exit code 137/,
      );
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
    check: async (_playbook, _name, mark) => {
      await eventually("the lost pod's processes to be killed by the kubelet", async () =>
        processesWithMarker(mark).length === 0 ? true : undefined,
      );
    },
  },
];

describe.concurrent("each reason on the real node", () => {
  it.each(cases)("$name", async (c) => {
    const mark = marker();
    const name = `r-${c.reason.toLowerCase()}-${mark.slice(-4)}`;
    await createPlaybook(namespace, name, c.spec(mark));
    if (c.meanwhile) await c.meanwhile(name, mark);
    const playbook = await waitForFinished(namespace, name, 120_000);
    expect(condition(playbook, "Succeeded"), JSON.stringify(playbook.status)).toMatchObject({
      status: c.reason === "Succeeded" ? "True" : "False",
      reason: c.reason,
    });
    expect(playbook.status?.phase).toBe(c.phase);
    if (c.limit) {
      expect(condition(playbook, "LimitExceeded")).toMatchObject({ status: "True", reason: c.limit });
      const events = await eventsOf(namespace, name, ["LimitFired"]);
      expect(events.find((e) => e.reason === "LimitFired")?.message).toContain(c.limit);
    } else {
      expect(condition(playbook, "LimitExceeded")).toBeUndefined();
    }
    await c.check?.(playbook, name, mark);
  });
});

describe("the controller's pods on the real node", () => {
  it("run the project's image in containerd, as the restricted user, under the real pause", async () => {
    const mark = marker();
    await createPlaybook(namespace, "inside", {
      ceiling: "1m",
      tasks: [{ name: "look", run: `echo ${mark}; id -u; cat /proc/1/cmdline; echo; sleep 2` }],
    });
    const task = await eventually("the task", async () => processesWithMarker(mark)[0], 60_000);
    // Seen from this machine: the task's parent is the runner (node), pause is the pod's init.
    expect(commandOf(parentOf(task))).toMatch(/node .*playbook pod-runner|playbook pod-runner/);
    const playbook = await waitForFinished(namespace, "inside", 60_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True" });
    const [pod] = await podsOf(namespace, "inside");
    expect(pod?.spec?.nodeName).toBe("real-node");
    expect(pod?.spec?.containers[0]?.image).toBe(inject("runnerImage"));
    expect(pod?.status?.containerStatuses?.[0]?.containerID).toMatch(/^containerd:\/\//);
    const { stdout } = await kubectl(["-n", namespace, "logs", "inside-1"]);
    // The runner prefixes each task line with the task's name; /proc/1/cmdline ends in a NUL.
    expect(stdout).toMatch(new RegExp(`\\[look\\] ${mark}\\n\\[look\\] 65532\\n\\[look\\] /pause`));
  });
});
