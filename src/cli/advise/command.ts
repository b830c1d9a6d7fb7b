// `playbook advise --reports DIR`: the limits each Playbook's history supports (method.ts), with
// the evidence, a backtest and a patch it never applies. The flags are checked here, at the edge,
// each refusal naming the flag and the value.
import { readFileSync } from "node:fs";
import { z } from "zod";
import { DurationError, parseDuration } from "../../api/duration.js";
import { LOCAL_DEFAULTS } from "../../api/limits.js";
import { readManifestDocument, validatePlaybook } from "../../api/manifest.js";
import type { Playbook } from "../../api/playbook.js";
import { HistoryError, type PlaybookHistory, readHistory } from "./history.js";
import { type AdviseOptions, advise, DEFAULT_ADVISE_OPTIONS } from "./method.js";
import { adviceJson, renderExplain, renderPatch, renderTable } from "./render.js";

export class AdviseInputError extends Error {}

/** A number, or a fraction as a rate is often said: "0.001" or "1/1000". */
function numberOf(text: string): number {
  const fraction = /^\s*(\d+(?:\.\d+)?)\s*\/\s*(\d+(?:\.\d+)?)\s*$/.exec(text);
  if (fraction) return Number(fraction[1]) / Number(fraction[2]);
  return text.trim() === "" ? Number.NaN : Number(text);
}

const flagValue = (flag: string, check: (value: number) => boolean, must: string) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const value = numberOf(text);
      if (!Number.isFinite(value) || !check(value)) {
        ctx.addIssue({ code: "custom", message: `${flag} ${text}: ${must}` });
        return z.NEVER;
      }
      return value;
    });

const durationFlag = (flag: string) =>
  z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      try {
        return parseDuration(text);
      } catch (error) {
        ctx.addIssue({
          code: "custom",
          message: `${flag} ${text}: ${error instanceof DurationError ? error.message : String(error)}`,
        });
        return z.NEVER;
      }
    });

const AdviseFlags = z.strictObject({
  reports: z
    .string({ error: "--reports DIR is required: the folder of `playbook run -o json` / --report files" })
    .min(1),
  filename: z.string().min(1).optional(),
  output: z
    .string()
    .optional()
    .refine((v) => v === undefined || ["table", "json", "patch"].includes(v), {
      error: (issue) => `-o ${String(issue.input)}: must be table, json or patch`,
    }),
  explain: z.boolean().optional(),
  rate: flagValue("--rate", (v) => v > 0 && v < 1, "must be a share between 0 and 1, e.g. 0.001 or 1/1000"),
  margin: flagValue("--margin", (v) => v >= 1 && v <= 100, "must be a number from 1 to 100, e.g. 1.3"),
  halfLife: durationFlag("--half-life"),
  minSample: flagValue(
    "--min-sample",
    (v) => Number.isInteger(v) && v >= 1 && v <= 1_000_000,
    "must be a whole number of at least 1",
  ),
  floor: durationFlag("--floor"),
  borrow: z.boolean().optional(),
  backtest: flagValue(
    "--backtest",
    (v) => Number.isInteger(v) && v >= 0,
    "must be a whole number of runs (0: all of them)",
  ),
});

function readManifest(file: string): Playbook {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new AdviseInputError(
      `-f ${file}: ${code === "ENOENT" ? "no such file" : (code ?? (error as Error).message)}`,
    );
  }
  return validatePlaybook(readManifestDocument(text, file), LOCAL_DEFAULTS, file, { generateName: true });
}

/** The figure for one Playbook's history. */
function render(history: PlaybookHistory, options: AdviseOptions, output: string, explain: boolean): string {
  const advice = advise(history.runs, history.limits, options);
  if (output === "patch") return renderPatch(history.name, history.playbook, advice);
  if (explain) return renderExplain(history.name, advice);
  return renderTable(history.name, advice, history.skipped.length);
}

export function adviseCommand(flags: unknown): number {
  const parsed = AdviseFlags.safeParse(flags);
  if (!parsed.success) throw new AdviseInputError(parsed.error.issues.map((i) => i.message).join("; "));
  const f = parsed.data;
  const options: AdviseOptions = {
    rate: f.rate ?? DEFAULT_ADVISE_OPTIONS.rate,
    margin: f.margin ?? DEFAULT_ADVISE_OPTIONS.margin,
    halfLifeMs: f.halfLife ?? DEFAULT_ADVISE_OPTIONS.halfLifeMs,
    minSample: f.minSample ?? DEFAULT_ADVISE_OPTIONS.minSample,
    floorMs: f.floor ?? DEFAULT_ADVISE_OPTIONS.floorMs,
    borrow: f.borrow === true,
    backtestRuns: f.backtest ?? DEFAULT_ADVISE_OPTIONS.backtestRuns,
  };
  const manifest = f.filename ? { playbook: readManifest(f.filename), file: f.filename } : null;
  let histories: PlaybookHistory[];
  try {
    histories = readHistory(f.reports, manifest);
  } catch (error) {
    if (error instanceof HistoryError) throw new AdviseInputError(error.message);
    throw error;
  }
  if (manifest) {
    // -f names the Playbook to advise on: its runs only.
    const name = histories.find((h) => h.playbook === manifest.playbook)?.name;
    histories = histories.filter((h) => h.name === name);
  }
  if (histories.length === 0 || histories.every((h) => h.runs.length === 0)) {
    throw new AdviseInputError(
      `--reports ${f.reports}: no finished run${manifest ? ` of ${manifest.playbook.metadata.name} (-f ${manifest.file})` : ""} in its .json, .yaml or .yml files`,
    );
  }
  const output = f.output ?? "table";
  if (output === "json") {
    const all = histories.map((h) => adviceJson(h.name, advise(h.runs, h.limits, options)));
    process.stdout.write(`${JSON.stringify(all.length === 1 ? all[0] : all, null, 2)}\n`);
    return 0;
  }
  const parts = histories.map((h) => render(h, options, output, f.explain === true));
  process.stdout.write(parts.join(output === "patch" ? "---\n" : "\n"));
  return 0;
}
