// The log archive's words in the API (docs/log-archive.md): the LogArchived condition, its
// reasons, the finalizer that deletes a run's objects with it, and the aggregated API that reads
// an archived log back. Shared by the controller, the CLI and the chart.

/** Condition type: True once the attempt's whole output (to the cap) is in the archive. */
export const LOG_ARCHIVED = "LogArchived";

/** LogArchived reasons. */
export const LOG_ARCHIVE_REASONS = {
  /** True: every byte the runner printed is in the archive. */
  archived: "Archived",
  /** Unknown: the attempt runs and its output is being archived. */
  archiving: "Archiving",
  /** False: the store did not answer or refused, past the retries. */
  storeUnreachable: "StoreUnreachable",
  /** False: the output passed maximums.archivedLogBytes; the head and the tail are kept. */
  capReached: "CapReached",
  /** False: the node went away while the run ran; what arrived before is kept. */
  nodeLost: "NodeLost",
  /** False: the controller restarted while the attempt ran; the archive holds what the node still kept. */
  incomplete: "Incomplete",
} as const;
export type LogArchiveReason = (typeof LOG_ARCHIVE_REASONS)[keyof typeof LOG_ARCHIVE_REASONS];

/** `playbook_log_archive_failures_total{reason}` label values. */
export const LOG_ARCHIVE_FAILURES = [
  "store_unreachable",
  "cap_reached",
  "node_lost",
  "incomplete",
  "delete",
] as const;
export type LogArchiveFailure = (typeof LOG_ARCHIVE_FAILURES)[number];

/** On every Playbook while the archive is on: its objects go before the Playbook does. */
export const LOG_ARCHIVE_FINALIZER = "playbook.dev/log-archive";

/** The aggregated API the controller serves archived logs through (`get playbooklogs`). */
export const LOG_API_GROUP = "logs.playbook.dev";
export const LOG_API_VERSION = "v1alpha1";
export const LOG_API_RESOURCE = "playbooklogs";
/**
 * The subresource that answers an attempt's log bytes. A `log` subresource is long-running to
 * the API server (as pods/log), so its request timeout does not cut a slow read.
 */
export const LOG_API_SUBRESOURCE = "log";
/** The header of the log API's answer that says which attempt's log it is. */
export const LOG_API_ATTEMPT_HEADER = "x-playbook-log-attempt";

/** maximums.archivedLogBytes when no policy says: 1 GiB. */
export const DEFAULT_ARCHIVED_LOG_BYTES = 1024 ** 3;

/** The least maximums.archivedLogBytes a policy may set: two parts of the upload and room for the tail. */
export const MIN_ARCHIVED_LOG_BYTES = 16 * 1024 ** 2;
