// A run's output as its pods expose it: the runner container's log (its progress lines, its
// progress records, which are never shown, and `[task] ` lines, all on its stdout: `kubectl logs POD -c runner`), read through the log API with
// each line's timestamp, followed across the run's attempts (one pod each). Nothing is asked of
// the pod itself: no permission, no token in it.
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { PROGRESS_MARKER } from "../../api/progress-record.js";
import { ApiError } from "../../runtime/api-client.js";
import { statusCodeOf } from "../../runtime/api-errors.js";
import { type Cluster, describeApiFailure } from "./connection.js";
import type { ClusterPlaybook } from "./playbooks.js";

/** The pod's container the runner is in (src/controller/pods/pod-builder.ts's RUNNER_CONTAINER). */
export const RUNNER_CONTAINER = "runner";
/** Labels the controller puts on a run's pods (src/controller/objects.ts). */
const LABEL_NAME = "playbook.dev/name";
const LABEL_POD_ATTEMPT = "playbook.dev/pod-attempt";
/** How long a pod that has not started is looked at again. */
const NOT_STARTED_RETRY_MS = 500;
/** The longest wait before a log that failed is tried again. */
const MAX_RETRY_MS = 5_000;

export interface RunPod {
  name: string;
  attempt: number;
}

/** One line of a pod's log: its text and when the kubelet took it (ms since the epoch). */
export interface LogLine {
  text: string;
  at: number;
}

/** The pod's log cannot be read now: it is gone (404), or its runner has not started yet (400, 204). */
export class LogUnavailable extends Error {
  readonly kind: "gone" | "not-started";

  constructor(kind: "gone" | "not-started", message: string) {
    super(message);
    this.name = "LogUnavailable";
    this.kind = kind;
  }
}

const PodListSchema = z.looseObject({
  items: z
    .array(
      z.looseObject({
        metadata: z.looseObject({
          name: z.string(),
          labels: z.record(z.string(), z.string()).optional(),
          ownerReferences: z.array(z.looseObject({ uid: z.string().optional() })).optional(),
        }),
      }),
    )
    .nullish(),
});

const PodSchema = z.looseObject({
  status: z
    .looseObject({
      containerStatuses: z
        .array(z.looseObject({ name: z.string(), state: z.looseObject({}).catchall(z.unknown()).optional() }))
        .optional(),
    })
    .optional(),
});

const AttemptsSchema = z.looseObject({
  podName: z.string().optional(),
  podAttempts: z.number().optional(),
  startTime: z.string().optional(),
});

const SpecTask = z.looseObject({ name: z.string(), retries: z.number().int().optional() });
const SpecTasksSchema = z.looseObject({
  tasks: z.array(SpecTask).optional(),
  finally: z.array(SpecTask).optional(),
});

/**
 * The run's tasks as its spec names them, with their retries (what the progress lines leave out):
 * the main tasks, then the finally tasks, as the runner counts them.
 */
export function tasksOfPlaybook(
  playbook: ClusterPlaybook | undefined,
): { name: string; retries: number; finally?: true }[] {
  const spec = SpecTasksSchema.safeParse(playbook?.spec ?? {}).data;
  return [
    ...(spec?.tasks ?? []).map((task) => ({ name: task.name, retries: task.retries ?? 0 })),
    ...(spec?.finally ?? []).map((task) => ({
      name: task.name,
      retries: task.retries ?? 0,
      finally: true as const,
    })),
  ];
}

/** What the status says of the run's pods: the current one and how many there were. */
export function podsInStatus(playbook: ClusterPlaybook): { podName?: string; podAttempts: number } {
  const status = AttemptsSchema.safeParse(playbook.status ?? {}).data ?? {};
  return {
    ...(status.podName ? { podName: status.podName } : {}),
    podAttempts: status.podAttempts ?? (status.podName ? 1 : 0),
  };
}

/** The run's start (status.startTime), from which its ceiling counts. */
export function runStartOf(playbook: ClusterPlaybook): Date | undefined {
  const text = AttemptsSchema.safeParse(playbook.status ?? {}).data?.startTime;
  return text ? new Date(text) : undefined;
}

/**
 * The run's pods that still exist, by attempt: those the Playbook owns (by UID), found by the
 * controller's labels. status.podName is always among them, listed or not (a user who may read
 * logs but not list pods still follows the current one).
 */
export async function podsOfRun(cluster: Cluster, playbook: ClusterPlaybook): Promise<RunPod[]> {
  const { podName, podAttempts } = podsInStatus(playbook);
  const pods = new Map<string, RunPod>();
  const name = playbook.metadata.name;
  // The label holds the name as it is when it fits a label value; a longer one is cut and hashed.
  const selector =
    name.length <= 63 ? `${LABEL_NAME}=${name}` : "app.kubernetes.io/managed-by=playbook-controller";
  try {
    const list = PodListSchema.parse(
      await cluster.api.call({
        method: "GET",
        path: `/api/v1/namespaces/${encodeURIComponent(cluster.namespace)}/pods`,
        query: { labelSelector: selector },
      }),
    );
    for (const pod of list.items ?? []) {
      const owned = pod.metadata.ownerReferences?.some((owner) => owner.uid === playbook.metadata.uid);
      const attempt = Number(pod.metadata.labels?.[LABEL_POD_ATTEMPT]);
      if (owned && Number.isInteger(attempt))
        pods.set(pod.metadata.name, { name: pod.metadata.name, attempt });
    }
  } catch (error) {
    if (statusCodeOf(error) !== 403)
      throw describeApiFailure(error, { verb: "list", resource: "pods" }, cluster);
  }
  if (podName && !pods.has(podName)) pods.set(podName, { name: podName, attempt: podAttempts });
  return [...pods.values()].sort((a, b) => a.attempt - b.attempt);
}

/**
 * A line of the runner's log that is one of its progress records (src/api/progress-record.ts):
 * only the runner starts a line with the marker, task lines start with their `[task] ` prefix.
 */
export function isProgressRecord(text: string): boolean {
  return text.startsWith(PROGRESS_MARKER);
}

/** A timestamp of the log API (RFC 3339 with up to nine decimals) as a key that sorts as it reads. */
function timestampKey(text: string): string {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/.exec(text);
  if (!m) return text;
  return `${m[1]}.${(m[2] ?? "").padEnd(9, "0")}`;
}

/** A line of the log API with `timestamps=true`: its text, its time, and a key that sorts as the times do. */
export function splitTimestamp(raw: string): { key: string; stamp: string; line: LogLine } {
  const space = raw.indexOf(" ");
  const stamp = space > 0 ? raw.slice(0, space) : "";
  const at = stamp ? Date.parse(stamp) : Number.NaN;
  if (Number.isNaN(at)) return { key: "", stamp: "", line: { text: raw, at: Date.now() } };
  return { key: timestampKey(stamp), stamp, line: { text: raw.slice(space + 1), at } };
}

function unavailable(error: unknown, pod: string): LogUnavailable | undefined {
  if (!(error instanceof ApiError)) return undefined;
  const said = (error.body as { message?: unknown } | null)?.message;
  const message = typeof said === "string" ? said : error.message;
  if (error.code === 404) return new LogUnavailable("gone", `pod ${pod} is gone: ${message}`);
  // 400: its container is waiting to start; 204 (no content): the pod is not on a node yet.
  if (error.code === 400 || error.code === 204) return new LogUnavailable("not-started", message);
  return undefined;
}

/** Whether the pod's runner container has ended (or the pod is gone): its log is complete. */
async function runnerEnded(cluster: Cluster, pod: string, signal: AbortSignal): Promise<boolean> {
  try {
    const raw = await cluster.api.call({
      method: "GET",
      path: `/api/v1/namespaces/${encodeURIComponent(cluster.namespace)}/pods/${encodeURIComponent(pod)}`,
      options: { signal },
    });
    const runner = PodSchema.parse(raw).status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
    return runner?.state?.terminated !== undefined;
  } catch (error) {
    if (statusCodeOf(error) === 404) return true;
    throw error;
  }
}

/**
 * Reads one pod's runner log, each line with its time; with `follow`, until the container ends.
 * A stream that breaks while the container still runs is opened again from the last line's time,
 * its lines already seen skipped. Rejects with LogUnavailable when the pod is gone or its runner
 * has not started, with a ClusterError when the API server refuses.
 */
export async function readPodLog(
  cluster: Cluster,
  pod: string,
  options: {
    follow: boolean;
    signal: AbortSignal;
    onLine: (line: LogLine) => void;
    onOpen?: () => void;
    /** a failure that is tried again (the kubelet unreachable): said once */
    onProblem?: (message: string) => void;
  },
): Promise<void> {
  let announced = false;
  let failures = 0;
  const path = `/api/v1/namespaces/${encodeURIComponent(cluster.namespace)}/pods/${encodeURIComponent(pod)}/log`;
  // The newest time seen and the lines seen at it: a stream opened again from that time skips
  // what was read before. Only then: within one stream, stdout and stderr lines are not in time
  // order (containerd stamps each stream's lines apart), and none may be dropped for it.
  let maxKey = "";
  let maxStamp = "";
  let atMax: string[] = [];
  for (let opened = 0; !options.signal.aborted; opened++) {
    let closed = false;
    const seenBefore = opened > 0 ? [...atMax] : [];
    let reopenedFrom = opened > 0 ? maxKey : "";
    try {
      await cluster.api.streamLines(
        path,
        {
          container: RUNNER_CONTAINER,
          timestamps: true,
          ...(options.follow ? { follow: true } : {}),
          ...(maxStamp ? { sinceTime: maxStamp } : {}),
        },
        {
          onOpen: () => {
            if (!announced) options.onOpen?.();
            announced = true;
            failures = 0;
          },
          onLine: (raw) => {
            const { key, stamp, line } = splitTimestamp(raw);
            if (key && reopenedFrom) {
              if (key < reopenedFrom) return;
              // Past the time it was opened from: nothing more was seen before.
              if (key > reopenedFrom) reopenedFrom = "";
              const seen = key === reopenedFrom ? seenBefore.indexOf(line.text) : -1;
              if (seen >= 0) {
                seenBefore.splice(seen, 1);
                return;
              }
            }
            if (key > maxKey) {
              maxKey = key;
              maxStamp = stamp;
              atMax = [line.text];
            } else if (key && key === maxKey) atMax.push(line.text);
            // The runner's progress records are the controller's to read, never shown.
            if (!isProgressRecord(line.text)) options.onLine(line);
          },
        },
        { signal: options.signal },
      );
      closed = true;
    } catch (error) {
      if (options.signal.aborted) return;
      const why = unavailable(error, pod);
      if (why && (opened === 0 || why.kind === "gone")) throw why;
      if (!why) {
        const failure = describeApiFailure(error, { verb: "get", resource: "pods/log", name: pod }, cluster);
        // Refused (RBAC...), or nothing to come back to: said to the caller.
        if (!options.follow || (error instanceof ApiError && error.code < 500)) throw failure;
        // The API server, or the kubelet behind it, failed, or the connection broke: said once,
        // then tried again while the container runs.
        if (failures++ === 0) options.onProblem?.(failure.message);
      }
    }
    if (!options.follow || options.signal.aborted) return;
    // A stream the server closed ends with the container, unless the pod says it still runs
    // (a user who may not read pods has only the stream's word).
    const ended = await runnerEnded(cluster, pod, options.signal).catch(() => undefined);
    if (ended === true || (ended === undefined && closed)) return;
    const waitMs = Math.min(NOT_STARTED_RETRY_MS * 2 ** failures, MAX_RETRY_MS);
    await sleep(waitMs, undefined, { signal: options.signal }).catch(() => undefined);
  }
}

/**
 * The latest Playbook a watch delivered, and a way to wait for the next: what the followers of a
 * run decide on (which pod is current, whether the run has ended).
 */
export class RunState {
  latest: ClusterPlaybook | undefined;
  /** the Playbook was deleted (or replaced) while watched */
  gone = false;
  ended = false;
  private waiters: (() => void)[] = [];

  update(playbook: ClusterPlaybook | null, ended: boolean): void {
    if (playbook === null) this.gone = true;
    else this.latest = playbook;
    this.ended = this.ended || ended || this.gone;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /** Resolves at the next update, or when the signal aborts. */
  changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const done = () => {
        signal.removeEventListener("abort", done);
        resolve();
      };
      this.waiters.push(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}

export interface FollowHandlers {
  /** a pod's log begins (after the first, a new attempt) */
  onPod: (pod: RunPod, first: boolean) => void;
  onLine: (line: LogLine, pod: RunPod) => void;
  /** a pod whose log could not be read: gone before it was read */
  onGone: (pod: RunPod, message: string) => void;
  /** a pod's log failed and is tried again */
  onProblem?: (pod: RunPod, message: string) => void;
}

/**
 * Follows every attempt's log in order until the run ends: each pod's log until its runner
 * ends, then the next attempt's. Resolves once the run has ended and the last pod's log is read,
 * or when the signal aborts.
 */
export async function followRun(
  cluster: Cluster,
  state: RunState,
  handlers: FollowHandlers,
  signal: AbortSignal,
): Promise<void> {
  const done = new Set<string>();
  let first = true;
  while (!signal.aborted) {
    const playbook = state.latest;
    const pending = playbook ? await nextPods(cluster, playbook, done) : [];
    const pod = pending[0];
    if (!pod) {
      if (state.ended) return;
      await state.changed(signal);
      continue;
    }
    // Whether the run had ended before this read: one that ends while a read finds the container
    // not started yet (an attempt of a second) is read once more, as its container has run.
    const endedBefore = state.ended;
    try {
      await readPodLog(cluster, pod.name, {
        follow: true,
        signal,
        onOpen: () => {
          handlers.onPod(pod, first);
          first = false;
        },
        onLine: (line) => handlers.onLine(line, pod),
        onProblem: (message) => handlers.onProblem?.(pod, message),
      });
      done.add(pod.name);
    } catch (error) {
      if (!(error instanceof LogUnavailable)) throw error;
      const current = playbook ? podsInStatus(state.latest ?? playbook).podName : undefined;
      if (error.kind === "gone" || endedBefore || (current !== undefined && current !== pod.name)) {
        if (error.kind === "gone") handlers.onGone(pod, error.message);
        done.add(pod.name);
        continue;
      }
      // Not started yet: look again soon, or as soon as the run changes.
      await Promise.race([
        sleep(NOT_STARTED_RETRY_MS, undefined, { signal }).catch(() => undefined),
        state.changed(signal),
      ]);
    }
  }
}

/** The run's pods whose logs are still to be read, by attempt. */
async function nextPods(cluster: Cluster, playbook: ClusterPlaybook, done: Set<string>): Promise<RunPod[]> {
  const { podName, podAttempts } = podsInStatus(playbook);
  if (!podName) return [];
  const pods =
    podAttempts > 1 || done.size > 0
      ? await podsOfRun(cluster, playbook)
      : [{ name: podName, attempt: podAttempts }];
  return pods.filter((pod) => !done.has(pod.name));
}
