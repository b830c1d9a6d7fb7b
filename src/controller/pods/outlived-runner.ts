// Task containers that still run after the runner's container ended: the runner could not end
// what ran in them (a task stopped its agent, say), and the pod would keep them until its TTL.
// The kubelet's view is the one no task can change, so it decides; the pod is deleted at once.
import { type PodView, RUNNER_CONTAINER } from "../objects.js";

/** The pod's containers but the runner's that the kubelet reports running, by name. */
export function containersOutlivingRunner(pod: PodView): string[] {
  const statuses = pod.status?.containerStatuses ?? [];
  const runner = statuses.find((s) => s.name === RUNNER_CONTAINER);
  if (runner?.state?.terminated === undefined) return [];
  return statuses
    .filter((s) => s.name !== RUNNER_CONTAINER && s.state?.running !== undefined)
    .map((s) => s.name);
}
