// The reason table on the real node: the controller's pods run the project's image in containerd
// under a real kubelet, so the runner's limits, the report in the termination message, the
// kubelet's activeDeadlineSeconds backstop and the kill of a pod's processes are all the real ones.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { describeReasonTable, parentOf, realNode, type TableContext } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  kubectl,
  podsOf,
  startController,
  waitForFinished,
} from "../controller/support.js";
import {
  createTestNamespace,
  deleteTestNamespace,
  marker,
  processesWithMarker,
} from "../harness/cluster-test.js";

const { core } = clients();
const table = {} as TableContext;

beforeAll(async () => {
  table.namespace = await createTestNamespace(core, "rn-reasons");
  table.controller = startController([table.namespace], realNode.controller);
});
afterAll(async () => {
  await table.controller?.stop();
  await deleteTestNamespace(core, table.namespace);
});

function commandOf(pid: number): string {
  return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim();
}

describeReasonTable("each reason on the real node", realNode, table);

describe("the controller's pods on the real node", () => {
  it("run the project's image in containerd, as the restricted user, under the real pause", async () => {
    const mark = marker();
    await createPlaybook(table.namespace, "inside", {
      ceiling: "1m",
      tasks: [{ name: "look", run: `echo ${mark}; id -u; cat /proc/1/cmdline; echo; sleep 2` }],
    });
    const task = await eventually("the task", async () => processesWithMarker(mark)[0], 60_000);
    // Seen from this machine: the task's parent is the agent of its container, pause is the pod's init.
    expect(commandOf(parentOf(task))).toMatch(
      // The agent from the runner image's volume (auto on containerd 2.x) or the hook's copy.
      /\/playbook\/agent\/(usr\/local\/lib\/playbook\/)?agent \/playbook\/run\/runner\.sock task-1/,
    );
    const playbook = await waitForFinished(table.namespace, "inside", 60_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True" });
    const [pod] = await podsOf(table.namespace, "inside");
    expect(pod?.spec?.nodeName).toBe("real-node");
    expect(pod?.spec?.containers[0]?.image).toBe(inject("runnerImage"));
    expect(pod?.status?.containerStatuses?.[0]?.containerID).toMatch(/^containerd:\/\//);
    const { stdout } = await kubectl(["-n", table.namespace, "logs", "inside-1", "-c", "runner"]);
    // The runner prefixes each task line with the task's name; the task runs as the tasks' user
    // (1000), not the runner's; /proc/1/cmdline ends in a NUL.
    expect(stdout).toMatch(new RegExp(`\\[look\\] ${mark}\\n\\[look\\] 1000\\n\\[look\\] /pause`));
  });

  it("run each task under its shell: sh -c goes on past a failed pipe, bash -eo pipefail fails the task", async () => {
    await createPlaybook(table.namespace, "shells", {
      ceiling: "1m",
      tasks: [
        { name: "lenient", run: "false | true; echo went-on" },
        { name: "strict", shell: "bash -eo pipefail", run: "false | true; echo went-on" },
      ],
    });
    const playbook = await waitForFinished(table.namespace, "shells", 60_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(playbook.status?.tasks?.map((task) => [task.name, task.phase])).toEqual([
      ["lenient", "Succeeded"],
      ["strict", "Failed"],
    ]);
    expect(playbook.status?.tasks?.[1]?.exitCode).toBe(1);
    const { stdout } = await kubectl(["-n", table.namespace, "logs", "shells-1", "-c", "runner"]);
    expect(stdout).toContain("[lenient] went-on");
    expect(stdout).not.toContain("[strict] went-on");
  });
});
