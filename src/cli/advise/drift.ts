// Advise's drift warnings on one figure: trending up, near its limit, too loose (docs/advise.md).
import type { EffectiveLimit } from "../../api/limits.js";
import type { Weighted } from "./advice-model.js";
import { percent, show } from "./proposal.js";

/** Trend: the newer half's median against the older half's, up by more than this share. */
export const TREND_RISE = 0.2;
/** Near its limit: a recent attempt used more than this share of it. */
export const NEAR_LIMIT_RATIO = 0.8;
/** How many of the newest successful attempts "recent" means. */
export const RECENT_ATTEMPTS = 5;
/** Too loose: no attempt of the window used more than this share of it. */
export const LOOSE_RATIO = 0.1;

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/**
 * Drift of one figure, oldest first: a rise of the newer half's median over the older half's
 * (the middle one of an odd count in neither), a recent attempt near its current limit, a limit
 * no attempt came within LOOSE_RATIO of.
 */
export function driftWarnings(
  what: string,
  byTime: readonly Weighted[],
  current: EffectiveLimit | null,
  minSample: number,
  trend = true,
): string[] {
  const warnings: string[] = [];
  const values = [...byTime].sort((a, b) => a.at - b.at).map((s) => s.value);
  if (trend && values.length >= minSample) {
    const half = Math.floor(values.length / 2);
    const older = median(values.slice(0, half));
    const newer = median(values.slice(values.length - half));
    if (newer > older * (1 + TREND_RISE)) {
      warnings.push(
        `${what}: trending up: the newer ${half} ${half === 1 ? "run's" : "runs'"} median is ${show(newer)}, the older ${half}'s ${show(older)} (+${Math.round((newer / older - 1) * 100)}%)`,
      );
    }
  }
  if (current && current.ms > 0 && values.length > 0) {
    const recent = values.slice(-RECENT_ATTEMPTS);
    const near = recent.filter((v) => v / current.ms > NEAR_LIMIT_RATIO);
    if (near.length > 0) {
      const worst = Math.max(...near);
      warnings.push(
        `${what}: near its limit: ${near.length} of the last ${recent.length} used more than ${NEAR_LIMIT_RATIO * 100}% of its ${show(current.ms)} (${current.field}), up to ${show(worst)} (${percent(worst / current.ms)})`,
      );
    }
    const highest = Math.max(...values);
    if (values.length >= minSample && highest / current.ms < LOOSE_RATIO) {
      warnings.push(
        `${what}: too loose: no attempt came within ${LOOSE_RATIO * 100}% of its ${show(current.ms)} (${current.field}); the longest was ${show(highest)} (${percent(highest / current.ms)})`,
      );
    }
  }
  return warnings;
}
