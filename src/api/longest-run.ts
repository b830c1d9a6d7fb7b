// The longest a run can take, from its first pod's creation (status.startTime) to its end, as the
// controller and the runner count its limits: every pod it may create waits at most queueTimeout
// for Kueue's admission, which the ceiling does not count; the ceiling is shared by all its pods
// (each re-created pod gets what is left of it); only the last pod's start (admission until its
// runner starts) is not taken from the ceiling, as the runner counts what is left from its own start.
import { formatDuration } from "./duration.js";
import { type CountLimit, type EffectiveLimit, finallyWindowMs, type ResolvedLimits } from "./limits.js";

/** How the run's pods are re-created: after a loss (backoffLimit) and after Kueue's stops. */
export interface RunPods {
  /** Whether its pods go through Kueue (a queue name from the spec, the policy or the controller). */
  queued: boolean;
  backoffLimit: { value: number; source: string };
  onPreemption: "Requeue" | "Fail";
  /** The cap on requeues after Kueue's stops (preemptionCap). */
  maxPreemptions: CountLimit;
}

export interface LongestRun {
  /** null: no bound (a queued run with no queueTimeout at any level waits as long as Kueue keeps it). */
  ms: number | null;
  /** Pods the run may create: 1, backoffLimit after losses, maxPreemptions after Kueue's stops. */
  pods: number;
  /** Time its pods may wait for Kueue in all: pods × queueTimeout (0 without a queue). */
  queueMs: number | null;
  /** What one admitted pod adds at most: startTimeout, the ceiling, killGrace and the finally tasks' window. */
  runMs: number;
}

/**
 * startTimeout + ceiling + killGrace + (finallyCeiling + killGrace, with finally tasks) after
 * pods × queueTimeout, pods = 1 + backoffLimit + maxPreemptions (Requeue under a queue).
 */
export function longestRun(limits: ResolvedLimits, pods: RunPods): LongestRun {
  const preemptions = pods.queued && pods.onPreemption === "Requeue" ? pods.maxPreemptions.value : 0;
  const count = 1 + pods.backoffLimit.value + preemptions;
  const queueMs = !pods.queued ? 0 : limits.queueTimeout === null ? null : count * limits.queueTimeout.ms;
  const runMs = limits.startTimeout.ms + limits.ceiling.ms + limits.killGrace.ms + finallyWindowMs(limits);
  return { ms: queueMs === null ? null : queueMs + runMs, pods: count, queueMs, runMs };
}

const shown = (limit: EffectiveLimit) => `${formatDuration(limit.ms)} (${limit.source})`;

/**
 * "2h46m30s from its first pod's creation: up to 8 pods (1 + backoffLimit 2 (default) +
 * maxPreemptions 5 (default)) each waiting up to queueTimeout 30m (spec) for Kueue, then startTimeout
 * 5m (default) + ceiling 1h (spec) + killGrace 10s (default) + finally tasks 5m10s".
 */
export function describeLongestRun(limits: ResolvedLimits, pods: RunPods): string {
  const run = longestRun(limits, pods);
  const requeues =
    pods.queued && pods.onPreemption === "Requeue"
      ? ` + maxPreemptions ${pods.maxPreemptions.value} (${pods.maxPreemptions.source})`
      : "";
  const podsText = `up to ${run.pods} pod${run.pods === 1 ? "" : "s"} (1 + backoffLimit ${pods.backoffLimit.value} (${pods.backoffLimit.source})${requeues})`;
  const finallyText =
    limits.finally.length > 0
      ? ` + finally tasks ${formatDuration(finallyWindowMs(limits))} (finallyCeiling ${shown(limits.finallyCeiling)} and its killGrace)`
      : "";
  const admitted = `startTimeout ${shown(limits.startTimeout)} + ceiling ${shown(limits.ceiling)} + killGrace ${shown(limits.killGrace)}${finallyText}`;
  if (!pods.queued) {
    return `${formatDuration(run.runMs)} from its first pod's creation: ${admitted}; ${podsText} share the ceiling`;
  }
  if (run.ms === null || limits.queueTimeout === null) {
    return `no bound: ${podsText} each wait for Kueue's admission with no queueTimeout (spec, policy or controller); once admitted, ${admitted}`;
  }
  return `${formatDuration(run.ms)} from its first pod's creation: ${podsText} each waiting up to queueTimeout ${shown(limits.queueTimeout)} for Kueue, then ${admitted}`;
}
