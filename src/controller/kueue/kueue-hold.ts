// A run's pod while Kueue holds it (the admission scheduling gate on it): the run is Queued with
// Kueue's own words, read from the Workload Kueue made for the pod, and the queue time so far;
// when queueTimeout passes it ends QueueTimeout and the pod is deleted, so its Workload leaves the
// queue. Pure: the Workloads come in with the decision's input (docs/kueue.md).
import { setCondition } from "../../api/conditions.js";
import { formatDuration, parseDuration } from "../../api/duration.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import { type Decision, progress, type RunState, settle } from "../decision.js";
import type { PodView } from "../objects.js";
import { QUEUED_REASON } from "../policy/policy-queue.js";
import { isFinished, SUCCEEDED, settledStatus } from "../status.js";
import {
  KUEUE_ADMISSION_GATE,
  KUEUE_QUEUE_LABEL,
  WORKLOAD_ADMITTED,
  WORKLOAD_QUOTA_RESERVED,
} from "./kueue-names.js";
import type { WorkloadView } from "./workload-view.js";

/** How often a queued run looks again when nothing it watches changes (the Workload's words). */
export const KUEUE_RECHECK_MS = 30_000;

/** Whether Kueue holds the pod: its admission gate is on it. */
export function heldByKueue(pod: PodView): boolean {
  return (pod.spec?.schedulingGates ?? []).some((gate) => gate.name === KUEUE_ADMISSION_GATE);
}

/** The Workload Kueue made for `pod` (it owns it), if the controller has seen it. */
export function workloadOf(
  pod: PodView,
  workloads: readonly WorkloadView[] | undefined,
): WorkloadView | undefined {
  const uid = pod.metadata.uid;
  if (!uid) return undefined;
  return workloads?.find((w) => w.metadata.ownerReferences?.some((o) => o.uid === uid));
}

/**
 * Kueue's own words on why the Workload waits: its QuotaReserved condition when it has no quota
 * yet (e.g. "couldn't assign flavors to pod set main: insufficient unused quota for cpu in
 * flavor default, 1 more needed"), else its Admitted one (admission checks pending). In the
 * moments between a reservation and the gate's removal, the reservation or the admission itself
 * (`admitted`: the Workload is admitted and the gate is about to go).
 */
export function kueueWords(
  workload: WorkloadView | undefined,
): { reason: string; message: string; admitted?: true } | undefined {
  const conditions = workload?.status?.conditions ?? [];
  const quota = conditions.find((c) => c.type === WORKLOAD_QUOTA_RESERVED);
  const admitted = conditions.find((c) => c.type === WORKLOAD_ADMITTED);
  const waiting =
    quota?.status !== "True" ? quota : admitted?.status !== "True" ? (admitted ?? quota) : admitted;
  if (!waiting?.reason && !waiting?.message) return undefined;
  return {
    reason: waiting.reason ?? "Pending",
    message: waiting.message ?? "",
    ...(waiting === admitted && admitted.status === "True" ? { admitted: true as const } : {}),
  };
}

/** When Kueue admitted the pod: its Workload's Admitted condition, else when its gate went (PodScheduled changed). */
export function admittedAt(pod: PodView, workload: WorkloadView | undefined): number | undefined {
  const admitted = workload?.status?.conditions?.find(
    (c) => c.type === WORKLOAD_ADMITTED && c.status === "True",
  );
  const fromWorkload = Date.parse(admitted?.lastTransitionTime ?? "");
  if (!Number.isNaN(fromWorkload)) return fromWorkload;
  if (pod.metadata.labels?.[KUEUE_QUEUE_LABEL] === undefined) return undefined;
  const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled");
  if (!scheduled || scheduled.reason === "SchedulingGated") return undefined;
  const at = Date.parse(scheduled.lastTransitionTime ?? "");
  return Number.isNaN(at) ? undefined : at;
}

/** "for 3m20s" since the pod's creation, whole seconds. */
function queuedFor(pod: PodView, now: number): string {
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  const seconds = Number.isNaN(created) ? 0 : Math.max(0, Math.floor((now - created) / 1000));
  return formatDuration(seconds * 1000);
}

/** What the Queued condition says of a pod Kueue holds, in Kueue's words where it has them. */
export function queuedMessage(
  pod: PodView,
  workload: WorkloadView | undefined,
  attempts: number,
  now: number,
): string {
  const name = pod.metadata.name;
  const queue = pod.metadata.labels?.[KUEUE_QUEUE_LABEL];
  const since = `queued ${queuedFor(pod, now)} (since ${pod.metadata.creationTimestamp ?? "its creation"})`;
  if (queue === undefined) {
    return `pod ${name} (attempt ${attempts}) is held by Kueue's admission gate though the run names no queue: Kueue manages this namespace's pods without a queue name (manageJobsWithoutQueueName); set spec.queueName (or the policy's defaults.queueName) to choose its LocalQueue; ${since}`;
  }
  const words = kueueWords(workload);
  const said = words
    ? `${words.reason}: ${words.message}`
    : workload
      ? `Workload ${workload.metadata.name} has no word from Kueue yet`
      : "no Workload seen for it yet";
  if (words?.admitted)
    return `pod ${name} (attempt ${attempts}) is admitted by Kueue in LocalQueue ${queue} (${said}); its admission gate is being removed; ${since}`;
  return `pod ${name} (attempt ${attempts}) waits for Kueue's admission in LocalQueue ${queue}: ${said}; ${since}`;
}

/** When the pod's queue window closes; undefined without a queue timeout or a creation time. */
export function queueDeadline(state: RunState, pod: PodView): number | undefined {
  const limit = state.base.limits.queueTimeout;
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  if (!limit || Number.isNaN(created)) return undefined;
  return created + limit.ms;
}

/**
 * A pod Kueue still holds: Queued with Kueue's words, neither its start timeout nor the ceiling
 * counting (the runner has not started); QueueTimeout once its queue window closes.
 */
export function decideHeldPod(state: RunState, pod: PodView): Decision {
  const { base, attempts } = state;
  const now = state.input.now.getTime();
  const workload = workloadOf(pod, state.input.workloads);
  const deadline = queueDeadline(state, pod);
  if (deadline !== undefined && deadline <= now) return decideQueueTimeout(state, pod, workload);
  const message = queuedMessage(pod, workload, attempts, now);
  const conditions = setCondition(
    base.previous.conditions ?? [],
    // The time queued so far changes every second: the condition is rewritten when Kueue's words do.
    { type: SUCCEEDED, status: "Unknown", reason: QUEUED_REASON, message },
    base.now,
    base.generation,
  );
  const previousMessage = base.previous.conditions?.find((c) => c.type === SUCCEEDED)?.message ?? "";
  const sameWords = stripTime(previousMessage) === stripTime(message);
  const next: PlaybookStatus = {
    ...base.previous,
    phase: "Pending",
    startTime: state.startTime,
    podName: pod.metadata.name,
    podAttempts: attempts,
    queuedSince: pod.metadata.creationTimestamp ?? base.now.toISOString(),
    conditions: sameWords ? (base.previous.conditions ?? conditions) : conditions,
  };
  if (base.generation !== undefined) next.observedGeneration = base.generation;
  const recheck = Math.min(KUEUE_RECHECK_MS, deadline === undefined ? KUEUE_RECHECK_MS : deadline - now);
  return progress(base, next, { requeueAfterMs: Math.max(1, recheck) });
}

/** The message without its clock ("queued 3m20s (since ...)"), so that waiting alone writes nothing. */
function stripTime(message: string): string {
  return message.replace(/; queued [^;]*$/, "");
}

/** The queue window closed: QueueTimeout naming the queue and Kueue's last words; the pod goes. */
function decideQueueTimeout(state: RunState, pod: PodView, workload: WorkloadView | undefined): Decision {
  const { base } = state;
  const limit = base.limits.queueTimeout;
  const queue = pod.metadata.labels?.[KUEUE_QUEUE_LABEL] ?? "(none: Kueue took the pod without a queue name)";
  const words = kueueWords(workload);
  const window = limit ? `${formatDuration(limit.ms)} queue timeout (${limit.field})` : "queue timeout";
  const message = `pod ${pod.metadata.name} (attempt ${state.attempts}) was not admitted by Kueue within its ${window} in LocalQueue ${queue}; Kueue's last word: ${words ? `${words.reason}: ${words.message}` : "none"}`;
  const { queuedSince: _done, ...rest } = settledStatus(base, { reason: "QueueTimeout", message });
  return settle(base, { ...rest, podName: pod.metadata.name, podAttempts: state.attempts }, "QueueTimeout", {
    actions: pod.metadata.deletionTimestamp
      ? []
      : [{ type: "deletePod", name: pod.metadata.name, why: "finished" }],
  });
}

/**
 * Kueue admitted the run's pod since the status last showed it (Queued with this pod, or a pod the
 * status does not name yet): its LocalQueue and how long it waited, from its creation to the
 * admission, for playbook_queue_wait_seconds. Counted with the status write that follows it.
 */
export function admissionSeen(
  previous: PlaybookStatus,
  pod: PodView,
  admitted: number | undefined,
): { queue: string; waitSeconds: number } | undefined {
  const queue = pod.metadata.labels?.[KUEUE_QUEUE_LABEL];
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  if (queue === undefined || admitted === undefined || Number.isNaN(created)) return undefined;
  const shown = previous.conditions?.find((c) => c.type === SUCCEEDED);
  const wasQueued = previous.podName === pod.metadata.name && shown?.reason === QUEUED_REASON;
  if (!wasQueued && previous.podName === pod.metadata.name) return undefined;
  return { queue, waitSeconds: Math.max(0, admitted - created) / 1000 };
}

/**
 * How long the pod waited in Kueue's queue (creation to admission), in ms; 0 when it did not go
 * through Kueue or its admission is not known. The run's ceiling does not count that time.
 */
export function queuedMs(pod: PodView, admitted: number | undefined): number {
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  if (admitted === undefined || Number.isNaN(created)) return 0;
  return Math.max(0, admitted - created);
}

/**
 * For a run whose pod Kueue holds (status.queuedSince) under a queueTimeout: its queue and the
 * share of that budget used at `now` (playbook_queue_budget_used_ratio); undefined otherwise.
 */
export function queueBudgetUsed(
  status: PlaybookStatus | undefined,
  now: Date,
): { queue: string; ratio: number } | undefined {
  const since = Date.parse(status?.queuedSince ?? "");
  const budget = status?.limits?.queueTimeout?.value;
  if (!status || isFinished(status) || Number.isNaN(since) || !budget) return undefined;
  const budgetMs = parseDuration(budget);
  if (!(budgetMs > 0)) return undefined;
  return { queue: status.queue?.name ?? "", ratio: Math.max(0, now.getTime() - since) / budgetMs };
}
