// Advise's backtest (docs/advise.md): the limits in force once a proposal is taken, and the
// history replayed under them: which successful runs it would have killed, which cut runs it ends sooner.
import type {
  Advice,
  AdviseOptions,
  Backtest,
  BacktestKill,
  BacktestSaving,
  LimitAdvice,
  RunSample,
} from "./advice-model.js";

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
