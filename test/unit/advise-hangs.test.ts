// `playbook advise` on a history where a tight limit caught real hangs (issue 57, item 3): 24
// runs under `stall: 2s`, 3 of them hung and cut by the stall. The floor must not loosen that
// limit, the backtest replays only what the proposal changes, and it names each run it cites by
// something a user can find (its file).
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { DEFAULT_ADVISE_OPTIONS, type RunSample } from "../../src/cli/advise/advice-model.js";
import { historyOf } from "../../src/cli/advise/history.js";
import { advise } from "../../src/cli/advise/method.js";
import { renderExplain, renderTable } from "../../src/cli/advise/render.js";

const S = 1000;
const T0 = Date.parse("2026-11-01T03:00:00Z");
const limits = resolveLimits(
  PlaybookSpecSchema.parse({ stall: "2s", tasks: [{ name: "fetch", run: "true" }] }),
  LOCAL_DEFAULTS,
);
const HUNG = [5, 12, 19];

/** Run i: 1s of work, never silent over 300ms; runs 5, 12 and 19 went silent and the 2s stall cut them. */
function run(i: number): RunSample {
  const hung = HUNG.includes(i);
  return {
    id: `runs/${i}.json`,
    startedAt: T0 + i * 3_600_000,
    outcome: hung ? "cut" : "succeeded",
    reason: hung ? "StallLimit" : "Succeeded",
    durationMs: hung ? 2_600 : 1_000 + i * 10,
    tasks: [
      hung
        ? {
            name: "fetch",
            outcome: "cut",
            limit: "StallLimit",
            startMs: 0,
            durationMs: 2_600,
            longestSilenceMs: 2_000,
          }
        : {
            name: "fetch",
            outcome: "succeeded",
            startMs: 0,
            durationMs: 1_000 + i * 10,
            longestSilenceMs: 300,
          },
    ],
  };
}
const runs = Array.from({ length: 24 }, (_, i) => run(i));

describe("a stall limit that caught real hangs", () => {
  const advice = advise(runs, limits, DEFAULT_ADVISE_OPTIONS);

  it("is not loosened by the floor: the run's and the task's stall stay at 2s", () => {
    // 300ms x1.3 = 390ms, under the 1m floor; the floor would pass the 2s that cut the hangs.
    expect(advice.stall.figure.proposalMs).toBe(2 * S);
    expect(advice.tasks[0]?.stall.figure.proposalMs).toBe(2 * S);
    expect(advice.stall.figure.held?.runs).toEqual(HUNG.map((i) => `runs/${i}.json`));
  });

  it("shows the evidence: the runs it cut, silent to the end, and the longest good silence", () => {
    expect(advice.stall.figure.how).toContain(
      "the floor 1m would pass the current 2s, which cut 3 runs that hung (silent to the end, up to 2s; no successful run was silent over 300ms): runs/5.json, runs/12.json, runs/19.json",
    );
    const table = renderTable("fetch", advice, 0);
    expect(table).toContain(
      "Held: the run's stall is not raised to the floor 1m past its current 2s, which cut 3 runs that hung (silent to the end, up to 2s; no successful run was silent over 300ms): runs/5.json, runs/12.json, runs/19.json",
    );
    expect(renderExplain("fetch", advice)).toContain("held at the current limit: 2s");
  });

  it("does not say the hung runs would run on: the stall that cut them is unchanged", () => {
    expect(advice.backtest.ranOn).toEqual([]);
    expect(advice.backtest.savings).toEqual([]);
    expect(renderTable("fetch", advice, 0)).not.toContain("would run on");
  });

  it("still proposes the floor where no hang was cut: the task's timeout, none today", () => {
    expect(advice.tasks[0]?.timeout.figure.proposalMs).toBe(60 * S);
  });
});

describe("a timeout that cut runs", () => {
  const timed = resolveLimits(
    PlaybookSpecSchema.parse({ tasks: [{ name: "sync", run: "true", timeout: "30s" }] }),
    LOCAL_DEFAULTS,
  );
  /** Twelve runs of 5s, never silent over 1s; runs 4 and 9 cut at the 30s timeout, silent up to `silenceMs`. */
  const history = (silenceMs: number): RunSample[] =>
    Array.from({ length: 14 }, (_, i) => {
      const cut = i === 4 || i === 9;
      return {
        id: `runs/${i}.json`,
        startedAt: T0 + i * 3_600_000,
        outcome: cut ? "cut" : "succeeded",
        reason: cut ? "TaskTimeout" : "Succeeded",
        durationMs: cut ? 30 * S : 5 * S,
        tasks: [
          cut
            ? {
                name: "sync",
                outcome: "cut",
                limit: "TaskTimeout",
                startMs: 0,
                durationMs: 30 * S,
                longestSilenceMs: silenceMs,
              }
            : { name: "sync", outcome: "succeeded", startMs: 0, durationMs: 5 * S, longestSilenceMs: S },
        ],
      };
    });

  it("is held against the floor when the runs it cut made no progress: silent longer than any good one", () => {
    const timeout = advise(history(25 * S), timed, DEFAULT_ADVISE_OPTIONS).tasks[0]?.timeout;
    expect(timeout?.figure.proposalMs).toBe(30 * S);
    expect(timeout?.figure.held?.runs).toEqual(["runs/4.json", "runs/9.json"]);
    expect(timeout?.figure.held?.evidence).toBe(
      "no output for up to 25s before it: no progress; no successful attempt was silent over 1s",
    );
  });

  it("takes the floor when the runs it cut went on printing: they may have been work", () => {
    const timeout = advise(history(S), timed, DEFAULT_ADVISE_OPTIONS).tasks[0]?.timeout;
    expect(timeout?.figure.proposalMs).toBe(60 * S);
    expect(timeout?.figure.held).toBeUndefined();
  });
});

describe("the backtest with nothing proposed", () => {
  it("says nothing changes, and cites no run", () => {
    // Nine runs are under the minimum sample of 10: nothing is proposed.
    const advice = advise(runs.slice(0, 9), limits, DEFAULT_ADVISE_OPTIONS);
    expect(advice.backtest).toMatchObject({ changes: false, kills: [], savings: [], ranOn: [] });
    const table = renderTable("fetch", advice, 0);
    expect(table).toContain(
      "Backtest: nothing is proposed to change; each of the 9 runs would end as it did.",
    );
    expect(table).not.toContain("run on");
  });
});

describe("the backtest with some limits proposed", () => {
  it("replays only those: a run over a limit the proposal leaves as it is is not cited", () => {
    // Task a's timeout is 30s now; run 3 took 45s under an older spec. Task a ran in 9 runs,
    // under the minimum sample: its timeout is not proposed. The ceiling is (from 12 runs).
    const spec = PlaybookSpecSchema.parse({
      tasks: [
        { name: "a", run: "true", timeout: "30s" },
        { name: "b", run: "true" },
      ],
    });
    const twoTasks = resolveLimits(spec, LOCAL_DEFAULTS);
    const history: RunSample[] = Array.from({ length: 12 }, (_, i) => {
      const a =
        i < 9
          ? [{ name: "a", outcome: "succeeded" as const, startMs: 0, durationMs: i === 3 ? 45 * S : 10 * S }]
          : [];
      return {
        id: `runs/${i}.json`,
        startedAt: T0 + i * 3_600_000,
        outcome: "succeeded",
        reason: "Succeeded",
        durationMs: 60 * S,
        tasks: [...a, { name: "b", outcome: "succeeded", startMs: 0, durationMs: 5 * S }],
      };
    });
    const advice = advise(history, twoTasks, DEFAULT_ADVISE_OPTIONS);
    expect(advice.tasks[0]?.timeout.figure.proposalMs).toBeNull();
    expect(advice.ceiling.figure.proposalMs).not.toBeNull();
    expect(advice.backtest.changes).toBe(true);
    expect(advice.backtest.kills).toEqual([]);
  });
});

describe("the runs the backtest cites", () => {
  it("are named by their files when local runs of one manifest share a name", () => {
    const file = (i: number, ends: "Succeeded" | "StallLimit", seconds: number) => {
      const start = new Date(T0 + i * 3_600_000);
      const end = new Date(start.getTime() + seconds * S);
      return {
        source: `runs/${i}.json`,
        value: {
          apiVersion: "playbook.dev/v1alpha1",
          kind: "Playbook",
          metadata: { name: "nightly" },
          spec: { ceiling: "10m", tasks: [{ name: "fetch", run: "true", timeout: "5m" }] },
          status: {
            startTime: start.toISOString(),
            completionTime: end.toISOString(),
            conditions: [
              {
                type: "Succeeded",
                status: ends === "Succeeded" ? "True" : "False",
                reason: ends,
                message: "",
                lastTransitionTime: end.toISOString(),
              },
            ],
            tasks: [
              {
                name: "fetch",
                phase: ends === "Succeeded" ? "Succeeded" : "TimedOut",
                ...(ends === "Succeeded" ? {} : { limit: "StallLimit" }),
                attempts: 1,
                startTime: start.toISOString(),
                completionTime: end.toISOString(),
                longestSilence: ends === "Succeeded" ? "1s" : "4m",
              },
            ],
          },
        },
      };
    };
    // Ten runs of 10s, and two a 4m stall cut after 4m10s: the 5m timeout the proposal lowers to 1m.
    const documents = [
      ...Array.from({ length: 10 }, (_, i) => file(i, "Succeeded", 10)),
      file(10, "StallLimit", 250),
      file(11, "StallLimit", 250),
    ];
    const [history] = historyOf(documents, null);
    if (!history) throw new Error("no history");
    expect(history.runs.map((r) => r.id)).toContain("runs/10.json");
    const advice = advise(history.runs, history.limits, DEFAULT_ADVISE_OPTIONS);
    expect(advice.backtest.savings.map((s) => s.run)).toEqual(["runs/10.json", "runs/11.json"]);
    expect(JSON.stringify(advice.backtest)).not.toContain('"nightly"');
  });
});
