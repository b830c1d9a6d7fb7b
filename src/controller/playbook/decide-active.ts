// A pod that has not ended: its progress, unless it never started within its start timeout or
// the run's ceiling, or outlived its activeDeadlineSeconds without its node stopping it.
import { formatDuration } from "../../api/duration.js";
import type { ResolvedLimits } from "../../api/limits.js";
import {
  BACKSTOP_SLACK_MS,
  cancelledTasks,
  type Decision,
  progress,
  type RunState,
  settle,
} from "../decision.js";
import type { PodView } from "../objects.js";

import { type NodeSilence, nodeSilenceOf } from "../pods/node-lost.js";
import { DEADLINE_MARGIN_SECONDS } from "../pods/pod-builder.js";
import { describeHold, describeWaiting, podStarted } from "../pods/pod-state.js";
import { progressStatus, settledStatus } from "../status.js";
import { decideLost, pendingMessage } from "./decide-start.js";

/** A pod that has not ended: report its progress, unless it never started or outlived its deadline. */
export function decideActivePod(state: RunState, pod: PodView): Decision {
  const { base, attempts, startTime } = state;
  const { now } = state.input;
  // Started: every container (the runner and each task image's) is running; until then the pod
  // is pending, whatever its phase, and its start timeout counts.
  const running = podStarted(pod);
  const endsAt = Date.parse(startTime) + base.limits.ceiling.ms + base.limits.killGrace.ms;
  // Each pod's own window: a pod re-created after a loss gets a fresh one, not a fresh ceiling.
  const startBy = running ? undefined : startDeadline(base.limits, pod);
  if (startBy !== undefined && startBy <= now.getTime() && startBy <= endsAt) {
    return decideStartTimeout(state, pod);
  }
  if (!running && endsAt <= now.getTime()) {
    // activeDeadlineSeconds counts from the pod's start on a node: a pod that never starts
    // (unschedulable, image never pulled) is bounded by the controller instead.
    return decideNeverStarted(state, pod);
  }
  const backstopAt = endsAt + (DEADLINE_MARGIN_SECONDS * 1000 + BACKSTOP_SLACK_MS);
  if (running && backstopAt <= now.getTime()) return decideOutlived(state, pod);
  const silence = running ? nodeSilenceOf(pod) : undefined;
  if (silence && silence.lostAt <= now.getTime()) return decideNodeLost(state, pod, silence);
  const hold = running ? undefined : describeHold(pod);
  const next = progressStatus(base, {
    phase: running ? "Running" : "Pending",
    message: running
      ? `pod ${pod.metadata.name} is running (attempt ${attempts})${pod.metadata.deletionTimestamp ? "; it is being deleted" : ""}${silence ? `; its node ${silence.node} stopped reporting` : ""}`
      : pendingMessage(pod.metadata.name, attempts, hold),
    startTime,
    podName: pod.metadata.name,
    podAttempts: attempts,
  });
  const lookAgainAt = running
    ? Math.min(backstopAt, silence?.lostAt ?? backstopAt)
    : Math.min(endsAt, startBy ?? endsAt);
  return progress(base, next, { requeueAfterMs: lookAgainAt - now.getTime() });
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
  );
  if (pod.metadata.deletionTimestamp) return decision;
  return { ...decision, actions: [{ type: "deletePod", name, why: "finished" }, ...decision.actions] };
}

/** When the pod's start window closes; undefined while its creation time is not known yet. */
export function startDeadline(limits: ResolvedLimits, pod: PodView): number | undefined {
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  return Number.isNaN(created) ? undefined : created + limits.startTimeout.ms;
}

/** The pod did not start within its start timeout: the run ends StartTimeout and the pod is removed. */
function decideStartTimeout(state: RunState, pod: PodView): Decision {
  const { base } = state;
  const limit = base.limits.startTimeout;
  const why = describeWaiting(pod) ?? `pod phase ${pod.status?.phase ?? "unknown"}`;
  const message = `pod ${pod.metadata.name} (attempt ${state.attempts}) never started: its containers did not all start within the ${formatDuration(limit.ms)} start timeout (${limit.field}); ${why}`;
  const next = settledStatus(base, { reason: "StartTimeout", message, tasks: cancelledTasks(base) });
  return settle(base, { ...next, podName: pod.metadata.name, podAttempts: state.attempts }, "StartTimeout", {
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
  const message = `pod ${pod.metadata.name} outlived its activeDeadlineSeconds (the run's ${formatDuration(base.limits.ceiling.ms)} ceiling from ${base.limits.ceiling.field}, plus killGrace and a margin) without its node stopping it; the controller deleted it`;
  const next = settledStatus(base, {
    reason: "PodDeadlineExceeded",
    message,
    tasks: cancelledTasks(base),
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

/** The ceiling passed before the pod ever ran: the run ends RunCeiling and the pod is removed. */
function decideNeverStarted(state: RunState, pod: PodView): Decision {
  const { base } = state;
  const waiting = pod.status?.containerStatuses?.find((s) => s.state?.waiting?.reason)?.state?.waiting;
  const why =
    waiting?.reason ??
    pod.status?.reason ??
    pod.status?.conditions?.find((c) => c.status === "False")?.reason;
  const message = `the run's ${formatDuration(base.limits.ceiling.ms)} ceiling (${base.limits.ceiling.field}) passed before pod ${pod.metadata.name} started${why ? ` (${why})` : ""}`;
  const next = settledStatus(base, {
    reason: "RunCeiling",
    message,
    tasks: cancelledTasks(base),
  });
  return settle(base, { ...next, podName: pod.metadata.name, podAttempts: state.attempts }, "RunCeiling", {
    actions: pod.metadata.deletionTimestamp
      ? []
      : [{ type: "deletePod", name: pod.metadata.name, why: "finished" }],
  });
}
