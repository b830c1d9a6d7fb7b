// What a progress record may claim, bounded by what the controller knows itself: the run's
// recorded start, when the pod's runner container started (the kubelet's), its own clock, and the
// most records the runner can write in a time. A record outside them is not the runner's and is
// ignored, whatever else it says (docs/design.md, "Live progress"). Pure functions.
import type { ResolvedLimits } from "../../api/limits.js";
import type { ProgressRecord } from "../../api/progress-record.js";
import { CLOCK_SLACK_MS } from "../pods/report-trust.js";

/**
 * How far the node's clock (the runner's and the kubelet's times) may be ahead of the controller's.
 * Larger than the node-to-node slack: these are two machines' clocks.
 */
export const NODE_CLOCK_SKEW_MS = 10_000;

/**
 * The fewest bytes of the runner's log a record costs, the records for a task's start or end
 * aside: one by lines follows 50 task lines of at least 5 bytes ("[a] " and a newline) and is
 * itself a line of at least 98 ("playbook.dev/progress {"v":1,"start":"…","seq":0,"tasks":[…]}").
 */
const MIN_LOG_BYTES_PER_RECORD = 50 * 5 + 98;
/**
 * The most bytes the runner's log takes in a millisecond: 4 GiB/s, three times what the runner
 * writes into a raw pipe in its benchmark (docs/development.md); containerd's log, which stamps
 * and writes every entry, takes far less.
 */
const MAX_LOG_BYTES_PER_MS = (4 * 2 ** 30) / 1000;
/** The most records the runner writes in a millisecond, the one per second by the clock included. */
export const MAX_RECORDS_PER_MS = Math.ceil(MAX_LOG_BYTES_PER_MS / MIN_LOG_BYTES_PER_RECORD) + 1;

/** What the controller knows of the run and its pod, against which a record is checked. */
export interface RecordBounds {
  /** the run's start as status records it: the runner was handed it and counts from it */
  runStart: string;
  /** when the pod's runner container started (ms, the kubelet's, a whole second), else the pod's creation */
  runnerStartedAt: number;
  /** the controller's clock now (ms) */
  now: number;
  /** the most records the runner writes for the run's begin and its tasks' starts and ends */
  eventRecords: number;
  /** the record taken from this pod before, if any */
  last?: TakenRecord;
}

/** A record the status shows: its seq, and the latest time it names (ms): it was written after. */
export interface TakenRecord {
  seq: number;
  writtenAfter: number;
}

/** The records the runner writes that no clock or line count decides: the begin, and each attempt's start and end. */
export function eventRecordsOf(limits: ResolvedLimits): number {
  return 1 + limits.tasks.reduce((sum, task) => sum + 2 * (task.retries + 1), 0);
}

/** The latest time the record names (ms on the runner's clock): its start, a running task's start, a task's end. */
export function latestTimeOf(record: ProgressRecord): number {
  const start = Date.parse(record.start);
  let latest = 0;
  for (const task of record.tasks) latest = Math.max(latest, task.s ?? 0, task.t?.[1] ?? 0);
  return start + latest;
}

/** The most records the runner can have written in `ms` with `events` records for events on top. */
function mostRecords(events: number, ms: number): number {
  return events + Math.ceil(Math.max(0, ms) * MAX_RECORDS_PER_MS);
}

/**
 * Why the record cannot be the runner's, or undefined when it is within what the controller knows:
 * - its start is the run's recorded start (the runner counts from the start it was handed);
 * - every time it names lies between the runner container's start and now (with the clocks' slack);
 * - its seq is no more than the records the runner could have written since its container started;
 * - against the record taken before: no lower seq, and no more records between the two than the
 *   time from the first's latest time to now allows.
 */
export function recordOutOfBounds(record: ProgressRecord, bounds: RecordBounds): string | undefined {
  const start = Date.parse(record.start);
  const runStart = Date.parse(bounds.runStart);
  if (start !== runStart) {
    return `record ${record.seq} counts from ${record.start}, not from the run's start ${bounds.runStart}`;
  }
  const earliest = bounds.runnerStartedAt - CLOCK_SLACK_MS;
  const latest = bounds.now + NODE_CLOCK_SKEW_MS;
  for (const [index, task] of record.tasks.entries()) {
    const times = [task.s, task.t?.[0], task.t?.[1]].filter((offset) => offset !== undefined);
    for (const offset of times) {
      const at = start + offset;
      if (at < earliest || at > latest) {
        return `record ${record.seq} says task ${index} ran at ${new Date(at).toISOString()}, outside the runner's life (${new Date(bounds.runnerStartedAt).toISOString()} to now, ${new Date(bounds.now).toISOString()})`;
      }
    }
  }
  const most = mostRecords(bounds.eventRecords, latest - earliest);
  if (record.seq >= most) {
    return `record ${record.seq} is beyond the ${most} records the runner can have written since its container started`;
  }
  const last = bounds.last;
  if (last === undefined) return undefined;
  if (record.seq < last.seq) return `record ${record.seq} is older than record ${last.seq} read before`;
  const since = mostRecords(bounds.eventRecords, latest - last.writtenAfter);
  if (record.seq - last.seq > since) {
    return `record ${record.seq} is ${record.seq - last.seq} records after record ${last.seq}, more than the ${since} the runner can have written since that one`;
  }
  return undefined;
}
