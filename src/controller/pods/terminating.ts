// A pod asked to stop that never goes away (its node is gone, a finalizer holds it): a cancel
// waits for it as long as its grace and the runner's report allow, then stops waiting, as the
// other stop paths do, so the run settles instead of staying Running for ever.
import { z } from "zod";
import { formatDuration } from "../../api/duration.js";
import type { ResolvedLimits } from "../../api/limits.js";
import type { PodView } from "../objects.js";
import { describeFinallyWindow, terminationGraceSeconds } from "./pod-builder.js";

/** How long past its grace a terminating pod is waited for: the time a node takes to report. */
export const TERMINATING_SLACK_MS = 30_000;

const DeletionSchema = z.looseObject({
  metadata: z.looseObject({
    deletionTimestamp: z.union([z.string(), z.date()]).nullable().optional(),
    deletionGracePeriodSeconds: z.number().int().nonnegative().nullable().optional(),
    finalizers: z.array(z.string()).nullable().optional(),
  }),
});

export interface Termination {
  /** When the deletion was asked for: the deletionTimestamp less the grace period it was given. */
  requestedAt: number;
  /** When a cancel stops waiting for the pod to go. */
  giveUpAt: number;
  finalizers: string[];
}

/**
 * When a terminating pod of a cancelled run is given up on: the grace the controller gives a
 * cancel (killGrace, the finally tasks' window, a margin for the report) after the deletion was asked for, or the
 * pod's own shorter grace, plus TERMINATING_SLACK_MS. Undefined when the pod is not terminating.
 */
export function terminationOf(pod: PodView, limits: ResolvedLimits): Termination | undefined {
  const meta = DeletionSchema.safeParse(pod).data?.metadata;
  const stamp = meta?.deletionTimestamp;
  if (!stamp) return undefined;
  const deleteAt = stamp instanceof Date ? stamp.getTime() : Date.parse(stamp);
  if (Number.isNaN(deleteAt)) return undefined;
  const requestedAt = deleteAt - (meta.deletionGracePeriodSeconds ?? 0) * 1000;
  const graceEnd = Math.min(deleteAt, requestedAt + terminationGraceSeconds(limits) * 1000);
  return { requestedAt, giveUpAt: graceEnd + TERMINATING_SLACK_MS, finalizers: meta.finalizers ?? [] };
}

/** Why the cancel stopped waiting, naming the pod and what may hold it. */
export function describeStuckTermination(
  pod: PodView,
  termination: Termination,
  limits: ResolvedLimits,
  now: Date,
): string {
  const name = pod.metadata.name;
  const waited = formatDuration(
    Math.max(0, Math.round((now.getTime() - termination.requestedAt) / 1000)) * 1000,
  );
  const holds = [
    termination.finalizers.length > 0 ? `finalizers ${termination.finalizers.join(", ")}` : undefined,
    `node ${pod.spec?.nodeName || "none"}`,
  ].filter(Boolean);
  return `the run was cancelled (spec.cancel); pod ${name} did not end in time: it was still terminating ${waited} after its deletion was requested (killGrace ${formatDuration(limits.killGrace.ms)} (${limits.killGrace.field})${describeFinallyWindow(limits)}, a margin for the report and ${formatDuration(TERMINATING_SLACK_MS)} for its node; ${holds.join(", ")}), so the run ended without the runner's report`;
}
