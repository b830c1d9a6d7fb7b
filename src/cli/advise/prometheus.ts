// The history `playbook advise --prometheus URL` reads: the controller's duration and usage
// histograms of one Playbook (its `playbook` label value) in one namespace, over a window cut in
// slices, through Prometheus' HTTP API (query_range for the series, query for what labels exist
// when none matched). Every answer is checked with zod; every failure names the URL and what failed.
import { z } from "zod";
import { EXIT } from "../exit-codes.js";
import { type Bucket, bucketsOf, sliceIncreases } from "./histogram.js";

/** How many slices the window is cut in: their recency weights, and the two halves a trend compares. */
export const SLICES = 24;
const ANSWER_TIMEOUT_MS = 30_000;

export class PrometheusError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number) {
    super(message);
    this.name = "PrometheusError";
    this.exitCode = exitCode;
  }
}

const Answer = z.discriminatedUnion("status", [
  z.looseObject({ status: z.literal("success"), data: z.unknown() }),
  z.looseObject({ status: z.literal("error"), errorType: z.string(), error: z.string() }),
]);

const Matrix = z.object({
  resultType: z.literal("matrix"),
  result: z.array(
    z.object({
      metric: z.record(z.string(), z.string()),
      values: z.array(z.tuple([z.number(), z.string()])),
    }),
  ),
});

const Vector = z.object({
  resultType: z.literal("vector"),
  result: z.array(
    z.object({ metric: z.record(z.string(), z.string()), value: z.tuple([z.number(), z.string()]) }),
  ),
});

function problemOf(error: z.ZodError): string {
  const issue = error.issues[0];
  return issue ? `${issue.path.join(".") || "the answer"}: ${issue.message}` : "not as expected";
}

/** One call of Prometheus' HTTP API, its `data` on success; every other outcome a PrometheusError. */
async function callApi(
  base: string,
  endpoint: "query" | "query_range",
  params: Record<string, string>,
): Promise<unknown> {
  const url = `${base.replace(/\/+$/, "")}/api/v1/${endpoint}`;
  const what = `--prometheus ${base}: ${endpoint} ${params.query}`;
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      body: new URLSearchParams(params),
      signal: AbortSignal.timeout(ANSWER_TIMEOUT_MS),
    });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why =
      (error as Error).name === "TimeoutError"
        ? `no answer within ${ANSWER_TIMEOUT_MS / 1000}s`
        : (cause?.code ?? cause?.message ?? (error as Error).message);
    throw new PrometheusError(`--prometheus ${base}: cannot reach ${url}: ${why}`, EXIT.lost);
  }
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new PrometheusError(
      `${what}: ${url} answered HTTP ${response.status} with no JSON (${text.slice(0, 80).trim() || "empty"}): is this Prometheus' address?`,
      EXIT.invalid,
    );
  }
  const answer = Answer.safeParse(body);
  if (!answer.success) {
    throw new PrometheusError(
      `${what}: HTTP ${response.status}, not Prometheus' API answer (${problemOf(answer.error)})`,
      EXIT.invalid,
    );
  }
  if (answer.data.status === "error") {
    throw new PrometheusError(
      `${what}: Prometheus answered ${answer.data.errorType}: ${answer.data.error}`,
      EXIT.invalid,
    );
  }
  return answer.data.data;
}

/** The window's step times, oldest first, in seconds: SLICES + 1 of them, the last `endS`. */
export function stepTimes(endS: number, windowS: number): number[] {
  const step = windowS / SLICES;
  return Array.from({ length: SLICES + 1 }, (_, k) => endS - windowS + k * step);
}

/** A histogram's increase in each slice, grouped by the labels asked for: the groups' buckets per slice. */
export interface SlicedHistogram {
  /** the group's label values, by the label names asked for ("" where a series lacks one) */
  labels: Record<string, string>;
  /** one per slice, oldest first: each bucket's increase in it (cumulative over le) */
  slices: Bucket[][];
}

/**
 * The `_bucket` series of `metric` that match `matchers`, each series' increase per slice summed
 * over the series of each group (replicas, restarts), by the `by` labels.
 */
export async function slicedHistogram(
  base: string,
  metric: string,
  matchers: Record<string, string>,
  by: readonly string[],
  times: readonly number[],
): Promise<SlicedHistogram[]> {
  const selector = `${metric}_bucket{${Object.entries(matchers)
    .map(([name, value]) => `${name}=${JSON.stringify(value)}`)
    .join(",")}}`;
  const first = times[0] as number;
  const last = times[times.length - 1] as number;
  const step = times.length > 1 ? (times[1] as number) - first : 1;
  const data = await callApi(base, "query_range", {
    query: selector,
    start: String(first),
    end: String(last),
    step: String(step),
  });
  const matrix = Matrix.safeParse(data);
  if (!matrix.success) {
    throw new PrometheusError(
      `--prometheus ${base}: query_range ${selector}: not a matrix (${problemOf(matrix.error)})`,
      EXIT.invalid,
    );
  }
  const groups = new Map<string, { labels: Record<string, string>; byLe: Map<number, number[]> }>();
  for (const series of matrix.data.result) {
    const le = series.metric.le === "+Inf" ? Number.POSITIVE_INFINITY : Number(series.metric.le);
    if (!Number.isFinite(le) && le !== Number.POSITIVE_INFINITY) continue;
    const labels = Object.fromEntries(by.map((name) => [name, series.metric[name] ?? ""]));
    const key = JSON.stringify(labels);
    const group = groups.get(key) ?? { labels, byLe: new Map<number, number[]>() };
    groups.set(key, group);
    // Step times come back as the floats asked for; match them to the nearest step.
    const points = new Map<number, number>();
    for (const [at, value] of series.values) {
      const k = Math.round((at - first) / step);
      const time = times[k];
      if (time !== undefined) points.set(time, Number(value));
    }
    const increases = sliceIncreases(points, times);
    const sums = group.byLe.get(le) ?? increases.map(() => 0);
    group.byLe.set(
      le,
      sums.map((sum, k) => sum + (increases[k] ?? 0)),
    );
  }
  return [...groups.values()].map(({ labels, byLe }) => ({
    labels,
    slices: Array.from({ length: times.length - 1 }, (_, k) =>
      bucketsOf([...byLe].map(([le, counts]) => ({ le, count: counts[k] ?? 0 }))),
    ),
  }));
}

/** The values of `label` on `metric`'s series in the window (for the message when none matched). */
export async function labelValues(
  base: string,
  metric: string,
  matchers: Record<string, string>,
  label: string,
  windowS: number,
  atS: number,
): Promise<string[]> {
  const selector = `${metric}{${Object.entries(matchers)
    .map(([name, value]) => `${name}=${JSON.stringify(value)}`)
    .join(",")}}`;
  const query = `group by (${label}) (last_over_time(${selector}[${Math.max(1, Math.round(windowS))}s]))`;
  const data = await callApi(base, "query", { query, time: String(atS) });
  const vector = Vector.safeParse(data);
  if (!vector.success) {
    throw new PrometheusError(
      `--prometheus ${base}: query ${query}: not a vector (${problemOf(vector.error)})`,
      EXIT.invalid,
    );
  }
  return vector.data.result.map((r) => r.metric[label] ?? "").sort();
}
