// What every source of `playbook advise` shares: the method's and the output's flags, checked
// at the edge (each refusal names the flag and the value), and the printing of the advice.
import { readFileSync } from "node:fs";
import { z } from "zod";
import { DurationError, parseDuration } from "../../api/duration.js";
import type { LimitDefaults } from "../../api/limits.js";
import { readManifestDocument, validatePlaybook } from "../../api/manifest.js";
import type { Playbook } from "../../api/playbook.js";
import { type AdviseOptions, DEFAULT_ADVISE_OPTIONS } from "./advice-model.js";
import type { PlaybookHistory } from "./history.js";
import { advise } from "./method.js";
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

/** The method's flags and the output's, shared by every source of history. */
const MethodFlags = {
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
};

export const AdviseFlags = z.strictObject({
  reports: z
    .string({ error: "--reports DIR is required: the folder of `playbook run -o json` / --report files" })
    .min(1),
  filename: z.string().min(1).optional(),
  ...MethodFlags,
});

const ClusterAdviseFlags = z.strictObject({
  kubeconfig: z.string().min(1, "--kubeconfig: must name a file").optional(),
  context: z.string().min(1, "--context: must name a context").optional(),
  namespace: z.string().min(1, "-n: must name a namespace").optional(),
  selector: z.string().min(1, "-l: must be a label selector, e.g. app=backup").optional(),
  cron: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, {
      error: (i) => `cron ${String(i.input)}: not a CronPlaybook name`,
    })
    .optional(),
  ...MethodFlags,
});
export type ClusterAdviseFlags = z.infer<typeof ClusterAdviseFlags>;

/** The default Playbook label whose value the controller's --metrics-playbook-label puts on the metrics. */
export const DEFAULT_PLAYBOOK_LABEL = "app.kubernetes.io/name";
/** How far back --prometheus reads by default: 30 days. */
export const DEFAULT_WINDOW_MS = 720 * 3_600_000;

const PrometheusAdviseFlags = z.strictObject({
  prometheus: z.string().transform((text, ctx) => {
    let url: URL | undefined;
    try {
      url = new URL(text);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== "http:" && url.protocol !== "https:")) {
      ctx.addIssue({
        code: "custom",
        message: `--prometheus ${text}: must be Prometheus' http(s) address, e.g. http://prometheus:9090`,
      });
      return z.NEVER;
    }
    return text.replace(/\/+$/, "");
  }),
  playbook: z.string().min(1, "--playbook: must be a value of the metrics' playbook label").optional(),
  playbookLabel: z
    .string()
    .regex(/^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/, {
      error: (i) => `--playbook-label ${String(i.input)}: not a label key, e.g. app.kubernetes.io/name`,
    })
    .optional(),
  window: durationFlag("--window").refine((ms) => ms === undefined || ms >= 60_000, {
    error: (i) => `--window ${String(i.input)}: must be at least 1m`,
  }),
  filename: z.string().min(1).optional(),
  kubeconfig: z.string().min(1, "--kubeconfig: must name a file").optional(),
  context: z.string().min(1, "--context: must name a context").optional(),
  namespace: z.string().min(1, "-n: must name a namespace").optional(),
  selector: z.string().min(1, "-l: must be a label selector, e.g. app=backup").optional(),
  cron: ClusterAdviseFlags.shape.cron,
  ...MethodFlags,
});
export type PrometheusAdviseFlags = z.infer<typeof PrometheusAdviseFlags>;

/** --prometheus's flags: one way to choose the series (cron NAME, -l, --playbook), checked before any call. */
export function prometheusAdviseFlags(flags: unknown): {
  flags: PrometheusAdviseFlags;
  request: AdviseRequest;
} {
  const f = parsed(PrometheusAdviseFlags, flags);
  const chosen = [f.cron, f.selector, f.playbook].filter((v) => v !== undefined).length;
  if (chosen !== 1) {
    throw new AdviseInputError(
      "--prometheus: choose the Playbook's series one way: cron NAME, -l SELECTOR or --playbook VALUE",
    );
  }
  if (f.filename !== undefined && f.playbook === undefined)
    throw new AdviseInputError("-f goes with --playbook; cron and -l read the cluster's spec");
  const request = requestOf(f);
  if (request.output === "patch" && f.playbook !== undefined && f.filename === undefined) {
    throw new AdviseInputError(
      "-o patch: --playbook reads no spec to patch; give the Playbook's manifest with -f FILE",
    );
  }
  return { flags: f, request };
}

/** What to print and how the method runs, from the flags every source shares. */
export interface AdviseRequest {
  options: AdviseOptions;
  output: "table" | "json" | "patch";
  explain: boolean;
}

export function requestOf(
  f: z.infer<typeof AdviseFlags> | ClusterAdviseFlags | PrometheusAdviseFlags,
): AdviseRequest {
  return {
    options: {
      rate: f.rate ?? DEFAULT_ADVISE_OPTIONS.rate,
      margin: f.margin ?? DEFAULT_ADVISE_OPTIONS.margin,
      halfLifeMs: f.halfLife ?? DEFAULT_ADVISE_OPTIONS.halfLifeMs,
      minSample: f.minSample ?? DEFAULT_ADVISE_OPTIONS.minSample,
      floorMs: f.floor ?? DEFAULT_ADVISE_OPTIONS.floorMs,
      borrow: f.borrow === true,
      backtestRuns: f.backtest ?? DEFAULT_ADVISE_OPTIONS.backtestRuns,
    },
    output: (f.output ?? "table") as AdviseRequest["output"],
    explain: f.explain === true,
  };
}

export function parsed<T extends z.ZodType>(schema: T, flags: unknown): z.infer<T> {
  const result = schema.safeParse(flags);
  if (!result.success) throw new AdviseInputError(result.error.issues.map((i) => i.message).join("; "));
  return result.data;
}

/** The cluster source's flags, checked before anything is asked of the cluster. */
export function clusterAdviseFlags(flags: unknown): { flags: ClusterAdviseFlags; request: AdviseRequest } {
  const f = parsed(ClusterAdviseFlags, flags);
  if ((f.cron === undefined) === (f.selector === undefined)) {
    throw new AdviseInputError("give one source of runs: cron NAME, -l SELECTOR or --reports DIR");
  }
  return { flags: f, request: requestOf(f) };
}

/** Where a patch goes: a Playbook's spec, or a CronPlaybook's template (spec.template.spec). */
export type PatchTarget = { kind: "Playbook" } | { kind: "CronPlaybook"; name: string; namespace: string };

/** Prints the advice on each history as the request asks; 0. */
export function printAdvice(
  histories: readonly PlaybookHistory[],
  request: AdviseRequest,
  target: PatchTarget,
): number {
  const { options, output, explain } = request;
  if (output === "json") {
    const all = histories.map((h) => adviceJson(h.name, advise(h.runs, h.limits, options)));
    process.stdout.write(`${JSON.stringify(all.length === 1 ? all[0] : all, null, 2)}\n`);
    return 0;
  }
  const parts = histories.map((h) => {
    const advice = advise(h.runs, h.limits, options);
    if (output === "patch") return renderPatch(h.name, h.playbook, advice, target);
    if (explain) return renderExplain(h.name, advice);
    return renderTable(h.name, advice, h.skipped.length);
  });
  process.stdout.write(parts.join(output === "patch" ? "---\n" : "\n"));
  return 0;
}

/** The Playbook of `-f FILE`, checked against `defaults`; a file that cannot be read says why. */
export function readAdviseManifest(file: string, defaults: LimitDefaults): Playbook {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new AdviseInputError(
      `-f ${file}: ${code === "ENOENT" ? "no such file" : (code ?? (error as Error).message)}`,
    );
  }
  return validatePlaybook(readManifestDocument(text, file), defaults, file, { generateName: true });
}
