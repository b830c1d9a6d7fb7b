// What `playbook advise` prints: a table per Playbook, the method with its figures (--explain),
// the advice as JSON, or a merge patch of the Playbook's spec. Pure: strings from the advice.
import { stringify } from "yaml";
import { formatDuration } from "../../api/duration.js";
import type { EffectiveLimit } from "../../api/limits.js";
import type { Playbook, PlaybookSpec } from "../../api/playbook.js";
import type { Advice, Figure, LimitAdvice } from "./advice-model.js";

const show = (ms: number | null | undefined) =>
  ms === null || ms === undefined ? "-" : formatDuration(Math.round(ms));

function current(limit: EffectiveLimit | null): string {
  if (!limit) return "none";
  if (limit.ms === 0) return `off (${limit.source})`;
  return `${show(limit.ms)} (${limit.source})`;
}

/** How the proposal was reached, in a few words for the table. */
function reached(advice: LimitAdvice, options: Advice["options"]): string {
  const figure = advice.figure;
  if (advice.borrowed) return `too few (${figure.n}); borrowed the run's`;
  if (figure.proposalMs === null) return `too few (${figure.n} < ${options.minSample})`;
  const parts = [
    `p${Number(((1 - options.rate) * 100).toFixed(6))}${figure.atLargest ? "=max" : ""} x${options.margin}`,
  ];
  if (figure.how.some((h) => h.startsWith("raised to the floor"))) parts.push("floor");
  if (figure.how.some((h) => h.startsWith("raised above an attempt cut off"))) parts.push("above cut-off");
  if (figure.how.some((h) => h.startsWith("raised to the largest task timeout")))
    parts.push("raised to a task's timeout");
  if (figure.held) parts.push("floor held at the current limit");
  if (figure.hung.length > 0) parts.push(`${figure.hung.length} hung`);
  return parts.join(", ");
}

/** Each limit kept at its current value against the floor, with the runs that show it caught hangs. */
function heldLines(advice: Advice): string[] {
  const held: [string, LimitAdvice][] = [
    ["the ceiling", advice.ceiling],
    ["the run's stall", advice.stall],
    ...advice.tasks.flatMap((task): [string, LimitAdvice][] => [
      [`task ${task.name}'s timeout`, task.timeout],
      [`task ${task.name}'s stall`, task.stall],
    ]),
  ];
  return held.flatMap(([label, limit]) => {
    const hold = limit.figure.held;
    if (!hold) return [];
    const runs = `${hold.runs.length} ${hold.runs.length === 1 ? "run" : "runs"}`;
    return [
      `Held: ${label} is not raised to the floor ${show(advice.options.floorMs)} past its current ${show(hold.currentMs)}, which cut ${runs} that hung (${hold.evidence}): ${hold.runs.join(", ")}`,
    ];
  });
}

function row(label: string, advice: LimitAdvice, options: Advice["options"]): string[] {
  const f: Figure = advice.figure;
  return [
    label,
    String(f.n),
    String(f.cut),
    show(f.p50),
    show(f.p95),
    show(f.p99),
    show(f.max),
    current(advice.current),
    show(f.proposalMs),
    reached(advice, options),
  ];
}

/** Rows as columns padded to their widest cell, the last left as it is. */
export function table(rows: string[][]): string[] {
  const widths = rows[0]?.map((_, column) => Math.max(...rows.map((r) => (r[column] ?? "").length))) ?? [];
  return rows.map((r) =>
    r
      .map((cell, column) => (column === r.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
      .join("  ")
      .trimEnd(),
  );
}

function when(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function sampleLine(name: string, advice: Advice, skipped: number): string {
  const cut = advice.ceiling.figure.cut;
  const ok = advice.ceiling.figure.n;
  const other = advice.runs - ok - cut;
  const span = advice.span ? ` from ${when(advice.span[0])} to ${when(advice.span[1])}` : "";
  const notes = skipped > 0 ? `; ${skipped} not finished, left out` : "";
  return `Playbook ${name}: ${advice.runs} runs (${ok} succeeded, ${cut} ended at a limit, ${other} other)${span}${notes}`;
}

function backtestLines(advice: Advice): string[] {
  const bt = advice.backtest;
  const lines: string[] = [];
  if (!bt.changes) {
    lines.push(
      `Backtest: nothing is proposed to change; each of the ${advice.runs} runs would end as it did.`,
    );
    return lines;
  }
  if (bt.kills.length === 0) {
    lines.push(
      `Backtest: none of the last ${bt.runs} successful runs would have been killed by the proposal.`,
    );
  } else {
    const runs = new Set(bt.kills.map((k) => k.run));
    lines.push(
      `Backtest: ${runs.size} of the last ${bt.runs} successful runs would have been killed by the proposal:`,
    );
    for (const kill of bt.kills) {
      const what = kill.task ? `task ${kill.task}` : "the run";
      const measure = kill.limit === "StallLimit" ? "was silent for" : "took";
      lines.push(
        `  ${kill.run}: ${what} ${measure} ${show(kill.valueMs)}, over the proposed ${show(kill.proposalMs)} (${kill.limit})`,
      );
    }
  }
  if (bt.savings.length > 0) {
    const longest = Math.max(...bt.savings.map((s) => s.tookMs));
    const endsAfter = Math.max(...bt.savings.map((s) => s.endsAfterMs));
    const reasons = [...new Set(bt.savings.map((s) => s.reason))].join(", ");
    lines.push(
      `  ${bt.savings.length} ${bt.savings.length === 1 ? "run" : "runs"} ended at ${reasons} after up to ${show(longest)}; with the proposal ${bt.savings.length === 1 ? "it ends" : "they end"} after ${show(endsAfter)} at most: ${show(bt.savedMs)} saved`,
    );
  }
  if (bt.ranOn.length > 0) {
    lines.push(
      `  ${bt.ranOn.length} ${bt.ranOn.length === 1 ? "run" : "runs"} that ended at a limit would run on under the proposal (its outcome unknown): ${bt.ranOn.join(", ")}`,
    );
  }
  return lines;
}

/** The table for a terminal: the sample, each limit's figures, current and proposed, the backtest, the warnings. */
export function renderTable(name: string, advice: Advice, skipped: number): string {
  const o = advice.options;
  const rows = [
    ["LIMIT", "N", "CUT", "P50", "P95", "P99", "LONGEST", "CURRENT", "PROPOSED", "HOW"],
    row("ceiling (run)", advice.ceiling, o),
    row("stall (run)", advice.stall, o),
    ...advice.tasks.flatMap((task) => [
      row(`timeout ${task.name}`, task.timeout, o),
      row(`stall ${task.name}`, task.stall, o),
    ]),
  ];
  const lines = [
    sampleLine(name, advice, skipped),
    "Durations for the ceiling and timeouts, each attempt's longest silence for the stalls (LONGEST: the largest seen); N successful, CUT ended at a limit.",
    ...table(rows),
    "",
    ...heldLines(advice),
    ...backtestLines(advice),
  ];
  if (advice.warnings.length > 0) lines.push("", "Warnings:", ...advice.warnings.map((w) => `  ${w}`));
  return `${lines.join("\n")}\n`;
}

/** The method in words with this advice's figures: --explain. */
export function renderExplain(name: string, advice: Advice): string {
  const o = advice.options;
  const lines = [
    `How the limits of ${name} were proposed (docs/advise.md):`,
    `  - From the successful attempts of each task (its duration for the timeout, its longest silence for the stall)`,
    `    and from whole successful runs (the ceiling; their longest silence of any task for the run's stall).`,
    `  - Each is weighted by its age: ${o.halfLifeMs > 0 ? `half as much per ${show(o.halfLifeMs)} (--half-life)` : "all the same (--half-life 0)"}.`,
    `  - The false-kill rate ${o.rate} (--rate): the proposal starts at the weighted p${Number(((1 - o.rate) * 100).toFixed(6))},`,
    `    the smallest value with that share of the weight at or below it; with fewer than ${Math.ceil(1 / o.rate)} attempts it is the largest seen.`,
    `  - Times the margin ${o.margin} (--margin), at least the floor ${show(o.floorMs)} (--floor), rounded up to a readable duration.`,
    "  - An attempt that ended at a limit was cut off, not finished: it never lowers a proposal. One the proposal",
    "    would let run on raises it to at least its length times the margin; one longer than the proposal is taken",
    "    as hung (no successful attempt took that long), and the backtest counts the time the proposal saves.",
    `  - Fewer than ${o.minSample} successful attempts (--min-sample): no proposal${o.borrow ? ", the run's figure is borrowed (--borrow)" : " (--borrow takes the run's figure)"}.`,
    "",
  ];
  const figureLines = (label: string, advice: LimitAdvice) => [
    `${label}: now ${advice.current ? `${current(advice.current).replace(/ \(.*\)$/, "")} (${advice.current.field})` : "none"}`,
    ...advice.figure.how.map((h) => `  ${h}`),
    ...(advice.figure.proposalMs !== null ? [`  proposed: ${show(advice.figure.proposalMs)}`] : []),
  ];
  lines.push(...figureLines("The ceiling", advice.ceiling), ...figureLines("The run's stall", advice.stall));
  for (const task of advice.tasks) {
    lines.push(
      ...figureLines(`Task ${task.name}'s timeout`, task.timeout),
      ...figureLines(`Task ${task.name}'s stall`, task.stall),
    );
  }
  lines.push("", ...backtestLines(advice));
  if (advice.warnings.length > 0) lines.push("", "Warnings:", ...advice.warnings.map((w) => `  ${w}`));
  return `${lines.join("\n")}\n`;
}

/** The advice as data: durations in ms, with the proposals also as duration strings. */
export function adviceJson(name: string, advice: Advice): object {
  const limit = (l: LimitAdvice) => ({
    current: l.current
      ? { ms: l.current.ms, value: show(l.current.ms), source: l.current.source, field: l.current.field }
      : null,
    ...l.figure,
    proposal: l.figure.proposalMs === null ? null : show(l.figure.proposalMs),
    ...(l.borrowed ? { borrowed: true } : {}),
  });
  return {
    playbook: name,
    runs: advice.runs,
    span: advice.span ? advice.span.map(when) : null,
    options: advice.options,
    ceiling: limit(advice.ceiling),
    stall: limit(advice.stall),
    tasks: advice.tasks.map((task) => ({
      name: task.name,
      timeout: limit(task.timeout),
      stall: limit(task.stall),
    })),
    backtest: advice.backtest,
    warnings: advice.warnings,
  };
}

/**
 * The proposal as a JSON merge patch (RFC 7386) of the Playbook's spec. A merge patch replaces a
 * list whole, so spec.tasks is given whole: the spec's tasks, only their timeouts and stalls
 * changed. spec.finally is left out, and so unchanged. Null when nothing is proposed.
 */
export interface SpecPatch {
  spec: { ceiling?: string; stall?: string; tasks?: Partial<PlaybookSpec["tasks"][number]>[] };
}

/** What a patch reads of an advice: the proposals (from the runs, or from the histograms). */
interface Proposed {
  figure: { proposalMs: number | null };
}
export interface PatchableAdvice {
  runs: number;
  ceiling: Proposed;
  stall: Proposed;
  tasks: readonly { name: string; timeout: Proposed; stall: Proposed }[];
}

export function specPatch(playbook: Playbook, advice: PatchableAdvice): SpecPatch | null {
  const spec: SpecPatch["spec"] = {};
  const ceiling = advice.ceiling.figure.proposalMs;
  const runStall = advice.stall.figure.proposalMs;
  if (ceiling !== null) spec.ceiling = formatDuration(ceiling);
  if (runStall !== null) spec.stall = formatDuration(runStall);
  let changed = false;
  const tasks = playbook.spec.tasks.map((task, index) => {
    const proposed = advice.tasks[index];
    if (!proposed || proposed.name !== task.name) return task;
    const next = { ...task };
    if (proposed.timeout.figure.proposalMs !== null)
      next.timeout = formatDuration(proposed.timeout.figure.proposalMs);
    const ownStall = proposed.stall.figure.proposalMs;
    // A task keeps to the run's stall (spec.stall) unless its own proposal differs or it has its own now.
    if (ownStall !== null && (ownStall !== runStall || task.stall !== undefined))
      next.stall = formatDuration(ownStall);
    if (next.timeout !== task.timeout || next.stall !== task.stall) changed = true;
    return next;
  });
  if (changed) spec.tasks = tasks.map(withoutDefaults);
  return Object.keys(spec).length > 0 ? { spec } : null;
}

/** A task as the manifest would say it: the schema's defaults (retries 0, env []) left out again. */
function withoutDefaults(task: PlaybookSpec["tasks"][number]): Partial<PlaybookSpec["tasks"][number]> {
  const { retries, env, ...rest } = task;
  return { ...rest, ...(retries ? { retries } : {}), ...(env.length > 0 ? { env } : {}) };
}

export function renderPatch(
  name: string,
  playbook: Playbook,
  advice: PatchableAdvice,
  target: { kind: "Playbook" } | { kind: "CronPlaybook"; name: string; namespace: string } = {
    kind: "Playbook",
  },
): string {
  const patch = specPatch(playbook, advice);
  const header =
    target.kind === "CronPlaybook"
      ? [
          `# playbook advise: the proposed limits of CronPlaybook ${target.name} as a merge patch of its template (spec.template.spec.tasks is given whole: a merge patch replaces a list).`,
          `# kubectl patch cronplaybook ${target.name} -n ${target.namespace} --type=merge --patch-file THIS`,
          "# Its next run takes them; the runs already made keep theirs.",
        ]
      : [
          `# playbook advise: the proposed limits of ${name} as a merge patch (spec.tasks is given whole: a merge patch replaces a list).`,
          "# A manifest: kubectl patch --local -f playbook.yaml --type=merge --patch-file THIS -o yaml",
          "# A Playbook on the cluster runs once: patch the manifest of its next run, or its CronPlaybook's spec.template.",
        ];
  if (!patch) return `${header.join("\n")}\n# nothing proposed: ${advice.runs} runs are too few\n{}\n`;
  const body = target.kind === "CronPlaybook" ? { spec: { template: { spec: patch.spec } } } : patch;
  return `${header.join("\n")}\n${stringify(body)}`;
}
