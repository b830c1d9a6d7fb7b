// `playbook advise --prometheus`'s method (docs/advise.md): the same steps as method.ts, read off
// the controller's histograms instead of each run. A histogram keeps only how many observations
// fell in each bucket, so a quantile is known only to lie within one bucket (lower, upper]:
// Prometheus' histogram_quantile() interpolates inside it, which is a guess. Every figure here
// carries its bucket's bounds, and a proposal starts from the upper bound, the smallest limit the
// histogram can show kills none of the attempts at or below the quantile. Pure functions.
import { formatDuration } from "../../api/duration.js";
import type { EffectiveLimit } from "../../api/limits.js";
import type { AdviseOptions } from "./advice-model.js";
import { LOOSE_RATIO, NEAR_LIMIT_RATIO, TREND_RISE } from "./drift.js";
import { roundUpReadable } from "./proposal.js";

/** One bucket: how many observations were at or below `le` (cumulative); `le` Infinity is +Inf. */
export interface Bucket {
  le: number;
  count: number;
}

/** Where a quantile lies: in the bucket (lowerMs, upperMs], and where interpolation puts it. */
export interface BucketRange {
  lowerMs: number;
  /** Infinity: above the largest finite bucket, where the histogram cannot tell */
  upperMs: number;
  /** as histogram_quantile() gives it: linear within the bucket; the lower bound in the +Inf one */
  interpolatedMs: number;
}

/**
 * Buckets from (le, count) pairs: sorted, and made cumulative-monotone as histogram_quantile()
 * does (a scrape between two bucket series' increments may show a lower count above a higher).
 */
export function bucketsOf(pairs: readonly { le: number; count: number }[]): Bucket[] {
  const sorted = [...pairs].sort((a, b) => a.le - b.le);
  let highest = 0;
  return sorted.map(({ le, count }) => {
    highest = Math.max(highest, count);
    return { le, count: highest };
  });
}

/** The total: the +Inf bucket's count (0 without one). */
export function totalOf(buckets: readonly Bucket[]): number {
  const inf = buckets.at(-1);
  return inf && inf.le === Number.POSITIVE_INFINITY ? inf.count : 0;
}

/** The count at or below `value`: the largest bucket bound not above it (0 under the first). */
export function countAtOrBelow(buckets: readonly Bucket[], value: number): number {
  let count = 0;
  for (const bucket of buckets) if (bucket.le <= value) count = bucket.count;
  return count;
}

/**
 * The bucket the q-quantile lies in: the first whose cumulative count reaches q of the total, as
 * histogram_quantile() finds it, with its bounds in ms (the histogram's are seconds, `scale` to ms)
 * and the interpolated value. Null for an empty histogram.
 */
export function bucketQuantile(buckets: readonly Bucket[], q: number, scale = 1000): BucketRange | null {
  const total = totalOf(buckets);
  if (total <= 0) return null;
  const rank = q * total;
  let previous = { le: 0, count: 0 };
  for (const bucket of buckets) {
    // A hair of tolerance: a weighted count that is the rank but for float rounding reaches it.
    if (bucket.count >= rank * (1 - 1e-12) && bucket.count > 0) {
      const lowerMs = previous.le * scale;
      if (bucket.le === Number.POSITIVE_INFINITY) {
        return { lowerMs, upperMs: Number.POSITIVE_INFINITY, interpolatedMs: lowerMs };
      }
      const upperMs = bucket.le * scale;
      const within = bucket.count - previous.count;
      const share = within > 0 ? (rank - previous.count) / within : 1;
      return { lowerMs, upperMs, interpolatedMs: lowerMs + (upperMs - lowerMs) * Math.max(0, share) };
    }
    previous = bucket;
  }
  return null;
}

const show = (ms: number) => formatDuration(Math.round(ms));

/** "(5s, 15s]", "(6h, +Inf)". */
export function showRange(range: Pick<BucketRange, "lowerMs" | "upperMs">): string {
  return range.upperMs === Number.POSITIVE_INFINITY
    ? `(${show(range.lowerMs)}, +Inf)`
    : `(${show(range.lowerMs)}, ${show(range.upperMs)}]`;
}

/** The figures of one duration histogram and the limit proposed from them. */
export interface HistogramFigure {
  /** successful attempts in the window (weighted by recency: an estimate, not a count) */
  n: number;
  /** attempts cut off at a limit */
  cut: number;
  p50: BucketRange | null;
  p95: BucketRange | null;
  p99: BucketRange | null;
  /** the bucket of the quantile at 1 - rate */
  quantile: BucketRange | null;
  proposalMs: number | null;
  how: string[];
  /** at most this many of the window's successful attempts lie above the proposal (the backtest) */
  aboveProposal: number;
  /** cut-off attempts whose bucket lies wholly above the proposal: taken as hung */
  hung: number;
}

/**
 * The proposal from a histogram: the bucket of the 1 - rate quantile, its upper bound times the
 * margin, at least the floor; a bucket of cut-off attempts wholly under the proposal raises it to
 * at least that bucket's upper bound times the margin; rounded up to a readable duration. The
 * quantiles are read off `full.weighted` (each slice's counts times its recency weight); the
 * sample's size and the backtest off `full.counted`, the attempts as they were.
 */
export function proposeFromHistogram(
  full: { weighted: readonly Bucket[]; counted: readonly Bucket[] },
  cut: readonly Bucket[],
  options: AdviseOptions,
  what: string,
): HistogramFigure {
  const n = totalOf(full.counted);
  const weighted = full.weighted;
  const figure: HistogramFigure = {
    n,
    cut: totalOf(cut),
    p50: bucketQuantile(weighted, 0.5),
    p95: bucketQuantile(weighted, 0.95),
    p99: bucketQuantile(weighted, 0.99),
    quantile: null,
    proposalMs: null,
    how: [],
    aboveProposal: 0,
    hung: 0,
  };
  if (n < options.minSample) {
    figure.how.push(
      `${countWord(n)} successful attempts in the histogram, fewer than the minimum sample of ${options.minSample}: no proposal`,
    );
    return figure;
  }
  const q = 1 - options.rate;
  const quantile = bucketQuantile(weighted, q) as BucketRange;
  figure.quantile = quantile;
  const name = `p${Number((q * 100).toFixed(6))}`;
  if (quantile.upperMs === Number.POSITIVE_INFINITY) {
    figure.how.push(
      `the ${name} of ${countWord(n)} ${what} lies above the largest bucket, ${show(quantile.lowerMs)}: the histogram cannot bound it, no proposal`,
    );
    return figure;
  }
  figure.how.push(
    `the ${name} of ${countWord(n)} ${what} lies in the bucket ${showRange(quantile)} (interpolated: ${show(quantile.interpolatedMs)}); the proposal starts from its upper bound, ${show(quantile.upperMs)}`,
  );
  if (n < 1 / options.rate) {
    figure.how.push(
      `fewer than ${Math.ceil(1 / options.rate)} attempts: that is the bucket of the largest seen`,
    );
  }
  let proposal = quantile.upperMs * options.margin;
  figure.how.push(`times the margin ${options.margin}: ${show(proposal)}`);
  if (proposal < options.floorMs) {
    proposal = options.floorMs;
    figure.how.push(`raised to the floor: ${show(proposal)}`);
  }
  // Cut-off attempts push up, never down. A bucket of them wholly under the proposal was cut by a
  // limit this one would not have fired: it must get the margin over the bucket's upper bound.
  const cutBuckets = nonEmptyBuckets(cut, 1000);
  for (;;) {
    const rounded = roundUpReadable(proposal);
    const below = cutBuckets.filter((b) => b.upperMs < rounded && b.upperMs * options.margin > proposal);
    if (below.length === 0) break;
    const highest = below[below.length - 1] as { upperMs: number; lowerMs: number };
    proposal = highest.upperMs * options.margin;
    figure.how.push(
      `raised above attempts cut off in ${showRange(highest)} (a limit ended them): ${show(highest.upperMs)} times ${options.margin} is ${show(proposal)}`,
    );
  }
  const rounded = roundUpReadable(proposal);
  if (rounded !== proposal) figure.how.push(`rounded up to ${show(rounded)}`);
  figure.proposalMs = rounded;
  figure.aboveProposal = n - countAtOrBelow(full.counted, rounded / 1000);
  const hung = cutBuckets.filter((b) => b.lowerMs >= rounded);
  figure.hung = hung.reduce((sum, b) => sum + b.count, 0);
  if (figure.hung > 0) {
    figure.how.push(
      `${countWord(figure.hung)} cut-off attempts lie in buckets above that (${hung.map(showRange).join(", ")}): taken as hung, not as work`,
    );
  }
  return figure;
}

/** The buckets that hold observations, each with its own count (not cumulative), bounds in ms. */
function nonEmptyBuckets(
  buckets: readonly Bucket[],
  scale: number,
): { lowerMs: number; upperMs: number; count: number }[] {
  const found: { lowerMs: number; upperMs: number; count: number }[] = [];
  let previous = { le: 0, count: 0 };
  for (const bucket of buckets) {
    const count = bucket.count - previous.count;
    if (count > 1e-9) found.push({ lowerMs: previous.le * scale, upperMs: bucket.le * scale, count });
    previous = bucket;
  }
  return found;
}

/** A count as said: whole numbers plainly, a weighted one to a tenth with "~". */
export function countWord(n: number): string {
  const rounded = Math.round(n * 10) / 10;
  return Number.isInteger(rounded) ? String(rounded) : `~${rounded}`;
}

/**
 * Drift from the histograms: a median a whole bucket higher in the newer half of the window than
 * in the older (with more than TREND_RISE between the bounds); attempts near their limit and a
 * limit too loose, from the usage ratio histogram (duration over the limit).
 */
export function histogramDrift(
  what: string,
  halves: { older: readonly Bucket[]; newer: readonly Bucket[] } | null,
  usage: readonly Bucket[] | null,
  current: EffectiveLimit | null,
  minSample: number,
): string[] {
  const warnings: string[] = [];
  if (halves && totalOf(halves.older) + totalOf(halves.newer) >= minSample) {
    const older = bucketQuantile(halves.older, 0.5);
    const newer = bucketQuantile(halves.newer, 0.5);
    if (older && newer && newer.lowerMs >= older.upperMs * (1 + TREND_RISE)) {
      warnings.push(
        `${what}: trending up: the newer half of the window's median lies in ${showRange(newer)}, the older half's in ${showRange(older)}`,
      );
    }
  }
  const total = usage ? totalOf(usage) : 0;
  if (usage && total > 0) {
    const near = total - countAtOrBelow(usage, NEAR_LIMIT_RATIO);
    const limit = current && current.ms > 0 ? ` ${show(current.ms)} (${current.field})` : "";
    if (near > 1e-9) {
      warnings.push(
        `${what}: near its limit: ${countWord(near)} of ${countWord(total)} finished in the window used more than ${NEAR_LIMIT_RATIO * 100}% of their limit${limit} (playbook_task_limit_usage_ratio)`,
      );
    }
    if (total >= minSample && countAtOrBelow(usage, LOOSE_RATIO) >= total * (1 - 1e-12)) {
      warnings.push(
        `${what}: too loose: none of ${countWord(total)} finished in the window used more than ${LOOSE_RATIO * 100}% of their limit${limit}`,
      );
    }
  }
  return warnings;
}

/** The sum of weighted slices of one histogram: each bucket's count times its slice's weight. */
export function weightedSum(slices: readonly { weight: number; buckets: readonly Bucket[] }[]): Bucket[] {
  const byLe = new Map<number, number>();
  for (const { weight, buckets } of slices)
    for (const bucket of buckets) byLe.set(bucket.le, (byLe.get(bucket.le) ?? 0) + weight * bucket.count);
  return bucketsOf([...byLe].map(([le, count]) => ({ le, count })));
}

/**
 * What a counter series grew by in each slice (t[k-1], t[k]] of a range query's points (the value
 * at each step, absent where the series had no sample): the growth over the last value seen; a
 * value below it is a reset (a restarted controller), counted from 0, as increase() does; a series
 * that first appears after the range's start began at 0 within it (the controller creates the
 * series it fills at 0). `times` are the range's step times, oldest first.
 */
export function sliceIncreases(points: ReadonlyMap<number, number>, times: readonly number[]): number[] {
  const increases: number[] = [];
  let last = points.get(times[0] as number);
  for (const time of times.slice(1)) {
    const value = points.get(time);
    if (value === undefined) {
      increases.push(0);
      continue;
    }
    increases.push(last === undefined ? value : value >= last ? value - last : value);
    last = value;
  }
  return increases;
}
