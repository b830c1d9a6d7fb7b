// One exit code per outcome, the same for `playbook run`, the pod runner and every command that
// waits on a cluster run (DESIGN's "Local mode" table), so a script can tell a limit from a failure.
// The controller holds the pod runner's exit code to it: a runner exits by its report's reason.
import { isLimitReason } from "./reasons.js";

export const EXIT = { succeeded: 0, failed: 1, invalid: 2, lost: 3, limit: 124, interrupted: 130 } as const;

/**
 * DESIGN's table: Succeeded 0, TaskFailed 1, InvalidSpec 2,
 * PodLost/RunnerLost/Preempted 3, TaskTimeout/StallLimit/RunCeiling/PodDeadlineExceeded/StartTimeout/
 * QueueTimeout 124, Cancelled 130.
 * A reason outside the vocabulary (a newer controller's) is a failure.
 */
export function exitCodeForReason(reason: string): number {
  if (reason === "Succeeded") return EXIT.succeeded;
  if (reason === "InvalidSpec") return EXIT.invalid;
  if (reason === "PodLost" || reason === "RunnerLost" || reason === "Preempted") return EXIT.lost;
  if (reason === "Cancelled") return EXIT.interrupted;
  if (isLimitReason(reason)) return EXIT.limit;
  return EXIT.failed;
}
