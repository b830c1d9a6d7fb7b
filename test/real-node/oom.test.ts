// A task that runs its container past `spec.resources.limits.memory` on the real node. Each task
// runs in the container of its image, under that container's limit (spec.resources apply to each
// task container); the runner has a container and a fixed limit of its own, so whatever the QoS
// class, the kernel's choice is among the task container's processes (the agent and the tasks,
// which start at oom_score_adj 1000) and the runner lives to report: the run ends TaskFailed, never
// RunnerLost. Either the kernel ends a task process (the task exits 137, its message naming the OOM
// kill when the runner can see it), or the whole container ends (cgroup v2's memory.oom.group, or
// the agent taken): the runner reports the task lost with its container, and the controller names
// the container, its image and the kubelet's reason.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";

const { core } = clients();
let namespace: string;
let controller: RunningController | undefined;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-oom");
  controller = startController([namespace], realNode.controller);
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

// Five processes of about 26 MiB each (perl's "x" operator leaves two copies of 12 MiB): together
// they pass 96 MiB, each is smaller than the runner.
const HOG = `perl -e '$x = "a" x (12*1024*1024); sleep 4'`;
/** The task's message either way: a process of it ended by the kernel, or its whole container. */
const TASK_OOM = /^(exited with code 137|container task-1 \(image [^)]+\) was OOMKilled \(exit 137\))/;

function hogSpec(limits: Record<string, string>) {
  return {
    ceiling: "2m",
    killGrace: "0s",
    resources: { limits },
    tasks: [
      {
        name: "hog",
        run: [
          // What the kernel weighs besides size, in the task's log.
          'echo "task oom_score_adj $(cat /proc/self/oom_score_adj)"',
          'pids=""',
          `for i in 1 2 3 4 5; do ${HOG} & pids="$pids $!"; done`,
          'for p in $pids; do wait "$p" || exit "$?"; done',
        ].join("\n"),
      },
      { name: "after", run: "echo never" },
    ],
  };
}

describe("a task that runs into its container's memory limit on the real node", () => {
  it.each([
    ["Guaranteed", { cpu: "500m", memory: "96Mi" }],
    ["Burstable", { memory: "96Mi" }],
  ])("%s pod: fails TaskFailed with the OOM kill named, the runner untouched", async (qos, limits) => {
    const name = `hog-${qos.toLowerCase()}`;
    await createPlaybook(namespace, name, hogSpec(limits));
    const playbook = await waitForFinished(namespace, name, realNode.finishMs);
    const [pod] = await podsOf(namespace, name);
    // The runner's fixed requests have no cpu limit: only the task containers' limits vary.
    expect(pod?.status?.qosClass).toBe("Burstable");
    const succeeded = condition(playbook, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(succeeded?.message).toMatch(/^task hog (failed: )?/);
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "hog", phase: "Failed" });
    expect(playbook.status?.tasks?.[0]?.message).toMatch(TASK_OOM);
    expect(playbook.status?.tasks?.[1]).toMatchObject({ name: "after", phase: "Skipped" });
    // The runner lived and reported: its container ended with its exit code for a failed run.
    const runner = pod?.status?.containerStatuses?.find((s) => s.name === "runner");
    expect(runner?.state?.terminated).toMatchObject({ exitCode: 1 });
    expect(runner?.state?.terminated?.reason).not.toBe("OOMKilled");
  });
});
