// An attempt whose runner uploads its own log (src/api/log-upload.ts): the controller waits for the
// attempt to end as the cache shows its pod, then composes the object of the runner's segments
// (upload-compose.ts) and says what it holds. Pure decisions over the observed pod and the
// composed upload; the archiver owns the waiting and the record.
import { LOG_ARCHIVE_REASONS, type LogArchiveReason } from "../../api/log-archive.js";
import { type PodView, RUNNER_CONTAINER } from "../objects.js";
import { nodeSilenceOf } from "../pods/node-lost.js";
import type { ComposedAttempt } from "./upload-compose.js";

/**
 * How the attempt's runner ended, as the cache shows its pod; undefined while it runs. `killed`:
 * it did not end by itself (SIGKILL, for memory or once its grace period ran out), so it had no
 * time for its last segment and index, whatever the store did.
 */
export type UploadEnd = { how: "ended" } | { how: "killed"; by: string } | { how: "gone" } | { how: "lost" };

const SIGKILL = 9;

export function uploadEnd(pod: PodView | undefined, now: number): UploadEnd | undefined {
  if (!pod) return { how: "gone" };
  const runner = pod.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
  const terminated = runner?.state?.terminated;
  if (terminated) {
    if (terminated.reason === "OOMKilled")
      return { how: "killed", by: "the kernel, out of memory (OOMKilled)" };
    if (terminated.signal === SIGKILL || terminated.exitCode === 128 + SIGKILL)
      return { how: "killed", by: `SIGKILL (exit code ${terminated.exitCode})` };
    return { how: "ended" };
  }
  const phase = pod.status?.phase;
  if (phase === "Succeeded" || phase === "Failed") return { how: "ended" };
  const silence = nodeSilenceOf(pod);
  if (silence && now >= silence.lostAt) return { how: "lost" };
  return undefined;
}

/** The condition the composed upload gives: its reason and message. */
export function uploadVerdict(
  composed: ComposedAttempt | undefined,
  end: UploadEnd,
  args: { capBytes: number; flushMs: number },
): [LogArchiveReason, string] {
  const lost = end.how === "gone" || end.how === "lost";
  const killed = end.how === "killed" ? `the runner was killed by ${end.by} before it uploaded` : undefined;
  if (!composed) {
    if (lost)
      return [
        LOG_ARCHIVE_REASONS.nodeLost,
        "the pod was lost before its runner uploaded any of its log: nothing is archived",
      ];
    const what = killed ? `${killed} any of its log` : "the runner uploaded none of its log";
    return [LOG_ARCHIVE_REASONS.incomplete, `${what}: nothing is archived`];
  }
  const kept = `${composed.bytes} bytes archived`;
  const index = composed.index;
  if (index?.failed)
    return [
      LOG_ARCHIVE_REASONS.storeUnreachable,
      `${kept} of ${index.bytes}: the runner's upload stopped: ${index.failed}`,
    ];
  if (composed.short !== undefined)
    return [LOG_ARCHIVE_REASONS.incomplete, `${kept} of ${composed.received}: ${composed.short}`];
  if (!index?.done) {
    const missing = `at most the last ${Math.ceil(args.flushMs / 1000)} s of its output before that is missing`;
    if (killed)
      return [LOG_ARCHIVE_REASONS.incomplete, `${kept}: ${killed} its last segment and index; ${missing}`];
    return lost
      ? [
          LOG_ARCHIVE_REASONS.nodeLost,
          `${kept}: the pod was lost before its runner ended, and the archive holds what the runner had uploaded; ${missing}`,
        ]
      : // The runner tries its last segment and index for a while as it ends: the store did not take them.
        [
          LOG_ARCHIVE_REASONS.storeUnreachable,
          `${kept}: the store did not take the runner's last segment and index as it ended; ${missing}`,
        ];
  }
  if (composed.leftOut > 0)
    return [
      LOG_ARCHIVE_REASONS.capReached,
      `${kept} of ${composed.received}: ${composed.leftOut} bytes past maximums.archivedLogBytes (${args.capBytes}) were left out between the head and the tail`,
    ];
  return [LOG_ARCHIVE_REASONS.archived, kept];
}
