// Which of the pods that carry a run's owner reference the controller created. Anyone who may
// create pods in the namespace can give one the run's label, a controller ownerReference to the
// Playbook and a copy of the plan annotation; none of that is proof. The proof is the pod's UID,
// recorded in status.podUID with the start record (or the loss) that follows its create. A pod
// found before that record (a controller stopped in between, a run that waited for its slot) is
// taken only when it is, field for field, what pod-builder builds for its attempt
// (built-pod-difference.ts).
// Pure readers of the pods as the API server shows them.
import type { PlaybookStatus } from "../../api/playbook.js";
import { type PodView, podAttemptOf } from "../objects.js";
import { alternatePodName, podNameFor } from "./pod-builder.js";

/** How far the pod's creationTimestamp (the API server's clock) may precede the controller's build. */
export const CREATE_SKEW_MS = 2_000;

/** A pod that carries the run's owner reference and is not one the controller created. */
export interface ForeignPod {
  pod: PodView;
  why: string;
}

/**
 * The run's pods as the status records them: the current attempt's pod (the UID status.podUID
 * names), the earlier attempts' pods (by name and attempt label, below the current attempt: never
 * read again), and every other pod, foreign. Undefined `recorded` when the status names no UID
 * (then `unrecorded` holds the candidates, to be checked against what the controller builds).
 */
export function sortRunPods(
  status: PlaybookStatus,
  pods: readonly PodView[],
  playbook: { name: string; uid: string },
): { recorded?: PodView; unrecorded: PodView[]; earlier: PodView[]; foreign: ForeignPod[] } {
  const uid = status.podUID;
  const attempts = status.podAttempts ?? 0;
  const namedFor = (pod: PodView) => {
    const attempt = podAttemptOf(pod);
    const name = pod.metadata.name;
    return (
      attempt > 0 &&
      (name === podNameFor(playbook.name, attempt) ||
        name === alternatePodName(playbook.name, attempt, playbook.uid))
    );
  };
  const earlierAttempt = (pod: PodView) => namedFor(pod) && podAttemptOf(pod) < attempts;
  if (uid === undefined) {
    const unrecorded: PodView[] = [];
    const earlier: PodView[] = [];
    const foreign: ForeignPod[] = [];
    for (const pod of pods) {
      if (earlierAttempt(pod) && status.podName !== pod.metadata.name) earlier.push(pod);
      else if (namedFor(pod) && (status.podName === undefined || status.podName === pod.metadata.name))
        unrecorded.push(pod);
      else
        foreign.push({ pod, why: "its name and attempt label are not those of an attempt the run recorded" });
    }
    return { unrecorded, earlier, foreign };
  }
  const recorded = pods.find((pod) => pod.metadata.uid === uid);
  const earlier: PodView[] = [];
  const foreign: ForeignPod[] = [];
  for (const pod of pods) {
    if (pod === recorded) continue;
    if (earlierAttempt(pod) && pod.metadata.name !== status.podName) earlier.push(pod);
    else
      foreign.push({
        pod,
        why: `its UID is not ${uid}, the UID of the pod the controller created (status.podUID)`,
      });
  }
  return { ...(recorded ? { recorded } : {}), unrecorded: [], earlier, foreign };
}
