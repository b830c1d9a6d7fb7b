// What a reconcile pass does for the log archive: which attempt to begin following (a pure choice
// over the status and the pods), and the status the archive's result gives (archive-status.ts).
import { DEFAULT_ARCHIVED_LOG_BYTES } from "../../api/log-archive.js";
import type { NamespaceRules } from "../../api/policy.js";
import { quantityValue } from "../../api/quantity.js";
import { type PodView, RUNNER_CONTAINER, type StoredPlaybook } from "../objects.js";
import { archiveSettled, wasArchiving } from "./archive-status.js";
import type { AttemptRef } from "./log-archiver.js";

/** maximums.archivedLogBytes of the namespace's policy, else 1Gi. */
export function archivedLogCap(rules: NamespaceRules | undefined): number {
  const value = rules?.maximums.archivedLogBytes;
  const bytes = value === undefined ? Number.NaN : quantityValue(value);
  return Number.isFinite(bytes) && bytes > 0 ? Math.floor(bytes) : DEFAULT_ARCHIVED_LOG_BYTES;
}

/**
 * The recorded attempt to follow, once its runner container has started (or, when the status
 * says an earlier controller was archiving it, whatever is left of its pod); undefined when the
 * status already says how its archive ended or there is nothing to follow yet.
 */
export function attemptToFollow(
  playbook: StoredPlaybook,
  pods: readonly PodView[],
  capBytes: number,
): AttemptRef | undefined {
  const status = playbook.status;
  const { namespace = "", name, uid } = playbook.metadata;
  if (!status || !uid || !status.podName || !status.podUID || !status.podAttempts) return undefined;
  // A deleted run's folder is being emptied: nothing new goes into it.
  if (playbook.metadata.deletionTimestamp) return undefined;
  const attempt = status.podAttempts;
  if (archiveSettled(status, attempt)) return undefined;
  const resumed = wasArchiving(status, attempt);
  const pod = pods.find((p) => p.metadata.uid === status.podUID);
  const runner = pod?.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
  const started = runner?.state?.running !== undefined || runner?.state?.terminated !== undefined;
  if (!started && !(resumed && !pod)) return undefined;
  return {
    run: { namespace, name, uid },
    attempt,
    pod: status.podName,
    podUID: status.podUID,
    capBytes,
    resumed,
  };
}
