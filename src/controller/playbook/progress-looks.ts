// When and how the controller looks at a running run's progress: the runner container's log
// (pods/log) of the pod the status records, read at most once per --progress-interval per run,
// the first time one interval after the run's start (so a run shorter than that costs no read and
// no write), as a short tail and, when that holds no record, one longer tail.
import { PROGRESS_MARKER, PROGRESS_MAX_BYTES, parseProgressLine } from "../../api/progress-record.js";
import type { CallOptions } from "../../runtime/api-client.js";
import type { PodLogSource } from "../../runtime/pod-log.js";
import { keyOf, type PodView, RUNNER_CONTAINER, type StoredPlaybook } from "../objects.js";
import { nodeSilenceOf } from "../pods/node-lost.js";
import { isFinished } from "../status.js";
import type { ProgressLook } from "./live-progress.js";
import type { TakenRecord } from "./progress-bounds.js";

/** The first read: the runner writes a record at least every 50 task lines, so this holds one. */
export const SHORT_TAIL_LINES = 200;
/** The second read, when a burst of output pushed the last record out of the short tail. */
export const LONG_TAIL_LINES = 5000;

/** The newest lines of the runner's log that may be records: a short tail, else a longer one. */
export async function readProgressLines(
  source: PodLogSource,
  pod: { namespace: string; name: string },
  options?: CallOptions,
): Promise<string[]> {
  const tail = { namespace: pod.namespace, pod: pod.name, container: RUNNER_CONTAINER };
  const short = await source({ ...tail, tailLines: SHORT_TAIL_LINES }, options);
  if (short.some((line) => parseProgressLine(line) !== null)) return short;
  return source({ ...tail, tailLines: LONG_TAIL_LINES }, options);
}

/** The line prefix and bound a PodLogSource for progress keeps (apiPodLogSource's arguments). */
export const PROGRESS_LINES = { prefix: PROGRESS_MARKER, maxLineBytes: PROGRESS_MAX_BYTES + 1 } as const;

interface Looked {
  podUID: string;
  at: number;
  taken?: TakenRecord;
}

/**
 * The recorded pod, while its runner container runs: the only log progress is read from. Not a
 * pod whose node stopped reporting (pods/node-lost.ts): its kubelet does not answer, and a read
 * would hold the reconcile pass until the call's deadline.
 */
export function recordedRunningPod(playbook: StoredPlaybook, pods: readonly PodView[]): PodView | undefined {
  const status = playbook.status;
  if (!status || isFinished(status) || status.phase !== "Running") return undefined;
  if (status.podName === undefined || status.podUID === undefined) return undefined;
  const pod = pods.find((p) => p.metadata.name === status.podName && p.metadata.uid === status.podUID);
  if (!pod || pod.metadata.deletionTimestamp) return undefined;
  const runner = pod.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
  return runner?.state?.running !== undefined && nodeSilenceOf(pod) === undefined ? pod : undefined;
}

/** Per run, when its progress was last read and the newest record taken from it. */
export class ProgressLooks {
  private readonly looked = new Map<string, Looked>();
  private readonly intervalMs: number;
  private readonly source: PodLogSource;

  constructor(intervalMs: number, source: PodLogSource) {
    this.intervalMs = intervalMs;
    this.source = source;
  }

  get enabled(): boolean {
    return this.intervalMs > 0;
  }

  /** When the run's next look is due (ms since the epoch), or undefined when it gets none. */
  dueAt(playbook: StoredPlaybook, pods: readonly PodView[]): number | undefined {
    return this.dueFor(playbook, recordedRunningPod(playbook, pods));
  }

  /** dueAt for the run's recorded pod, once found. */
  private dueFor(playbook: StoredPlaybook, pod: PodView | undefined): number | undefined {
    if (!this.enabled) return undefined;
    const start = Date.parse(playbook.status?.startTime ?? "");
    if (!pod || Number.isNaN(start)) return undefined;
    const last = this.looked.get(keyOf(playbook.metadata));
    const lastAt = last && last.podUID === pod.metadata.uid ? last.at : Number.NEGATIVE_INFINITY;
    return Math.max(start + this.intervalMs, lastAt + this.intervalMs);
  }

  /** Reads the run's progress if a look is due now; undefined when none is. */
  async look(
    playbook: StoredPlaybook,
    pods: readonly PodView[],
    now: Date,
    options?: CallOptions,
  ): Promise<ProgressLook | undefined> {
    const key = keyOf(playbook.metadata);
    if (isFinished(playbook.status)) {
      this.looked.delete(key);
      return undefined;
    }
    const pod = recordedRunningPod(playbook, pods);
    const due = this.dueFor(playbook, pod);
    if (due === undefined || !pod?.metadata.uid || due > now.getTime()) return undefined;
    const podUID = pod.metadata.uid;
    const last = this.looked.get(key);
    const taken = last?.podUID === podUID ? last.taken : undefined;
    // Counted as a look whether or not the read answers: a failing read is not retried in a loop.
    this.looked.set(key, { podUID, at: now.getTime(), ...(taken ? { taken } : {}) });
    const lines = await readProgressLines(
      this.source,
      { namespace: playbook.metadata.namespace ?? "", name: pod.metadata.name },
      options,
    );
    return { podUID, lines, ...(taken ? { last: taken } : {}) };
  }

  /** The record of the pod was taken into status: an older one is not news after it. */
  took(playbook: StoredPlaybook, podUID: string, record: TakenRecord): void {
    const key = keyOf(playbook.metadata);
    const last = this.looked.get(key);
    if (last?.podUID !== podUID || (last.taken && last.taken.seq > record.seq)) return;
    this.looked.set(key, { ...last, taken: record });
  }

  /** The Playbook is gone or finished: nothing more to remember of it. */
  forget(key: string): void {
    this.looked.delete(key);
  }
}
