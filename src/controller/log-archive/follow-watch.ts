// While the controller follows an attempt's log (log-archiver.ts), the pod as the cache shows it
// says when the follow must end without the stream's help. A node that goes silent (its kubelet
// stopped, the network cut) leaves the stream open and idle for ever; a kubelet that dies ends it
// as cleanly as a container that exited. Pure decisions over the observed pod and times; the
// archiver owns the timer, and the words of what a log that is not whole misses.
import { type PodView, RUNNER_CONTAINER } from "../objects.js";
import { type NodeSilence, nodeSilenceOf } from "../pods/node-lost.js";

/** How often the archiver looks at the pod while it follows. */
export const FOLLOW_WATCH_MS = 1_000;
/** A stream that said nothing for this long, on a pod the controller takes as lost, is ended. */
export const SILENT_STREAM_MS = 5_000;
/** A pod gone (or deleted, its grace over) whose stream says nothing for this long is ended. */
export const GONE_STREAM_MS = 15_000;
/** How long a stream that ended cleanly waits for the cache to show its runner container ended. */
export const CLEAN_END_SETTLE_MS = 10_000;
/** How long opening the follow is retried while the pod exists and is not lost. */
export const OPEN_RETRY_MS = 60_000;

/** One follow as the archiver saw it: when it began, and when its last byte arrived. */
export interface FollowTimes {
  openedAt: number;
  lastByteAt?: number | undefined;
}

/** Why a follow was ended by the controller, not by its stream. */
export interface FollowCut {
  /** The node's silence as the cache shows it, when the pod is taken as lost with its node. */
  silence?: NodeSilence;
  /** What happened, in words an operator reads after "the pod's node stopped reporting (…)" or alone. */
  why: string;
}

const iso = (ms: number) => new Date(ms).toISOString();

function deletedAt(pod: PodView): number | undefined {
  const stamp = pod.metadata.deletionTimestamp;
  if (!stamp) return undefined;
  const at = Date.parse(stamp);
  return Number.isNaN(at) ? undefined : at;
}

/**
 * Whether the follow ends now: the controller takes the pod as lost with its node (its silence
 * reached lostAt, as decide-active.ts takes it) and the stream said nothing for SILENT_STREAM_MS;
 * or the pod is gone, or deleted and past its grace (its deletionTimestamp), and the stream said
 * nothing for GONE_STREAM_MS. Undefined while the follow goes on.
 */
export function followCut(pod: PodView | undefined, times: FollowTimes, now: number): FollowCut | undefined {
  const idleSince = Math.max(times.openedAt, times.lastByteAt ?? 0);
  const idle = now - idleSince;
  const silence = pod ? nodeSilenceOf(pod) : undefined;
  if (silence && now >= silence.lostAt && idle >= SILENT_STREAM_MS)
    return { silence, why: `its log said nothing since ${iso(idleSince)}` };
  if (idle < GONE_STREAM_MS) return undefined;
  if (!pod) return { why: `the pod was gone and its log said nothing since ${iso(idleSince)}` };
  const deleted = deletedAt(pod);
  if (deleted !== undefined && now >= deleted)
    return {
      why: `the pod was deleted, its grace over at ${iso(deleted)}, and its log said nothing since ${iso(idleSince)}`,
    };
  return undefined;
}

/**
 * A stream that ended without an error: whole once the cache shows the runner container ended
 * (or the pod gone); while it shows it running, wait up to CLEAN_END_SETTLE_MS for the kubelet's
 * status (a kubelet that died ends the stream as cleanly as an exited container); then cut.
 */
export function cleanEnd(
  pod: PodView | undefined,
  endedAt: number,
  now: number,
): "whole" | "wait" | FollowCut {
  const runner = pod?.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
  if (!pod || !runner?.state?.running) return "whole";
  if (now - endedAt < CLEAN_END_SETTLE_MS) return "wait";
  const silence = nodeSilenceOf(pod);
  return {
    ...(silence ? { silence } : {}),
    why: `the log stream ended at ${iso(endedAt)} while the runner container still ran (its kubelet stopped?)`,
  };
}

/**
 * How long to wait before opening the follow again after it failed to open; undefined when it
 * is not tried again: the pod is gone (a 404, or not in the cache), its node is taken as lost,
 * or OPEN_RETRY_MS has passed since the first try. Backs off from 500 ms to 8 s.
 */
export function openRetryDelay(
  failure: { notFound: boolean; tries: number },
  pod: PodView | undefined,
  firstTriedAt: number,
  now: number,
): number | undefined {
  if (failure.notFound || !pod) return undefined;
  const silence = nodeSilenceOf(pod);
  if (silence && now >= silence.lostAt) return undefined;
  const delay = Math.min(500 * 2 ** Math.max(0, failure.tries - 1), 8_000);
  return now + delay - firstTriedAt > OPEN_RETRY_MS ? undefined : delay;
}

/**
 * The words of an archive that is not whole because its pod's node was lost or its stream cut:
 * how much it holds, when its last byte arrived, when the node stopped reporting, and so what
 * may be missing.
 */
export function notWholeMessage(args: {
  bytes: number;
  lastByteAt?: number | undefined;
  silence?: NodeSilence | undefined;
  why: string;
}): string {
  const { bytes, lastByteAt, silence, why } = args;
  const kept =
    lastByteAt === undefined
      ? `${bytes} bytes archived`
      : `${bytes} bytes archived, the last at ${iso(lastByteAt)}`;
  const after =
    lastByteAt === undefined ? "what the task printed" : `what the task printed after ${iso(lastByteAt)}`;
  if (!silence) return `${kept}; ${why}: ${after} is not in it`;
  const gap =
    lastByteAt === undefined
      ? ""
      : `, at most ${Math.max(0, Math.ceil((silence.since - lastByteAt) / 1000))} s of it before the node was marked,`;
  return `${kept}; the pod's node ${silence.node} stopped reporting (marked not Ready at ${iso(silence.since)}; ${why}): ${after}${gap} is not in it, nor what the pod printed on the silent node`;
}
