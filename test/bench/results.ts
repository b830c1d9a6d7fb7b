// The JSON `npm run bench -- --json FILE` writes, validated before it is written, and the table
// printed from it.
import { z } from "zod";
import { LoadDuringSchema } from "./machine-load.js";
import { median, meetsTarget, spread, TARGET } from "./stats.js";

const Value = z.number().finite().nullable();

/** A sample's size and nearest-rank p10..p90 (stats.ts spread). */
export const SpreadSchema = z.strictObject({
  n: z.number().int().positive(),
  p10: z.number(),
  p25: z.number(),
  p50: z.number(),
  p75: z.number(),
  p90: z.number(),
});

export const ComparisonSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9_]+$/),
  ours: Value,
  reference: Value,
  unit: z.string().min(1),
  /** ours / reference; null only when one of them could not be measured. */
  ratio: Value,
  target: z.string().regex(TARGET),
  /** What was compared with what, or why a value is missing. */
  note: z.string().optional(),
  /** The samples behind ours and reference (and the per-round ratios, where paired), where kept. */
  spread: z
    .strictObject({ ours: SpreadSchema, reference: SpreadSchema, ratio: SpreadSchema.optional() })
    .optional(),
  /** With --repeat N: the ratio of each whole repetition, and their spread; `ratio` is their median. */
  repeats: z.strictObject({ ratios: z.array(z.number()), spread: SpreadSchema }).optional(),
  /** The machine's load while this comparison was measured. */
  load: LoadDuringSchema.optional(),
});
export type Comparison = z.infer<typeof ComparisonSchema>;

export const FigureSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9_]+$/),
  value: Value,
  unit: z.string().min(1),
  note: z.string().optional(),
});
export type Figure = z.infer<typeof FigureSchema>;

export const BenchResultsSchema = z
  .strictObject({
    version: z.literal(1),
    quick: z.boolean(),
    startedAt: z.iso.datetime(),
    finishedAt: z.iso.datetime(),
    machine: z.strictObject({
      cores: z.number().int().positive(),
      loadAverage: z.array(z.number()),
      /** the load over the whole run */
      load: LoadDuringSchema.optional(),
    }),
    comparisons: z.array(ComparisonSchema),
    figures: z.array(FigureSchema),
  })
  .superRefine((results, ctx) => {
    // A name may stand in both lists (controller_rss_mb_10000 does), never twice in one.
    for (const list of ["comparisons", "figures"] as const) {
      const seen = new Set<string>();
      for (const [i, entry] of results[list].entries()) {
        if (seen.has(entry.name))
          ctx.addIssue({ code: "custom", path: [list, i], message: `${entry.name} appears twice` });
        seen.add(entry.name);
      }
    }
    for (const [i, c] of results.comparisons.entries()) {
      if ((c.ours === null || c.reference === null) && c.note === undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["comparisons", i],
          message: `${c.name} has no value and no note`,
        });
      }
    }
  });
export type BenchResults = z.infer<typeof BenchResultsSchema>;

/** The names the issue fixes; the smoke test checks each is there with numbers. */
export const REQUIRED_COMPARISONS = [
  "launch_throughput_100",
  "launch_throughput_500",
  "launch_throughput_2000",
  "launch_vs_api_2000",
  "settle_latency_p50",
  "settle_latency_p99",
  "deadline_to_condition_p99",
  "api_writes_per_run",
  "controller_rss_mb_10000",
  "cli_startup",
  "kill_latency_p99_1procs",
  "kill_latency_p99_10procs",
  "kill_latency_p99_100procs",
  "kill_latency_p50_100procs",
  "task_overhead",
  "stdout_throughput",
] as const;

export const REQUIRED_FIGURES = [
  "controller_rss_mb_1000",
  "controller_rss_mb_10000",
  "api_conflicts_per_run",
  "events_per_run",
  "controller_cpu_seconds_per_1000_runs",
  "cluster_up_seconds",
  // Where the cores go at launch (issue 45): each process's CPU per run, ours, the bare loop and
  // the Playbooks' creates alone.
  "launch_cpu_per_run_2000_ours",
  "launch_cpu_per_run_2000_bare",
  "launch_cpu_per_run_2000_input",
  // The log archive's retention (issue 58): objects left after runs created and deleted, target 0.
  "log_archive_orphans_1000",
] as const;

/**
 * The comparisons of N repetitions as one each: ours and reference the medians of the
 * repetitions', the ratio the median of their ratios, with those ratios and their spread.
 */
export function mergeRepeats(runs: Comparison[][]): Comparison[] {
  const first = runs[0] ?? [];
  // One repetition's spread of samples would stand for all of them: the repetitions' ratios do.
  return first.map(({ spread: _oneRun, ...entry }) => {
    const same = runs.map((run) => run.find((c) => c.name === entry.name)).filter((c) => c !== undefined);
    const values = (pick: (c: Comparison) => number | null) =>
      same.map(pick).filter((v): v is number => v !== null);
    const ratios = values((c) => c.ratio);
    const ours = values((c) => c.ours);
    const reference = values((c) => c.reference);
    const loads = same.map((c) => c.load).filter((l) => l !== undefined);
    const steals = loads.map((l) => l.stealPercent).filter((v): v is number => v !== null);
    const busy = loads.map((l) => l.busyPercent).filter((v): v is number => v !== null);
    return ComparisonSchema.parse({
      ...entry,
      ours: ours.length > 0 ? median(ours) : null,
      reference: reference.length > 0 ? median(reference) : null,
      ratio: ratios.length > 0 ? median(ratios) : null,
      note: `${entry.note ?? ""}; ${same.length} repetitions, the median of their ratios`,
      ...(ratios.length > 0 ? { repeats: { ratios, spread: spread(ratios) } } : {}),
      ...(loads.length > 0
        ? {
            load: {
              seconds: loads.reduce((sum, l) => sum + l.seconds, 0),
              loadAverage1: {
                min: Math.min(...loads.map((l) => l.loadAverage1.min)),
                max: Math.max(...loads.map((l) => l.loadAverage1.max)),
              },
              busyPercent: busy.length > 0 ? median(busy) : null,
              stealPercent: steals.length > 0 ? Math.max(...steals) : null,
            },
          }
        : {}),
    });
  });
}

/** A comparison with its ratio computed from the two values. */
export function compare(
  entry: Omit<Comparison, "ratio"> & { ratio?: number | null },
  ratioOf: (ours: number | null, reference: number | null) => number | null,
): Comparison {
  return { ...entry, ratio: entry.ratio ?? ratioOf(entry.ours, entry.reference) };
}

const show = (value: number | null): string => {
  if (value === null) return "-";
  if (Math.abs(value) >= 100) return value.toFixed(0);
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(2);
};

function table(rows: string[][]): string {
  const widths =
    rows[0]?.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? "").length))) ?? [];
  return rows
    .map((row) =>
      row
        .map((cell, column) => cell.padEnd(widths[column] ?? 0))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/** The printed report: comparisons with whether each meets its target, then the figures. */
export function formatResults(results: BenchResults): string {
  const comparisons = [
    ["name", "ours", "reference", "unit", "ratio", "ratio p10..p90", "target", "met", "load"],
    ...results.comparisons.map((c) => {
      const met = meetsTarget(c.ratio, c.target);
      // The repetitions' ratios where the run was repeated, else the rounds' where they were paired.
      const ratios = c.repeats?.spread ?? c.spread?.ratio;
      return [
        c.name,
        show(c.ours),
        show(c.reference),
        c.unit,
        show(c.ratio),
        ratios
          ? `${show(ratios.p10)}..${show(ratios.p90)} (${c.repeats ? `${ratios.n} runs` : `n ${ratios.n}`})`
          : "",
        c.target,
        met === null ? "?" : met ? "yes" : "NO",
        c.load ? `${show(c.load.loadAverage1.min)}-${show(c.load.loadAverage1.max)}` : "",
      ];
    }),
  ];
  const figures = [
    ["figure", "value", "unit"],
    ...results.figures.map((f) => [f.name, show(f.value), f.unit]),
  ];
  const load = results.machine.load;
  const loadLine = load
    ? `\nLoad over the run: 1-min average ${show(load.loadAverage1.min)} to ${show(load.loadAverage1.max)} on ${results.machine.cores} cores, ` +
      `busy ${load.busyPercent ?? "?"}%, steal ${load.stealPercent === null ? "not shown" : `${load.stealPercent}%`}\n`
    : "";
  const notes = [
    ...results.comparisons.filter((c) => c.note).map((c) => `  ${c.name}: ${c.note}`),
    ...results.figures.filter((f) => f.note).map((f) => `  ${f.name}: ${f.note}`),
  ];
  return `${table(comparisons)}\n${loadLine}\n${table(figures)}\n${notes.length > 0 ? `\nNotes:\n${notes.join("\n")}\n` : ""}`;
}
