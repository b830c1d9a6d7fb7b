// The defaults a run's plan carries, rebuilt from its status.limits: the run's resolved limits at
// the levels they came from, so that resolving its spec with them gives what the run is held to.
// The controller rebuilds a lost pod's plan from them (plan-digest.ts); `playbook describe` shows
// a started run's limits from them.
import { parseDuration } from "./duration.js";
import type { CountLimit, EffectiveLimit, LimitDefaults, PolicyLimitDefaults, RetryWaits } from "./limits.js";
import type { PlaybookStatus } from "./playbook.js";

type Level = Pick<EffectiveLimit, "ms" | "source">;

/**
 * The defaults a plan carries: the run's resolved limits, each at the level it came from, so that
 * resolving the plan's spec with them gives the same values and sources again. The finally tasks'
 * ceiling only for a run that has finally tasks (`finally`, when given, lists them), as its status
 * shows it only then: the plan of a run without them stays the one it always was.
 */
export function planDefaults(limits: {
  ceiling: Level;
  stall: Level;
  killGrace: Level;
  startTimeout: Level;
  finallyCeiling?: Level | undefined;
  finally?: readonly unknown[];
  queueTimeout?: Level | null | undefined;
  taskTimeout?: Level | null | undefined;
  maxPreemptions?: Pick<CountLimit, "value" | "source"> | null | undefined;
  retryWaits?: RetryWaits | undefined;
}): LimitDefaults {
  const policy: PolicyLimitDefaults = {};
  if (limits.ceiling.source === "policy") policy.ceilingMs = limits.ceiling.ms;
  if (limits.stall.source === "policy") policy.stallMs = limits.stall.ms;
  if (limits.killGrace.source === "policy") policy.killGraceMs = limits.killGrace.ms;
  if (limits.startTimeout.source === "policy") policy.startTimeoutMs = limits.startTimeout.ms;
  const finallyCeiling = (limits.finally?.length ?? 1) > 0 ? limits.finallyCeiling : undefined;
  if (finallyCeiling?.source === "policy") policy.finallyCeilingMs = finallyCeiling.ms;
  // A queue timeout only where one is set, so that a run without one keeps the plan it always had.
  const queueTimeout = limits.queueTimeout ?? undefined;
  if (queueTimeout?.source === "policy") policy.queueTimeoutMs = queueTimeout.ms;
  // Only under a policy's maximums.taskTimeout, so that a run without one keeps the plan it always had.
  if (limits.taskTimeout?.source === "policy") policy.taskTimeoutMs = limits.taskTimeout.ms;
  // As the queue timeout: only where one is set, so that a plan of an earlier version is rebuilt as it was.
  const maxPreemptions = limits.maxPreemptions ?? undefined;
  if (maxPreemptions?.source === "policy") policy.maxPreemptions = maxPreemptions.value;
  // The policy's retry waits only where it sets them; the controller's are constants (limits.ts).
  const waits = limits.retryWaits;
  if (waits?.delay.source === "policy") policy.retryDelayMs = waits.delay.ms;
  if (waits?.backoff.source === "policy") policy.retryBackoff = waits.backoff.value;
  if (waits?.maxDelay.source === "policy") policy.retryMaxDelayMs = waits.maxDelay.ms;
  return {
    ceilingMs: limits.ceiling.ms,
    maxCeilingMs: limits.ceiling.ms,
    stallMs: limits.stall.ms,
    killGraceMs: limits.killGrace.ms,
    startTimeoutMs: limits.startTimeout.ms,
    ...(finallyCeiling ? { finallyCeilingMs: finallyCeiling.ms } : {}),
    ...(queueTimeout?.source === "default" ? { queueTimeoutMs: queueTimeout.ms } : {}),
    ...(maxPreemptions?.source === "default" ? { maxPreemptions: maxPreemptions.value } : {}),
    ...(Object.keys(policy).length > 0 ? { policy } : {}),
  };
}

/** The plan's defaults as the run's status.limits show them; undefined when it shows none. */
export function planDefaultsFromStatus(status: PlaybookStatus): LimitDefaults | undefined {
  const limits = status.limits;
  if (!limits?.startTimeout) return undefined;
  const level = (limit: { value: string; source: string }): Level => ({
    ms: parseDuration(limit.value),
    source: limit.source as EffectiveLimit["source"],
  });
  const policyLevel = (limit: { value: string; source: string } | undefined, field: string) =>
    limit?.source === "policy"
      ? { ms: parseDuration(limit.value), source: "policy" as const, field }
      : undefined;
  try {
    const retryDelay = policyLevel(limits.retryDelay, "");
    const retryMaxDelay = policyLevel(limits.retryMaxDelay, "");
    const backoff = limits.retryBackoff?.source === "policy" ? Number(limits.retryBackoff.value) : undefined;
    const fallback = { ms: 0, source: "default" as const, field: "" };
    return planDefaults({
      ceiling: level(limits.ceiling),
      stall: level(limits.stall),
      killGrace: level(limits.killGrace),
      startTimeout: level(limits.startTimeout),
      ...(limits.finallyCeiling ? { finallyCeiling: level(limits.finallyCeiling) } : {}),
      ...(limits.queueTimeout ? { queueTimeout: level(limits.queueTimeout) } : {}),
      ...(limits.taskTimeout ? { taskTimeout: level(limits.taskTimeout) } : {}),
      ...(limits.maxPreemptions
        ? {
            maxPreemptions: {
              value: limits.maxPreemptions.value,
              source: limits.maxPreemptions.source as CountLimit["source"],
            },
          }
        : {}),
      // Only the policy's levels matter to the plan: the rest are the spec's or constants.
      retryWaits: {
        delay: retryDelay ?? fallback,
        backoff:
          backoff !== undefined && Number.isFinite(backoff)
            ? { value: backoff, source: "policy", field: "" }
            : { value: 0, source: "default", field: "" },
        maxDelay: retryMaxDelay ?? fallback,
      },
    });
  } catch {
    return undefined;
  }
}
