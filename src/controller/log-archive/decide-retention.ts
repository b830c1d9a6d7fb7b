// Retention of a run's archived objects (docs/log-archive.md#retention): pure decisions over the
// Playbook the cache shows, the archive's setting and `now`. While the archive is on, every
// Playbook carries the finalizer playbook.dev/log-archive before its first pod; once deleted, its
// run's folder is deleted from the store and the finalizer comes off. A store that stays down
// holds the Playbook at most the delete timeout, counted from its deletionTimestamp: then the
// controller gives up, says so (a Warning naming the folder, the metric) and lets it go.

import { LOG_ARCHIVE_FINALIZER } from "../../api/log-archive.js";
import type { StoredPlaybook } from "../objects.js";
import { runPrefix } from "./archive-keys.js";

export interface RetentionSettings {
  /** The archive is on (a bucket is set). */
  archiveOn: boolean;
  /** The archive's key prefix ("" for the bucket's root). */
  prefix: string;
  /** How long after its deletionTimestamp a Playbook's objects are retried before the controller gives up. */
  deleteTimeoutMs: number;
}

export type RetentionStep =
  /** Nothing for retention to do: the pass goes on. */
  | { type: "none" }
  /** The finalizer goes on first; the pass ends and the patch's watch event brings the next. */
  | { type: "addFinalizer" }
  /** Deleted with the finalizer: delete the run's folder, then release. */
  | { type: "deleteObjects"; prefix: string }
  /** Deleted, with the archive off now: let it go at once, saying its objects (if any) were left. */
  | { type: "release"; leftPrefix: string };

function hasFinalizer(playbook: StoredPlaybook): boolean {
  return playbook.metadata.finalizers?.includes(LOG_ARCHIVE_FINALIZER) ?? false;
}

/** What retention does in this pass, before any run decision. */
export function decideRetention(playbook: StoredPlaybook, settings: RetentionSettings): RetentionStep {
  const { namespace = "", name, uid = "" } = playbook.metadata;
  const prefix = runPrefix(settings.prefix, { namespace, name, uid });
  if (playbook.metadata.deletionTimestamp) {
    // Not ours to hold: the pass goes on as for any Playbook being deleted.
    if (!hasFinalizer(playbook)) return { type: "none" };
    return settings.archiveOn ? { type: "deleteObjects", prefix } : { type: "release", leftPrefix: prefix };
  }
  if (settings.archiveOn && !hasFinalizer(playbook)) return { type: "addFinalizer" };
  return { type: "none" };
}

export type DeleteFailedStep =
  /** Try again after this long. */
  | { type: "retry"; afterMs: number }
  /** The bound passed: give up (Warning, metric) and release. */
  | { type: "giveUp"; waitedMs: number };

const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 60_000;

/**
 * After a failed delete of a run's folder: retry with a delay that grows with the time already
 * spent (about half of it, 1 s to 60 s: a backoff that needs no memory and survives a restart),
 * the last retry landing on the bound; give up once the bound has passed.
 */
export function afterDeleteFailed(
  deletionTimestamp: string,
  now: Date,
  deleteTimeoutMs: number,
): DeleteFailedStep {
  const deletedAt = Date.parse(deletionTimestamp);
  const waitedMs = Number.isNaN(deletedAt) ? deleteTimeoutMs : Math.max(0, now.getTime() - deletedAt);
  if (waitedMs >= deleteTimeoutMs) return { type: "giveUp", waitedMs };
  const backoff = Math.min(MAX_RETRY_MS, Math.max(FIRST_RETRY_MS, Math.round(waitedMs / 2)));
  return { type: "retry", afterMs: Math.max(1, Math.min(backoff, deleteTimeoutMs - waitedMs)) };
}
