// Which of the pods that carry a run's owner reference the controller created. Anyone who may
// create pods in the namespace can give one the run's label, a controller ownerReference to the
// Playbook and a copy of the plan annotation; none of that is proof. The proof is the pod's UID,
// recorded in status.podUID with the start record (or the loss) that follows its create. A pod
// found before that record (a controller stopped in between, or a pass before the record's write)
// is taken only when its containers are exactly what pod-builder builds for its attempt.
// Pure readers of the pods as the API server shows them.
import { CEILING_LEFT_ENV_VAR, canonical } from "../../api/plan.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import { type PodView, podAttemptOf, RUNNER_CONTAINER } from "../objects.js";
import { alternatePodName, type PodManifest, podNameFor } from "./pod-builder.js";

/** How far the pod's creationTimestamp (the API server's clock) may precede the controller's build. */
export const CREATE_SKEW_MS = 2_000;

/** The container fields pod-builder sets that decide what a container runs and what it reads. */
const COMPARED = ["image", "command", "args", "env", "workingDir", "volumeMounts", "lifecycle"] as const;
/** The kubelet's default path: a runner told to write its report elsewhere is not the runner. */
const DEFAULT_TERMINATION_PATH = "/dev/termination-log";

type Container = Record<string, unknown> & { name: string };

function containersOf(pod: { spec?: Record<string, unknown> | undefined }): Container[] {
  const containers = (pod.spec as { containers?: unknown } | undefined)?.containers;
  return Array.isArray(containers) ? (containers as Container[]) : [];
}

function envValue(container: Container, name: string): string | undefined {
  const env = Array.isArray(container.env) ? (container.env as { name?: string; value?: string }[]) : [];
  return env.find((e) => e.name === name)?.value;
}

function withoutEnv(container: Container, name: string): unknown {
  const env = Array.isArray(container.env) ? (container.env as { name?: string }[]) : [];
  return env.filter((e) => e.name !== name);
}

/**
 * What differs between the pod and the one pod-builder built for its attempt (`expected`), in
 * words naming the container and the field; undefined when every container is as built. The
 * runner's remaining ceiling (an env value fixed at the create) may be lower than the build's, never
 * higher than what was left when the pod was created: `ceilingLeftBoundMs`.
 */
export function differenceFromBuilt(
  pod: PodView,
  expected: PodManifest,
  ceilingLeftBoundMs: number,
): string | undefined {
  const found = containersOf(pod as { spec?: Record<string, unknown> });
  const built = containersOf(expected);
  const names = (list: Container[]) => list.map((c) => c.name).join(", ");
  if (names(found) !== names(built)) {
    return `its containers are [${names(found)}], the controller builds [${names(built)}]`;
  }
  for (const [index, want] of built.entries()) {
    const have = found[index] as Container;
    for (const field of COMPARED) {
      const same =
        field === "env"
          ? canonical(withoutEnv(have, CEILING_LEFT_ENV_VAR)) ===
            canonical(withoutEnv(want, CEILING_LEFT_ENV_VAR))
          : canonical(have[field] ?? null) === canonical(want[field] ?? null);
      if (!same) return `its container ${want.name} has another ${field} than the controller builds`;
    }
    if (want.name !== RUNNER_CONTAINER) continue;
    const path = have.terminationMessagePath ?? DEFAULT_TERMINATION_PATH;
    if (
      path !== DEFAULT_TERMINATION_PATH ||
      have.terminationMessagePolicy !== want.terminationMessagePolicy
    ) {
      return `its container ${RUNNER_CONTAINER} writes its termination message elsewhere than the controller builds`;
    }
    const left = envValue(have, CEILING_LEFT_ENV_VAR);
    const wanted = envValue(want, CEILING_LEFT_ENV_VAR);
    if (wanted === undefined) continue;
    const ms = Number(left);
    if (left === undefined || !Number.isInteger(ms) || ms < 0 || ms > ceilingLeftBoundMs) {
      return `its container ${RUNNER_CONTAINER} has ${CEILING_LEFT_ENV_VAR}=${left ?? "(unset)"}, more than the ${ceilingLeftBoundMs} ms the run had left when the pod was created`;
    }
  }
  return undefined;
}

/** The remaining ceiling a built pod hands its runner, in milliseconds. */
export function builtCeilingLeftMs(built: PodManifest): number {
  const runner = containersOf(built).find((c) => c.name === RUNNER_CONTAINER);
  return Number(runner ? envValue(runner, CEILING_LEFT_ENV_VAR) : 0) || 0;
}

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
