// A task that runs its container past `spec.resources.limits.memory` on the real node (the kubelet
// made the memory cgroup and its limit, and gave the container the oom_score_adj of its QoS class).
// Every task process here is smaller than the runner (a Node process of about 60 MiB resident), so
// the kernel, which picks the largest process after adding oom_score_adj × limit / 1000, takes a
// task's only where the tasks' raised oom_score_adj (1000) is far enough above the runner's:
// - Guaranteed (cpu and memory limits): the kubelet gives the container -997 (0 on this node,
//   whose containerd, without CAP_SYS_RESOURCE, has restrict_oom_score_adj raise it to its own 0;
//   either is far below 1000). The run ends TaskFailed with the OOM kill named, not RunnerLost.
// - Burstable (a memory limit alone): the kubelet gives the container 1000 - 1000 × request /
//   node memory (997 for 96Mi here). runc writes it with CAP_SYS_RESOURCE on a normal node, which
//   makes it the floor an unprivileged process can lower its own to, so the runner cannot go
//   lower. 3/1000 of the limit is about 0.3 MiB: the kernel takes the runner, and the run ends
//   RunnerLost with the kubelet's OOMKilled. The test records that limit as the user sees it.
// The kubelet here runs on cgroup v1 (this machine mounts v1 controllers on /sys/fs/cgroup): on
// cgroup v2 it also sets memory.oom.group on the container (unless singleProcessOOMKill is set), and
// then any OOM kill in the container ends the runner too, whatever the QoS class.
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
const OOM_KILL =
  /out of memory: the kernel's OOM killer ended \d+ process\(es\) in the runner's memory cgroup/;

function hogSpec(limits: Record<string, string>) {
  return {
    ceiling: "2m",
    killGrace: "0s",
    resources: { limits },
    tasks: [
      {
        name: "hog",
        run: [
          // What the kernel weighs besides size, in the task's log (the task's parent is the runner).
          'echo "runner oom_score_adj $(cat /proc/$PPID/oom_score_adj), task $(cat /proc/self/oom_score_adj)"',
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
  it("Guaranteed pod: fails TaskFailed with the OOM kill named in the task's and the condition's message, not RunnerLost", async () => {
    await createPlaybook(namespace, "hog", hogSpec({ cpu: "500m", memory: "96Mi" }));
    const playbook = await waitForFinished(namespace, "hog", realNode.finishMs);
    const [pod] = await podsOf(namespace, "hog");
    expect(pod?.status?.qosClass).toBe("Guaranteed");
    const succeeded = condition(playbook, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(succeeded?.message).toMatch(new RegExp(`^task hog exited with code 137: ${OOM_KILL.source}`));
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "hog", phase: "Failed", exitCode: 137 });
    expect(playbook.status?.tasks?.[0]?.message).toMatch(
      new RegExp(`^exited with code 137: ${OOM_KILL.source}`),
    );
    expect(playbook.status?.tasks?.[1]).toMatchObject({ name: "after", phase: "Skipped" });
    // The runner lived: the container ended with the runner's exit code for a failed run (1), not
    // 137. containerd still calls it OOMKilled: a process in its cgroup was.
    expect(pod?.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({ exitCode: 1 });
  });

  it("Burstable pod (a memory limit alone): the kernel takes the runner, the run ends RunnerLost naming OOMKilled", async () => {
    await createPlaybook(namespace, "hog-burstable", hogSpec({ memory: "96Mi" }));
    const playbook = await waitForFinished(namespace, "hog-burstable", realNode.finishMs);
    const [pod] = await podsOf(namespace, "hog-burstable");
    expect(pod?.status?.qosClass).toBe("Burstable");
    const succeeded = condition(playbook, "Succeeded");
    expect(succeeded).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(succeeded?.message).toContain("without a valid runner report (OOMKilled, exit code 137)");
    // And what to do about it.
    expect(succeeded?.message).toContain(
      "give the pod both cpu and memory limits (requests equal, a Guaranteed pod)",
    );
    const terminated = pod?.status?.containerStatuses?.[0]?.state?.terminated;
    expect(terminated).toMatchObject({ reason: "OOMKilled", exitCode: 137 });
    // Why: the runner's oom_score_adj is the kubelet's Burstable value, a few points below the tasks'.
    expect(terminated?.message).toMatch(/\[hog\] runner oom_score_adj 9\d\d, task 1000\n/);
  });
});
