// `playbook advise`'s method (docs/advise.md): limits proposed from a Playbook's history of runs.
// Pure functions of the history and the options, so that every figure can be checked by hand:
// a recency-weighted empirical quantile at 1 - the false-kill rate, times a margin, a floor,
// rounded up to a readable duration; attempts cut off at a limit only ever push it up. Then a
// backtest on the same history and drift warnings. Nothing here reads a file or the cluster.
import { formatDuration } from "../../api/duration.js";
import type { EffectiveLimit, ResolvedLimits } from "../../api/limits.js";
import type { TaskLimit } from "../../api/reasons.js";

/** One task of one run, as its last attempt ended. */
export interface TaskSample {
  name: string;
  /**
   * succeeded: a full observation. cut: it ended at a limit, so its figures are lower bounds
   * (censored). other: failed, cancelled, skipped: not counted.
   */
  outcome: "succeeded" | "cut" | "other";
  /** the limit that cut it */
  limit?: TaskLimit;
  /** ms after the run's start that its last attempt started */
  startMs?: number;
  durationMs?: number;
  longestSilenceMs?: number;
}

/** One run of the Playbook. */
export interface RunSample {
  /** the run's name, or its report file: what the backtest names */
  id: string;
  /** when it started, ms since the epoch: its age for the weights */
  startedAt: number;
  /** succeeded, cut (it ended at a limit: its length is a lower bound), other (failed, cancelled) */
  outcome: "succeeded" | "cut" | "other";
  /** what ended it, as its condition says */
  reason: string;
  /** from its start to its last main task's end: what the ceiling bounds (the finally tasks have their own) */
  durationMs: number;
  tasks: TaskSample[];
}

export interface AdviseOptions {
  /** the share of successful attempts the proposal may kill, e.g. 0.001 */
  rate: number;
  margin: number;
  halfLifeMs: number;
  minSample: number;
  floorMs: number;
  /** a task with too few samples takes the run-level figure (the ceiling, the run's stall) */
  borrow: boolean;
  /** how many of the newest successful runs the backtest replays; 0: all of them */
  backtestRuns: number;
}

export const DEFAULT_ADVISE_OPTIONS: AdviseOptions = {
  rate: 0.001,
  margin: 1.3,
  // A daily run's last two weeks weigh at least half: a month of history is a sample of 30.
  halfLifeMs: 14 * 24 * 3_600_000,
  minSample: 10,
  // A limit under a minute kills on a slow image pull or a busy node as much as on a hang.
  floorMs: 60_000,
  borrow: false,
  backtestRuns: 0,
};

/** The figures of one kind of sample (durations or silences) and the limit proposed from them. */
export interface Figure {
  /** successful (full) observations */
  n: number;
  /** attempts cut off at a limit: lower bounds, never read as durations */
  cut: number;
  p50: number | null;
  p95: number | null;
  p99: number | null;
  /** the largest seen: the longest duration, or the longest silence */
  max: number | null;
  /** the weighted quantile at 1 - rate */
  quantile: number | null;
  /** the sample is too small to tell that quantile from the largest value seen */
  atLargest: boolean;
  proposalMs: number | null;
  /** how the proposal was reached, step by step, in words */
  how: string[];
  /** cut-off attempts longer than the proposal: taken as hung (no successful one took that long) */
  hung: number[];
  /**
   * The floor was not let pass the current limit: that limit cut runs the history shows hung.
   * The proposal is then the current limit (or the figures' own, where that is higher).
   */
  held?: Hold;
}

/**
 * The current limit and the runs it cut that the history shows hung: silent to the end (the
 * stall fired), or silent longer than any successful attempt ever was (no progress). The floor
 * may not raise a proposal past such a limit: that would let those hangs run on.
 */
export interface Hold {
  currentMs: number;
  /** the runs it cut that hung, as the backtest names them */
  runs: string[];
  /** the cut attempts' values (durations or silences) in this figure */
  values: number[];
  /** what shows them hung, in words */
  evidence: string;
}

export interface LimitAdvice {
  current: EffectiveLimit | null;
  figure: Figure;
  /** the task had too few samples and took the run-level proposal */
  borrowed?: boolean;
}

export interface TaskAdvice {
  name: string;
  timeout: LimitAdvice;
  stall: LimitAdvice;
}

export interface BacktestKill {
  run: string;
  /** the task, absent for the ceiling */
  task?: string;
  limit: "TaskTimeout" | "StallLimit" | "RunCeiling";
  valueMs: number;
  proposalMs: number;
}

export interface BacktestSaving {
  run: string;
  reason: string;
  /** how long it ran */
  tookMs: number;
  /** when the proposal would have ended it */
  endsAfterMs: number;
}

export interface Backtest {
  /** the proposal changes a limit in force; without a change nothing is replayed: every run ends as it did */
  changes: boolean;
  /** successful runs replayed */
  runs: number;
  kills: BacktestKill[];
  /** runs that ended at a limit and the proposal would have ended sooner */
  savings: BacktestSaving[];
  savedMs: number;
  /** runs that ended at a limit the proposal raises: they would have run on, their outcome unknown */
  ranOn: string[];
}

export interface Advice {
  runs: number;
  /** the oldest and the newest run's start, ms since the epoch */
  span: [number, number] | null;
  ceiling: LimitAdvice;
  /** the run-level stall (spec.stall): from each run's longest silence of any task */
  stall: LimitAdvice;
  tasks: TaskAdvice[];
  backtest: Backtest;
  warnings: string[];
  options: AdviseOptions;
}

interface Weighted {
  value: number;
  weight: number;
  at: number;
}

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

const show = (ms: number) => formatDuration(Math.round(ms));

/** A share as a percentage, to a tenth; under a tenth of a percent said so. */
function percent(share: number): string {
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

/** The proposals, the backtest and the warnings for one Playbook's runs under its current limits. */
export function advise(runs: readonly RunSample[], limits: ResolvedLimits, options: AdviseOptions): Advice {
  const byTime = [...runs].sort((a, b) => a.startedAt - b.startedAt);
  const newest = byTime[byTime.length - 1]?.startedAt ?? 0;
  const weightOf = (run: RunSample) => recencyWeight(newest - run.startedAt, options.halfLifeMs);
  const weighted = (run: RunSample, value: number): Weighted => ({
    value,
    weight: weightOf(run),
    at: run.startedAt,
  });

  // The run level: the ceiling from whole runs, the run's stall from each run's longest silence.
  const succeeded = byTime.filter((run) => run.outcome === "succeeded");
  const runCut = byTime.filter((run) => run.outcome === "cut");
  const runSilence = (run: RunSample) => Math.max(0, ...run.tasks.map((t) => t.longestSilenceMs ?? 0));
  const hasSilences = (run: RunSample) => run.tasks.some((t) => t.longestSilenceMs !== undefined);
  const goodRunSilence = Math.max(0, ...succeeded.filter(hasSilences).map(runSilence));
  const cutBy = (run: RunSample, limit: TaskLimit) =>
    run.tasks.some((t) => t.outcome === "cut" && t.limit === limit);
  const ceilingFigure = proposeFrom(
    succeeded.map((run) => weighted(run, run.durationMs)),
    runCut.map((run) => run.durationMs),
    options,
    "successful runs' durations",
    holdOf(
      limits.ceiling,
      runCut
        .filter((run) => run.reason === "PodDeadlineExceeded" || cutBy(run, "RunCeiling"))
        .map((run) => ({
          run,
          value: run.durationMs,
          silenceMs: hasSilences(run) ? runSilence(run) : undefined,
        })),
      goodRunSilence,
      "run",
      false,
    ),
  );
  const stallFigure = proposeFrom(
    succeeded.filter(hasSilences).map((run) => weighted(run, runSilence(run))),
    runCut.filter(hasSilences).map(runSilence),
    options,
    "successful runs' longest silences (any task)",
    holdOf(
      limits.stall,
      runCut
        .filter((run) => hasSilences(run) && cutBy(run, "StallLimit"))
        .map((run) => ({ run, value: runSilence(run), silenceMs: runSilence(run) })),
      goodRunSilence,
      "run",
      true,
    ),
  );

  const tasks: TaskAdvice[] = limits.tasks.map((taskLimits) => {
    const samples = byTime.flatMap((run) => {
      const task = run.tasks.find((t) => t.name === taskLimits.name);
      return task ? [{ run, task }] : [];
    });
    const full = samples.filter((s) => s.task.outcome === "succeeded");
    const cut = samples.filter((s) => s.task.outcome === "cut");
    const goodSilence = Math.max(0, ...full.map((s) => s.task.longestSilenceMs ?? 0));
    const timeout = proposeFrom(
      full
        .filter((s) => s.task.durationMs !== undefined)
        .map((s) => weighted(s.run, s.task.durationMs as number)),
      cut.flatMap((s) => (s.task.durationMs === undefined ? [] : [s.task.durationMs])),
      options,
      "successful attempts' durations",
      holdOf(
        taskLimits.timeout,
        cut.flatMap((s) =>
          s.task.limit === "TaskTimeout" && s.task.durationMs !== undefined
            ? [{ run: s.run, value: s.task.durationMs, silenceMs: s.task.longestSilenceMs }]
            : [],
        ),
        goodSilence,
        "attempt",
        false,
      ),
    );
    const stall = proposeFrom(
      full
        .filter((s) => s.task.longestSilenceMs !== undefined)
        .map((s) => weighted(s.run, s.task.longestSilenceMs as number)),
      cut.flatMap((s) => (s.task.longestSilenceMs === undefined ? [] : [s.task.longestSilenceMs])),
      options,
      "successful attempts' longest silences",
      holdOf(
        taskLimits.stall,
        cut.flatMap((s) =>
          s.task.limit === "StallLimit" && s.task.longestSilenceMs !== undefined
            ? [{ run: s.run, value: s.task.longestSilenceMs, silenceMs: s.task.longestSilenceMs }]
            : [],
        ),
        goodSilence,
        "attempt",
        true,
      ),
    );
    return {
      name: taskLimits.name,
      timeout: borrowed(timeout, ceilingFigure, options, "the run's ceiling", {
        current: taskLimits.timeout,
      }),
      stall: borrowed(stall, stallFigure, options, "the run's stall", { current: taskLimits.stall }),
    };
  });

  // A task's timeout may not pass the ceiling (validate refuses it): the ceiling is raised to the
  // largest one proposed.
  const largestTimeout = Math.max(0, ...tasks.map((t) => t.timeout.figure.proposalMs ?? 0));
  if (largestTimeout > (ceilingFigure.proposalMs ?? limits.ceiling.ms)) {
    ceilingFigure.proposalMs = largestTimeout;
    ceilingFigure.how.push(
      `raised to the largest task timeout proposed, ${show(largestTimeout)}: a timeout may not pass the ceiling`,
    );
  }

  const warnings = [
    ...driftWarnings(
      "the run",
      succeeded.map((run) => weighted(run, run.durationMs)),
      limits.ceiling,
      options.minSample,
    ),
    ...tasks.flatMap((advice, index) => {
      const taskLimits = limits.tasks[index];
      const full = byTime.flatMap((run) => {
        const task = run.tasks.find((t) => t.name === advice.name && t.outcome === "succeeded");
        return task ? [{ run, task }] : [];
      });
      return [
        ...driftWarnings(
          `task ${advice.name} (duration)`,
          full
            .filter((s) => s.task.durationMs !== undefined)
            .map((s) => weighted(s.run, s.task.durationMs as number)),
          // Only a task's own timeout is its limit: the ceiling bounds the run (checked above).
          taskLimits?.timeout ?? null,
          options.minSample,
        ),
        ...driftWarnings(
          `task ${advice.name} (silence)`,
          full
            .filter((s) => s.task.longestSilenceMs !== undefined)
            .map((s) => weighted(s.run, s.task.longestSilenceMs as number)),
          taskLimits?.stall ?? null,
          options.minSample,
          // A longer silence goes with a longer duration: its trend would say the same twice.
          false,
        ),
      ];
    }),
  ];

  const advice: Omit<Advice, "backtest"> = {
    runs: byTime.length,
    span: byTime.length > 0 ? [byTime[0]?.startedAt as number, newest] : null,
    ceiling: { current: limits.ceiling, figure: ceilingFigure },
    stall: { current: limits.stall, figure: stallFigure },
    tasks,
    warnings,
    options,
  };
  return { ...advice, backtest: backtest(byTime, advice, options) };
}

/**
 * What holds a limit against the floor: the runs it cut (`cut`, each with the value the figure
 * reads and its longest silence) that hung, silent longer than any successful one ever was
 * (`goodSilenceMs`). For a stall, that silence ran to the end: the stall fired on it.
 */
function holdOf(
  current: EffectiveLimit | null,
  cut: readonly { run: RunSample; value: number; silenceMs: number | undefined }[],
  goodSilenceMs: number,
  unit: "run" | "attempt",
  stall: boolean,
): Hold | undefined {
  if (!current || current.ms <= 0) return undefined;
  const hung = cut.filter((c) => c.silenceMs !== undefined && c.silenceMs > goodSilenceMs);
  if (hung.length === 0) return undefined;
  const longest = Math.max(...hung.map((c) => c.silenceMs as number));
  const none = `no successful ${unit} was silent over ${show(goodSilenceMs)}`;
  return {
    currentMs: current.ms,
    runs: hung.map((c) => c.run.id),
    values: hung.map((c) => c.value),
    evidence: stall
      ? `silent to the end, up to ${show(longest)}; ${none}`
      : `no output for up to ${show(longest)} before it: no progress; ${none}`,
  };
}

function borrowed(
  own: Figure,
  runLevel: Figure,
  options: AdviseOptions,
  from: string,
  advice: { current: EffectiveLimit | null },
): LimitAdvice {
  if (own.proposalMs !== null || !options.borrow || runLevel.proposalMs === null) {
    return { current: advice.current, figure: own };
  }
  return {
    current: advice.current,
    borrowed: true,
    figure: {
      ...own,
      proposalMs: runLevel.proposalMs,
      how: [...own.how, `borrowed ${from}: ${show(runLevel.proposalMs)}`],
    },
  };
}

/**
 * The limits in force once the proposal is taken: each proposed one, else the current one (the
 * patch leaves it as it is); null where neither bounds it (no task timeout, a stall of 0s).
 */
export interface ProposedLimits {
  ceilingMs: number | null;
  stallMs: number | null;
  tasks: { name: string; timeoutMs: number | null; stallMs: number | null }[];
}

export function proposedLimits(
  advice: Pick<Advice, "ceiling" | "stall" | "tasks">,
  proposal: "taken" | "not taken" = "taken",
): ProposedLimits {
  const proposed = (limit: LimitAdvice) => (proposal === "taken" ? limit.figure.proposalMs : null);
  const inForce = (limit: LimitAdvice): number | null => {
    const ms = proposed(limit) ?? limit.current?.ms ?? null;
    return ms === 0 ? null : ms;
  };
  const runStall = inForce(advice.stall);
  return {
    ceilingMs: inForce(advice.ceiling),
    stallMs: runStall,
    tasks: advice.tasks.map((task) => {
      // A task without a stall of its own (proposed or set) takes the run's, as spec.stall gives it.
      const own =
        proposed(task.stall) ?? (task.stall.current?.source === "task" ? task.stall.current.ms : null);
      return {
        name: task.name,
        timeoutMs: inForce(task.timeout),
        stallMs: own === null ? runStall : own === 0 ? null : own,
      };
    }),
  };
}

/**
 * Replays the newest successful runs under the proposal (which would it have killed, and by what),
 * and the runs that ended at a limit: when the proposal would have ended each (its cut task's
 * start plus the proposed timeout, or the proposed ceiling, whichever comes first; a stall
 * tightened ends it that much sooner, as its last silence ran to the end), and the time that
 * saves. Only what the proposal changes is replayed: a run cut by a limit it leaves as it is ends
 * as it did, and with nothing changed there is nothing to replay.
 */
export function backtest(
  byTime: readonly RunSample[],
  advice: Pick<Advice, "ceiling" | "stall" | "tasks">,
  options: AdviseOptions,
): Backtest {
  const proposal = proposedLimits(advice);
  const now = proposedLimits(advice, "not taken");
  const changes =
    proposal.ceilingMs !== now.ceilingMs ||
    proposal.stallMs !== now.stallMs ||
    proposal.tasks.some(
      (t, i) => t.timeoutMs !== now.tasks[i]?.timeoutMs || t.stallMs !== now.tasks[i]?.stallMs,
    );
  if (!changes) return { changes, runs: 0, kills: [], savings: [], savedMs: 0, ranOn: [] };
  const succeeded = byTime.filter((run) => run.outcome === "succeeded");
  const replayed = options.backtestRuns > 0 ? succeeded.slice(-options.backtestRuns) : succeeded;
  const kills: BacktestKill[] = [];
  for (const run of replayed) {
    if (
      proposal.ceilingMs !== null &&
      proposal.ceilingMs !== now.ceilingMs &&
      run.durationMs > proposal.ceilingMs
    ) {
      kills.push({
        run: run.id,
        limit: "RunCeiling",
        valueMs: run.durationMs,
        proposalMs: proposal.ceilingMs,
      });
    }
    for (const task of run.tasks) {
      const limits = proposal.tasks.find((t) => t.name === task.name);
      if (!limits || task.outcome !== "succeeded") continue;
      // Only a limit the proposal changes is replayed: the others stay as the runs had them.
      const before = now.tasks.find((t) => t.name === task.name);
      if (
        limits.timeoutMs !== null &&
        limits.timeoutMs !== before?.timeoutMs &&
        task.durationMs !== undefined &&
        task.durationMs > limits.timeoutMs
      ) {
        kills.push({
          run: run.id,
          task: task.name,
          limit: "TaskTimeout",
          valueMs: task.durationMs,
          proposalMs: limits.timeoutMs,
        });
      }
      if (
        limits.stallMs !== null &&
        limits.stallMs !== before?.stallMs &&
        task.longestSilenceMs !== undefined &&
        task.longestSilenceMs > limits.stallMs
      ) {
        kills.push({
          run: run.id,
          task: task.name,
          limit: "StallLimit",
          valueMs: task.longestSilenceMs,
          proposalMs: limits.stallMs,
        });
      }
    }
  }
  const savings: BacktestSaving[] = [];
  const ranOn: string[] = [];
  for (const run of byTime.filter((r) => r.outcome === "cut")) {
    const cutTask = run.tasks.find((t) => t.outcome === "cut");
    const limits = proposal.tasks.find((t) => t.name === cutTask?.name);
    const before = now.tasks.find((t) => t.name === cutTask?.name);
    let endsAfter = proposal.ceilingMs ?? Number.POSITIVE_INFINITY;
    if (cutTask?.startMs !== undefined && limits && limits.timeoutMs !== null) {
      endsAfter = Math.min(endsAfter, cutTask.startMs + limits.timeoutMs);
    }
    // The limit that cut it, now and under the proposal: left as it is, it cuts the run again.
    const cutBy = cutTask?.limit ?? "RunCeiling";
    const [was, will] =
      cutBy === "TaskTimeout"
        ? [before?.timeoutMs, limits?.timeoutMs]
        : cutBy === "StallLimit"
          ? [before?.stallMs, limits?.stallMs]
          : [now.ceilingMs, proposal.ceilingMs];
    if (cutBy === "StallLimit" && was != null && will != null && will < was) {
      // Its last silence ran to the end: a shorter stall fires that much sooner.
      const end = (cutTask?.startMs ?? 0) + (cutTask?.durationMs ?? run.durationMs);
      endsAfter = Math.min(endsAfter, end - (was - will));
    }
    if (endsAfter < run.durationMs) {
      savings.push({ run: run.id, reason: run.reason, tookMs: run.durationMs, endsAfterMs: endsAfter });
    } else if (was !== will) ranOn.push(run.id);
  }
  return {
    changes,
    runs: replayed.length,
    kills,
    savings,
    savedMs: savings.reduce((sum, s) => sum + (s.tookMs - s.endsAfterMs), 0),
    ranOn,
  };
}
