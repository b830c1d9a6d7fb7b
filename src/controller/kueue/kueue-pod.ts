// What a run that goes through Kueue adds to its pod (docs/kueue.md): the queue and priority
// labels Kueue reads, and resource requests on every container, so that the quota counts what the
// pod asks for. A run without a queue gets none of it: its pod is the one it always was. Pure.
import type { PlaybookSpec, PlaybookStatus } from "../../api/playbook.js";
import type { PodSettings } from "../../api/policy.js";
import { KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL } from "./kueue-names.js";

type Resources = NonNullable<PodSettings["resources"]>;

/**
 * What a task container requests when neither the Playbook nor its policy says: a shell step's
 * share (the agent and a command such as curl, kubectl or make on a small tree). A task that
 * needs more says so in spec.resources; one that asks only a limit requests that limit, as the
 * API server defaults it.
 */
export const DEFAULT_TASK_REQUESTS = { cpu: "100m", memory: "256Mi" } as const;
/** The resources every container's request is given for: those a ClusterQueue's quota names most. */
export const REQUESTED_RESOURCES = ["cpu", "memory"] as const;

export type RequestSource = "spec" | "policy" | "default";
export interface ShownRequest {
  value: string;
  source: RequestSource;
}

/** status.queue: the run's LocalQueue and what its pod asks of the quota, each figure with its level. */
export type QueueStatus = NonNullable<PlaybookStatus["queue"]>;

/** The run's Kueue labels: the queue, and the WorkloadPriorityClass when the spec names one. */
export function kueueLabels(queue: PodSettings["queue"], spec: PlaybookSpec): Record<string, string> {
  if (!queue) return {};
  return {
    [KUEUE_QUEUE_LABEL]: queue.name,
    ...(spec.priorityClassName ? { [KUEUE_PRIORITY_LABEL]: spec.priorityClassName } : {}),
  };
}

/** A quantity as the API server keeps it in a resource map (a number stays a number there). */
const text = (quantity: string | number) => String(quantity);

/**
 * Each task container's resources for a run through Kueue: the effective ones (the spec's, the
 * policy's filling in), plus a request for each of REQUESTED_RESOURCES they leave without a request
 * or a limit (a limit alone is its request). Where each request came from goes with it.
 */
export function queuedTaskResources(
  spec: PlaybookSpec,
  effective: PodSettings["resources"],
): { resources: Resources; shown: Record<string, ShownRequest> } {
  const requests: Record<string, string | number> = { ...(effective?.requests ?? {}) };
  const shown: Record<string, ShownRequest> = {};
  for (const name of REQUESTED_RESOURCES) {
    const own = spec.resources?.requests?.[name] ?? spec.resources?.limits?.[name];
    const given = effective?.requests?.[name] ?? effective?.limits?.[name];
    if (own !== undefined) shown[name] = { value: text(own), source: "spec" };
    else if (given !== undefined) shown[name] = { value: text(given), source: "policy" };
    else {
      requests[name] = DEFAULT_TASK_REQUESTS[name];
      shown[name] = { value: DEFAULT_TASK_REQUESTS[name], source: "default" };
    }
  }
  return { resources: { ...(effective ?? {}), requests }, shown };
}

/** status.queue for a run through `queue`, whose pod holds `taskContainers` task containers. */
export function queueStatus(
  queue: NonNullable<PodSettings["queue"]>,
  spec: PlaybookSpec,
  effective: PodSettings["resources"],
  runnerRequests: Record<string, string>,
  taskContainers: number,
): QueueStatus {
  return {
    name: queue.name,
    source: queue.source,
    ...(spec.priorityClassName ? { priorityClassName: spec.priorityClassName } : {}),
    requests: {
      runner: runnerRequests,
      task: queuedTaskResources(spec, effective).shown,
      taskContainers,
    },
  };
}
