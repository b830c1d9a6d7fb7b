// `playbook advise`'s method on synthetic histories: each figure against a hand computation
// written beside it (docs/advise.md states the method).
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, type ResolvedLimits, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import {
  type AdviseOptions,
  DEFAULT_ADVISE_OPTIONS,
  type RunSample,
  type TaskSample,
} from "../../src/cli/advise/advice-model.js";
import { advise } from "../../src/cli/advise/method.js";
import { recencyWeight, roundUpReadable, weightedQuantile } from "../../src/cli/advise/proposal.js";

const S = 1000;
const DAY = 24 * 3_600_000;
const T0 = Date.parse("2026-11-01T03:00:00Z");

function limitsOf(
  tasks: { name: string; timeout?: string; stall?: string }[],
  ceiling = "1h",
): ResolvedLimits {
  const spec = PlaybookSpecSchema.parse({ ceiling, tasks: tasks.map((t) => ({ ...t, run: "true" })) });
  return resolveLimits(spec, LOCAL_DEFAULTS);
}

/** A run on day `day` whose tasks ran one after the other, 5s after its start, each as given. */
function runOn(
  day: number,
  tasks: (Omit<TaskSample, "startMs"> & { startMs?: number })[],
  id = `run-${day}`,
): RunSample {
  let at = 5 * S;
  const placed = tasks.map((task) => {
    const startMs = task.startMs ?? at;
    at = startMs + (task.durationMs ?? 0);
    return { ...task, startMs };
  });
  const cut = placed.some((t) => t.outcome === "cut");
  return {
    id,
    startedAt: T0 + day * DAY,
    outcome: cut ? "cut" : placed.every((t) => t.outcome === "succeeded") ? "succeeded" : "other",
    reason: cut ? (placed.find((t) => t.outcome === "cut")?.limit ?? "RunCeiling") : "Succeeded",
    durationMs: at,
    tasks: placed,
  };
}

const ok = (name: string, durationMs: number, longestSilenceMs = durationMs / 10): TaskSample => ({
  name,
  outcome: "succeeded",
  durationMs,
  longestSilenceMs,
});

const options = (over: Partial<AdviseOptions> = {}): AdviseOptions => ({
  ...DEFAULT_ADVISE_OPTIONS,
  ...over,
});

describe("the weighted quantile and the weights", () => {
  it("weighs a run one half-life older half as much", () => {
    expect(recencyWeight(0, DAY)).toBe(1);
    expect(recencyWeight(DAY, DAY)).toBe(0.5);
    expect(recencyWeight(2 * DAY, DAY)).toBe(0.25);
  });

  it("reads the smallest value whose cumulative weight reaches the share", () => {
    // 100 (weight 0.25), 50 (0.5), 10 (1): total 1.75. Sorted: 10 -> 1/1.75 = 0.571,
    // 50 -> 1.5/1.75 = 0.857, 100 -> 1. Unweighted, the median would be 50.
    const sample = [
      { value: 100, weight: 0.25, at: 0 },
      { value: 50, weight: 0.5, at: 1 },
      { value: 10, weight: 1, at: 2 },
    ];
    expect(weightedQuantile(sample, 0.5)).toBe(10);
    expect(weightedQuantile(sample, 0.6)).toBe(50);
    expect(weightedQuantile(sample, 0.857)).toBe(50);
    expect(weightedQuantile(sample, 0.9)).toBe(100);
    expect(weightedQuantile([], 0.5)).toBeNull();
  });

  it.each([
    [390, 400],
    [1000, 1000],
    [1001, 2000],
    [12_300, 15_000],
    [156_000, 180_000],
    [13 * 60_000 + 1, 14 * 60_000],
    [2 * 3_600_000 + 1, 2 * 3_600_000 + 300_000],
  ])("rounds %d ms up to a readable %d ms", (ms, rounded) => {
    expect(roundUpReadable(ms)).toBe(rounded);
  });
});

describe("a short history", () => {
  const limits = limitsOf([{ name: "a" }, { name: "b" }]);
  // Twelve runs of task a; task b was added for the last four only.
  const runs = Array.from({ length: 12 }, (_, i) =>
    runOn(i, i >= 8 ? [ok("a", 100 * S), ok("b", 20 * S)] : [ok("a", 100 * S)]),
  );

  it("proposes nothing for a task with fewer than the minimum sample, and says so", () => {
    const advice = advise(runs, limits, options());
    const b = advice.tasks[1];
    expect(b?.timeout.figure).toMatchObject({ n: 4, proposalMs: null });
    expect(b?.timeout.figure.how).toEqual([
      "4 successful attempts, fewer than the minimum sample of 10: no proposal",
    ]);
    expect(b?.timeout.borrowed).toBeUndefined();
  });

  it("borrows the run-level figure when asked, and flags it", () => {
    const advice = advise(runs, limits, options({ borrow: true }));
    // Each run: 5s + 100s, and 20s more for the last four: 105s x8, 125s x4. The p99.9 is the
    // largest, 125s; x1.3 = 162.5s; rounded up to 30s steps: 180s.
    expect(advice.ceiling.figure.proposalMs).toBe(180 * S);
    expect(advice.tasks[1]?.timeout).toMatchObject({ borrowed: true, figure: { proposalMs: 180 * S } });
    // The run's stall from each run's longest silence (a tenth of a task's duration here): 10s
    // for the first eight, 10s too for the last four (a's 10s over b's 2s): 10s x1.3 = 13s,
    // under the 1m floor: 1m.
    expect(advice.tasks[1]?.stall).toMatchObject({ borrowed: true, figure: { proposalMs: 60 * S } });
  });

  it("proposes nothing at all for fewer runs than the minimum sample", () => {
    const advice = advise(runs.slice(0, 9), limits, options());
    expect(advice.ceiling.figure.proposalMs).toBeNull();
    expect(advice.tasks[0]?.timeout.figure.proposalMs).toBeNull();
    expect(advice.backtest.kills).toEqual([]);
  });
});

describe("twelve runs of one task, 10s to 120s", () => {
  const limits = limitsOf([{ name: "a", timeout: "10m" }]);
  const runs = Array.from({ length: 12 }, (_, i) => runOn(i, [ok("a", (i + 1) * 10 * S)]));

  it("gives p50 / p95 / p99 and the proposal at the default rate", () => {
    const a = advise(runs, limits, options({ halfLifeMs: 0 })).tasks[0]?.timeout;
    // Equal weights (half-life 0: no decay): the p50 is the 6th of 12 (share 6/12 = 0.5) =
    // 60s, the p95 the 12th (11/12 = 0.917 < 0.95) = 120s, and so the p99.
    expect(a?.figure).toMatchObject({ n: 12, cut: 0, p50: 60 * S, p95: 120 * S, p99: 120 * S });
    // p99.9 of 12 is the largest: 120s; x1.3 = 156s; above the 1m floor; rounded up to 30s: 180s.
    expect(a?.figure).toMatchObject({ quantile: 120 * S, atLargest: true, proposalMs: 180 * S });
    expect(a?.figure.how).toEqual([
      "the weighted p99.9 quantile of 12 successful attempts' durations is 2m (the largest seen: the sample is too small to read it finer)",
      "times the margin 1.3: 2m36s",
      "rounded up to 3m",
    ]);
    expect(a?.current).toMatchObject({ ms: 600 * S, source: "task" });
  });

  it("reads a higher false-kill rate lower in the distribution", () => {
    const a = advise(runs, limits, options({ halfLifeMs: 0, rate: 0.1 })).tasks[0]?.timeout;
    // p90: 10.8 of 12 -> the 11th value, 110s; x1.3 = 143s; rounded up to 30s steps: 150s.
    expect(a?.figure).toMatchObject({ quantile: 110 * S, atLargest: false, proposalMs: 150 * S });
  });

  it("weighs recent runs more: with a one-day half-life the p50 is a newer, longer run's", () => {
    const a = advise(runs, limits, options({ halfLifeMs: DAY })).tasks[0]?.timeout;
    // Weights 2^-(11-i) for run i (i = 0..11, duration 10(i+1)s): the newest (120s) alone is
    // 1 / (2 - 2^-11) > 0.5 of the total, so the p50 is 120s; the 110s run has 0.5: the
    // runs up to 110s hold (1 - 2^-11) / (2 - 2^-11) < 0.5.
    expect(a?.figure.p50).toBe(120 * S);
  });

  it("replays every successful run under the proposal: none killed", () => {
    const advice = advise(runs, limits, options());
    expect(advice.backtest).toMatchObject({ runs: 12, kills: [], savings: [], savedMs: 0 });
  });

  it("warns of a limit no run came within 10% of", () => {
    const loose = advise(runs, limitsOf([{ name: "a", timeout: "30m" }]), options());
    // The longest, 120s, is 6.7% of 30m.
    expect(loose.warnings).toContain(
      "task a (duration): too loose: no attempt came within 10% of its 30m (spec.tasks[0].timeout); the longest was 2m (6.7%)",
    );
  });

  it("warns of a task that now runs near its limit", () => {
    const near = advise(runs, limitsOf([{ name: "a", timeout: "130s" }]), options());
    // The last five: 80s..120s; over 80% of 130s (104s): 110s and 120s. The worst 120/130 = 92%.
    expect(near.warnings).toContain(
      "task a (duration): near its limit: 2 of the last 5 used more than 80% of its 2m10s (spec.tasks[0].timeout), up to 2m (92.3%)",
    );
  });

  it("warns of durations trending up across the window", () => {
    const advice = advise(runs, limits, options());
    // Older six: 10..60s, median 35s; newer six: 70..120s, median 95s: +171%.
    expect(advice.warnings).toContain(
      "task a (duration): trending up: the newer 6 runs' median is 1m35s, the older 6's 35s (+171%)",
    );
  });
});

describe("attempts cut off at a limit", () => {
  // Ten successful runs of 91s..100s, one cut at its 2m timeout, one hung until the 1h ceiling.
  const limits = limitsOf([{ name: "a", timeout: "2m" }]);
  const good = Array.from({ length: 10 }, (_, i) => runOn(i, [ok("a", (91 + i) * S)]));
  const timedOut = runOn(10, [{ name: "a", outcome: "cut", limit: "TaskTimeout", durationMs: 120 * S }]);
  const hung = runOn(11, [{ name: "a", outcome: "cut", limit: "RunCeiling", durationMs: 3595 * S }]);
  const advice = advise([...good, timedOut, hung], limits, options());
  const a = advice.tasks[0]?.timeout;

  it("are flagged and never read as durations", () => {
    expect(a?.figure).toMatchObject({ n: 10, cut: 2, quantile: 100 * S });
  });

  it("push the proposal above the one a shorter proposal would cut again", () => {
    // 100s x1.3 = 130s, rounded 150s: the attempt cut at 120s would run on under it, so the
    // proposal is at least 120s x1.3 = 156s, rounded up to 180s. The hung one (3595s) is past it.
    expect(a?.figure.proposalMs).toBe(180 * S);
    expect(a?.figure.how).toEqual([
      "the weighted p99.9 quantile of 10 successful attempts' durations is 1m40s (the largest seen: the sample is too small to read it finer)",
      "times the margin 1.3: 2m10s",
      "raised above an attempt cut off at 2m (a limit ended it): 2m times 1.3 is 2m36s",
      "rounded up to 3m",
      "1 cut-off attempt ran longer than that (59m55s): taken as hung, not as work",
    ]);
    expect(a?.figure.hung).toEqual([3595 * S]);
  });

  it("never pull the proposal down", () => {
    const without = advise(good, limits, options()).tasks[0]?.timeout.figure.proposalMs;
    expect(without).toBe(150 * S);
    expect(a?.figure.proposalMs).toBeGreaterThanOrEqual(without as number);
  });

  it("count in the backtest the time the hung run would have saved", () => {
    // The ceiling: the successful runs took 5s + 91..100s; 105s x1.3 = 136.5s, rounded 150s,
    // under which the run cut at 125s would run on: 125s x1.3 = 162.5s, rounded up to 3m.
    expect(advice.ceiling.figure.proposalMs).toBe(180 * S);
    // The hung run: its task started at 5s and ran 3595s: 3600s. Its 3m timeout would end it at
    // 5s + 180s = 185s, the 3m ceiling at 180s: 3420s saved. The run cut at 2m (125s) runs on.
    expect(advice.backtest.savings).toEqual([
      { run: "run-11", reason: "RunCeiling", tookMs: 3600 * S, endsAfterMs: 180 * S },
    ]);
    expect(advice.backtest.savedMs).toBe(3420 * S);
    expect(advice.backtest.ranOn).toEqual(["run-10"]);
    expect(advice.backtest.kills).toEqual([]);
  });
});

describe("a bimodal task: a cache hit in 10s, a miss in 300s", () => {
  const limits = limitsOf([{ name: "build" }]);
  // Twenty runs, every fourth a miss (days 3, 7, 11, 15, 19).
  const runs = Array.from({ length: 20 }, (_, i) =>
    runOn(i, [ok("build", i % 4 === 3 ? 300 * S : 10 * S, 2 * S)]),
  );

  it("proposes from the slow mode, not the median", () => {
    const build = advise(runs, limits, options({ halfLifeMs: 0 })).tasks[0]?.timeout;
    // 15 at 10s, 5 at 300s: the p50 (10 of 20) is 10s; the p95 (19 of 20) and the p99.9 are 300s.
    expect(build?.figure).toMatchObject({ p50: 10 * S, p95: 300 * S, quantile: 300 * S });
    // 300s x1.3 = 390s, a multiple of 30s: 6m30s.
    expect(build?.figure.proposalMs).toBe(390 * S);
    expect(build?.current).toBeNull();
  });

  it("names the runs a proposal from the fast mode alone would have killed", () => {
    const advice = advise(runs, limits, options({ halfLifeMs: 0, rate: 0.3, floorMs: 0 }));
    // p70: 14 of 20 -> the 14th value, 10s; x1.3 = 13s; rounded up to 5s steps: 15s.
    expect(advice.tasks[0]?.timeout.figure.proposalMs).toBe(15 * S);
    expect(advice.backtest.kills.filter((k) => k.limit === "TaskTimeout")).toEqual(
      [3, 7, 11, 15, 19].map((day) => ({
        run: `run-${day}`,
        task: "build",
        limit: "TaskTimeout",
        valueMs: 300 * S,
        proposalMs: 15 * S,
      })),
    );
  });

  it("raises the ceiling to the largest task timeout it proposes: a timeout may not pass it", () => {
    // A second task failed in twelve of the twenty runs: eight successful runs, too few for a
    // ceiling of their own; the build's 6m30s is over the current 5m ceiling, which it raises.
    const limits = limitsOf([{ name: "build" }, { name: "deploy" }], "5m");
    const withDeploy = runs.map((run, i) =>
      runOn(i, [...run.tasks, i < 12 ? { name: "deploy", outcome: "other" } : ok("deploy", S)]),
    );
    const advice = advise(withDeploy, limits, options({ halfLifeMs: 0 }));
    expect(advice.tasks[0]?.timeout.figure.proposalMs).toBe(390 * S);
    expect(advice.ceiling.figure).toMatchObject({ n: 8, proposalMs: 390 * S });
    expect(advice.ceiling.figure.how).toContain(
      "raised to the largest task timeout proposed, 6m30s: a timeout may not pass the ceiling",
    );
  });
});

describe("the stall, from the longest silences", () => {
  it("is proposed the same way, and a silence cut at the stall limit pushes it up", () => {
    const limits = limitsOf([{ name: "a", stall: "1m" }]);
    const runs = [
      ...Array.from({ length: 10 }, (_, i) => runOn(i, [ok("a", 200 * S, (41 + i) * S)])),
      runOn(10, [
        { name: "a", outcome: "cut", limit: "StallLimit", durationMs: 90 * S, longestSilenceMs: 60 * S },
      ]),
    ];
    const stall = advise(runs, limits, options()).tasks[0]?.stall;
    // The largest silence 50s x1.3 = 65s, rounded 1m30s (30s steps): the attempt cut at 60s of
    // silence would run on, so at least 60s x1.3 = 78s, rounded up to 1m30s.
    expect(stall?.figure).toMatchObject({ n: 10, cut: 1, quantile: 50 * S, proposalMs: 90 * S });
    expect(stall?.current).toMatchObject({ ms: 60 * S, source: "task" });
  });
});
