// Runs whose pod's life the test writes on the scripted node (test/harness/scripted-node.ts):
// how a run ends is chosen by the test (a runner report of a given reason, or an end without
// one), and the Playbook spec carries the limit that reason names, as a real run's would.
import type { CoreV1Api, V1Pod } from "@kubernetes/client-node";
import { endPod, reportFor, reportPod, scheduledPod, startPod } from "../harness/scripted-node.js";

/** How a scripted run ends: the runner's report with this reason, or (RunnerLost) OOMKilled without one. */
export type Ending = "Succeeded" | "TaskFailed" | "TaskTimeout" | "StallLimit" | "RunnerLost";

export const ENDINGS: readonly Ending[] = [
  "Succeeded",
  "TaskFailed",
  "TaskTimeout",
  "StallLimit",
  "RunnerLost",
];

/** A Playbook spec whose single task has the limit the ending names (a timeout, a stall window). */
export function specFor(ending: Ending): Record<string, unknown> {
  const task: Record<string, unknown> = { name: "work", run: "make work" };
  if (ending === "TaskTimeout") task.timeout = "3s";
  if (ending === "StallLimit") task.stall = "3s";
  return { ceiling: "2m", killGrace: "1s", tasks: [task] };
}

/** The pod ends as `ending` says: the runner's report, or the container OOMKilled with no report. */
export async function endRun(core: CoreV1Api, pod: V1Pod, ending: Ending): Promise<void> {
  if (ending === "RunnerLost") {
    await endPod(core, pod, { exitCode: 137, reason: "OOMKilled" });
    return;
  }
  await reportPod(core, pod, reportFor(pod, { reason: ending }));
}

/** The pod of attempt `attempt` of Playbook `name`, once the scheduler bound it. */
export function podOf(core: CoreV1Api, namespace: string, name: string, attempt = 1): Promise<V1Pod> {
  return scheduledPod(core, namespace, `${name}-${attempt}`);
}

/** The run's pod starts and its runner reports success: what a run of `true` does on a kubelet. */
export async function succeedRun(core: CoreV1Api, namespace: string, name: string, attempt = 1) {
  const pod = await podOf(core, namespace, name, attempt);
  await startPod(core, pod);
  await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
}
