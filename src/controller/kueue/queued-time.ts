// The run's ceiling does not count time in Kueue's queue: not its current pod's (from its creation
// to its admission) and not its earlier pods' (before a preemption or a loss), which the status
// keeps in status.queuedMs as each pod gives way to the next (docs/kueue.md).
import type { PlaybookStatus } from "../../api/playbook.js";
import type { PodView } from "../objects.js";
import { admittedAt, queuedMs, workloadOf } from "./kueue-hold.js";
import type { WorkloadView } from "./workload-view.js";

/** When the run's ceiling began counting, before its current pod's own queue time: ms since the epoch. */
export function ceilingStartMs(startTime: string, status: PlaybookStatus): number {
  return Date.parse(startTime) + (status.queuedMs ?? 0);
}

/**
 * status.queuedMs once `ended` gives way to the next pod: what the earlier pods waited, and what
 * `ended` did (0 when it did not go through Kueue or its admission is unknown, so the ceiling
 * counts it: the run gets less time, never more).
 */
export function queuedMsAfter(
  status: PlaybookStatus,
  ended: PodView | undefined,
  workloads: readonly WorkloadView[] | undefined,
): number {
  const earlier = status.queuedMs ?? 0;
  if (!ended) return earlier;
  return earlier + queuedMs(ended, admittedAt(ended, workloadOf(ended, workloads)));
}
