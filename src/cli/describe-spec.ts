// What `playbook validate` prints of a Playbook's spec (and of a CronPlaybook's template): each
// effective limit and the maximums, each with the level it came from, and each task.
import { formatDuration, parseDuration } from "../api/duration.js";
import { type LimitDefaults, preemptionCap, resolveLimits, type TaskLimits } from "../api/limits.js";
import { describeLongestRun } from "../api/longest-run.js";
import { DEFAULT_BACKOFF_LIMIT, type Playbook } from "../api/playbook.js";
import { describePodBound } from "../api/pod-bound.js";
import type { PolicyDefaults, PolicyMaximums } from "../api/policy.js";
import { describeShell, effectiveShell } from "../api/shell.js";
import { describeTaskLimits, showLimit, showStartTimeout } from "./progress.js";

/** "retries 0", or with its waits: "retries 2 (waiting 1s (default), ×2 (default), at most 1m (default))". */
function describeRetries(task: TaskLimits): string {
  const waits = task.retryWaits;
  if (task.retries === 0 || !waits) return `retries ${task.retries}`;
  return `retries ${task.retries} (waiting ${showLimit(waits.delay)}, ×${waits.backoff.value} (${waits.backoff.source}), at most ${showLimit(waits.maxDelay)})`;
}

/** validate's first line for a manifest it found valid: "pb.yaml: Playbook nightly is valid". */
export function validLine(file: string, kind: string, name: string): string {
  return `${file}: ${kind} ${name} is valid`;
}

/**
 * "ceiling 24h (default), killGrace 5m (policy)": the longest each may be, with the level that
 * sets it (the policy's when it is the lower, else this command's own).
 */
function describeMaximums(defaults: LimitDefaults, maximums: PolicyMaximums | undefined): string {
  const lower = (own: number | undefined, policy: string | undefined) => {
    const policyMs = policy === undefined ? undefined : parseDuration(policy);
    if (policyMs !== undefined && (own === undefined || policyMs <= own)) {
      return `${formatDuration(policyMs)} (policy)`;
    }
    return own === undefined ? "none" : `${formatDuration(own)} (default)`;
  };
  // A policy that bounds the ceiling and not the finally window holds that window within its ceiling.
  const finallyCeiling =
    maximums?.ceiling !== undefined && maximums.finallyCeiling === undefined
      ? "within the ceiling's maximum (policy)"
      : lower(defaults.maxFinallyCeiling?.ms, maximums?.finallyCeiling);
  // The Kueue bounds only where a policy sets them: the controller sets none of its own.
  const queueBounds = [
    ...(maximums?.queueTimeout !== undefined ? [`queueTimeout ${maximums.queueTimeout} (policy)`] : []),
    ...(maximums?.maxPreemptions !== undefined ? [`maxPreemptions ${maximums.maxPreemptions} (policy)`] : []),
  ];
  return [
    `ceiling ${lower(defaults.maxCeilingMs, maximums?.ceiling)}`,
    `killGrace ${lower(defaults.maxKillGrace?.ms, maximums?.killGrace)}`,
    `finallyCeiling ${finallyCeiling}`,
    ...queueBounds,
  ].join(", ");
}

/** What validate prints of a Playbook's spec: each effective limit, the maximums, each task. */
export function describeSpec(
  spec: Playbook["spec"],
  defaults: LimitDefaults,
  defaultImage: string | undefined,
  maximums: PolicyMaximums | undefined,
  policyDefaults?: PolicyDefaults,
): string[] {
  const limits = resolveLimits(spec, defaults);
  // Each task's image: its own, else spec.image, else the policy's default, else the runner's.
  const imageOf = (own: string | undefined) =>
    own ??
    spec.image ??
    (defaultImage !== undefined ? `${defaultImage} (the policy's default)` : "the runner image");
  // Each task's shell, as its run is executed, and the level it came from.
  const shellOf = (list: "tasks" | "finally", index: number) => {
    const shell = effectiveShell(
      (list === "tasks" ? spec.tasks : (spec.finally ?? []))[index] ?? {},
      index,
      spec.shell,
      list,
    );
    const source = shell === undefined ? "default" : shell.field === "spec.shell" ? "spec" : "task";
    return `${describeShell(shell)} (${source})`;
  };
  return [
    `  ceiling ${showLimit(limits.ceiling)}, stall ${showLimit(limits.stall)}, killGrace ${showLimit(limits.killGrace)}, ${showStartTimeout(limits.startTimeout)}${limits.finally.length > 0 ? `, finallyCeiling ${showLimit(limits.finallyCeiling)}` : ""}`,
    `  at most: ${describeMaximums(defaults, maximums)}`,
    `  ${describePodBound(limits, defaults, maximums)}`,
    ...describeQueue(spec, limits, policyDefaults),
    ...limits.tasks.map(
      (task, index) =>
        `  task ${task.name}: ${describeTaskLimits(task, { ceiling: limits.ceiling })}, ${describeRetries(task)}, shell ${shellOf("tasks", index)}, image ${imageOf(spec.tasks[index]?.image)}`,
    ),
    ...limits.finally.map(
      (task, index) =>
        `  finally task ${task.name}: ${describeTaskLimits(task, { finallyCeiling: limits.finallyCeiling })}, ${describeRetries(task)}, shell ${shellOf("finally", index)}, image ${imageOf(spec.finally?.[index]?.image)}`,
    ),
  ];
}

/**
 * The run's queue and what bounds its time there, then the longest the whole run can take
 * (longest-run.ts). The controller's own --default-queue-name is not known here: a spec and policy
 * that name no queue are shown without one.
 */
function describeQueue(
  spec: Playbook["spec"],
  limits: ReturnType<typeof resolveLimits>,
  policy: PolicyDefaults | undefined,
): string[] {
  const queue =
    spec.queueName !== undefined
      ? `${spec.queueName} (spec)`
      : policy?.queueName !== undefined
        ? `${policy.queueName} (policy)`
        : undefined;
  const backoffLimit =
    spec.backoffLimit !== undefined
      ? { value: spec.backoffLimit, source: "spec" }
      : policy?.backoffLimit !== undefined
        ? { value: policy.backoffLimit, source: "policy" }
        : { value: DEFAULT_BACKOFF_LIMIT, source: "default" };
  const onPreemption = spec.onPreemption ?? "Requeue";
  const maxPreemptions = preemptionCap(limits);
  const longest = describeLongestRun(limits, {
    queued: queue !== undefined,
    backoffLimit,
    onPreemption,
    maxPreemptions,
  });
  return [
    ...(queue === undefined
      ? []
      : [
          `  queue ${queue}: queueTimeout ${limits.queueTimeout ? showLimit(limits.queueTimeout) : "none"} per pod, onPreemption ${onPreemption}${onPreemption === "Requeue" ? `, maxPreemptions ${maxPreemptions.value} (${maxPreemptions.source})` : ""}`,
        ]),
    `  longest run: ${longest}`,
  ];
}
