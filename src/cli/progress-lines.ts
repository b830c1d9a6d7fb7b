// progress.ts's plain lines read back into what they were printed from: the begin line's limits,
// the RunEvents, the skipped line and the end line. A pod's runner prints the plain lines (its
// stderr is no terminal), so `submit --watch` reads them from the pod's log and feeds a local
// Progress, which shows the same lines and the same live clock a local run shows.
import { parseDuration } from "../api/duration.js";
import { type EffectiveLimit, POLICY_TASK_TIMEOUT_FIELD, type TaskLimits } from "../api/limits.js";
import type { LimitSource, TaskLimit, TaskPhase } from "../api/reasons.js";
import { TASK_LIMITS, TASK_PHASES } from "../api/reasons.js";
import { type ContainmentKind, RUNNER_REASONS, type RunnerReason, type TaskOutcome } from "../api/report.js";
import type { AttemptStop } from "../pod-runner/attempt.js";
import type { RunEvent } from "../pod-runner/run.js";

/** The run-level limits the begin line shows, each with its source. */
export interface ShownRunLimits {
  ceiling: EffectiveLimit;
  stall: EffectiveLimit;
  killGrace: EffectiveLimit;
  startTimeout: EffectiveLimit;
}

export type ProgressLine =
  | { kind: "begin"; name: string; taskCount: number; limits: ShownRunLimits }
  | { kind: "event"; event: RunEvent }
  | { kind: "skipped"; names: string[] }
  | { kind: "end"; phase: string; reason: RunnerReason | string; message: string }
  /** a line of progress.ts's that carries no event (a signal received, a warning), or none of its lines */
  | { kind: "other"; line: string };

/** What the lines alone do not say: each task's place in the spec and its retries. */
export interface PlannedTask {
  name: string;
  retries: number;
  /** one of spec.finally's, listed after the main tasks */
  finally?: true;
}

const SOURCES = ["task", "spec", "policy", "default"] as const;
const WHAT: Record<string, string> = {
  ceiling: "ceiling",
  stall: "stall limit",
  killGrace: "kill grace",
  startTimeout: "start timeout",
};

/** The field resolveLimits names for a run-level limit from its source. */
function runLimit(key: keyof ShownRunLimits, duration: string, source: string): EffectiveLimit | null {
  const ms = parseShownDuration(duration);
  if (ms === null || !isSource(source) || source === "task") return null;
  const what = WHAT[key] as string;
  const field =
    source === "spec"
      ? `spec.${key}`
      : source === "policy"
        ? `the namespace policy's default ${what}`
        : `the default ${what}`;
  return { ms, source, field };
}

function isSource(text: string): text is LimitSource {
  return (SOURCES as readonly string[]).includes(text);
}

function parseShownDuration(text: string): number | null {
  try {
    return parseDuration(text);
  } catch {
    return null;
  }
}

const BEGIN =
  /^playbook: running (.+): (\d+) tasks?, ceiling (\S+) \((\w+)\), stall (\S+) \((\w+)\), killGrace (\S+) \((\w+)\), startTimeout (\S+) \((\w+); [^)]*\)$/;
const STARTED =
  /^playbook: task (\S+) started(?: .*)? \((?:attempt (\d+)\/(\d+), )?(?:timeout (\S+) \((\w+)\)|no timeout of its own), stall (?:off \((\w+)\)|(\S+) \((\w+)\)), (?:finallyCeiling|ceiling) (\S+) \((\w+)\)\)$/;
/** progress.ts's line for the finally-started event. */
const FINALLY_STARTED =
  /^playbook: the main tasks ended \((\w+)(?:: (\S+))?\); running (\d+) finally tasks? within finallyCeiling (\S+) \((\w+)\)$/;
const STOPPING = /^playbook: task (\S+) (?:is being cancelled|passed its (\w+) limit): (.+)$/;
/** What a stop with a grace did: the cancel file, the SIGTERM (progress.ts, describeStop). */
const STOP_DONE = /^cancel file (not )?written, (SIGTERM .+), SIGKILL in \S+$/;
const DROPPED =
  /^playbook: task (\S+): dropped (\d+) bytes of its output that came (after its stop|at the run's end) faster than the runner's stdout took it$/;
const RETRYING =
  /^playbook: task (\S+) (?:was killed by (\S+)|exited with code (-?\d+|null)); retrying(?: in (\S+))? \(attempt (\d+)(?:\/(\d+))?\)$/;
const FINISHED = /^playbook: task (\S+) (\w+)(?: in (\S+))?(?: \((.+)\))?$/;
const UNIT_BYTES: Record<string, number> = { KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 };
const CONTAINMENT = /^playbook: containment: (.+)$/;
const LEFTOVERS =
  /^playbook: (?:ended (\d+) process\(es\) that tasks left running|found (\d+) process\(es\) that tasks left running and ended (\d+): \d+ still ran after the kill)$/;
const SKIPPED = /^playbook: skipped: (.+)$/;
const END = /^playbook: run (\w+) \((\w+)\): (.*)$/;

/** A duration the runner wrote, or 0 for one it did not (a line a task could not have written anyway). */
function parseDurationOr0(text: string): number {
  try {
    return parseDuration(text);
  } catch {
    return 0;
  }
}

function containmentKind(description: string): ContainmentKind {
  if (description.startsWith("a cgroup")) return "cgroup";
  if (description.startsWith("a child subreaper")) return "subreaper";
  if (description.startsWith("agents")) return "agents";
  return "none";
}

/**
 * Reads one run's plain progress lines in order. It keeps what a line leaves out but an earlier
 * line said: the attempt each task is on (a finished line does not repeat it) and the run's stall
 * limit (a task that has none of its own shares it).
 */
export class ProgressLineReader {
  private readonly tasks: readonly PlannedTask[];
  private runStall: EffectiveLimit | undefined;
  private readonly attempts = new Map<number, number>();

  constructor(tasks: readonly PlannedTask[]) {
    this.tasks = tasks;
  }

  /** Whether a task of this name is in the run: its `[name] ` lines are task output. */
  isTask(name: string): boolean {
    return this.indexOf(name) >= 0;
  }

  private indexOf(name: string): number {
    return this.tasks.findIndex((task) => task.name === name);
  }

  /** The spec field of the task at `index` (the finally tasks count on after the main ones). */
  private fieldOf(index: number): string {
    const mainCount = this.tasks.filter((task) => !task.finally).length;
    return index < mainCount ? `spec.tasks[${index}]` : `spec.finally[${index - mainCount}]`;
  }

  read(line: string): ProgressLine {
    const other = { kind: "other", line } as const;
    if (!line.startsWith("playbook: ")) return other;
    return (
      this.begin(line) ??
      this.started(line) ??
      this.stopping(line) ??
      this.retrying(line) ??
      this.dropped(line) ??
      this.finished(line) ??
      this.misc(line) ??
      other
    );
  }

  private begin(line: string): ProgressLine | null {
    const m = BEGIN.exec(line);
    if (!m) return null;
    const [
      ,
      name,
      count,
      ceiling,
      ceilingSource,
      stall,
      stallSource,
      grace,
      graceSource,
      start,
      startSource,
    ] = m as unknown as string[];
    const limits = {
      ceiling: runLimit("ceiling", ceiling as string, ceilingSource as string),
      stall: runLimit("stall", stall === "off" ? "0s" : (stall as string), stallSource as string),
      killGrace: runLimit("killGrace", grace as string, graceSource as string),
      startTimeout: runLimit("startTimeout", start as string, startSource as string),
    };
    if (!limits.ceiling || !limits.stall || !limits.killGrace || !limits.startTimeout) return null;
    this.runStall = limits.stall;
    return {
      kind: "begin",
      name: name as string,
      taskCount: Number(count),
      limits: limits as ShownRunLimits,
    };
  }

  private started(line: string): ProgressLine | null {
    const m = STARTED.exec(line);
    if (!m) return null;
    const [, name, attemptText, tries, timeout, timeoutSource, stallOffSource, stall, stallSource] =
      m as unknown as (string | undefined)[];
    const index = this.indexOf(name as string);
    if (index < 0) return null;
    const field = this.fieldOf(index);
    const attempt = attemptText === undefined ? 1 : Number(attemptText);
    const retries = tries === undefined ? (this.tasks[index]?.retries ?? 0) : Number(tries) - 1;
    let timeoutLimit: EffectiveLimit | null = null;
    if (timeout !== undefined) {
      const ms = parseShownDuration(timeout);
      if (ms === null) return null;
      if (timeoutSource === "task") timeoutLimit = { ms, source: "task", field: `${field}.timeout` };
      else if (timeoutSource === "policy") {
        timeoutLimit = { ms, source: "policy", field: POLICY_TASK_TIMEOUT_FIELD };
      } else return null;
    }
    const source = (stallOffSource ?? stallSource) as string;
    const ms = stall === undefined ? 0 : parseShownDuration(stall);
    if (ms === null || !isSource(source)) return null;
    const stallLimit: EffectiveLimit =
      source === "task"
        ? { ms, source, field: `${field}.stall` }
        : this.runStall && this.runStall.ms === ms && this.runStall.source === source
          ? this.runStall
          : (runLimit("stall", stall ?? "0s", source) as EffectiveLimit);
    this.attempts.set(index, attempt);
    const limits: TaskLimits = { name: name as string, timeout: timeoutLimit, stall: stallLimit, retries };
    return {
      kind: "event",
      event: { type: "task-started", index, name: name as string, attempt, limits },
    };
  }

  private stopping(line: string): ProgressLine | null {
    const m = STOPPING.exec(line);
    if (!m) return null;
    const [, name, limit, how] = m as unknown as (string | undefined)[];
    const index = this.indexOf(name as string);
    if (index < 0) return null;
    if (limit !== undefined && !(TASK_LIMITS as readonly string[]).includes(limit)) return null;
    const stop: AttemptStop =
      limit === undefined ? { kind: "cancelled" } : { kind: "limit", limit: limit as TaskLimit };
    const done = STOP_DONE.exec(how as string);
    if (done) {
      const term = done[2] as string;
      stop.cancelFileWritten = done[1] === undefined;
      stop.term = { delivered: !/^SIGTERM not /.test(term), detail: term };
    }
    return { kind: "event", event: { type: "task-stopping", index, name: name as string, stop } };
  }

  private retrying(line: string): ProgressLine | null {
    const m = RETRYING.exec(line);
    if (!m) return null;
    const [, name, signal, code, wait, attempt, attempts] = m as unknown as (string | undefined)[];
    const index = this.indexOf(name as string);
    if (index < 0) return null;
    return {
      kind: "event",
      event: {
        type: "task-retrying",
        index,
        name: name as string,
        attempt: Number(attempt),
        // A line of an earlier runner names neither: no wait, and the spec's retries.
        attempts: attempts === undefined ? (this.tasks[index]?.retries ?? 0) + 1 : Number(attempts),
        delayMs: wait === undefined ? 0 : parseDurationOr0(wait),
        exitCode: signal !== undefined || code === "null" ? null : Number(code),
        signal: signal ?? null,
      },
    };
  }

  private finished(line: string): ProgressLine | null {
    const m = FINISHED.exec(line);
    if (!m) return null;
    const [, name, phase, took, detail] = m as unknown as (string | undefined)[];
    const index = this.indexOf(name as string);
    if (index < 0 || !(TASK_PHASES as readonly string[]).includes(phase as string)) return null;
    const tookMs = took === undefined ? null : parseShownDuration(took);
    if (took !== undefined && tookMs === null) return null;
    const outcome: TaskOutcome = {
      name: name as string,
      phase: phase as TaskPhase,
      attempts: this.attempts.get(index) ?? 0,
      exitCode: phase === "Succeeded" ? 0 : null,
      signal: null,
    };
    for (const part of detail === undefined ? [] : detail.split(", ")) {
      const code = /^exit code (-?\d+)$/.exec(part);
      const cpu = /^cpu (\d+(?:\.\d+)?)s$/.exec(part);
      const peak = /^peak (\d+(?:\.\d+)?) (KiB|MiB|GiB)$/.exec(part);
      if (cpu) outcome.cpuSeconds = Number(cpu[1]);
      else if (peak)
        outcome.peakMemoryBytes = Math.round(Number(peak[1]) * (UNIT_BYTES[peak[2] as string] ?? 1));
      else if ((TASK_LIMITS as readonly string[]).includes(part)) outcome.limit = part as TaskLimit;
      else if (part === "Exited" || part === "Killed") outcome.ending = part;
      else if (code) outcome.exitCode = Number(code[1]);
      else if (/^SIG[A-Z0-9]+$/.test(part)) outcome.signal = part;
      else return null;
    }
    // The runner's own measure: the log's stamps of two lines are when containerd read them.
    return {
      kind: "event",
      event: { type: "task-finished", index, outcome, ...(tookMs === null ? {} : { tookMs }) },
    };
  }

  private dropped(line: string): ProgressLine | null {
    const m = DROPPED.exec(line);
    if (!m) return null;
    const [, name, bytes, when] = m as unknown as string[];
    const index = this.indexOf(name as string);
    if (index < 0) return null;
    return {
      kind: "event",
      event: {
        type: "output-dropped",
        index,
        name: name as string,
        bytes: Number(bytes),
        when: when === "after its stop" ? "stop" : "end",
      },
    };
  }

  private misc(line: string): ProgressLine | null {
    const finallyStarted = FINALLY_STARTED.exec(line);
    if (finallyStarted) {
      const [, outcome, endingTask, count, duration, source] = finallyStarted as unknown as (
        | string
        | undefined
      )[];
      const ms = parseShownDuration(duration as string);
      if (
        ms === null ||
        !isSource(source as string) ||
        !(RUNNER_REASONS as readonly string[]).includes(outcome as string)
      )
        return null;
      const fieldSource = source as LimitSource;
      const finallyCeiling: EffectiveLimit = {
        ms,
        source: fieldSource,
        field:
          fieldSource === "spec"
            ? "spec.finallyCeiling"
            : fieldSource === "policy"
              ? "the namespace policy's default finally ceiling"
              : "the default finally ceiling",
      };
      return {
        kind: "event",
        event: {
          type: "finally-started",
          count: Number(count),
          outcome: outcome as RunnerReason,
          ...(endingTask !== undefined ? { endingTask } : {}),
          finallyCeiling,
        },
      };
    }
    const containment = CONTAINMENT.exec(line);
    if (containment) {
      const description = containment[1] as string;
      return {
        kind: "event",
        event: { type: "containment", kind: containmentKind(description), description },
      };
    }
    const leftovers = LEFTOVERS.exec(line);
    if (leftovers) {
      return {
        kind: "event",
        event:
          leftovers[1] !== undefined
            ? {
                type: "leftovers-swept",
                found: Number(leftovers[1]),
                ended: Number(leftovers[1]),
                warnings: [],
              }
            : {
                type: "leftovers-swept",
                found: Number(leftovers[2]),
                ended: Number(leftovers[3]),
                warnings: [],
              },
      };
    }
    const skipped = SKIPPED.exec(line);
    if (skipped) return { kind: "skipped", names: (skipped[1] as string).split(", ") };
    const end = END.exec(line);
    if (end) {
      const [, phase, reason, message] = end as unknown as string[];
      return { kind: "end", phase: phase as string, reason: reason as string, message: message as string };
    }
    return null;
  }
}
