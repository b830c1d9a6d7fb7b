// What `playbook advise --prometheus` prints: as render.ts, each figure with the bucket it lies in.
// Pure: strings from the advice.
import { formatDuration } from "../../api/duration.js";
import type { EffectiveLimit } from "../../api/limits.js";
import { type BucketRange, countWord, showRange } from "./histogram.js";
import type { HistogramAdvice, HistogramLimitAdvice } from "./histogram-advice.js";
import { table } from "./render.js";

const show = (ms: number | null | undefined) =>
  ms === null || ms === undefined ? "-" : formatDuration(Math.round(ms));

/** "12s (5s, 15s]": where interpolation puts it, and the bucket it lies in. */
export function showFigure(range: BucketRange | null): string {
  if (!range) return "-";
  if (range.upperMs === Number.POSITIVE_INFINITY) return `>${show(range.lowerMs)} ${showRange(range)}`;
  return `${show(range.interpolatedMs)} ${showRange(range)}`;
}

function current(limit: EffectiveLimit | null): string {
  if (!limit) return "unknown";
  if (limit.ms === 0) return `off (${limit.source})`;
  return `${show(limit.ms)} (${limit.source})`;
}

function reached(advice: HistogramLimitAdvice, options: HistogramAdvice["options"]): string {
  const figure = advice.figure;
  if (advice.borrowed) return `too few (${countWord(figure.n)}); borrowed the run's`;
  if (figure.quantile?.upperMs === Number.POSITIVE_INFINITY) return "above the largest bucket";
  if (figure.proposalMs === null) return `too few (${countWord(figure.n)} < ${options.minSample})`;
  const parts = [
    `p${Number(((1 - options.rate) * 100).toFixed(6))} bucket's upper ${show(figure.quantile?.upperMs)} x${options.margin}`,
  ];
  if (figure.how.some((h) => h.startsWith("raised to the floor"))) parts.push("floor");
  if (figure.how.some((h) => h.startsWith("raised above attempts cut off"))) parts.push("above cut-off");
  if (figure.how.some((h) => h.startsWith("raised to the largest task timeout")))
    parts.push("raised to a task's timeout");
  if (figure.hung > 0) parts.push(`${countWord(figure.hung)} hung`);
  return parts.join(", ");
}

function row(label: string, advice: HistogramLimitAdvice, options: HistogramAdvice["options"]): string[] {
  const f = advice.figure;
  return [
    label,
    countWord(f.n),
    countWord(f.cut),
    showFigure(f.p50),
    showFigure(f.p95),
    showFigure(f.p99),
    current(advice.current),
    show(f.proposalMs),
    reached(advice, options),
  ];
}

const when = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");

function sampleLine(name: string, source: string, advice: HistogramAdvice): string {
  const reasons = Object.entries(advice.byReason)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([reason, n]) => `${countWord(n)} ${reason}`)
    .join(", ");
  return `Playbook ${name} from ${source}: ${countWord(advice.runs)} runs (${reasons || "none"}) from ${when(advice.window.startMs)} to ${when(advice.window.endMs)}`;
}

function backtestLines(advice: HistogramAdvice): string[] {
  const limits = [
    { what: "the run", figure: advice.ceiling.figure, limit: "the ceiling" },
    ...advice.tasks.map((t) => ({ what: `task ${t.name}`, figure: t.timeout.figure, limit: "its timeout" })),
  ].filter((l) => l.figure.proposalMs !== null);
  const over = limits.filter((l) => l.figure.aboveProposal > 1e-9);
  const lines = [
    over.length === 0
      ? "Backtest: no successful attempt in the window lies in a bucket above its proposal."
      : "Backtest: successful attempts in the window whose bucket lies above or across the proposal (at most; the histogram cannot tell within a bucket):",
    ...over.map(
      (l) =>
        `  ${l.what}: up to ${countWord(l.figure.aboveProposal)} of ${countWord(l.figure.n)} over the proposed ${show(l.figure.proposalMs)} (${l.limit})`,
    ),
  ];
  const hung = limits.filter((l) => l.figure.hung > 0);
  for (const l of hung) {
    lines.push(
      `  ${l.what}: ${countWord(l.figure.hung)} ended at a limit in a bucket above the proposed ${show(l.figure.proposalMs)}: the proposal would have ended them sooner (how much sooner the histogram cannot tell)`,
    );
  }
  return lines;
}

function notes(advice: HistogramAdvice): string[] {
  const lines: string[] = [];
  if (!advice.perTask) {
    lines.push(
      "No task's timeout: the task duration series carry no task label (the controller's --metrics-task-label, chart value config.metricsTaskLabel).",
    );
  }
  lines.push(
    "No stall: the histograms hold no silences (advise cron NAME or -l without --prometheus reads them).",
  );
  return lines;
}

export function renderHistogramTable(name: string, source: string, advice: HistogramAdvice): string {
  const o = advice.options;
  const rows = [
    ["LIMIT", "N", "CUT", "P50", "P95", "P99", "CURRENT", "PROPOSED", "HOW"],
    row("ceiling (run)", advice.ceiling, o),
    ...advice.tasks.map((task) => row(`timeout ${task.name}`, task.timeout, o)),
  ];
  const lines = [
    sampleLine(name, source, advice),
    "Durations from the histograms: each figure as histogram_quantile() interpolates it, with the bucket (lower, upper] it lies in; N successful, CUT ended at a limit.",
    ...table(rows),
    ...notes(advice),
    "",
    ...backtestLines(advice),
  ];
  if (advice.warnings.length > 0) lines.push("", "Warnings:", ...advice.warnings.map((w) => `  ${w}`));
  return `${lines.join("\n")}\n`;
}

export function renderHistogramExplain(name: string, source: string, advice: HistogramAdvice): string {
  const o = advice.options;
  const lines = [
    `How the limits of ${name} were proposed from ${source} (docs/advise.md):`,
    "  - From the controller's histograms: playbook_run_duration_seconds (the ceiling, from reason Succeeded),",
    "    playbook_task_duration_seconds (each task's timeout, from phase Succeeded; TimedOut ones are cut off),",
    "    playbook_task_limit_usage_ratio (near misses and limits too loose).",
    "  - A histogram counts observations per bucket: a quantile is known only to lie in one bucket (lower, upper].",
    "    histogram_quantile() interpolates linearly inside it; that figure is shown, beside the bucket, and is a guess.",
    `  - The window, ${when(advice.window.startMs)} to ${when(advice.window.endMs)}, is cut in slices of ${show(advice.window.sliceMs)};`,
    `    each slice's counts are weighted by its age: ${o.halfLifeMs > 0 ? `half as much per ${show(o.halfLifeMs)} (--half-life)` : "all the same (--half-life 0)"}.`,
    `  - The false-kill rate ${o.rate} (--rate): the bucket of the weighted p${Number(((1 - o.rate) * 100).toFixed(6))}; the proposal starts from its`,
    "    upper bound (a limit there kills none of the attempts in that bucket or below), times the margin",
    `    ${o.margin} (--margin), at least the floor ${show(o.floorMs)} (--floor), rounded up to a readable duration.`,
    "  - Attempts cut off at a limit never lower it: a bucket of them under the proposal raises it to that",
    "    bucket's upper bound times the margin; a bucket above it holds runs taken as hung.",
    `  - Fewer than ${o.minSample} successful attempts (--min-sample): no proposal${o.borrow ? ", the run's ceiling is borrowed (--borrow)" : ""}.`,
    "",
  ];
  const figureLines = (label: string, advice: HistogramLimitAdvice) => [
    `${label}: now ${advice.current ? `${show(advice.current.ms)} (${advice.current.field})` : "unknown"}`,
    ...advice.figure.how.map((h) => `  ${h}`),
    ...(advice.figure.proposalMs !== null ? [`  proposed: ${show(advice.figure.proposalMs)}`] : []),
  ];
  lines.push(...figureLines("The ceiling", advice.ceiling));
  for (const task of advice.tasks) lines.push(...figureLines(`Task ${task.name}'s timeout`, task.timeout));
  lines.push(...notes(advice), "", ...backtestLines(advice));
  if (advice.warnings.length > 0) lines.push("", "Warnings:", ...advice.warnings.map((w) => `  ${w}`));
  return `${lines.join("\n")}\n`;
}

/** The advice as data: durations in ms, each figure as its bucket (upper null for +Inf) and the interpolated value. */
export function histogramAdviceJson(name: string, source: string, advice: HistogramAdvice): object {
  const range = (r: BucketRange | null) =>
    r
      ? {
          lowerMs: r.lowerMs,
          upperMs: r.upperMs === Number.POSITIVE_INFINITY ? null : r.upperMs,
          interpolatedMs: r.interpolatedMs,
        }
      : null;
  const limit = (l: HistogramLimitAdvice) => ({
    current: l.current
      ? { ms: l.current.ms, value: show(l.current.ms), source: l.current.source, field: l.current.field }
      : null,
    ...l.figure,
    p50: range(l.figure.p50),
    p95: range(l.figure.p95),
    p99: range(l.figure.p99),
    quantile: range(l.figure.quantile),
    proposal: l.figure.proposalMs === null ? null : show(l.figure.proposalMs),
    ...(l.borrowed ? { borrowed: true } : {}),
  });
  return {
    playbook: name,
    source,
    window: {
      start: when(advice.window.startMs),
      end: when(advice.window.endMs),
      sliceMs: advice.window.sliceMs,
    },
    runs: advice.runs,
    byReason: advice.byReason,
    options: advice.options,
    ceiling: limit(advice.ceiling),
    tasks: advice.tasks.map((task) => ({ name: task.name, timeout: limit(task.timeout) })),
    perTask: advice.perTask,
    warnings: advice.warnings,
  };
}

/** The shape render.ts's merge patch reads: the proposals, no stall. */
export function patchableOf(advice: HistogramAdvice) {
  const none = { figure: { proposalMs: null } };
  return {
    runs: advice.runs,
    ceiling: advice.ceiling,
    stall: none,
    tasks: advice.tasks.map((t) => ({ name: t.name, timeout: t.timeout, stall: none })),
  };
}
