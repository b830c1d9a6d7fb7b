// A Secret, ConfigMap or key a task names that the kubelet cannot find (docs/secrets.md): the
// kubelet keeps the container waiting with CreateContainerConfigError and retries, so the pod would
// wait out its start timeout. The run ends at once instead, in the kubelet's own words (the object
// and the key). An optional reference that is missing never shows here: the kubelet starts the
// container without it. Pure: reads the pod as observed.
import type { PodView } from "../objects.js";
import { nameContainer } from "./pod-state.js";

/** The kubelet's waiting reason for a container whose env or envFrom names what does not exist. */
export const MISSING_SOURCE_REASON = "CreateContainerConfigError";

/** "task container task-1 (image ...): CreateContainerConfigError: secret \"db\" not found", or undefined. */
export function missingSourceOf(pod: PodView): string | undefined {
  for (const status of pod.status?.containerStatuses ?? []) {
    const waiting = status.state?.waiting;
    if (waiting?.reason !== MISSING_SOURCE_REASON) continue;
    const message = waiting.message?.trim();
    return `${nameContainer(pod, status.name)}: ${waiting.reason}${message ? `: ${message}` : ""}`;
  }
  return undefined;
}
