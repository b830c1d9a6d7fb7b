// Where a run's archived output lives in the bucket. One folder per run (the Playbook's UID keeps
// a re-created Playbook of the same name apart), one object per attempt (pod) and its report:
//   <prefix><namespace>/<name>/<uid>/attempt-<K>.log
//   <prefix><namespace>/<name>/<uid>/attempt-<K>.report.json
// Every key is made here from the Playbook the controller reads, never from what a pod wrote, so
// no run's output can land in another run's folder.

export interface RunIdentity {
  namespace: string;
  name: string;
  uid: string;
}

/** The run's folder: everything under it is deleted with the Playbook. */
export function runPrefix(prefix: string, run: RunIdentity): string {
  return `${prefix}${run.namespace}/${run.name}/${run.uid}/`;
}

/** The attempt's log object (attempt counts from 1, as status.podAttempts). */
export function attemptLogKey(prefix: string, run: RunIdentity, attempt: number): string {
  return `${runPrefix(prefix, run)}attempt-${attempt}.log`;
}

/** The record beside an attempt's completed log object: what it holds, as the controller completed it. */
export function recordKey(logKey: string): string {
  return `${logKey}.json`;
}

/** The attempt's report, as the runner wrote it to its termination message. */
export function attemptReportKey(prefix: string, run: RunIdentity, attempt: number): string {
  return `${runPrefix(prefix, run)}attempt-${attempt}.report.json`;
}

/**
 * Where the runner's own upload of an attempt puts its pieces until the controller composes them
 * into the attempt's log object (src/api/log-upload.ts): head segment n, tail slot j, the index.
 */
export function uploadSegmentsPrefix(logKey: string): string {
  return `${logKey}.seg/`;
}

export function headSegmentKey(logKey: string, n: number): string {
  return `${uploadSegmentsPrefix(logKey)}h-${String(n).padStart(5, "0")}`;
}

export function tailSlotKey(logKey: string, slot: number): string {
  return `${uploadSegmentsPrefix(logKey)}t-${String(slot).padStart(4, "0")}`;
}

export function uploadIndexKey(logKey: string): string {
  return `${uploadSegmentsPrefix(logKey)}index.json`;
}

/** The shape the controller gave the attempt's upload (head, tail, segment size), as it made the plan. */
export function uploadShapeKey(logKey: string): string {
  return `${uploadSegmentsPrefix(logKey)}shape.json`;
}
