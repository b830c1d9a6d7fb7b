// `playbook advise`'s method (docs/advise.md): limits proposed from a Playbook's history of runs.
// Pure functions of the history and the options, so that every figure can be checked by hand:
// a recency-weighted empirical quantile at 1 - the false-kill rate, times a margin, a floor,
// rounded up to a readable duration; attempts cut off at a limit only ever push it up. Then a
// backtest on the same history and drift warnings. Nothing here reads a file or the cluster.
// The proposal is in proposal.ts, the drift warnings in drift.ts, the backtest in backtest.ts.
import type { EffectiveLimit, ResolvedLimits } from "../../api/limits.js";
import type { TaskLimit } from "../../api/reasons.js";
import type {
  Advice,
  AdviseOptions,
  Figure,
  Hold,
  LimitAdvice,
  RunSample,
  TaskAdvice,
  Weighted,
} from "./advice-model.js";
import { backtest } from "./backtest.js";
import { driftWarnings } from "./drift.js";
import { proposeFrom, recencyWeight, show } from "./proposal.js";

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
