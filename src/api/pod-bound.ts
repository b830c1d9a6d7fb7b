// A run's whole bound: what its pod's activeDeadlineSeconds allows at the run's start (the
// ceiling, its killGrace, the finally tasks' window and a margin), each part with the level it
// came from, and the longest the namespace's maximums allow, for `playbook validate` to show.
import { formatDuration, parseDuration } from "./duration.js";
import { finallyWindowMs, type LimitDefaults, type ResolvedLimits } from "./limits.js";
import type { LimitSource } from "./reasons.js";

/** What activeDeadlineSeconds adds past the run's bound, so the runner reports before the kubelet stops the pod. */
export const DEADLINE_MARGIN_SECONDS = 5;

const seconds = (ms: number) => Math.ceil(ms / 1000);

export interface BoundPart {
  what: "ceiling" | "killGrace" | "finallyCeiling" | "margin";
  ms: number;
  source: LimitSource | "controller";
}

/** The parts of the pod's whole life, in order: ceiling, killGrace, then the finally window (finallyCeiling, killGrace), the margin. */
export function podBoundParts(limits: ResolvedLimits): BoundPart[] {
  const part = (what: BoundPart["what"], limit: { ms: number; source: LimitSource }): BoundPart => ({
    what,
    ms: limit.ms,
    source: limit.source,
  });
  return [
    part("ceiling", limits.ceiling),
    part("killGrace", limits.killGrace),
    ...(limits.finally.length > 0
      ? [part("finallyCeiling", limits.finallyCeiling), part("killGrace", limits.killGrace)]
      : []),
    { what: "margin", ms: DEADLINE_MARGIN_SECONDS * 1000, source: "controller" },
  ];
}

/** The pod's activeDeadlineSeconds when the run starts: its whole bound in whole seconds. */
export function startDeadlineSeconds(limits: ResolvedLimits): number {
  return (
    seconds(limits.ceiling.ms) +
    seconds(limits.killGrace.ms) +
    seconds(finallyWindowMs(limits)) +
    DEADLINE_MARGIN_SECONDS
  );
}

const showPart = (part: BoundPart) =>
  part.what === "margin"
    ? `margin ${formatDuration(part.ms)}`
    : `${part.what} ${formatDuration(part.ms)} (${part.source})`;

/**
 * The longest a pod may live under `maximums` (the namespace policy's, or none) and the
 * controller's (or `playbook run`'s) own, for a spec with or without finally tasks; null when a
 * part has no maximum. A policy that sets maximums.ceiling but no maximums.finallyCeiling takes
 * the finally window from its ceiling (policy.ts, checkFinallyWithinCeiling).
 */
export function maximumBoundParts(
  defaults: LimitDefaults,
  maximums:
    | { ceiling?: string | undefined; killGrace?: string | undefined; finallyCeiling?: string | undefined }
    | undefined,
  withFinally: boolean,
): { parts: BoundPart[]; finallyWithinCeiling: boolean } | null {
  const lower = (own: number | undefined, policy: string | undefined): BoundPart["source"] | null => {
    const policyMs = policy === undefined ? undefined : parseDuration(policy);
    if (policyMs !== undefined && (own === undefined || policyMs <= own)) return "policy";
    return own === undefined ? null : "default";
  };
  const bound = (what: BoundPart["what"], own: number | undefined, policy: string | undefined) => {
    const source = lower(own, policy);
    if (source === null) return null;
    return { what, ms: source === "policy" ? parseDuration(policy as string) : (own as number), source };
  };
  const ceiling = bound("ceiling", defaults.maxCeilingMs, maximums?.ceiling);
  const killGrace = bound("killGrace", defaults.maxKillGrace?.ms, maximums?.killGrace);
  if (!ceiling || !killGrace) return null;
  const margin: BoundPart = { what: "margin", ms: DEADLINE_MARGIN_SECONDS * 1000, source: "controller" };
  const finallyWithinCeiling =
    withFinally && maximums?.ceiling !== undefined && maximums.finallyCeiling === undefined;
  if (!withFinally || finallyWithinCeiling) {
    // The policy's own maximums.ceiling holds the ceiling and the finally window together.
    const whole = finallyWithinCeiling
      ? {
          what: "ceiling" as const,
          ms: parseDuration(maximums?.ceiling as string),
          source: "policy" as const,
        }
      : ceiling;
    return { parts: [whole, killGrace, margin], finallyWithinCeiling };
  }
  const finallyCeiling = bound("finallyCeiling", defaults.maxFinallyCeiling?.ms, maximums?.finallyCeiling);
  if (!finallyCeiling) return null;
  return { parts: [ceiling, killGrace, finallyCeiling, killGrace, margin], finallyWithinCeiling };
}

const total = (parts: BoundPart[]) => parts.reduce((sum, part) => sum + seconds(part.ms), 0);

/**
 * "pod bound 10m40s (activeDeadlineSeconds 640): ceiling 10m (spec) + killGrace 30s (policy) +
 * margin 5s; at most 10m35s: ceiling 10m (policy) + killGrace 30s (policy) + margin 5s".
 */
export function describePodBound(
  limits: ResolvedLimits,
  defaults: LimitDefaults,
  maximums: Parameters<typeof maximumBoundParts>[1],
): string {
  const deadline = startDeadlineSeconds(limits);
  const own = `pod bound ${formatDuration(deadline * 1000)} (activeDeadlineSeconds ${deadline}): ${podBoundParts(limits).map(showPart).join(" + ")}`;
  const max = maximumBoundParts(defaults, maximums, limits.finally.length > 0);
  if (!max) return `${own}; at most: no bound`;
  const within = max.finallyWithinCeiling
    ? " (the finally tasks' window within the ceiling's maximum: the policy sets no maximums.finallyCeiling)"
    : "";
  return `${own}; at most ${formatDuration(total(max.parts) * 1000)}: ${max.parts.map(showPart).join(" + ")}${within}`;
}
