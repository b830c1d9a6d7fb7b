// What a pod says about its run: whether it ended, the runner's report, what the kubelet said,
// and whether the infrastructure took it away. Pure readers of the pod as the API server has it.
import { z } from "zod";
import { PLAN_GENERATION_ANNOTATION } from "../api/plan.js";
import { decodeReport, InvalidReportError, type RunnerReport } from "../api/report.js";
import { type ContainerTerminated, type PodView, podAttemptOf, RUNNER_CONTAINER } from "./objects.js";

const FINISHED_POD_PHASES = new Set(["Succeeded", "Failed"]);

/** Ended: by its phase, or (restartPolicy Never) by its runner container's terminated state. */
export function isPodFinished(pod: PodView): boolean {
  if (FINISHED_POD_PHASES.has(pod.status?.phase ?? "")) return true;
  const statuses = pod.status?.containerStatuses ?? [];
  const runner = statuses.find((s) => s.name === RUNNER_CONTAINER);
  return runner?.state?.terminated !== undefined;
}

function runnerTerminated(pod: PodView): ContainerTerminated | undefined {
  const statuses = pod.status?.containerStatuses ?? [];
  const runner = statuses.find((s) => s.name === RUNNER_CONTAINER) ?? statuses[0];
  return runner?.state?.terminated ?? runner?.lastState?.terminated;
}

export type ReadReport = { ok: true; report: RunnerReport } | { ok: false; problem: string };

export function readReport(pod: PodView, taskCount: number): ReadReport {
  const terminated = runnerTerminated(pod);
  if (!terminated) return { ok: false, problem: "the runner container has no terminated state" };
  const message = terminated.message?.trim() ?? "";
  if (message === "") return { ok: false, problem: "the termination message is empty" };
  try {
    return { ok: true, report: decodeReport(message, taskCount) };
  } catch (error) {
    if (error instanceof InvalidReportError) return { ok: false, problem: `the report is ${error.message}` };
    throw error;
  }
}

/** What the kubelet said about a pod that ended: "OOMKilled, exit code 137". */
export function describeKubeletVerdict(pod: PodView): string {
  const parts: string[] = [];
  if (pod.status?.reason)
    parts.push(`pod ${pod.status.reason}${pod.status.message ? `: ${pod.status.message}` : ""}`);
  const terminated = runnerTerminated(pod);
  if (terminated) {
    if (terminated.reason) parts.push(terminated.reason);
    parts.push(`exit code ${terminated.exitCode}`);
    if (terminated.signal) parts.push(`signal ${terminated.signal}`);
  } else {
    parts.push(`pod phase ${pod.status?.phase ?? "unknown"}`);
  }
  return parts.join(", ");
}

/**
 * What to do about a runner the kernel ended for its container's memory. Tasks share the runner
 * container's memory limit; they start at oom_score_adj 1000, but the kubelet gives a Burstable
 * container a value near 1000 too, so only in a Guaranteed pod does the kernel take a task first.
 * Empty unless the runner was OOMKilled outside a Guaranteed pod.
 */
export function runnerOomHint(pod: PodView): string {
  if (runnerTerminated(pod)?.reason !== "OOMKilled" || pod.status?.qosClass === "Guaranteed") return "";
  return `; the kernel ended the runner for the pod's memory limit, which its tasks share: give the pod both cpu and memory limits (requests equal, a Guaranteed pod) so that it ends the task instead and the run reports it`;
}

/** Waiting reasons of a pod on its way up: they say nothing the user needs to act on. */
const STARTING_REASONS = new Set(["ContainerCreating", "PodInitializing"]);

const said = (reason: string | null | undefined, message: string | null | undefined) =>
  reason ? `${reason}${message ? `: ${message.trim()}` : ""}` : undefined;

/**
 * Why a pod that has not started is held, when something holds it (not merely on its way up):
 * the kubelet's waiting reason of an init container, the runner or a task container
 * (ErrImagePull, ImagePullBackOff, CreateContainerConfigError), else the scheduler's
 * (Unschedulable, with its message). A container other than the runner is named.
 */
export function describeHold(pod: PodView): string | undefined {
  const statuses = [
    ...(pod.status?.initContainerStatuses ?? []),
    ...[...(pod.status?.containerStatuses ?? [])].sort(
      (a, b) => Number(b.name === RUNNER_CONTAINER) - Number(a.name === RUNNER_CONTAINER),
    ),
  ];
  for (const status of statuses) {
    const waiting = status.state?.waiting;
    if (!waiting?.reason || STARTING_REASONS.has(waiting.reason)) continue;
    const why = said(waiting.reason, waiting.message);
    return status.name === RUNNER_CONTAINER ? why : `container ${status.name}: ${why}`;
  }
  const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled" && c.status === "False");
  return said(scheduled?.reason, scheduled?.message);
}

/**
 * What holds a pod that has not started, in the words of whoever holds it (describeHold), else
 * what it is doing (ContainerCreating), else the pod's own reason.
 */
export function describeWaiting(pod: PodView): string | undefined {
  const statuses = pod.status?.containerStatuses ?? [];
  const waiting = (statuses.find((s) => s.name === RUNNER_CONTAINER) ?? statuses[0])?.state?.waiting;
  const conditions = pod.status?.conditions ?? [];
  return (
    describeHold(pod) ??
    said(waiting?.reason, waiting?.message) ??
    said(pod.status?.reason, pod.status?.message) ??
    said(conditions.find((c) => c.status === "False")?.reason, undefined)
  );
}

/** The pod of the latest attempt, if any. */
export function currentPod(pods: readonly PodView[]): PodView | undefined {
  let best: PodView | undefined;
  for (const pod of pods) {
    if (!best || podAttemptOf(pod) > podAttemptOf(best)) best = pod;
  }
  return best;
}

/** How long a pod that ended without a report stays unjudged, so a disruption can still show. */
export const REPORTLESS_SETTLE_MS = 3000;

export function settleWaitMs(pod: PodView, now: Date): number {
  const finishedAt = Date.parse(runnerTerminated(pod)?.finishedAt ?? "");
  if (Number.isNaN(finishedAt)) return 0;
  // finishedAt has whole seconds: count from the end of that second.
  return Math.max(0, finishedAt + 1000 + REPORTLESS_SETTLE_MS - now.getTime());
}

/**
 * Why the infrastructure took the pod away, if it did: an eviction, or a DisruptionTarget
 * condition (preemption, taint manager, PodGC for a node that is gone, kubelet shutdown).
 */
export function disruptionOf(pod: PodView): string | undefined {
  if (pod.status?.reason === "Evicted") {
    return `was evicted${pod.status.message ? `: ${pod.status.message}` : ""}`;
  }
  const target = pod.status?.conditions?.find((c) => c.type === "DisruptionTarget" && c.status === "True");
  if (target)
    return `was disrupted (${target.reason ?? "DisruptionTarget"}${target.message ? `: ${target.message}` : ""})`;
  return undefined;
}

/** Whether the runner container has ended (its termination message, if any, can be read). */
export function runnerEnded(pod: PodView): boolean {
  return runnerTerminated(pod) !== undefined;
}

const PodTimingSchema = z.looseObject({
  spec: z.looseObject({ activeDeadlineSeconds: z.number().int().optional() }).optional(),
  status: z.looseObject({ startTime: z.union([z.string(), z.date()]).nullable().optional() }).optional(),
});

export function podActiveDeadlineSeconds(pod: PodView): number | undefined {
  return PodTimingSchema.safeParse(pod).data?.spec?.activeDeadlineSeconds;
}

/**
 * When the kubelet started the pod (activeDeadlineSeconds counts from there) and its deadline,
 * if it has started.
 */
export function podDeadline(pod: PodView): { startedAt: number; seconds: number; at: number } | undefined {
  const parsed = PodTimingSchema.safeParse(pod);
  if (!parsed.success) return undefined;
  const started = parsed.data.status?.startTime;
  const seconds = parsed.data.spec?.activeDeadlineSeconds;
  if (!started || seconds === undefined) return undefined;
  const startedAt = started instanceof Date ? started.getTime() : Date.parse(started);
  if (Number.isNaN(startedAt)) return undefined;
  return { startedAt, seconds, at: startedAt + seconds * 1000 };
}

/** The Playbook's generation the pod's plan was made from, if it says. */
export function podPlanGeneration(pod: PodView): number | undefined {
  const value = Number(pod.metadata.annotations?.[PLAN_GENERATION_ANNOTATION]);
  return Number.isInteger(value) && value > 0 ? value : undefined;
}
