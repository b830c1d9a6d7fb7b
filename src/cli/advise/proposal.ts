// How advise proposes one limit from a sample (docs/advise.md): a recency-weighted empirical
// quantile at 1 - the false-kill rate, times a margin, a floor, rounded up to a readable duration;
// attempts cut off at a limit only ever push it up.
import { formatDuration } from "../../api/duration.js";
import type { AdviseOptions, Figure, Hold, Weighted } from "./advice-model.js";

/**
 * The q-quantile of a weighted sample: the smallest value whose cumulative weight reaches q of
 * the total (the inverse of the weighted empirical distribution, no interpolation). Null when empty.
 */
export function weightedQuantile(sample: readonly Weighted[], q: number): number | null {
  if (sample.length === 0) return null;
  const sorted = [...sample].sort((a, b) => a.value - b.value);
  const total = sorted.reduce((sum, s) => sum + s.weight, 0);
  let cumulative = 0;
  for (const s of sorted) {
    cumulative += s.weight;
    // A hair of tolerance: a share that is q but for float rounding reaches it.
    if (cumulative >= q * total * (1 - 1e-12)) return s.value;
  }
  return sorted[sorted.length - 1]?.value ?? null;
}

/** The weight of an observation `ageMs` old: 1 for the newest, 1/2 one half-life before it. */
export function recencyWeight(ageMs: number, halfLifeMs: number): number {
  return halfLifeMs > 0 ? 0.5 ** (Math.max(0, ageMs) / halfLifeMs) : 1;
}

/** The step a readable duration of this size is rounded up to. */
function readableStep(ms: number): number {
  if (ms <= 1_000) return 100;
  if (ms <= 10_000) return 1_000;
  if (ms <= 60_000) return 5_000;
  if (ms <= 600_000) return 30_000;
  if (ms <= 3_600_000) return 60_000;
  if (ms <= 6 * 3_600_000) return 300_000;
  return 900_000;
}

/** Rounds up to a readable duration: 100ms under 1s, 1s to 10s, 5s to 1m, 30s to 10m, 1m to 1h, 5m to 6h, then 15m. */
export function roundUpReadable(ms: number): number {
  const step = readableStep(ms);
  // Math.round first: 13 * 1.3 is 16.900000000000002, not more than 16.9.
  return Math.ceil(Math.round(ms * 1000) / 1000 / step) * step;
}

export const show = (ms: number) => formatDuration(Math.round(ms));

/** A share as a percentage, to a tenth; under a tenth of a percent said so. */
export function percent(share: number): string {
  return share > 0 && share < 0.001 ? "<0.1%" : `${Math.round(share * 1000) / 10}%`;
}

/**
 * The proposal from a sample: the weighted quantile at 1 - rate, times the margin, at least the
 * floor; every cut-off attempt shorter than that raises it to at least its length times the
 * margin (a limit that would let it run on must not be one that cuts it again); rounded up.
 */
export function proposeFrom(
  full: readonly Weighted[],
  cut: readonly number[],
  options: AdviseOptions,
  what: string,
  hold?: Hold,
): Figure {
  const figure: Figure = {
    n: full.length,
    cut: cut.length,
    p50: weightedQuantile(full, 0.5),
    p95: weightedQuantile(full, 0.95),
    p99: weightedQuantile(full, 0.99),
    max: full.length > 0 ? Math.max(...full.map((s) => s.value)) : null,
    quantile: null,
    atLargest: false,
    proposalMs: null,
    how: [],
    hung: [],
  };
  if (full.length < options.minSample) {
    figure.how.push(
      `${full.length} successful ${full.length === 1 ? "attempt" : "attempts"}, fewer than the minimum sample of ${options.minSample}: no proposal`,
    );
    return figure;
  }
  const q = 1 - options.rate;
  const quantile = weightedQuantile(full, q) as number;
  figure.quantile = quantile;
  figure.atLargest = quantile === figure.max;
  figure.how.push(
    `the weighted ${formatQuantile(q)} quantile of ${full.length} ${what} is ${show(quantile)}${
      figure.atLargest ? " (the largest seen: the sample is too small to read it finer)" : ""
    }`,
  );
  let proposal = quantile * options.margin;
  figure.how.push(`times the margin ${options.margin}: ${show(proposal)}`);
  let pushing = cut;
  if (proposal < options.floorMs) {
    if (hold && hold.runs.length > 0 && options.floorMs > hold.currentMs) {
      // A floor above a limit that caught real hangs would let them run on: it stops there.
      const count = `${hold.runs.length} ${hold.runs.length === 1 ? "run" : "runs"}`;
      figure.how.push(
        `the floor ${show(options.floorMs)} would pass the current ${show(hold.currentMs)}, which cut ${count} that hung (${hold.evidence}): ${hold.runs.join(", ")}`,
      );
      if (proposal < hold.currentMs) {
        proposal = hold.currentMs;
        figure.how.push(`held at the current limit: ${show(proposal)}`);
      }
      figure.held = hold;
      // Those runs were hangs, not work cut short: they do not push the proposal up.
      const hung = [...hold.values];
      pushing = cut.filter((c) => {
        const at = hung.indexOf(c);
        if (at < 0) return true;
        hung.splice(at, 1);
        return false;
      });
    } else {
      proposal = options.floorMs;
      figure.how.push(`raised to the floor: ${show(proposal)}`);
    }
  }
  // Cut-off attempts push up, never down: one the rounded proposal would let run on must get at
  // least the margin over where it was cut. Those above it are taken as hung.
  const sortedCut = [...pushing].sort((a, b) => a - b);
  for (;;) {
    const rounded = roundUpReadable(proposal);
    const below = sortedCut.filter((c) => c < rounded && c * options.margin > proposal);
    if (below.length === 0) break;
    const highest = below[below.length - 1] as number;
    proposal = highest * options.margin;
    figure.how.push(
      `raised above an attempt cut off at ${show(highest)} (a limit ended it): ${show(highest)} times ${options.margin} is ${show(proposal)}`,
    );
  }
  const rounded = roundUpReadable(proposal);
  if (rounded !== proposal) figure.how.push(`rounded up to ${show(rounded)}`);
  figure.proposalMs = rounded;
  figure.hung = [...cut].sort((a, b) => a - b).filter((c) => c >= rounded);
  if (figure.hung.length > 0) {
    figure.how.push(
      `${figure.hung.length} cut-off ${figure.hung.length === 1 ? "attempt" : "attempts"} ran longer than that (${figure.hung.map(show).join(", ")}): taken as hung, not as work`,
    );
  }
  return figure;
}

function formatQuantile(q: number): string {
  // 0.999 -> p99.9
  return `p${Number((q * 100).toFixed(6))}`;
}
