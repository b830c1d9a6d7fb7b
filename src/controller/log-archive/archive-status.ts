// What a run's status says of its recorded attempt's archive: condition LogArchived and
// status.log. A pure decision over the status and what the archiver knows of the attempt (its
// in-memory result, or the small record it left beside the object). Written apart from the run's
// outcome, which never waits for it.
import { setCondition } from "../../api/conditions.js";
import { LOG_ARCHIVE_REASONS, LOG_ARCHIVED, type LogArchiveReason } from "../../api/log-archive.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import { sameStatus } from "../status.js";

export type ArchivedLog = NonNullable<PlaybookStatus["log"]>;

/** What the archiver knows of one attempt (pod). */
export type AttemptArchive =
  | { podUID: string; attempt: number; state: "archiving"; key: string }
  | {
      podUID: string;
      attempt: number;
      state: "ended";
      reason: LogArchiveReason;
      message: string;
      /** The object, when one was completed (not after StoreUnreachable). */
      log?: ArchivedLog;
    };

/** The message of the Unknown condition: the attempt it is about, so a restart can tell. */
export function archivingMessage(attempt: number, key: string): string {
  return `attempt ${attempt}'s output is being archived to ${key}`;
}

/** Whether the status says an archive of this attempt was under way (a controller restarted during it). */
export function wasArchiving(status: PlaybookStatus | undefined, attempt: number): boolean {
  const condition = status?.conditions?.find((c) => c.type === LOG_ARCHIVED);
  return (
    condition?.status === "Unknown" &&
    condition.reason === LOG_ARCHIVE_REASONS.archiving &&
    (condition.message ?? "").startsWith(`attempt ${attempt}'s `)
  );
}

/** Whether the status already says how the attempt's archive ended. */
export function archiveSettled(status: PlaybookStatus | undefined, attempt: number): boolean {
  const condition = status?.conditions?.find((c) => c.type === LOG_ARCHIVED);
  return (
    condition !== undefined &&
    condition.status !== "Unknown" &&
    (condition.message ?? "").startsWith(`attempt ${attempt}:`)
  );
}

/**
 * Whether the status should hear of this archive: the recorded attempt's, or an earlier attempt's
 * that ended while the status still says it is being archived (its pod was lost with its node
 * and the run moved on to a new pod before the follow ended): its condition is written until the
 * new attempt's archive begins; status.log stays the recorded attempt's.
 */
function concerns(status: PlaybookStatus, archive: AttemptArchive): boolean {
  if (archive.podUID === status.podUID) return true;
  return (
    archive.state === "ended" &&
    archive.attempt < (status.podAttempts ?? 0) &&
    wasArchiving(status, archive.attempt)
  );
}

/**
 * The status with the archive in it (the recorded attempt's, or an earlier attempt's the status
 * still says is being archived), or null when it says that already or the archive is not its.
 */
export function archiveStatus(
  status: PlaybookStatus,
  archive: AttemptArchive | undefined,
  now: Date,
  generation: number | undefined,
): PlaybookStatus | null {
  if (!archive || !concerns(status, archive)) return null;
  const earlier = archive.podUID !== status.podUID;
  const { log: _earlier, ...rest } = status;
  let next: PlaybookStatus;
  if (archive.state === "archiving") {
    next = {
      ...rest,
      conditions: setCondition(
        status.conditions ?? [],
        {
          type: LOG_ARCHIVED,
          status: "Unknown",
          reason: LOG_ARCHIVE_REASONS.archiving,
          message: archivingMessage(archive.attempt, archive.key),
        },
        now,
        generation,
      ),
    };
  } else {
    const whole = archive.reason === LOG_ARCHIVE_REASONS.archived;
    const log = earlier ? status.log : archive.log;
    next = {
      ...rest,
      ...(log ? { log } : {}),
      conditions: setCondition(
        status.conditions ?? [],
        {
          type: LOG_ARCHIVED,
          status: whole ? "True" : "False",
          reason: archive.reason,
          message: `attempt ${archive.attempt}: ${archive.message}`,
        },
        now,
        generation,
      ),
    };
  }
  return sameStatus(status, next) ? null : next;
}
