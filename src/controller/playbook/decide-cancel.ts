// spec.cancel: a started pod is stopped at a lowered activeDeadlineSeconds and kept for its logs,
// one no node took is deleted, and a pod that does not stop is given up on after its grace.
import { formatDuration } from "../../api/duration.js";
import type { ResolvedLimits } from "../../api/limits.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import {
  type Action,
  BACKSTOP_SLACK_MS,
  type Decision,
  progress,
  type RunState,
  settle,
} from "../decision.js";
import { ceilingStartMs } from "../kueue/queued-time.js";
import type { PodView } from "../objects.js";
import { describeFinallyWindow, terminationGraceSeconds } from "../pods/pod-builder.js";
import { isPodFinished, podActiveDeadlineSeconds, podDeadline } from "../pods/pod-state.js";
import { describeStuckTermination, type Termination, terminationOf } from "../pods/terminating.js";
import { progressStatus, settledStatus } from "../status.js";
import { decideEndedPod } from "./decide-ended.js";

export function decideCancel(state: RunState, pod: PodView | undefined): Decision {
  const { base } = state;
  if (pod && !isPodFinished(pod)) {
    const next = progressStatus(base, {
      phase: "Running",
      message: `cancelling: pod ${pod.metadata.name} was asked to stop (spec.cancel)`,
      startTime: state.startTime,
      podName: pod.metadata.name,
      podAttempts: state.attempts,
    });
    const termination = terminationOf(pod, base.limits);
    if (termination) return decideTerminating(state, pod, next, termination);
    return decideStopPod(state, pod, next);
  }
  if (pod) return decideEndedPod(state, pod);
  const message =
    state.attempts === 0
      ? "the run was cancelled (spec.cancel) before its pod was created"
      : "the run was cancelled (spec.cancel); its pod was gone before the runner reported";
  const next = settledStatus(base, {
    reason: "Cancelled",
    message,
  });
  return settle(base, next, "Cancelled");
}

/**
 * Cancel a pod that has not ended. A started pod keeps its logs as any finished run's pod does:
 * its activeDeadlineSeconds is lowered to now, so the kubelet stops it with its grace period (the
 * runner writes the cancel file, signals, kills and reports) and keeps it. A pod no node has
 * taken has nothing to keep and is deleted, as is one whose node ignores the lowered deadline.
 */
function decideStopPod(state: RunState, pod: PodView, next: PlaybookStatus): Decision {
  const { base } = state;
  const { now } = state.input;
  const name = pod.metadata.name;
  const grace = terminationGraceSeconds(base.limits);
  const deadline = podDeadline(pod);
  const deleteAction: Action = { type: "deletePod", name, gracePeriodSeconds: grace, why: "cancel" };
  if (!deadline && !pod.spec?.nodeName) {
    return progress(base, next, {
      actions: [deleteAction],
      events: [
        {
          type: "Normal",
          reason: "Cancelling",
          message: `Deleted pod ${name}: spec.cancel is true and no node had taken the pod (${describeCancelGrace(base.limits, grace)})`,
        },
      ],
    });
  }
  if (!deadline) return decideStopUnstartedPod(state, pod, next);
  const elapsedSeconds = Math.max(1, Math.ceil((now.getTime() - deadline.startedAt) / 1000));
  if (deadline.seconds > elapsedSeconds) {
    return progress(base, next, {
      actions: [{ type: "lowerDeadline", name, activeDeadlineSeconds: elapsedSeconds }],
      events: [
        {
          type: "Normal",
          reason: "Cancelling",
          message: `Lowered activeDeadlineSeconds of pod ${name} to ${elapsedSeconds}: spec.cancel is true; the kubelet stops it and keeps it for its logs, and the runner gives the running task ${describeKillGrace(base.limits)} between the cancel file and SIGTERM and the SIGKILL${base.limits.finally.length > 0 ? `, then runs the finally tasks within their ${formatDuration(base.limits.finallyCeiling.ms)} ceiling (${base.limits.finallyCeiling.field})` : ""}`,
        },
      ],
      requeueAfterMs: grace * 1000 + BACKSTOP_SLACK_MS,
    });
  }
  const giveUpAt = deadline.at + grace * 1000 + BACKSTOP_SLACK_MS;
  if (giveUpAt <= now.getTime()) {
    // Its node did not stop it at the lowered deadline (unresponsive, partitioned).
    return progress(base, next, {
      actions: [deleteAction],
      events: [
        {
          type: "Warning",
          reason: "Cancelling",
          message: `Deleted pod ${name}: spec.cancel is true and its node did not stop it at its lowered activeDeadlineSeconds (${describeCancelGrace(base.limits, grace)})`,
        },
      ],
    });
  }
  return progress(base, next, { requeueAfterMs: giveUpAt - now.getTime() });
}

/**
 * A pod bound to a node that has not said it started it (or whose start the cache has not seen
 * yet): a deadline of one second stops it as soon as its node runs it. A node that never does is
 * given up on, and the pod deleted, when the run's ceiling and killGrace passed.
 */
function decideStopUnstartedPod(state: RunState, pod: PodView, next: PlaybookStatus): Decision {
  const { base } = state;
  const { now } = state.input;
  const name = pod.metadata.name;
  const grace = terminationGraceSeconds(base.limits);
  const giveUpAt =
    ceilingStartMs(state.startTime, base.previous) + base.limits.ceiling.ms + base.limits.killGrace.ms;
  if (giveUpAt <= now.getTime()) {
    return progress(base, next, {
      actions: [{ type: "deletePod", name, gracePeriodSeconds: grace, why: "cancel" }],
      events: [
        {
          type: "Warning",
          reason: "Cancelling",
          message: `Deleted pod ${name}: spec.cancel is true and its node never started it (${describeCancelGrace(base.limits, grace)})`,
        },
      ],
    });
  }
  const seconds = podActiveDeadlineSeconds(pod);
  if (seconds !== undefined && seconds <= 1)
    return progress(base, next, { requeueAfterMs: giveUpAt - now.getTime() });
  return progress(base, next, {
    actions: [{ type: "lowerDeadline", name, activeDeadlineSeconds: 1 }],
    events: [
      {
        type: "Normal",
        reason: "Cancelling",
        message: `Lowered activeDeadlineSeconds of pod ${name} to 1: spec.cancel is true; its node stops it as soon as it starts it and keeps it for its logs`,
      },
    ],
    requeueAfterMs: giveUpAt - now.getTime(),
  });
}

/** A cancelled run's pod that is terminating: waited for until its grace and a margin passed. */
function decideTerminating(
  state: RunState,
  pod: PodView,
  next: PlaybookStatus,
  termination: Termination,
): Decision {
  const { base } = state;
  const { now } = state.input;
  if (termination.giveUpAt > now.getTime()) {
    return progress(base, next, { requeueAfterMs: termination.giveUpAt - now.getTime() });
  }
  const message = describeStuckTermination(pod, termination, base.limits, now);
  const settled = settledStatus(base, { reason: "Cancelled", message });
  return settle(base, { ...settled, podName: pod.metadata.name, podAttempts: state.attempts }, "Cancelled");
}

/** "killGrace 10s (spec.killGrace)": the grace a cancelled task gets, as the user set it. */
function describeKillGrace(limits: ResolvedLimits): string {
  return `killGrace ${formatDuration(limits.killGrace.ms)} (${limits.killGrace.field})`;
}

/**
 * A cancel's deletion: the task's killGrace first, then the pod's grace period that covers it and
 * the finally tasks' window, which a cancel leaves them.
 */
function describeCancelGrace(limits: ResolvedLimits, graceSeconds: number): string {
  return `the runner gives the running task ${describeKillGrace(limits)}; the pod's grace period is ${graceSeconds}s, killGrace${describeFinallyWindow(limits)} plus a margin for the report`;
}
