// What `playbook advise`'s method reads (the samples of a Playbook's runs), is told (its
// options) and says (the advice: a figure per limit, the backtest, the warnings; docs/advise.md).
import type { EffectiveLimit } from "../../api/limits.js";
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

/** One observation of a sample: its value, its recency weight and when it was taken. */
export interface Weighted {
  value: number;
  weight: number;
  at: number;
}
