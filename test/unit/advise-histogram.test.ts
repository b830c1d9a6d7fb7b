// `playbook advise --prometheus`'s method on synthetic histograms: where each quantile lies (the
// bucket's bounds, and histogram_quantile()'s interpolation), the proposal from the bucket's upper
// bound, cut-off buckets, drift, slices of counters with resets, and each figure checked by hand.
// That the figures agree with the objects' on a real Prometheus: test/controller/prometheus.test.ts.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { validatePlaybook } from "../../src/api/manifest.js";
import { DEFAULT_ADVISE_OPTIONS } from "../../src/cli/advise/advice-model.js";
import {
  type Bucket,
  bucketQuantile,
  bucketsOf,
  histogramDrift,
  proposeFromHistogram,
  sliceIncreases,
} from "../../src/cli/advise/histogram.js";
import { adviseFromHistograms } from "../../src/cli/advise/histogram-advice.js";
import { PrometheusError, SLICES, slicedHistogram, stepTimes } from "../../src/cli/advise/prometheus.js";
import { renderHistogramExplain, renderHistogramTable } from "../../src/cli/advise/render-histogram.js";

const INF = Number.POSITIVE_INFINITY;
/** Cumulative buckets from per-bucket counts: bounds in seconds, as the controller's histograms have them. */
function histogram(bounds: readonly number[], counts: readonly number[]): Bucket[] {
  let sum = 0;
  return bounds.map((le, i) => {
    sum += counts[i] ?? 0;
    return { le, count: sum };
  });
}
const TASK_BOUNDS = [0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600, 21600, INF];
const options = { ...DEFAULT_ADVISE_OPTIONS, halfLifeMs: 0 };

describe("where a quantile lies in a histogram", () => {
  // 2 in (0, 1], 4 in (1, 5], 4 in (5, 15]: 10.
  const buckets = histogram([1, 5, 15, INF], [2, 4, 4, 0]);

  it("finds the bucket whose cumulative count reaches q of the total, and interpolates in it as histogram_quantile() does", () => {
    // rank 0.5 x 10 = 5: (1s, 5s], 3 of its 4 in: 1 + 4 x 3/4 = 4s.
    expect(bucketQuantile(buckets, 0.5)).toEqual({ lowerMs: 1000, upperMs: 5000, interpolatedMs: 4000 });
    // rank 9.5: (5s, 15s], 3.5 of its 4: 5 + 10 x 0.875 = 13.75s.
    expect(bucketQuantile(buckets, 0.95)).toEqual({ lowerMs: 5000, upperMs: 15000, interpolatedMs: 13750 });
    // rank 2 is reached by the first bucket: (0, 1], at its top.
    expect(bucketQuantile(buckets, 0.2)).toEqual({ lowerMs: 0, upperMs: 1000, interpolatedMs: 1000 });
  });

  it("says a quantile in the +Inf bucket lies above the largest bound, as histogram_quantile() gives that bound", () => {
    const over = histogram([1, 5, INF], [5, 4, 1]);
    expect(bucketQuantile(over, 0.99)).toEqual({ lowerMs: 5000, upperMs: INF, interpolatedMs: 5000 });
  });

  it("has none for an empty histogram, and mends a count that decreases with le", () => {
    expect(bucketQuantile(histogram([1, INF], [0, 0]), 0.5)).toBeNull();
    expect(
      bucketsOf([
        { le: INF, count: 3 },
        { le: 1, count: 2 },
        { le: 5, count: 1 },
      ]),
    ).toEqual([
      { le: 1, count: 2 },
      { le: 5, count: 2 },
      { le: INF, count: 3 },
    ]);
  });
});

describe("a proposal from a histogram", () => {
  it("starts from the upper bound of the quantile's bucket, times the margin, at least the floor, rounded", () => {
    // 12 successful: 3 in (1, 5], 5 in (5, 15], 4 in (15, 30]. At rate 0.001 and n < 1000 the
    // quantile is the bucket of the largest: (15s, 30s]; 30s x 1.3 = 39s; floor 1m.
    const full = histogram(TASK_BOUNDS, [0, 0, 0, 3, 5, 4]);
    const figure = proposeFromHistogram({ weighted: full, counted: full }, [], options, "durations");
    expect(figure.n).toBe(12);
    expect(figure.quantile).toMatchObject({ lowerMs: 15_000, upperMs: 30_000 });
    expect(figure.p50).toMatchObject({ lowerMs: 5000, upperMs: 15_000 });
    // rank 6: (5s, 15s], 3 of its 5: 5 + 10 x 3/5 = 11s. The p99.9's rank 11.988: (15s, 30s],
    // 3.988 of its 4: 15 + 15 x 0.997 = 29.955s.
    expect(figure.p50?.interpolatedMs).toBe(11_000);
    expect(figure.proposalMs).toBe(60_000);
    expect(figure.how).toEqual([
      "the p99.9 of 12 durations lies in the bucket (15s, 30s] (interpolated: 29.955s); the proposal starts from its upper bound, 30s",
      "fewer than 1000 attempts: that is the bucket of the largest seen",
      "times the margin 1.3: 39s",
      "raised to the floor: 1m",
    ]);
    expect(figure.aboveProposal).toBe(0);
  });

  it("without the floor, rounds 30s x 1.3 = 39s up to 40s, and counts the attempts in buckets above it", () => {
    const full = histogram(TASK_BOUNDS, [0, 0, 0, 3, 5, 4]);
    const figure = proposeFromHistogram(
      { weighted: full, counted: full },
      [],
      { ...options, floorMs: 0 },
      "d",
    );
    expect(figure.proposalMs).toBe(40_000);
    expect(figure.aboveProposal).toBe(0);
    // At rate 0.2 the p80 lies in (15s, 30s] too (rank 9.6 > 8): the same proposal.
    const looser = proposeFromHistogram(
      { weighted: full, counted: full },
      [],
      { ...options, floorMs: 0, rate: 0.5 },
      "d",
    );
    // p50 in (5s, 15s]: 15s x 1.3 = 19.5s, rounded to 20s; the 4 in (15s, 30s] may lie above it.
    expect(looser.proposalMs).toBe(20_000);
    expect(looser.aboveProposal).toBe(4);
  });

  it("proposes nothing with too few attempts, or when the quantile lies above the largest bucket", () => {
    const few = histogram(TASK_BOUNDS, [0, 0, 0, 3]);
    expect(proposeFromHistogram({ weighted: few, counted: few }, [], options, "d").proposalMs).toBeNull();
    const huge = histogram(TASK_BOUNDS, [0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 1]);
    const figure = proposeFromHistogram({ weighted: huge, counted: huge }, [], options, "d");
    expect(figure.proposalMs).toBeNull();
    expect(figure.how[0]).toContain("lies above the largest bucket, 6h");
  });

  it("is raised by a bucket of cut-off attempts under it, and takes those in buckets above it as hung", () => {
    const bounds = [10, 12, 20, 600, INF];
    const full = histogram(bounds, [10]);
    // 10 in (0, 10]: 10s x 1.3 = 13s, rounded to 15s. 2 cut off in (10s, 12s] lie under 15s: the
    // proposal goes to 12s x 1.3 = 15.6s, rounded to 20s. 1 cut off in (20s, 10m] is above: hung.
    const cut = histogram(bounds, [0, 2, 0, 1]);
    const figure = proposeFromHistogram(
      { weighted: full, counted: full },
      cut,
      { ...options, floorMs: 0 },
      "d",
    );
    expect(figure.cut).toBe(3);
    expect(figure.proposalMs).toBe(20_000);
    expect(figure.how).toContain(
      "raised above attempts cut off in (10s, 12s] (a limit ended them): 12s times 1.3 is 15.6s",
    );
    expect(figure.hung).toBe(1);
  });
});

describe("a counter's increase per slice", () => {
  const times = [0, 10, 20, 30, 40];

  it("is the growth over the last value seen, a reset counted from 0, a gap neither", () => {
    const points = new Map([
      [0, 5],
      [10, 7],
      [20, 2],
      [40, 4],
    ]);
    expect(sliceIncreases(points, times)).toEqual([2, 2, 0, 2]);
  });

  it("counts a series that first appears within the range from 0", () => {
    expect(
      sliceIncreases(
        new Map([
          [20, 3],
          [30, 3],
          [40, 5],
        ]),
        times,
      ),
    ).toEqual([0, 3, 0, 2]);
  });
});

describe("drift from histograms", () => {
  const bounds = [1, 5, 15, 30, INF];
  it("warns of a median a whole bucket higher in the newer half", () => {
    const older = histogram(bounds, [0, 6]);
    const newer = histogram(bounds, [0, 0, 0, 6]);
    expect(histogramDrift("task t", { older, newer }, null, null, 10)).toEqual([
      "task t: trending up: the newer half of the window's median lies in (15s, 30s], the older half's in (1s, 5s]",
    ]);
    expect(histogramDrift("task t", { older, newer: older }, null, null, 10)).toEqual([]);
  });

  it("counts the attempts over 80% of their limit, and calls a limit none came within 10% of too loose", () => {
    const ratios = [0.1, 0.25, 0.5, 0.75, 0.8, 0.9, 0.95, 0.99, 1, INF];
    const near = histogram(ratios, [0, 0, 5, 3, 0, 2]);
    expect(histogramDrift("task t", null, near, null, 10)).toEqual([
      "task t: near its limit: 2 of 10 finished in the window used more than 80% of their limit (playbook_task_limit_usage_ratio)",
    ]);
    const loose = histogram(ratios, [12]);
    expect(histogramDrift("task t", null, loose, null, 10)[0]).toContain("too loose: none of 12");
  });
});

describe("the advice on one Playbook's histograms", () => {
  const times = stepTimes(1_000_000, 24 * 3600);
  const empty = Array.from({ length: SLICES }, () => histogram(TASK_BOUNDS, []));
  /** A histogram with all its observations in the newest slice. */
  const newest = (labels: Record<string, string>, counts: number[]) => ({
    labels,
    slices: [...empty.slice(1), histogram(TASK_BOUNDS, counts)],
  });
  const playbook = {
    ceiling: "1h",
    tasks: [
      { name: "build", run: "make", timeout: "10m" },
      { name: "test", run: "make test" },
    ],
  };
  const limits = resolveLimits(
    validatePlaybook(
      {
        apiVersion: "playbook.dev/v1alpha1",
        kind: "Playbook",
        metadata: { name: "nightly" },
        spec: playbook,
      },
      LOCAL_DEFAULTS,
      "test",
    ).spec,
    LOCAL_DEFAULTS,
  );

  it("proposes the ceiling from the successful runs and each task's timeout from its own, raising the ceiling to the largest", () => {
    const advice = adviseFromHistograms(
      {
        times,
        runs: [
          newest({ reason: "Succeeded" }, [0, 0, 0, 0, 0, 10]),
          newest({ reason: "TaskTimeout" }, [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        ],
        tasks: [
          newest({ task: "build", phase: "Succeeded" }, [0, 0, 0, 0, 0, 0, 0, 11]),
          newest({ task: "test", phase: "Succeeded" }, [0, 0, 0, 12]),
        ],
        usage: [],
      },
      limits,
      options,
    );
    expect(advice.runs).toBe(11);
    expect(advice.byReason).toEqual({ Succeeded: 10, TaskTimeout: 1 });
    // build: (60s, 300s]: 5m x 1.3 = 6m30s; test: (1s, 5s]: floor 1m.
    expect(advice.tasks.map((t) => [t.name, t.timeout.figure.proposalMs])).toEqual([
      ["build", 390_000],
      ["test", 60_000],
    ]);
    // Runs in (15s, 30s]: 39s, floor 1m; raised to build's 6m30s. The run cut in (15m, 1h] is hung.
    expect(advice.ceiling.figure.proposalMs).toBe(390_000);
    expect(advice.ceiling.figure.hung).toBe(1);
    expect(advice.ceiling.current?.ms).toBe(3_600_000);
    expect(advice.tasks[0]?.timeout.current?.ms).toBe(600_000);
    const table = renderHistogramTable("nightly", "http://prometheus:9090", advice);
    expect(table).toContain("timeout build");
    expect(table).toMatch(/\(1m, 5m\]/);
    expect(renderHistogramExplain("nightly", "http://prometheus:9090", advice)).toContain(
      "histogram_quantile() interpolates linearly inside it",
    );
  });

  it("weighs the older slices less with a half-life", () => {
    // 10 runs in (1s, 5s] in the oldest slice, 10 in (15s, 30s] in the newest, a day apart: with
    // a half-life of 1h the old ones weigh almost nothing, and the median lies in the newer bucket.
    const runs = [
      {
        labels: { reason: "Succeeded" },
        slices: [
          histogram(TASK_BOUNDS, [0, 0, 0, 10]),
          ...empty.slice(1, -1),
          histogram(TASK_BOUNDS, [0, 0, 0, 0, 0, 10]),
        ],
      },
    ];
    const flat = adviseFromHistograms({ times, runs, tasks: [], usage: [] }, null, options);
    expect(flat.ceiling.figure.p50).toMatchObject({ lowerMs: 1000, upperMs: 5000 });
    const weighted = adviseFromHistograms({ times, runs, tasks: [], usage: [] }, null, {
      ...options,
      halfLifeMs: 3_600_000,
    });
    expect(weighted.ceiling.figure.p50).toMatchObject({ lowerMs: 15_000, upperMs: 30_000 });
    expect(weighted.ceiling.figure.n).toBe(20);
    expect(weighted.perTask).toBe(false);
    expect(renderHistogramTable("x", "p", weighted)).toContain(
      "the task duration series carry no task label",
    );
  });
});

describe("Prometheus' answers", () => {
  let server: Server;
  let base: string;
  let answer: { status: number; body: string } = { status: 200, body: "" };
  beforeAll(async () => {
    server = createServer((_req, res) => {
      res.writeHead(answer.status, { "content-type": "application/json" });
      res.end(answer.body);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const read = () =>
    slicedHistogram(base, "playbook_run_duration_seconds", { namespace: "ops" }, ["reason"], [0, 60]);

  it("names the URL and the query when the answer is not Prometheus' API", async () => {
    answer = { status: 404, body: "<html>Not Found</html>" };
    await expect(read()).rejects.toThrow(
      new RegExp(
        `--prometheus ${base}: query_range playbook_run_duration_seconds_bucket\\{namespace="ops"\\}: .*answered HTTP 404 with no JSON \\(<html>Not Found</html>\\): is this Prometheus' address\\?`,
      ),
    );
  });

  it("gives Prometheus' own error, and a result that is no matrix", async () => {
    answer = {
      status: 400,
      body: JSON.stringify({ status: "error", errorType: "bad_data", error: "parse error" }),
    };
    await expect(read()).rejects.toThrow(/Prometheus answered bad_data: parse error/);
    answer = {
      status: 200,
      body: JSON.stringify({ status: "success", data: { resultType: "vector", result: [] } }),
    };
    await expect(read()).rejects.toThrow(/not a matrix \(resultType: /);
  });

  it("says it cannot reach a closed port, with exit code 3", async () => {
    // A port just freed: nothing listens there.
    const spare = createServer();
    await new Promise<void>((resolve) => spare.listen(0, "127.0.0.1", resolve));
    const closed = `http://127.0.0.1:${(spare.address() as AddressInfo).port}`;
    await new Promise<void>((resolve) => spare.close(() => resolve()));
    const error = await slicedHistogram(closed, "m", {}, [], [0, 60]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PrometheusError);
    expect((error as PrometheusError).message).toBe(
      `--prometheus ${closed}: cannot reach ${closed}/api/v1/query_range: ECONNREFUSED`,
    );
    expect((error as PrometheusError).exitCode).toBe(3);
  });
});
