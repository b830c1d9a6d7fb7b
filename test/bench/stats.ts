// The statistics every benchmark reports: nearest-rank percentiles and ratios against a reference
// measured in the same run.

/** Nearest-rank percentile (p in 0..100) of a non-empty sample; never interpolates. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) throw new Error("percentile of an empty sample");
  if (!(p >= 0 && p <= 100)) throw new Error(`percentile ${p} is not within 0..100`);
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] as number;
}

export const median = (values: readonly number[]): number => percentile(values, 50);

/** ours / reference, or null when the reference is zero or either is not a finite number. */
export function ratio(ours: number | null, reference: number | null): number | null {
  if (ours === null || reference === null) return null;
  if (!Number.isFinite(ours) || !Number.isFinite(reference) || reference === 0) return null;
  return ours / reference;
}

/** A target as the JSON states it: `<= 1.0` or `>= 0.7`. */
export const TARGET = /^(<=|>=) (\d+(?:\.\d+)?)$/;

/** Whether a ratio meets its target; null when there is no ratio to judge. */
export function meetsTarget(value: number | null, target: string): boolean | null {
  if (value === null) return null;
  const match = TARGET.exec(target);
  if (!match) throw new Error(`target ${JSON.stringify(target)} is not "<= N" or ">= N"`);
  const bound = Number(match[2]);
  return match[1] === "<=" ? value <= bound : value >= bound;
}

/** Events per minute over a span in milliseconds. */
export function perMinute(count: number, spanMs: number): number {
  if (!(spanMs > 0)) throw new Error(`span ${spanMs}ms is not positive`);
  return (count * 60_000) / spanMs;
}

/** A sample's spread: its size and nearest-rank p10, p25, p50, p75 and p90. */
export interface Spread {
  n: number;
  p10: number;
  p25: number;
  p50: number;
  p75: number;
  p90: number;
}

export function spread(values: readonly number[]): Spread {
  return {
    n: values.length,
    p10: percentile(values, 10),
    p25: percentile(values, 25),
    p50: percentile(values, 50),
    p75: percentile(values, 75),
    p90: percentile(values, 90),
  };
}
