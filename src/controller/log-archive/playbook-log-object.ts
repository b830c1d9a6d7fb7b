// What the log API answers for `get playbooklogs NAME` (no subresource): a PlaybookLog object that
// lists the run's archived attempts, as the store holds them: each attempt's log object, its size,
// and what the record the controller put beside it says (sha256, the LogArchived reason and
// message). An attempt whose record is missing (its upload still running, or the record's write
// failed) is listed with the object's size alone.
import { z } from "zod";
import { LOG_API_GROUP, LOG_API_VERSION } from "../../api/log-archive.js";
import { attemptLogKey, type RunIdentity, recordKey, runPrefix } from "./archive-keys.js";
import type { ArchiveStore } from "./archive-store.js";

export const LOG_API_KIND = "PlaybookLog";

/** One archived attempt, as the PlaybookLog lists it. */
export interface ArchivedAttempt {
  attempt: number;
  bytes: number;
  sha256?: string;
  /** The LogArchived reason the controller recorded when it completed the object. */
  reason?: string;
  message?: string;
}

export interface PlaybookLogObject {
  kind: typeof LOG_API_KIND;
  apiVersion: string;
  /** creationTimestamp: the Playbook's, so that kubectl's AGE is the run's. */
  metadata: { name: string; namespace: string; creationTimestamp?: string };
  /** The run (Playbook) whose folder the attempts are in. */
  playbookUID: string;
  attempts: ArchivedAttempt[];
}

/** The record, read leniently: a field it lacks is left out of the listing, not an error. */
const Record = z.looseObject({
  bytes: z.number().int().min(0).optional(),
  sha256: z.string().optional(),
  reason: z.string().optional(),
  message: z.string().optional(),
});

const ATTEMPT_KEY = /\/attempt-(\d+)\.log$/;

/** The attempts with a log object in the run's folder, in order. */
export async function archivedAttempts(store: ArchiveStore, run: RunIdentity): Promise<number[]> {
  const attempts: number[] = [];
  for (const key of await store.listKeys(runPrefix(store.prefix, run))) {
    const attempt = Number(ATTEMPT_KEY.exec(key)?.[1]);
    if (Number.isInteger(attempt) && attempt > 0) attempts.push(attempt);
  }
  return attempts.sort((a, b) => a - b);
}

/** The PlaybookLog of a run: its archived attempts and what each record says. */
export async function playbookLogObject(
  store: ArchiveStore,
  run: RunIdentity,
  created?: string,
): Promise<PlaybookLogObject> {
  const attempts: ArchivedAttempt[] = [];
  for (const attempt of await archivedAttempts(store, run)) {
    const key = attemptLogKey(store.prefix, run, attempt);
    const record = await store.readJson(recordKey(key), Record);
    const bytes = record?.bytes ?? (await store.headObject(key))?.bytes;
    // Deleted between the listing and now: not archived any more.
    if (bytes === undefined) continue;
    attempts.push({
      attempt,
      bytes,
      ...(record?.sha256 === undefined ? {} : { sha256: record.sha256 }),
      ...(record?.reason === undefined ? {} : { reason: record.reason }),
      ...(record?.message === undefined ? {} : { message: record.message }),
    });
  }
  return {
    kind: LOG_API_KIND,
    apiVersion: `${LOG_API_GROUP}/${LOG_API_VERSION}`,
    metadata: {
      name: run.name,
      namespace: run.namespace,
      ...(created === undefined ? {} : { creationTimestamp: created }),
    },
    playbookUID: run.uid,
    attempts,
  };
}
