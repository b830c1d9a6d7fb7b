// finally tasks on the real node (issue 42, item 5): the cleanup runs in its own image after the
// main tasks end, however they ended, and sees the outcome so far; a cancel leaves it its time.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  kubectlResult,
  patchSpec,
  podsOf,
  type RunningController,
  runnerLogs,
  startController,
  taskLines,
  waitForFinished,
  waitForPlaybook,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { importTaskImages, TASK_IMAGES } from "../harness/task-images.js";

const { core } = clients();
const log = (message: string) => process.stderr.write(`[finally] ${message}\n`);
let namespace = "";
let controller: RunningController | undefined;

beforeAll(async () => {
  await importTaskImages(inject("kubeconfig"), log);
  namespace = await createTestNamespace(core, "rn-finally");
  const policy = {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "PlaybookPolicy",
    metadata: { name: "default", namespace },
    spec: { allowedImages: ["playbook.test/*"] },
  };
  const applied = await kubectlResult(["apply", "--server-side", "-f", "-"], JSON.stringify(policy));
  expect(applied.stderr).toBe("");
  controller = startController([namespace], realNode.controller);
});
afterAll(async () => {
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
});

describe("finally tasks on the real node", () => {
  it("run in their own image after a main task failed, see the outcome, and the run stays TaskFailed naming it", async () => {
    await createPlaybook(namespace, "failed", {
      ceiling: "2m",
      tasks: [
        { name: "build", run: "echo building; exit 3" },
        { name: "deploy", run: "echo never" },
      ],
      finallyCeiling: "1m",
      finally: [
        {
          name: "report",
          image: TASK_IMAGES.debian,
          run: 'echo "outcome=$PLAYBOOK_OUTCOME failed=$PLAYBOOK_FAILED_TASK"',
        },
      ],
    });
    const playbook = await waitForFinished(namespace, "failed", realNode.finishMs);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
    expect(condition(playbook, "Succeeded")?.message).toMatch(/^task build exited with code 3/);
    expect(playbook.status?.endingTask).toBe("build");
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Failed", "Skipped"]);
    expect(playbook.status?.finally).toMatchObject([
      { name: "report", phase: "Succeeded", attempts: 1, exitCode: 0, image: TASK_IMAGES.debian },
    ]);
    expect(playbook.status?.limits?.finallyCeiling).toEqual({ value: "1m", source: "spec" });
    const [pod] = await podsOf(namespace, "failed");
    expect(pod?.spec?.containers?.map((c) => c.image)).toContain(TASK_IMAGES.debian);
    expect(taskLines(await runnerLogs(namespace, "failed"), "report")).toEqual([
      "outcome=TaskFailed failed=build",
    ]);
  });

  it("still run after spec.cancel, within the pod's grace, and the run ends Cancelled", async () => {
    await createPlaybook(namespace, "cancelled", {
      ceiling: "5m",
      killGrace: "2s",
      tasks: [{ name: "wait", run: "echo waiting; sleep 300" }],
      finallyCeiling: "1m",
      // Longer than killGrace and the 5s margin: only the finally window in the pod's grace lets it end.
      finally: [
        {
          name: "unlock",
          image: TASK_IMAGES.debian,
          run: 'sleep 10; echo "unlocked after $PLAYBOOK_OUTCOME"',
        },
      ],
    });
    await waitForPlaybook(namespace, "cancelled", "to be Running", (p) => p.status?.phase === "Running");
    // The main task runs: its first line is in the runner's log.
    await eventually(
      "the main task to print",
      async () =>
        taskLines(await runnerLogs(namespace, "cancelled"), "wait").includes("waiting") || undefined,
      realNode.taskStartMs,
    );
    await patchSpec(namespace, "cancelled", { cancel: true });
    const playbook = await waitForFinished(namespace, "cancelled", realNode.finishMs);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Cancelled"]);
    expect(playbook.status?.finally).toMatchObject([{ name: "unlock", phase: "Succeeded", exitCode: 0 }]);
    expect(taskLines(await runnerLogs(namespace, "cancelled"), "unlock")).toEqual([
      "unlocked after Cancelled",
    ]);
  });
});
