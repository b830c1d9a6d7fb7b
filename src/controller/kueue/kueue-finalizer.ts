// The controller's finalizer on the pods of runs that go through Kueue: Kueue deletes a pod it
// preempts, and without the finalizer the pod (its runner's report, Kueue's TerminationTarget
// condition) could be gone before the controller read it, and the stop would pass for a lost pod.
// It comes off as soon as the controller is done with the pod: the run's status recorded what
// followed the pod (a later attempt, or the run's end). No pod is left terminating on it. Pure.
import type { PlaybookStatus } from "../../api/playbook.js";
import type { Action } from "../decision.js";
import { type PodView, podAttemptOf } from "../objects.js";
import { isFinished } from "../status.js";
import { PREEMPTION_FINALIZER } from "./kueue-names.js";

/** Whether the pod carries the controller's finalizer. */
export function heldForReading(pod: PodView): boolean {
  return (pod.metadata.finalizers ?? []).includes(PREEMPTION_FINALIZER);
}

/**
 * The pods whose finalizer comes off now, as the status on record (`recorded`, before this pass's
 * write) shows the controller done with them: every pod of a finished run, and a pod of an
 * earlier attempt than the latest the status records (its end was decided when the next pod was
 * created). The current pod of a run that goes on keeps it: its end is still to be read.
 */
export function releaseActions(recorded: PlaybookStatus | undefined, pods: readonly PodView[]): Action[] {
  const done = isFinished(recorded);
  const latest = recorded?.podAttempts ?? 0;
  return pods
    .filter((pod) => heldForReading(pod) && (done || podAttemptOf(pod) < latest))
    .map((pod) => ({ type: "releasePod" as const, name: pod.metadata.name }));
}

/**
 * A pod whose Playbook is gone (deleted: the garbage collector deletes its pods) has nobody left
 * to read it: its finalizer comes off once it is being deleted.
 */
export function orphanToRelease(pod: PodView, ownerKnown: boolean): boolean {
  return heldForReading(pod) && !ownerKnown && Boolean(pod.metadata.deletionTimestamp);
}
