// A pod that has not ended: its progress, unless it never started within its start timeout or
// the run's ceiling (StartTimeout either way), or outlived its activeDeadlineSeconds without its node stopping it.
import { formatDuration } from "../../api/duration.js";
import type { ResolvedLimits } from "../../api/limits.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import { BACKSTOP_SLACK_MS, type Decision, progress, type RunState, settle } from "../decision.js";
import {
  admissionSeen,
  admittedAt,
  decideHeldPod,
  heldByKueue,
  queuedMs,
  workloadOf,
} from "../kueue/kueue-hold.js";
import { kueueStopOf } from "../kueue/kueue-preemption.js";
import { ceilingStartMs } from "../kueue/queued-time.js";
import { type PodView, RUNNER_CONTAINER } from "../objects.js";
import {
  MOUNT_LOOK_INTERVAL_MS,
  missingClaimOf,
  missingSourceOf,
  missingVolumeSourceOf,
  mountEventsDue,
} from "../pods/missing-source.js";
import { type NodeSilence, nodeSilenceOf } from "../pods/node-lost.js";
import { DEADLINE_MARGIN_SECONDS, finallyWindowSeconds } from "../pods/pod-builder.js";
import { describeHold, describeWaiting, podStarted } from "../pods/pod-state.js";
import { describeBackstop, progressStatus, settledStatus } from "../status.js";
import { decideLost, pendingMessage } from "./decide-start.js";
import { type LiveProgress, liveProgress } from "./live-progress.js";

/** A pod that has not ended: report its progress, unless it never started or outlived its deadline. */
export function decideActivePod(state: RunState, pod: PodView): Decision {
  // Held by Kueue: only its queue timeout counts until Kueue admits it.
  if (heldByKueue(pod) && !pod.metadata.deletionTimestamp) return decideHeldPod(state, pod);
  const { base, attempts, startTime } = state;
  const { now } = state.input;
  // Started: every container (the runner and each task image's) is running; until then the pod
  // is pending, whatever its phase, and its start timeout counts.
  const running = podStarted(pod);
  const admitted = admittedAt(pod, workloadOf(pod, state.input.workloads));
  // Time in Kueue's queue is not the run's: the runner counts what was left of the ceiling at the
  // pod's creation from its own start, as the pod's activeDeadlineSeconds does, so this pod's queue
  // time moves the end, as its earlier pods' did (status.queuedMs). A pod re-created after a
  // preemption does not restart the ceiling.
  const ceilingFrom = ceilingStartMs(startTime, base.previous) + queuedMs(pod, admitted);
  const endsAt = ceilingFrom + base.limits.ceiling.ms + base.limits.killGrace.ms;
  // A started run may go on past its main tasks' end for its finally tasks' window, as its pod's
  // activeDeadlineSeconds does; a pod that never started runs no finally task.
  const finallyEndsAt = endsAt + finallyWindowSeconds(base.limits) * 1000;
  // Each pod's own window: a pod re-created after a loss gets a fresh one, not a fresh ceiling.
  const startBy = running ? undefined : startDeadline(base.limits, pod, admitted);
  // activeDeadlineSeconds counts from the pod's start on a node: a pod that never starts
  // (unschedulable, image never pulled) is bounded by the controller instead, and it ends
  // StartTimeout at whichever comes first, its start window or the run's ceiling.
  // A Secret, ConfigMap, claim or key a task names is missing: no wait makes it appear
  // (missing-source.ts), whether the kubelet says so in the pod's status, in its FailedMount
  // events, or the scheduler in the pod's condition.
  const missing = running
    ? undefined
    : (missingSourceOf(pod) ??
      missingClaimOf(pod) ??
      missingVolumeSourceOf(pod, state.input.mountEvents?.[pod.metadata.uid ?? ""]));
  if (missing) return decideMissingSource(state, pod, missing);
  if (!running && Math.min(startBy ?? endsAt, endsAt) <= now.getTime()) {
    return decideStartTimeout(state, pod, startBy !== undefined && startBy <= endsAt ? "window" : "ceiling");
  }
  const backstopAt = finallyEndsAt + (DEADLINE_MARGIN_SECONDS * 1000 + BACKSTOP_SLACK_MS);
  if (running && backstopAt <= now.getTime()) return decideOutlived(state, pod);
  const silence = running ? nodeSilenceOf(pod) : undefined;
  if (silence && silence.lostAt <= now.getTime()) return decideNodeLost(state, pod, silence);
  const hold = running ? undefined : describeHold(pod);
  const next = progressStatus(base, {
    phase: running ? "Running" : "Pending",
    message: running
      ? `pod ${pod.metadata.name} is running (attempt ${attempts})${stopping(pod)}${silence ? `; its node ${silence.node} stopped reporting` : ""}`
      : pendingMessage(pod.metadata.name, attempts, hold),
    startTime,
    podName: pod.metadata.name,
    podAttempts: attempts,
  });
  // The kubelet's FailedMount events change no pod: while the pod waits for its volumes they are
  // read again shortly.
  const mountLookAt = !running && mountEventsDue(pod) ? now.getTime() + MOUNT_LOOK_INTERVAL_MS : endsAt;
  const lookAgainAt = running
    ? Math.min(backstopAt, silence?.lostAt ?? backstopAt)
    : Math.min(endsAt, startBy ?? endsAt, mountLookAt);
  const admission = admissionSeen(base.previous, pod, admitted);
  if (admission) {
    // Admitted: the queue time is over (playbook_queue_wait_seconds takes it with this write).
    delete next.queuedSince;
  }
  const look = running ? state.input.progress : undefined;
  const known = { runStart: startTime, runnerStartedAt: runnerStartedAt(pod, startTime), now: now.getTime() };
  const live = look ? liveProgress(base.previous, base.limits, look, known, state.taskImages) : undefined;
  const decision =
    !look || !live?.ok
      ? progress(base, next, { requeueAfterMs: lookAgainAt - now.getTime() })
      : progress(base, withLiveTasks(next, live), {
          requeueAfterMs: lookAgainAt - now.getTime(),
          progressTaken: { podUID: look.podUID, ...live.taken },
        });
  return admission && decision.status ? { ...decision, admitted: admission } : decision;
}

/** "; it is being deleted", with Kueue's words when Kueue is stopping it (kueue-preemption.ts). */
function stopping(pod: PodView): string {
  const stop = kueueStopOf(pod);
  if (stop) return `; Kueue is stopping it: ${stop.condition}${stop.message ? `: ${stop.message}` : ""}`;
  return pod.metadata.deletionTimestamp ? "; it is being deleted" : "";
}

/**
 * When the pod's runner container started, as the kubelet says (ms); else the pod's creation, else
 * the run's start: no record of this pod's runner names an earlier time.
 */
function runnerStartedAt(pod: PodView, runStart: string): number {
  const runner = pod.status?.containerStatuses?.find((c) => c.name === RUNNER_CONTAINER);
  for (const time of [runner?.state?.running?.startedAt, pod.metadata.creationTimestamp, runStart]) {
    const at = typeof time === "string" ? Date.parse(time) : Number.NaN;
    if (!Number.isNaN(at)) return at;
  }
  return 0;
}

/** The running status with the tasks and the current task the runner's newest record tells. */
function withLiveTasks(next: PlaybookStatus, live: Extract<LiveProgress, { ok: true }>): PlaybookStatus {
  const { currentTask: _said, ...rest } = next;
  return { ...rest, tasks: live.tasks, ...(live.currentTask ? { currentTask: live.currentTask } : {}) };
}

/**
 * The pod's node stopped reporting (node-lost.ts) and said nothing for NODE_SILENCE_MS since: the
 * pod is lost with its node, as if evicted. It is deleted, so that its node stops it if it comes
 * back, and the run goes on in a new pod while backoffLimit allows, else ends PodLost.
 */
function decideNodeLost(state: RunState, pod: PodView, silence: NodeSilence): Decision {
  const name = pod.metadata.name;
  const silent = formatDuration(
    Math.max(0, Math.round((state.input.now.getTime() - silence.since) / 1000)) * 1000,
  );
  const decision = decideLost(
    state,
    `pod ${name} was lost with its node ${silence.node}, which stopped reporting: the pod was marked not Ready at ${new Date(silence.since).toISOString()} and its node said nothing for ${silent} since`,
    pod,
  );
  if (pod.metadata.deletionTimestamp) return decision;
  return { ...decision, actions: [{ type: "deletePod", name, why: "finished" }, ...decision.actions] };
}

/**
 * When the pod's start window closes: startTimeout from Kueue's admission for a pod Kueue held,
 * else from its creation; undefined while neither time is known.
 */
export function startDeadline(limits: ResolvedLimits, pod: PodView, admitted?: number): number | undefined {
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  const from = admitted ?? created;
  return Number.isNaN(from) ? undefined : from + limits.startTimeout.ms;
}

/**
 * The pod did not start: its start window closed, or the run's ceiling passed first (a ceiling
 * shorter than the start timeout, a pod re-created late in the run). Either way the run ends
 * StartTimeout, naming what holds the pod (the container, its image and the kubelet's reason),
 * and the pod is removed.
 */
function decideStartTimeout(state: RunState, pod: PodView, closedBy: "window" | "ceiling"): Decision {
  const { base } = state;
  const limit = base.limits.startTimeout;
  const ceiling = base.limits.ceiling;
  const why = describeWaiting(pod) ?? `pod phase ${pod.status?.phase ?? "unknown"}`;
  const when =
    closedBy === "window"
      ? `its containers did not all start within the ${formatDuration(limit.ms)} start timeout (${limit.field})`
      : `its containers did not all start before the run's ${formatDuration(ceiling.ms)} ceiling (${ceiling.field}) passed, sooner than its ${formatDuration(limit.ms)} start timeout (${limit.field})`;
  const message = `pod ${pod.metadata.name} (attempt ${state.attempts}) never started: ${when}; ${why}`;
  const next = settledStatus(base, { reason: "StartTimeout", message });
  return settle(base, { ...next, podName: pod.metadata.name, podAttempts: state.attempts }, "StartTimeout", {
    actions: pod.metadata.deletionTimestamp
      ? []
      : [{ type: "deletePod", name: pod.metadata.name, why: "finished" }],
  });
}

/**
 * A task's container cannot be created for a Secret, ConfigMap, claim or key it names that does
 * not exist: the run ends InvalidSpec in the kubelet's or the scheduler's words, and the pod is
 * removed.
 */
function decideMissingSource(state: RunState, pod: PodView, missing: string): Decision {
  const { base } = state;
  const message = `pod ${pod.metadata.name} (attempt ${state.attempts}) cannot start: ${missing} (a Secret, ConfigMap, PersistentVolumeClaim or key the tasks name that does not exist; mark a Secret or ConfigMap reference optional: true where it may be missing)`;
  const next = settledStatus(base, { reason: "InvalidSpec", message });
  return settle(base, { ...next, podName: pod.metadata.name, podAttempts: state.attempts }, "InvalidSpec", {
    actions: pod.metadata.deletionTimestamp
      ? []
      : [{ type: "deletePod", name: pod.metadata.name, why: "finished" }],
  });
}

/**
 * The pod outlived its activeDeadlineSeconds by BACKSTOP_SLACK_MS: its node did not enforce it
 * (unresponsive, partitioned). As the Job controller does for a Job's deadline, the controller
 * deletes the pod and ends the run.
 */
function decideOutlived(state: RunState, pod: PodView): Decision {
  const { base } = state;
  const message = `pod ${pod.metadata.name} outlived its activeDeadlineSeconds (${describeBackstop(base.limits)}) without its node stopping it; the controller deleted it`;
  const next = settledStatus(base, {
    reason: "PodDeadlineExceeded",
    message,
  });
  return settle(
    base,
    { ...next, podName: pod.metadata.name, podAttempts: state.attempts },
    "PodDeadlineExceeded",
    {
      actions: pod.metadata.deletionTimestamp
        ? []
        : [{ type: "deletePod", name: pod.metadata.name, gracePeriodSeconds: 0, why: "finished" }],
    },
  );
}
