// Effective limits, each with the level it came from, so that status and progress lines can say
// "10m (task)" or "30m (default)" and an operator knows which knob to turn.
import { formatDuration, parseDuration } from "./duration.js";
import type { PlaybookSpec } from "./playbook.js";
import type { LimitSource } from "./reasons.js";

export interface LimitDefaults {
  ceilingMs: number;
  maxCeilingMs: number;
  stallMs: number;
  killGraceMs: number;
  /**
   * The longest killGrace accepted, and where it is set: the grace after the ceiling is what a run
   * may take beyond it, so without this bound the ceiling would have none. Absent from a run's
   * plan (its killGrace was checked when it started): no bound.
   */
  maxKillGrace?: { ms: number; where: string } | undefined;
  /** From the pod's creation until its runner starts; absent (a plan of an earlier version): DEFAULT_START_TIMEOUT_MS. */
  startTimeoutMs?: number | undefined;
  /** The finally tasks' ceiling; absent (a plan of an earlier version): DEFAULT_FINALLY_CEILING_MS. */
  finallyCeilingMs?: number | undefined;
  /** The longest finallyCeiling accepted, and where it is set; absent from a run's plan: no bound. */
  maxFinallyCeiling?: { ms: number; where: string } | undefined;
  /** From the pod's creation until Kueue admits it; absent: no queue timeout (the controller's default is none). */
  queueTimeoutMs?: number | undefined;
  /**
   * Pods Kueue stops that a run re-creates before the next stop ends it Preempted (the controller's
   * --default-max-preemptions); absent: a local run, or the plan of an earlier version
   * (DEFAULT_MAX_PREEMPTIONS applies, unshown).
   */
  maxPreemptions?: number | undefined;
  /** The wait before a task's first retry; absent (a plan of an earlier version): DEFAULT_RETRY_DELAY_MS. */
  retryDelayMs?: number | undefined;
  /** Its factor for each further retry; absent: DEFAULT_RETRY_BACKOFF. */
  retryBackoff?: number | undefined;
  /** The longest wait before jitter; absent: DEFAULT_RETRY_MAX_DELAY_MS. */
  retryMaxDelayMs?: number | undefined;
  /** The namespace policy's defaults: the level between the spec and the controller's defaults. */
  policy?: PolicyLimitDefaults | undefined;
}

/** A PlaybookPolicy's spec.defaults for the limits, in milliseconds; each may be absent. */
export interface PolicyLimitDefaults {
  ceilingMs?: number | undefined;
  stallMs?: number | undefined;
  killGraceMs?: number | undefined;
  startTimeoutMs?: number | undefined;
  finallyCeilingMs?: number | undefined;
  queueTimeoutMs?: number | undefined;
  retryDelayMs?: number | undefined;
  retryBackoff?: number | undefined;
  retryMaxDelayMs?: number | undefined;
  /**
   * The policy's maximums.taskTimeout: it bounds every task, so a task (main or finally) without a
   * timeout of its own takes it as its timeout.
   */
  taskTimeoutMs?: number | undefined;
  maxPreemptions?: number | undefined;
  /**
   * The policy's maximums that also give a value: a Playbook that sets none, under no default
   * within them, takes the maximum, so a bounded limit is never "none". Never in a run's plan.
   */
  maximumQueueTimeoutMs?: number | undefined;
  maximumMaxPreemptions?: number | undefined;
}

/** Where a task's timeout from the policy's maximums.taskTimeout is set, in its EffectiveLimit's field. */
export const POLICY_TASK_TIMEOUT_FIELD = "the namespace policy's maximum task timeout";

/** The controller's --default-start-timeout when not given, and what a plan without one means. */
export const DEFAULT_START_TIMEOUT_MS = 300_000;
/** The controller's --default-finally-ceiling when not given, and what a plan without one means. */
export const DEFAULT_FINALLY_CEILING_MS = 300_000;
/** The controller's --max-finally-ceiling when not given, and `playbook run`'s. */
export const DEFAULT_MAX_FINALLY_CEILING_MS = 3_600_000;

/** The controller's --default-max-preemptions when not given, and the cap of a plan without one. */
export const DEFAULT_MAX_PREEMPTIONS = 5;
/** The controller's default wait before a task's first retry, and what a plan without one means. */
export const DEFAULT_RETRY_DELAY_MS = 1000;
/** The controller's default factor of each further wait. */
export const DEFAULT_RETRY_BACKOFF = 2;
/** The controller's default longest wait between two attempts (before jitter). */
export const DEFAULT_RETRY_MAX_DELAY_MS = 60_000;

/** Defaults for `playbook run` on a laptop; the controller takes its own from its configuration. */
export const LOCAL_DEFAULTS: LimitDefaults = {
  ceilingMs: 3_600_000,
  maxCeilingMs: 24 * 3_600_000,
  stallMs: 600_000,
  killGraceMs: 10_000,
  maxKillGrace: { ms: 300_000, where: "playbook run's own maximum" },
  // Shown, never enforced: a local run has no pod to wait for.
  startTimeoutMs: DEFAULT_START_TIMEOUT_MS,
  finallyCeilingMs: DEFAULT_FINALLY_CEILING_MS,
  maxFinallyCeiling: { ms: DEFAULT_MAX_FINALLY_CEILING_MS, where: "playbook run's own maximum" },
};

export interface EffectiveLimit {
  ms: number;
  source: LimitSource;
  /** Where an operator would change it, e.g. "spec.tasks[0].timeout" or "the default ceiling". */
  field: string;
}

/** A limit that is a count, not a time (maxPreemptions), with the level it came from. */
export interface CountLimit {
  value: number;
  source: LimitSource;
  /** Where an operator would change it, e.g. "spec.maxPreemptions". */
  field: string;
}

export interface TaskLimits {
  name: string;
  /**
   * The task's own timeout, else the policy's maximums.taskTimeout (source policy); null when only
   * the run's ceiling (a finally task's: finallyCeiling) bounds it.
   */
  timeout: EffectiveLimit | null;
  /** 0 disables the stall limit. */
  stall: EffectiveLimit;
  retries: number;
  /** The waits between its attempts; absent (limits read back from progress lines): the defaults. */
  retryWaits?: RetryWaits;
}

/** How long a task waits before each retry: delay × backoff^(n-1), at most maxDelay, jittered (retry-wait.ts). */
export interface RetryWaits {
  delay: EffectiveLimit;
  backoff: { value: number; source: LimitSource; field: string };
  maxDelay: EffectiveLimit;
}

export interface ResolvedLimits {
  ceiling: EffectiveLimit;
  stall: EffectiveLimit;
  killGrace: EffectiveLimit;
  /** From the pod's creation until its runner starts (the controller enforces it, not the runner). */
  startTimeout: EffectiveLimit;
  tasks: TaskLimits[];
  /** The finally tasks' ceiling, counted from the main tasks' end (shown only for a spec with finally tasks). */
  finallyCeiling: EffectiveLimit;
  /** spec.finally's tasks, in order (empty without them). */
  finally: TaskLimits[];
  /** From the pod's creation until Kueue admits it (the controller enforces it); null: none set at any level. */
  queueTimeout: EffectiveLimit | null;
  /** The timeout of a task that sets none: the policy's maximums.taskTimeout; null without one. */
  taskTimeout: EffectiveLimit | null;
  /**
   * Pods Kueue stops that the run re-creates (onPreemption Requeue) before the next stop ends it
   * Preempted; null: set at no level (a local run, a plan of an earlier version: DEFAULT_MAX_PREEMPTIONS).
   */
  maxPreemptions: CountLimit | null;
  /** The retry waits of a task that sets none (spec, policy or default). */
  retryWaits: RetryWaits;
}

export interface LimitProblem {
  path: string;
  message: string;
}

function pick(
  specValue: string | undefined,
  specField: string,
  policyMs: number | undefined,
  defaultMs: number,
  what: string,
): EffectiveLimit {
  if (specValue !== undefined) return { ms: parseDuration(specValue), source: "spec", field: specField };
  if (policyMs !== undefined) {
    return { ms: policyMs, source: "policy", field: `the namespace policy's default ${what}` };
  }
  return { ms: defaultMs, source: "default", field: `the default ${what}` };
}

export function resolveLimits(spec: PlaybookSpec, defaults: LimitDefaults): ResolvedLimits {
  const policy = defaults.policy;
  const ceiling = pick(spec.ceiling, "spec.ceiling", policy?.ceilingMs, defaults.ceilingMs, "ceiling");
  const stall = pick(spec.stall, "spec.stall", policy?.stallMs, defaults.stallMs, "stall limit");
  const killGrace = pick(
    spec.killGrace,
    "spec.killGrace",
    policy?.killGraceMs,
    defaults.killGraceMs,
    "kill grace",
  );
  const startTimeout = pick(
    spec.startTimeout,
    "spec.startTimeout",
    policy?.startTimeoutMs,
    defaults.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS,
    "start timeout",
  );
  const finallyCeiling = pick(
    spec.finallyCeiling,
    "spec.finallyCeiling",
    policy?.finallyCeilingMs,
    defaults.finallyCeilingMs ?? DEFAULT_FINALLY_CEILING_MS,
    "finally ceiling",
  );
  const queueTimeout: EffectiveLimit | null =
    spec.queueTimeout !== undefined
      ? { ms: parseDuration(spec.queueTimeout), source: "spec", field: "spec.queueTimeout" }
      : asDuration(
          withinPolicyMaximum(
            policy?.queueTimeoutMs,
            defaults.queueTimeoutMs,
            policy?.maximumQueueTimeoutMs,
            "queue timeout",
          ),
        );
  const taskTimeout: EffectiveLimit | null =
    policy?.taskTimeoutMs === undefined
      ? null
      : { ms: policy.taskTimeoutMs, source: "policy", field: POLICY_TASK_TIMEOUT_FIELD };
  const maxPreemptions = resolveMaxPreemptions(spec, defaults);
  const retryDelay = pick(
    spec.retryDelay,
    "spec.retryDelay",
    policy?.retryDelayMs,
    defaults.retryDelayMs ?? DEFAULT_RETRY_DELAY_MS,
    "retry delay",
  );
  const retryMaxDelay = pick(
    spec.retryMaxDelay,
    "spec.retryMaxDelay",
    policy?.retryMaxDelayMs,
    defaults.retryMaxDelayMs ?? DEFAULT_RETRY_MAX_DELAY_MS,
    "retry max delay",
  );
  const retryBackoff: RetryWaits["backoff"] =
    spec.retryBackoff !== undefined
      ? { value: spec.retryBackoff, source: "spec", field: "spec.retryBackoff" }
      : policy?.retryBackoff !== undefined
        ? {
            value: policy.retryBackoff,
            source: "policy",
            field: "the namespace policy's default retry backoff",
          }
        : {
            value: defaults.retryBackoff ?? DEFAULT_RETRY_BACKOFF,
            source: "default",
            field: "the default retry backoff",
          };
  const taskLimits =
    (list: "tasks" | "finally") =>
    (task: PlaybookSpec["tasks"][number], index: number): TaskLimits => {
      const timeout: EffectiveLimit | null =
        task.timeout === undefined
          ? taskTimeout
          : { ms: parseDuration(task.timeout), source: "task", field: `spec.${list}[${index}].timeout` };
      const taskStall: EffectiveLimit =
        task.stall === undefined
          ? stall
          : { ms: parseDuration(task.stall), source: "task", field: `spec.${list}[${index}].stall` };
      const own = (value: string | undefined, name: string, fallback: EffectiveLimit): EffectiveLimit =>
        value === undefined
          ? fallback
          : { ms: parseDuration(value), source: "task", field: `spec.${list}[${index}].${name}` };
      const retryWaits: RetryWaits = {
        delay: own(task.retryDelay, "retryDelay", retryDelay),
        backoff:
          task.retryBackoff === undefined
            ? retryBackoff
            : { value: task.retryBackoff, source: "task", field: `spec.${list}[${index}].retryBackoff` },
        maxDelay: own(task.retryMaxDelay, "retryMaxDelay", retryMaxDelay),
      };
      return { name: task.name, timeout, stall: taskStall, retries: task.retries, retryWaits };
    };
  const tasks = spec.tasks.map(taskLimits("tasks"));
  const finallyTasks = (spec.finally ?? []).map(taskLimits("finally"));
  return {
    ceiling,
    stall,
    killGrace,
    startTimeout,
    tasks,
    finallyCeiling,
    finally: finallyTasks,
    queueTimeout,
    taskTimeout,
    maxPreemptions,
    retryWaits: { delay: retryDelay, backoff: retryBackoff, maxDelay: retryMaxDelay },
  };
}

/**
 * A limit the spec does not set, where the policy may give a default and a maximum: the policy's
 * default, else the controller's when within the policy's maximum, else that maximum; null when no
 * level sets one. `value` is in the limit's own unit (milliseconds, or a count).
 */
function withinPolicyMaximum(
  policyDefault: number | undefined,
  controllerDefault: number | undefined,
  policyMaximum: number | undefined,
  what: string,
): CountLimit | null {
  if (policyDefault !== undefined) {
    return { value: policyDefault, source: "policy", field: `the namespace policy's default ${what}` };
  }
  if (
    controllerDefault !== undefined &&
    (policyMaximum === undefined || controllerDefault <= policyMaximum)
  ) {
    return { value: controllerDefault, source: "default", field: `the default ${what}` };
  }
  if (policyMaximum !== undefined) {
    return { value: policyMaximum, source: "policy", field: `the namespace policy's maximum ${what}` };
  }
  return null;
}

const asDuration = (limit: CountLimit | null): EffectiveLimit | null =>
  limit && { ms: limit.value, source: limit.source, field: limit.field };

/** spec.maxPreemptions, else the policy's default, else the controller's within the policy's maximum. */
function resolveMaxPreemptions(spec: PlaybookSpec, defaults: LimitDefaults): CountLimit | null {
  if (spec.maxPreemptions !== undefined) {
    return { value: spec.maxPreemptions, source: "spec", field: "spec.maxPreemptions" };
  }
  const policy = defaults.policy;
  return withinPolicyMaximum(
    policy?.maxPreemptions,
    defaults.maxPreemptions,
    policy?.maximumMaxPreemptions,
    "maxPreemptions",
  );
}

/** The cap a run is held to: its resolved maxPreemptions, else (a plan of an earlier version) the default's. */
export function preemptionCap(limits: ResolvedLimits): CountLimit {
  return (
    limits.maxPreemptions ?? {
      value: DEFAULT_MAX_PREEMPTIONS,
      source: "default",
      field: "the default maxPreemptions",
    }
  );
}

/** A limit of no time: it would end its run or task at once. `value` as the spec says it. */
function noTime(value: string, what: string, ends: "run" | "task" | "finally tasks", hint = ""): string {
  return `${value} would end the ${ends} at once: ${what} must be longer than 0s${hint}`;
}

/** Checks that need the defaults or cross fields: what a schema alone cannot refuse. */
export function checkLimits(spec: PlaybookSpec, defaults: LimitDefaults): LimitProblem[] {
  const limits = resolveLimits(spec, defaults);
  const problems: LimitProblem[] = [];
  const ceilingText = formatDuration(limits.ceiling.ms);
  if (limits.ceiling.ms <= 0) {
    problems.push({
      path: limits.ceiling.source === "spec" ? "spec.ceiling" : "spec",
      message: noTime(
        `${ceilingText}${limits.ceiling.source === "spec" ? "" : ` (${limits.ceiling.field})`}`,
        "the ceiling",
        "run",
      ),
    });
  }
  if (limits.ceiling.ms > defaults.maxCeilingMs) {
    problems.push({
      path: limits.ceiling.source === "spec" ? "spec.ceiling" : "spec",
      message: `${ceilingText}${limits.ceiling.source === "spec" ? "" : ` (${limits.ceiling.field})`} is longer than the maximum ceiling ${formatDuration(defaults.maxCeilingMs)}`,
    });
  }
  const maxGrace = defaults.maxKillGrace;
  if (maxGrace !== undefined && limits.killGrace.ms > maxGrace.ms) {
    const value = formatDuration(limits.killGrace.ms);
    problems.push({
      path: limits.killGrace.source === "spec" ? "spec.killGrace" : "spec",
      message: `${limits.killGrace.source === "spec" ? value : `${value} (${limits.killGrace.field})`} is longer than the maximum killGrace ${formatDuration(maxGrace.ms)} (${maxGrace.where})`,
    });
  }
  if (spec.startTimeout !== undefined) {
    if (limits.startTimeout.ms <= 0) {
      problems.push({
        path: "spec.startTimeout",
        message: noTime(spec.startTimeout, "a start timeout", "run"),
      });
    } else if (limits.startTimeout.ms > limits.ceiling.ms) {
      const ceilingName = limits.ceiling.source === "spec" ? "spec.ceiling" : limits.ceiling.field;
      problems.push({
        path: "spec.startTimeout",
        message: `${spec.startTimeout} is longer than ${ceilingName} ${ceilingText}`,
      });
    }
  }
  if (spec.queueTimeout !== undefined && limits.queueTimeout !== null && limits.queueTimeout.ms <= 0) {
    problems.push({
      path: "spec.queueTimeout",
      message: noTime(spec.queueTimeout, "a queue timeout", "run"),
    });
  }
  problems.push(...checkFinallyLimits(spec, limits, defaults));
  const seen = new Map<string, string>();
  (spec.finally ?? []).forEach((task, index) => {
    const first = seen.get(task.name) ?? spec.tasks.findIndex((main) => main.name === task.name);
    if (typeof first === "string" || first >= 0) {
      problems.push({
        path: `spec.finally[${index}].name`,
        message: `${JSON.stringify(task.name)} is already used by ${typeof first === "string" ? first : `spec.tasks[${first}]`}; task names must be unique across spec.tasks and spec.finally`,
      });
    } else seen.set(task.name, `spec.finally[${index}]`);
  });
  seen.clear();
  spec.tasks.forEach((task, index) => {
    const first = seen.get(task.name);
    if (first !== undefined) {
      problems.push({
        path: `spec.tasks[${index}].name`,
        message: `${JSON.stringify(task.name)} is already used by ${first}; task names must be unique`,
      });
    } else {
      seen.set(task.name, `spec.tasks[${index}]`);
    }
    // Only the task's own: the policy's maximum needs no room under the ceiling, which bounds it anyway.
    const timeout = task.timeout === undefined ? null : limits.tasks[index]?.timeout;
    if (timeout && timeout.ms > limits.ceiling.ms) {
      const ceilingName = limits.ceiling.source === "spec" ? "spec.ceiling" : limits.ceiling.field;
      problems.push({
        path: `spec.tasks[${index}].timeout`,
        message: `${task.timeout} is longer than ${ceilingName} ${ceilingText}`,
      });
    }
    if (timeout && timeout.ms <= 0) {
      problems.push({
        path: `spec.tasks[${index}].timeout`,
        message: noTime(
          String(task.timeout),
          "a timeout",
          "task",
          "; leave it out for no timeout of its own",
        ),
      });
    }
  });
  return problems;
}

/**
 * finallyCeiling within its maximum and above 0, and each finally task's timeout within it: the
 * finally tasks' time is bounded as the main tasks' is, by a ceiling of their own.
 */
function checkFinallyLimits(
  spec: PlaybookSpec,
  limits: ResolvedLimits,
  defaults: LimitDefaults,
): LimitProblem[] {
  const problems: LimitProblem[] = [];
  const ceiling = limits.finallyCeiling;
  const fromSpec = ceiling.source === "spec";
  const shown = fromSpec ? formatDuration(ceiling.ms) : `${formatDuration(ceiling.ms)} (${ceiling.field})`;
  const path = fromSpec ? "spec.finallyCeiling" : "spec";
  // A ceiling nobody uses is not refused for its value unless the spec set it.
  if (!fromSpec && !spec.finally?.length) return problems;
  if (ceiling.ms <= 0)
    problems.push({ path, message: noTime(shown, "the finally ceiling", "finally tasks") });
  const max = defaults.maxFinallyCeiling;
  if (max !== undefined && ceiling.ms > max.ms) {
    problems.push({
      path,
      message: `${shown} is longer than the maximum finallyCeiling ${formatDuration(max.ms)} (${max.where})`,
    });
  }
  const ceilingName = fromSpec ? "spec.finallyCeiling" : ceiling.field;
  (spec.finally ?? []).forEach((task, index) => {
    const timeout = task.timeout === undefined ? null : limits.finally[index]?.timeout;
    if (!timeout) return;
    if (timeout.ms <= 0) {
      problems.push({
        path: `spec.finally[${index}].timeout`,
        message: noTime(
          String(task.timeout),
          "a timeout",
          "task",
          "; leave it out for no timeout of its own",
        ),
      });
    } else if (timeout.ms > ceiling.ms) {
      problems.push({
        path: `spec.finally[${index}].timeout`,
        message: `${task.timeout} is longer than ${ceilingName} ${formatDuration(ceiling.ms)}`,
      });
    }
  });
  return problems;
}

/**
 * The status.limits shape of docs/design.md; finallyCeiling only for a run with finally tasks,
 * taskTimeout only under a policy's maximums.taskTimeout, the retry waits only where the policy
 * gave them (what a lost pod's plan is rebuilt from).
 */
export function describeRunLimits(limits: ResolvedLimits) {
  const show = (limit: EffectiveLimit) => ({ value: formatDuration(limit.ms), source: limit.source });
  const waits = limits.retryWaits;
  return {
    ceiling: show(limits.ceiling),
    stall: show(limits.stall),
    killGrace: show(limits.killGrace),
    startTimeout: show(limits.startTimeout),
    ...(limits.finally.length > 0 ? { finallyCeiling: show(limits.finallyCeiling) } : {}),
    ...(limits.queueTimeout ? { queueTimeout: show(limits.queueTimeout) } : {}),
    ...(limits.taskTimeout ? { taskTimeout: show(limits.taskTimeout) } : {}),
    ...(limits.maxPreemptions
      ? { maxPreemptions: { value: limits.maxPreemptions.value, source: limits.maxPreemptions.source } }
      : {}),
    ...(waits.delay.source === "policy" ? { retryDelay: show(waits.delay) } : {}),
    ...(waits.backoff.source === "policy"
      ? { retryBackoff: { value: String(waits.backoff.value), source: waits.backoff.source } }
      : {}),
    ...(waits.maxDelay.source === "policy" ? { retryMaxDelay: show(waits.maxDelay) } : {}),
  };
}

/**
 * What the finally tasks may add to a run's time after its main tasks ended: their ceiling and the
 * grace of the stop that ends one at it. 0 without finally tasks.
 */
export function finallyWindowMs(limits: ResolvedLimits): number {
  return limits.finally.length === 0 ? 0 : limits.finallyCeiling.ms + limits.killGrace.ms;
}
