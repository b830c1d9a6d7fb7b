// The vocabulary of docs/design.md: run phases, task phases, condition reasons and which are limits.

export const RUN_PHASES = ["Pending", "Running", "Succeeded", "Failed", "Cancelled"] as const;
export type RunPhase = (typeof RUN_PHASES)[number];

export const TASK_PHASES = [
  "Pending",
  "Running",
  "Succeeded",
  "Failed",
  "TimedOut",
  "Cancelled",
  "Skipped",
] as const;
export type TaskPhase = (typeof TASK_PHASES)[number];

/**
 * Limits the runner fires itself; a task that ends on one of these is TimedOut. FinallyCeiling
 * stops only a `finally` task: it never ends the run (the run's reason stays its main tasks').
 */
export const TASK_LIMITS = ["TaskTimeout", "StallLimit", "RunCeiling", "FinallyCeiling"] as const;
export type TaskLimit = (typeof TASK_LIMITS)[number];
/** The limits that may end a run: a main task's. */
export const RUN_TASK_LIMITS = [
  "TaskTimeout",
  "StallLimit",
  "RunCeiling",
] as const satisfies readonly TaskLimit[];

/** Every reason that may appear on the LimitExceeded condition. */
export const LIMIT_REASONS = [
  ...RUN_TASK_LIMITS,
  "PodDeadlineExceeded",
  "StartTimeout",
  "QueueTimeout",
] as const;
export type LimitReason = (typeof LIMIT_REASONS)[number];

export const TERMINAL_REASONS = [
  "Succeeded",
  "TaskFailed",
  "TaskTimeout",
  "StallLimit",
  "RunCeiling",
  "PodDeadlineExceeded",
  "StartTimeout",
  "QueueTimeout",
  "Cancelled",
  "PodLost",
  "Preempted",
  "RunnerLost",
  "InvalidSpec",
] as const;
export type TerminalReason = (typeof TERMINAL_REASONS)[number];

/** How a killed group ended: within killGrace after the cancel file and SIGTERM, or by SIGKILL. */
export const ENDINGS = ["Exited", "Killed"] as const;
export type Ending = (typeof ENDINGS)[number];

export const LIMIT_SOURCES = ["task", "spec", "policy", "default"] as const;
export type LimitSource = (typeof LIMIT_SOURCES)[number];

export function isLimitReason(reason: string): reason is LimitReason {
  return (LIMIT_REASONS as readonly string[]).includes(reason);
}

/** One line per reason, used by `--help` and the README so both say the same. */
export const REASON_MEANINGS: Record<TerminalReason, string> = {
  Succeeded: "every task succeeded",
  TaskFailed: "a task exited non-zero after its retries",
  TaskTimeout: "a task passed its own timeout",
  StallLimit: "a task printed nothing for its stall window",
  RunCeiling: "the run's ceiling passed, enforced by the runner",
  PodDeadlineExceeded: "the kubelet's activeDeadlineSeconds backstop fired; the runner could not report",
  StartTimeout:
    "the pod did not start within startTimeout (unschedulable, image not pulled); the message says why",
  QueueTimeout:
    "Kueue did not admit the pod within queueTimeout; the message names the queue and Kueue's last reason",
  Cancelled: "spec.cancel was set, or the runner was interrupted",
  Preempted:
    "Kueue evicted the pod (preemption, eviction) and spec.onPreemption is Fail, or maxPreemptions is spent; its reason and the count in the message",
  PodLost: "the pod was lost (evicted, deleted, node gone) more than backoffLimit times",
  RunnerLost: "the pod ended without a valid runner report",
  InvalidSpec: "the spec failed validation the API server could not do",
};
