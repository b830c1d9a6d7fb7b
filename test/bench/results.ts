// The JSON `npm run bench -- --json FILE` writes, validated before it is written, and the table
// printed from it.
import { z } from "zod";
import { meetsTarget, TARGET } from "./stats.js";

const Value = z.number().finite().nullable();

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
    machine: z.strictObject({ cores: z.number().int().positive(), loadAverage: z.array(z.number()) }),
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
  "settle_latency_p50",
  "settle_latency_p99",
  "deadline_to_condition_p99",
  "api_writes_per_run",
  "controller_rss_mb_10000",
  "cli_startup",
  "kill_latency_p99_1procs",
  "kill_latency_p99_10procs",
  "kill_latency_p99_100procs",
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
] as const;

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
    ["name", "ours", "reference", "unit", "ratio", "target", "met"],
    ...results.comparisons.map((c) => {
      const met = meetsTarget(c.ratio, c.target);
      return [
        c.name,
        show(c.ours),
        show(c.reference),
        c.unit,
        show(c.ratio),
        c.target,
        met === null ? "?" : met ? "yes" : "NO",
      ];
    }),
  ];
  const figures = [
    ["figure", "value", "unit"],
    ...results.figures.map((f) => [f.name, show(f.value), f.unit]),
  ];
  const notes = [
    ...results.comparisons.filter((c) => c.note).map((c) => `  ${c.name}: ${c.note}`),
    ...results.figures.filter((f) => f.note).map((f) => `  ${f.name}: ${f.note}`),
  ];
  return `${table(comparisons)}\n\n${table(figures)}\n${notes.length > 0 ? `\nNotes:\n${notes.join("\n")}\n` : ""}`;
}
