// What a pod says about its run: whether it ended, the runner's report, what the kubelet said,
// and whether the infrastructure took it away. Pure readers of the pod as the API server has it.
import { z } from "zod";
import { PLAN_GENERATION_ANNOTATION } from "../../api/plan.js";
import { decodeReport, InvalidReportError, type RunnerReport } from "../../api/report.js";
import { type ContainerTerminated, type PodView, podAttemptOf, RUNNER_CONTAINER } from "../objects.js";
import { describeChange, judgePodChanges, type PodChange } from "./changed-pod.js";
import { RUNNER_RESOURCES } from "./pod-builder.js";
import { type DistrustWhy, judgeEnding, judgeReport, killedBy } from "./report-trust.js";

const FINISHED_POD_PHASES = new Set(["Succeeded", "Failed"]);

/** Ended: by its phase, or (restartPolicy Never) by its runner container's terminated state. */
/**
 * Whether the kubelet is done with the pod (phase Succeeded or Failed): until then its containers
 * may still run (task containers after the runner's end, or stopping) and the scheduler counts
 * its requests on the node.
 */
export function isPodPhaseTerminal(pod: PodView): boolean {
  return FINISHED_POD_PHASES.has(pod.status?.phase ?? "");
}

export function isPodFinished(pod: PodView): boolean {
  if (FINISHED_POD_PHASES.has(pod.status?.phase ?? "")) return true;
  const statuses = pod.status?.containerStatuses ?? [];
  const runner = statuses.find((s) => s.name === RUNNER_CONTAINER);
  return runner?.state?.terminated !== undefined;
}

/** The runner container's end; no other container's (a task's could say anything). */
function runnerTerminated(pod: PodView): ContainerTerminated | undefined {
  const statuses = pod.status?.containerStatuses ?? [];
  const runner = statuses.find((s) => s.name === RUNNER_CONTAINER);
  return runner?.state?.terminated ?? runner?.lastState?.terminated;
}

export type ReadReport =
  | {
      ok: true;
      report: RunnerReport;
      /** Changes of the pod that could reach its tasks, not its runner: the outcome is unverified. */
      unverified?: PodChange[];
    }
  | {
      ok: false;
      problem: string;
      /** Set when a report (or a message that may pass for one) was not trusted, and why. */
      distrust?: DistrustWhy;
    };

/** The plan's tasks as a report is read against them: names and images, main then finally. */
export interface PlannedTasks {
  names: readonly string[];
  images?: readonly string[];
  /** spec.finally's tasks, in order (none when absent). */
  finallyNames?: readonly string[];
  finallyImages?: readonly string[];
  /** Per task, main then finally, the container the plan placed it in (several may share an image). */
  containers?: readonly string[];
  runStart?: string;
}

/** When the runner container ended (its finishedAt), if it did. */
export function runnerEndOf(pod: PodView): string | null | undefined {
  const terminated = runnerTerminated(pod);
  return terminated ? (terminated.finishedAt ?? null) : undefined;
}

/**
 * The runner container's terminationMessagePolicy when it is not File (a pod made before the
 * runner's policy became File): FallbackToLogsOnError. The API server defaults an unset one to File.
 */
function runnerMessagePolicy(pod: PodView): string | undefined {
  const runner = pod.spec?.containers?.find((c) => c.name === RUNNER_CONTAINER);
  const policy = runner?.terminationMessagePolicy;
  return typeof policy === "string" && policy !== "File" ? policy : undefined;
}

/**
 * The runner's report, if its pod is still the one built (changed-pod.ts), its container ended on
 * its own and what the pod shows explains it (report-trust.ts). `tasks` names the plan's tasks and
 * their images, for what the report says of them.
 */
export function readReport(pod: PodView, tasks: PlannedTasks): ReadReport {
  const terminated = runnerTerminated(pod);
  if (!terminated) return { ok: false, problem: "the runner container has no terminated state" };
  const message = terminated.message?.trim() ?? "";
  // What changed the pod may have written the message, or made the runner write it.
  const changes = judgePodChanges(pod, terminated.finishedAt);
  if (changes.verdict === "changed") {
    return {
      ok: false,
      problem: `${describeChange(changes.change)}, so the runner's termination message is not trusted as its report`,
      ...(message !== "" ? { distrust: "changed" as const } : {}),
    };
  }
  // With FallbackToLogsOnError, the kubelet takes a runner that failed with an empty file at its
  // log's last lines, which task output fills: only a runner that exited 0 surely wrote its message.
  const policy = runnerMessagePolicy(pod);
  if (policy !== undefined && terminated.exitCode !== 0 && message !== "") {
    return {
      ok: false,
      problem: `the runner container's terminationMessagePolicy is ${policy} (the pod was made before it was File) and it exited ${terminated.exitCode}, so its termination message may be its log's tail, which task output fills, and is not read`,
      distrust: "log-tail",
    };
  }
  // OOMKilled first: the kernel ended it, so whatever its file holds is not its last word.
  if (message === "" && terminated.reason !== "OOMKilled") {
    return { ok: false, problem: "the termination message is empty" };
  }
  const ending = judgeEnding(terminated);
  if (!ending.trusted) {
    // A message that could pass for a report was not taken as one; no message, nothing distrusted.
    return { ok: false, problem: ending.problem, ...(message !== "" ? { distrust: ending.why } : {}) };
  }
  let report: RunnerReport;
  try {
    report = decodeReport(message, tasks.names.length, tasks.finallyNames?.length ?? 0);
  } catch (error) {
    if (error instanceof InvalidReportError) return { ok: false, problem: `the report is ${error.message}` };
    throw error;
  }
  // The finally tasks are judged as the main ones are: their rows count on after the main tasks'.
  const names = [...tasks.names, ...(tasks.finallyNames ?? [])];
  const images = tasks.images && [...tasks.images, ...(tasks.finallyImages ?? [])];
  const trust = judgeReport(pod, terminated, report, names, images, tasks.runStart, tasks.containers);
  if (!trust.trusted) return { ok: false, problem: trust.problem, distrust: trust.why };
  return { ok: true, report, ...(changes.verdict === "unverified" ? { unverified: changes.changes } : {}) };
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
 * What to say about a runner the kernel ended for its container's memory: the runner has its own
 * fixed limit (tasks run in their own containers), so its output buffering outgrew it.
 * Empty unless the runner was OOMKilled.
 */
export function runnerOomHint(pod: PodView): string {
  if (runnerTerminated(pod)?.reason !== "OOMKilled") return "";
  return `; the kernel ended the runner for its own container's ${RUNNER_RESOURCES.limits.memory} memory limit (the tasks run in their own containers and do not share it)`;
}

/** The image a container of the pod was created with, from its spec (else as the kubelet shows it). */
export function containerImage(pod: PodView, name: string): string | undefined {
  const spec = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  return spec.find((c) => c.name === name)?.image ?? statuses.find((s) => s.name === name)?.image;
}

/** "container task-2 (image postgres:16)". */
export function nameContainer(pod: PodView, name: string): string {
  const image = containerImage(pod, name);
  return `container ${name}${image ? ` (image ${image})` : ""}`;
}

/**
 * Whether the pod has started: Running, with every container (the runner and each task's) running
 * or already ended. A task container still pulling its image holds the whole run.
 */
export function podStarted(pod: PodView): boolean {
  if (pod.status?.phase !== "Running") return false;
  const statuses = pod.status.containerStatuses ?? [];
  // No container status at all: nothing to say against the phase.
  if (statuses.length === 0) return true;
  const names = (pod.spec?.containers ?? []).map((c) => c.name);
  const expected = names.length > 0 ? names : statuses.map((s) => s.name);
  return expected.every((name) => {
    const state = statuses.find((s) => s.name === name)?.state;
    return state?.running !== undefined || state?.terminated !== undefined;
  });
}

/**
 * What a task container that ended says, for the task the runner reports lost with it:
 * "container task-1 (image postgres:16) was OOMKilled (exit 137)", or, when its first process
 * (the agent) was killed by a signal (a task may kill its own agent: same user),
 * "container task-1 (image postgres:16) ended: its agent was killed by SIGKILL (exit 137)".
 */
export function describeEndedContainer(pod: PodView, name: string): string {
  const status = pod.status?.containerStatuses?.find((s) => s.name === name);
  const terminated = status?.state?.terminated ?? status?.lastState?.terminated;
  if (!terminated) return `${nameContainer(pod, name)} ended`;
  const signal = terminated.reason === "OOMKilled" ? undefined : killedBy(terminated);
  if (signal !== undefined) {
    return `${nameContainer(pod, name)} ended: its agent was killed by ${signal} (exit ${terminated.exitCode})`;
  }
  const how = `was ${terminated.reason ?? "ended"} (exit ${terminated.exitCode}${terminated.signal ? `, signal ${terminated.signal}` : ""})`;
  return `${nameContainer(pod, name)} ${how}`;
}

/** Init containers first, then the runner, then the task containers. */
function orderedStatuses(pod: PodView) {
  return [
    ...(pod.status?.initContainerStatuses ?? []),
    ...[...(pod.status?.containerStatuses ?? [])].sort(
      (a, b) => Number(b.name === RUNNER_CONTAINER) - Number(a.name === RUNNER_CONTAINER),
    ),
  ];
}

/** Waiting reasons of a pod on its way up: they say nothing the user needs to act on. */
const STARTING_REASONS = new Set(["ContainerCreating", "PodInitializing"]);

const said = (reason: string | null | undefined, message: string | null | undefined) =>
  reason ? `${reason}${message ? `: ${message.trim()}` : ""}` : undefined;

/**
 * Why a pod that has not started is held, when something holds it (not merely on its way up):
 * the kubelet's waiting reason of an init container, the runner or a task container
 * (ErrImagePull, ImagePullBackOff, CreateContainerConfigError), naming the container and its
 * image, else the scheduler's (Unschedulable, with its message).
 */
export function describeHold(pod: PodView): string | undefined {
  for (const status of orderedStatuses(pod)) {
    const waiting = status.state?.waiting;
    if (!waiting?.reason || STARTING_REASONS.has(waiting.reason)) continue;
    return `${nameContainer(pod, status.name)}: ${said(waiting.reason, waiting.message)}`;
  }
  const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled" && c.status === "False");
  return said(scheduled?.reason, scheduled?.message);
}

/**
 * What holds a pod that has not started, in the words of whoever holds it (describeHold), else
 * what it is doing (ContainerCreating), else the pod's own reason.
 */
export function describeWaiting(pod: PodView): string | undefined {
  const waiter = orderedStatuses(pod).find((s) => s.state?.waiting?.reason);
  const waiting = waiter?.state?.waiting;
  const conditions = pod.status?.conditions ?? [];
  return (
    describeHold(pod) ??
    (waiter ? `${nameContainer(pod, waiter.name)}: ${said(waiting?.reason, waiting?.message)}` : undefined) ??
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
