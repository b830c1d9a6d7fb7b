// The history `playbook advise --reports DIR` reads: the files `playbook run -o json|yaml` writes
// (a Playbook with its final status), the runner's reports `--report FILE` writes (they name no
// task: the Playbook they ran comes from -f), and lists of Playbooks (`kubectl get playbooks -o
// json`). Each file is checked with the same schemas the runner and the controller use, and a
// file that is none of these is refused, named, with what is wrong with it.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { parseDuration } from "../../api/duration.js";
import { type LimitDefaults, LOCAL_DEFAULTS, type ResolvedLimits, resolveLimits } from "../../api/limits.js";
import { InvalidPlaybookError, validatePlaybook } from "../../api/manifest.js";
import type { Playbook, PlaybookStatus, TaskStatus } from "../../api/playbook.js";
import type { TaskLimit } from "../../api/reasons.js";
import { decodeReport, InvalidReportError } from "../../api/report.js";
import { expandReport } from "../../api/report-expand.js";
import type { RunSample, TaskSample } from "./advice-model.js";

export class HistoryError extends Error {}

/**
 * The history's specs are checked as Playbooks but not against this machine's maximums: a
 * cluster's controller may allow a longer ceiling than `playbook run` does.
 */
const HISTORY_DEFAULTS: LimitDefaults = {
  ...LOCAL_DEFAULTS,
  maxCeilingMs: Number.MAX_SAFE_INTEGER,
  maxKillGrace: undefined,
  maxFinallyCeiling: undefined,
};

/** The runs of one Playbook and the spec their proposal is for. */
export interface PlaybookHistory {
  /** how the runs are grouped: the CronPlaybook, the generateName, else the Playbook's name */
  name: string;
  /** the newest run's Playbook, or -f's: the spec the patch is for */
  playbook: Playbook;
  limits: ResolvedLimits;
  runs: RunSample[];
  /** files read that held no finished run (a Playbook without a final status), for the notes */
  skipped: string[];
}

const CRON_LABEL = "playbook.dev/cron-playbook";

/**
 * The reasons of a run cut off while its tasks ran: its length is a lower bound. StartTimeout and
 * QueueTimeout end a run before any task ran: it says nothing of how long they take.
 */
const CUT_REASONS: readonly string[] = ["TaskTimeout", "StallLimit", "RunCeiling", "PodDeadlineExceeded"];

/** What the runs are grouped by: a CronPlaybook's runs, a generateName's, else one name. */
function groupOf(playbook: Playbook): string {
  const labels = playbook.metadata.labels ?? {};
  const cron = labels[CRON_LABEL];
  if (cron) return cron;
  const generateName = (playbook.metadata as { generateName?: unknown }).generateName;
  if (typeof generateName === "string" && generateName.length > 0) return generateName.replace(/-$/, "");
  return playbook.metadata.name;
}

/** The documents of a file, JSON or YAML. */
function documentsOf(file: string, text: string): unknown[] {
  const documents = parseAllDocuments(text, { merge: true });
  const values: unknown[] = [];
  for (const doc of documents) {
    const error = doc.errors[0];
    if (error) {
      const where = error.linePos?.[0]
        ? ` (line ${error.linePos[0].line}, column ${error.linePos[0].col})`
        : "";
      throw new HistoryError(`${file}: not JSON or YAML${where}: ${error.message.split("\n")[0]}`);
    }
    const value = doc.toJS();
    if (value !== null && value !== undefined) values.push(value);
  }
  return values;
}

function isReport(value: unknown): boolean {
  return (
    value !== null && typeof value === "object" && "v" in value && "tasks" in value && !("kind" in value)
  );
}

function playbookOf(value: unknown, source: string): Playbook {
  try {
    return validatePlaybook(value, HISTORY_DEFAULTS, source, { generateName: false });
  } catch (error) {
    if (error instanceof InvalidPlaybookError) throw new HistoryError(error.message);
    throw error;
  }
}

/**
 * When a task's last attempt started: a retried task's startTime is its first attempt's, and the
 * attempts and waits before the last are no part of what its timeout bounds. Undefined for a
 * retried task whose status does not say (a runner before lastAttemptStartTime).
 */
function lastAttemptStartOf(task: TaskStatus): string | undefined {
  if (task.attempts > 1) return task.lastAttemptStartTime;
  return task.startTime;
}

/** A task's last attempt's duration from its times, or undefined. */
function spanOf(task: TaskStatus): number | undefined {
  const started = lastAttemptStartOf(task);
  if (!started || !task.completionTime) return undefined;
  const ms = Date.parse(task.completionTime) - Date.parse(started);
  return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}

function silenceOf(task: TaskStatus, source: string): number | undefined {
  if (task.longestSilence === undefined) return undefined;
  try {
    return parseDuration(task.longestSilence);
  } catch (error) {
    throw new HistoryError(
      `${source}: status.tasks[${task.name}].longestSilence: ${(error as Error).message}`,
    );
  }
}

function taskSample(task: TaskStatus, runStart: number, source: string): TaskSample {
  const outcome =
    task.verified === false
      ? "other"
      : task.phase === "Succeeded"
        ? "succeeded"
        : task.phase === "TimedOut"
          ? "cut"
          : "other";
  const durationMs = spanOf(task);
  const longestSilenceMs = silenceOf(task, source);
  const started = lastAttemptStartOf(task);
  const startMs = started ? Date.parse(started) - runStart : undefined;
  return {
    name: task.name,
    outcome,
    ...(task.limit ? { limit: task.limit as TaskLimit } : {}),
    ...(startMs !== undefined && Number.isFinite(startMs) ? { startMs: Math.max(0, startMs) } : {}),
    ...(durationMs !== undefined ? { durationMs } : {}),
    ...(longestSilenceMs !== undefined ? { longestSilenceMs } : {}),
  };
}

/** A finished run's sample, from its status; null for one that has not finished. */
export function runFromStatus(id: string, status: PlaybookStatus, source: string): RunSample | null {
  const reason = status.conditions?.find((c) => c.type === "Succeeded")?.reason;
  if (
    !status.startTime ||
    !status.completionTime ||
    !reason ||
    reason === "Running" ||
    reason === "Pending"
  ) {
    return null;
  }
  const start = Date.parse(status.startTime);
  const tasks = (status.tasks ?? []).map((task) => taskSample(task, start, source));
  // What the ceiling bounds: from the run's start to its last main task's end.
  const ends = (status.tasks ?? []).flatMap((task) =>
    task.completionTime ? [Date.parse(task.completionTime)] : [],
  );
  const end = ends.length > 0 ? Math.max(...ends) : Date.parse(status.completionTime);
  return {
    id,
    startedAt: start,
    outcome: reason === "Succeeded" ? "succeeded" : CUT_REASONS.includes(reason) ? "cut" : "other",
    reason,
    durationMs: Math.max(0, end - start),
    tasks,
  };
}

interface Found {
  group: string;
  playbook: Playbook;
  run: RunSample | null;
  source: string;
}

/** The Playbooks a file holds: one, or a list's items. */
function playbooksIn(value: unknown, file: string): { playbook: Playbook; source: string }[] {
  const kind = (value as { kind?: unknown }).kind;
  if (kind === "List" || kind === "PlaybookList") {
    const items = (value as { items?: unknown }).items;
    if (!Array.isArray(items)) throw new HistoryError(`${file}: a ${kind} without items`);
    return items.map((item, index) => ({
      playbook: playbookOf(item, `${file} items[${index}]`),
      source: `${file} items[${index}]`,
    }));
  }
  if (kind !== "Playbook") {
    throw new HistoryError(
      `${file}: neither a Playbook (\`playbook run -o json\`), a list of them, nor a runner report (\`--report\`)${
        typeof kind === "string" ? `: kind ${JSON.stringify(kind)}` : ""
      }`,
    );
  }
  return [{ playbook: playbookOf(value, file), source: file }];
}

/**
 * Reads every .json, .yaml and .yml file in `dir` (not its subfolders) into the history of each
 * Playbook. `manifest` (-f) names the runner reports' Playbook and is the spec its group's patch is for.
 */
export function readHistory(
  dir: string,
  manifest: { playbook: Playbook; file: string } | null,
): PlaybookHistory[] {
  let names: string[];
  try {
    if (!statSync(dir).isDirectory()) throw new HistoryError(`--reports ${dir}: not a directory`);
    names = readdirSync(dir).sort();
  } catch (error) {
    if (error instanceof HistoryError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    throw new HistoryError(
      `--reports ${dir}: ${code === "ENOENT" ? "no such directory" : code === "EACCES" ? "permission denied" : (error as Error).message}`,
    );
  }
  const documents: { value: unknown; source: string; text: string }[] = [];
  for (const name of names.filter((n) => /\.(json|ya?ml)$/.test(n))) {
    const file = join(dir, name);
    let text: string;
    try {
      if (!statSync(file).isFile()) continue;
      text = readFileSync(file, "utf8");
    } catch (error) {
      throw new HistoryError(
        `${file}: cannot read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      );
    }
    for (const value of documentsOf(file, text)) documents.push({ value, source: file, text });
  }
  return historyOf(documents, manifest);
}

/**
 * The history of each Playbook in these documents (a Playbook, a list of them, or a runner
 * report, whose text is kept as read: the report is checked byte for byte as the controller does).
 */
export function historyOf(
  documents: readonly { value: unknown; source: string; text?: string }[],
  manifest: { playbook: Playbook; file: string } | null,
  /**
   * What names each run where the backtest cites it: a cluster's Playbook by its name (unique
   * there); a file's by the file, as local runs of one manifest share their name.
   */
  runIds: "name" | "source" = "source",
): PlaybookHistory[] {
  const found: Found[] = [];
  for (const { value, source: file, text } of documents) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new HistoryError(
        `${file}: neither a Playbook nor a runner report: ${JSON.stringify(value).slice(0, 60)}`,
      );
    }
    if (isReport(value)) {
      if (!manifest) {
        throw new HistoryError(
          `${file} is a runner report (--report), which names no task: give the Playbook it ran with -f FILE`,
        );
      }
      found.push(reportRun(file, text ?? JSON.stringify(value), manifest.playbook));
      continue;
    }
    for (const { playbook, source } of playbooksIn(value, file)) {
      const id = runIds === "name" ? playbook.metadata.name : source;
      const run = playbook.status ? runFromStatus(id, playbook.status, source) : null;
      found.push({ group: groupOf(playbook), playbook, run, source });
    }
  }
  return grouped(found, manifest);
}

function reportRun(file: string, text: string, playbook: Playbook): Found {
  const limits = resolveLimits(playbook.spec, HISTORY_DEFAULTS);
  let report: ReturnType<typeof decodeReport>;
  try {
    report = decodeReport(text.trim(), playbook.spec.tasks.length, playbook.spec.finally?.length ?? 0);
  } catch (error) {
    if (error instanceof InvalidReportError) {
      throw new HistoryError(`${file}: the report is ${error.message} (for -f's ${playbook.metadata.name})`);
    }
    throw error;
  }
  const expanded = expandReport(report, limits);
  const status: PlaybookStatus = {
    startTime: expanded.startTime,
    completionTime: expanded.completionTime,
    tasks: expanded.tasks,
    conditions: [
      {
        type: "Succeeded",
        status: "Unknown",
        reason: report.reason,
        message: "",
        lastTransitionTime: report.end,
      },
    ],
  };
  return { group: groupOf(playbook), playbook, run: runFromStatus(file, status, file), source: file };
}

function grouped(found: readonly Found[], manifest: { playbook: Playbook } | null): PlaybookHistory[] {
  const groups = new Map<string, Found[]>();
  for (const entry of found) groups.set(entry.group, [...(groups.get(entry.group) ?? []), entry]);
  const manifestGroup = manifest ? groupOf(manifest.playbook) : null;
  return [...groups.entries()].map(([name, entries]) => {
    // A run written both ways (-o json and --report) is one run.
    const seen = new Set<string>();
    const runs: RunSample[] = [];
    for (const entry of entries) {
      if (!entry.run) continue;
      const key = `${entry.run.startedAt}/${entry.run.durationMs}/${entry.run.reason}`;
      if (seen.has(key)) continue;
      seen.add(key);
      runs.push(entry.run);
    }
    const newest = [...entries]
      .sort((a, b) => (a.run?.startedAt ?? 0) - (b.run?.startedAt ?? 0))
      .at(-1) as Found;
    const playbook = name === manifestGroup && manifest ? manifest.playbook : newest.playbook;
    return {
      name,
      playbook,
      limits: limitsOf(playbook, newest.playbook.status),
      runs,
      skipped: entries.filter((e) => !e.run).map((e) => e.source),
    };
  });
}

/**
 * The limits in force: resolved from the spec; where the spec sets no ceiling or stall, the
 * newest run's status says what it was on its cluster (a policy's default, the controller's).
 */
function limitsOf(playbook: Playbook, status: PlaybookStatus | undefined): ResolvedLimits {
  const limits = resolveLimits(playbook.spec, HISTORY_DEFAULTS);
  const said = status?.limits;
  if (!said) return limits;
  const take = (value: { value: string; source: "task" | "spec" | "policy" | "default" }, field: string) => {
    try {
      return { ms: parseDuration(value.value), source: value.source, field };
    } catch {
      return null;
    }
  };
  // The spec's own level wins: the run's status says only where a default came from.
  const ceiling =
    limits.ceiling.source === "spec"
      ? null
      : take(
          said.ceiling,
          `the ${said.ceiling.source === "policy" ? "namespace policy's" : "controller's"} default ceiling`,
        );
  const stall =
    limits.stall.source === "spec"
      ? null
      : take(
          said.stall,
          `the ${said.stall.source === "policy" ? "namespace policy's" : "controller's"} default stall limit`,
        );
  return {
    ...limits,
    ...(ceiling ? { ceiling } : {}),
    ...(stall ? { stall } : {}),
    tasks: limits.tasks.map((task) => (task.stall.source === "task" || !stall ? task : { ...task, stall })),
  };
}
