// The advice on one Playbook from the controller's histograms (histogram.ts's method on the
// slices prometheus.ts read): the ceiling from the run durations, each task's timeout from its
// durations when the series carry a `task` label, drift from the halves of the window and the
// usage ratios. The histograms hold no silences: no stall is proposed from them. Pure.
import { formatDuration } from "../../api/duration.js";
import type { EffectiveLimit, ResolvedLimits } from "../../api/limits.js";
import type { AdviseOptions } from "./advice-model.js";
import {
  type Bucket,
  type HistogramFigure,
  histogramDrift,
  proposeFromHistogram,
  weightedSum,
} from "./histogram.js";
import type { SlicedHistogram } from "./prometheus.js";
import { recencyWeight } from "./proposal.js";

/** What a run's reason says of its length: StartTimeout and QueueTimeout ended it before any task ran. */
const CUT_REASONS: readonly string[] = ["TaskTimeout", "StallLimit", "RunCeiling", "PodDeadlineExceeded"];

/** One Playbook's histograms over the window, as prometheus.ts reads them. */
export interface PlaybookHistograms {
  /** playbook_run_duration_seconds by reason */
  runs: readonly SlicedHistogram[];
  /** playbook_task_duration_seconds by task and phase */
  tasks: readonly SlicedHistogram[];
  /** playbook_task_limit_usage_ratio by limit and task */
  usage: readonly SlicedHistogram[];
  /** the step times in seconds, oldest first: slice k is (times[k], times[k + 1]] */
  times: readonly number[];
}

export interface HistogramLimitAdvice {
  current: EffectiveLimit | null;
  figure: HistogramFigure;
  borrowed?: boolean;
}

export interface HistogramAdvice {
  /** the window, ms since the epoch */
  window: { startMs: number; endMs: number; sliceMs: number };
  /** runs in the window, by reason */
  byReason: Record<string, number>;
  runs: number;
  ceiling: HistogramLimitAdvice;
  tasks: { name: string; timeout: HistogramLimitAdvice }[];
  /** the task series carry a `task` label (the controller's --metrics-task-label) */
  perTask: boolean;
  warnings: string[];
  options: AdviseOptions;
}

/** The slices of the groups `match` picks, summed; weighted by recency or as counted. */
function combine(
  histograms: readonly SlicedHistogram[],
  match: (labels: Record<string, string>) => boolean,
  weights: readonly number[] | null,
): Bucket[] {
  const slices = histograms
    .filter((h) => match(h.labels))
    .flatMap((h) => h.slices.map((buckets, k) => ({ weight: weights ? (weights[k] ?? 0) : 1, buckets })));
  return weightedSum(slices);
}

/** The two halves of the window, counted: what a trend compares. */
function halvesOf(
  histograms: readonly SlicedHistogram[],
  match: (labels: Record<string, string>) => boolean,
  slices: number,
): { older: Bucket[]; newer: Bucket[] } {
  const half = Math.floor(slices / 2);
  const pick = (from: number, to: number) =>
    weightedSum(
      histograms
        .filter((h) => match(h.labels))
        .flatMap((h) => h.slices.slice(from, to).map((buckets) => ({ weight: 1, buckets }))),
    );
  return { older: pick(0, half), newer: pick(slices - half, slices) };
}

const show = (ms: number) => formatDuration(Math.round(ms));

export function adviseFromHistograms(
  input: PlaybookHistograms,
  limits: ResolvedLimits | null,
  options: AdviseOptions,
): HistogramAdvice {
  const times = input.times;
  const endS = times[times.length - 1] as number;
  const slices = times.length - 1;
  // A slice weighs as a run at its end would: the newest 1, one a half-life older 0.5.
  const weights = times.slice(1).map((t) => recencyWeight((endS - t) * 1000, options.halfLifeMs));
  const both = (match: (labels: Record<string, string>) => boolean) => ({
    weighted: combine(input.runs.concat(), match, weights),
    counted: combine(input.runs.concat(), match, null),
  });

  const byReason: Record<string, number> = {};
  for (const series of input.runs) {
    const reason = series.labels.reason ?? "";
    const total = combine([series], () => true, null).at(-1)?.count ?? 0;
    if (total > 0) byReason[reason] = (byReason[reason] ?? 0) + total;
  }
  const succeededRun = (l: Record<string, string>) => l.reason === "Succeeded";
  const ceilingFigure = proposeFromHistogram(
    both(succeededRun),
    combine(input.runs, (l) => CUT_REASONS.includes(l.reason ?? ""), null),
    options,
    "successful runs' durations",
  );

  const named = [...new Set(input.tasks.map((h) => h.labels.task ?? ""))].filter((t) => t !== "");
  const perTask = named.length > 0;
  const names = limits ? limits.tasks.map((t) => t.name) : named.sort();
  const taskFull = (name: string) => (l: Record<string, string>) =>
    l.task === name && l.phase === "Succeeded";
  const tasks = perTask
    ? names.map((name) => {
        const match = taskFull(name);
        const figure = proposeFromHistogram(
          {
            weighted: combine(input.tasks, match, weights),
            counted: combine(input.tasks, match, null),
          },
          combine(input.tasks, (l) => l.task === name && l.phase === "TimedOut", null),
          options,
          "successful attempts' durations",
        );
        const current = limits?.tasks.find((t) => t.name === name)?.timeout ?? null;
        if (figure.proposalMs === null && options.borrow && ceilingFigure.proposalMs !== null) {
          return {
            name,
            timeout: {
              current,
              borrowed: true,
              figure: {
                ...figure,
                proposalMs: ceilingFigure.proposalMs,
                how: [...figure.how, `borrowed the run's ceiling: ${show(ceilingFigure.proposalMs)}`],
              },
            },
          };
        }
        return { name, timeout: { current, figure } };
      })
    : [];

  const largestTimeout = Math.max(0, ...tasks.map((t) => t.timeout.figure.proposalMs ?? 0));
  if (largestTimeout > (ceilingFigure.proposalMs ?? limits?.ceiling.ms ?? Number.POSITIVE_INFINITY)) {
    ceilingFigure.proposalMs = largestTimeout;
    ceilingFigure.how.push(
      `raised to the largest task timeout proposed, ${show(largestTimeout)}: a timeout may not pass the ceiling`,
    );
  }

  const usageOf = (limit: string, task?: string) =>
    combine(input.usage, (l) => l.limit === limit && (task === undefined || l.task === task), null);
  const warnings = [
    ...histogramDrift(
      "the run",
      halvesOf(input.runs, succeededRun, slices),
      usageOf("RunCeiling"),
      limits?.ceiling ?? null,
      options.minSample,
    ),
    ...tasks.flatMap((task) =>
      histogramDrift(
        `task ${task.name} (duration)`,
        halvesOf(input.tasks, taskFull(task.name), slices),
        usageOf("TaskTimeout", task.name),
        task.timeout.current,
        options.minSample,
      ),
    ),
  ];
  const startS = times[0] as number;
  return {
    window: { startMs: startS * 1000, endMs: endS * 1000, sliceMs: ((endS - startS) / slices) * 1000 },
    byReason,
    runs: Object.values(byReason).reduce((sum, n) => sum + n, 0),
    ceiling: { current: limits?.ceiling ?? null, figure: ceilingFigure },
    tasks,
    perTask,
    warnings,
    options,
  };
}
