// A pod that ended: the runner's report decides, unless the kubelet's deadline, an eviction or a
// deletion did, or the run was cancelled.
import type { PlaybookStatus } from "../../api/playbook.js";
import type { ReportContext } from "../../api/report-expand.js";
import { BACKSTOP_SLACK_MS, type Decision, progress, type RunState, settle } from "../decision.js";
import { decideStoppedByKueue, endedByKueue, kueueStopOf } from "../kueue/kueue-preemption.js";
import type { PodView } from "../objects.js";
import { terminationGraceSeconds } from "../pods/pod-builder.js";
import {
  describeEndedContainer,
  describeKubeletVerdict,
  disruptionOf,
  podDeadline,
  type ReadReport,
  readReport,
  runnerEnded,
  runnerOomHint,
  settleWaitMs,
} from "../pods/pod-state.js";
import { describeBackstop, runStatusFromReport, settledStatus } from "../status.js";
import { decideLost } from "./decide-start.js";

/** The tasks' images and, for a task the runner reports lost with its container, what the kubelet says of it. */
function reportContext(state: RunState, pod: PodView): ReportContext {
  return {
    images: state.taskImages,
    finallyImages: state.finallyImages,
    describeContainer: (container) => describeEndedContainer(pod, container),
  };
}

/** The decision, counting the report it did not trust (playbook_untrusted_reports_total). */
function countingDistrust(decision: Decision, read: ReadReport): Decision {
  if (!read.ok && read.distrust && decision.finished) decision.finished.distrust = read.distrust;
  return decision;
}

/**
 * A trusted report's outcome, marked unverified when the pod was changed in a way that could
 * reach its tasks but not its runner (changed-pod.ts): the Succeeded condition's message ends
 * saying what changed, and a Warning event says it too.
 */
function settleReported(
  state: RunState,
  pod: PodView,
  next: PlaybookStatus,
  read: ReadReport & { ok: true },
): Decision {
  const trustedReport = { podUID: pod.metadata.uid ?? "", report: read.report };
  const changes = read.unverified ?? [];
  if (changes.length === 0)
    return { ...settle(state.base, next, read.report.reason, { fromReport: true }), trustedReport };
  const note = `unverified: the pod was changed after its creation: ${changes.map((c) => c.what).join("; ")}`;
  const conditions = (next.conditions ?? []).map((c) =>
    c.type === "Succeeded" ? { ...c, message: c.message ? `${c.message} (${note})` : note } : c,
  );
  const unverified = settle(state.base, { ...next, conditions }, read.report.reason, {
    fromReport: true,
    events: [
      {
        type: "Warning",
        reason: "OutcomeUnverified",
        message: `The runner's report of pod ${pod.metadata.name} decides the run, ${note}`,
      },
    ],
  });
  return { ...unverified, trustedReport };
}

/**
 * A report the runner finished before its pod's activeDeadlineSeconds passed: the run was decided
 * before the kubelet's backstop fired, which then only caught the runner on its way out. A report
 * finished at or after the deadline is the runner's answer to the kubelet's stop, not the run's.
 */
function reportedBeforeDeadline(read: ReadReport, pod: PodView): boolean {
  const deadline = podDeadline(pod);
  if (!read.ok || deadline === undefined) return false;
  const end = Date.parse(read.report.end);
  return !Number.isNaN(end) && end < deadline.at;
}

/**
 * A pod that ended: the runner's report decides, unless an eviction did, or the kubelet's
 * deadline fired before the runner reported.
 */
export function decideEndedPod(state: RunState, pod: PodView): Decision {
  const { base, spec } = state;
  const podName = pod.metadata.name;
  const run = { startTime: state.startTime, podName, podAttempts: state.attempts };
  const context = reportContext(state, pod);
  const read = readReport(pod, {
    names: spec.tasks.map((task) => task.name),
    images: state.taskImages,
    finallyNames: (spec.finally ?? []).map((task) => task.name),
    finallyImages: state.finallyImages,
    ...(state.taskContainers ? { containers: state.taskContainers } : {}),
    runStart: state.startTime,
  });
  // Kueue stopped the pod (preemption, eviction): never a task's failure, and the cancel decides a cancelled run.
  const stop = kueueStopOf(pod);
  if (stop && !state.cancel && endedByKueue(read)) return decideStoppedByKueue(state, pod, stop, read);
  const disruption = disruptionOf(pod);
  // A cancelled run is not re-created after a disruption: the cancel decides its end.
  if (disruption && !state.cancel) return decideLost(state, `pod ${podName} ${disruption}`, pod);
  if (pod.status?.reason === "DeadlineExceeded" && state.cancel) return decideCancelledPod(state, pod, read);
  if (pod.status?.reason === "DeadlineExceeded" && !reportedBeforeDeadline(read, pod)) {
    // A trusted report's tasks, as far as it got; without one, status shows progress (no outcome).
    const reported = read.ok ? runStatusFromReport(base, read.report, run, context) : undefined;
    const message = `the kubelet stopped pod ${podName} at its activeDeadlineSeconds backstop: ${describeBackstop(base.limits)} passed before the runner reported`;
    const next = settledStatus(base, {
      reason: "PodDeadlineExceeded",
      message,
      ...(reported?.tasks ? { tasks: reported.tasks } : {}),
      ...(reported?.finally ? { finally: reported.finally } : {}),
    });
    return countingDistrust(
      settle(base, { ...next, podName, podAttempts: state.attempts }, "PodDeadlineExceeded"),
      read,
    );
  }
  if (read.ok) {
    if (read.report.reason === "Cancelled" && !state.cancel) {
      // The runner was interrupted by someone else than us: a node drain, a deletion.
      return decideLost(
        state,
        `pod ${podName} was stopped from outside (${describeKubeletVerdict(pod)})`,
        pod,
      );
    }
    return settleReported(state, pod, runStatusFromReport(base, read.report, run, context), read);
  }
  if (pod.metadata.deletionTimestamp && !state.cancel) {
    return decideLost(
      state,
      `pod ${podName} was deleted before the runner reported (${describeKubeletVerdict(pod)})`,
      pod,
    );
  }
  const waitMs = settleWaitMs(pod, state.input.now);
  if (waitMs > 0 && !state.cancel) {
    // The container's end and the disruption that caused it can reach the API in separate
    // writes; a pod taken by the infrastructure must not be mistaken for a runner that crashed.
    return progress(base, base.previous, { requeueAfterMs: waitMs });
  }
  const message = `pod ${podName} ended without a valid runner report (${describeKubeletVerdict(pod)}): ${read.problem}${runnerOomHint(pod)}`;
  const next = settledStatus(base, { reason: state.cancel ? "Cancelled" : "RunnerLost", message });
  return countingDistrust(
    settle(
      base,
      { ...next, podName, podAttempts: state.attempts },
      state.cancel ? "Cancelled" : "RunnerLost",
    ),
    read,
  );
}

/**
 * A pod the kubelet stopped at the deadline the cancel lowered: the runner's report decides once
 * its container ended (the pod's phase turns Failed first); without one the run is Cancelled, as
 * the controller asked.
 */
function decideCancelledPod(state: RunState, pod: PodView, read: ReadReport): Decision {
  const { base } = state;
  const podName = pod.metadata.name;
  const run = { startTime: state.startTime, podName, podAttempts: state.attempts };
  if (read.ok) {
    return settleReported(
      state,
      pod,
      runStatusFromReport(base, read.report, run, reportContext(state, pod)),
      read,
    );
  }
  const deadline = podDeadline(pod);
  const waitUntil = (deadline?.at ?? 0) + terminationGraceSeconds(base.limits) * 1000 + BACKSTOP_SLACK_MS;
  if (!runnerEnded(pod) && waitUntil > state.input.now.getTime()) {
    return progress(base, base.previous, { requeueAfterMs: waitUntil - state.input.now.getTime() });
  }
  const message = `the run was cancelled (spec.cancel); pod ${podName} was stopped at its lowered activeDeadlineSeconds without a valid runner report (${describeKubeletVerdict(pod)}): ${read.ok ? "" : read.problem}`;
  const next = settledStatus(base, { reason: "Cancelled", message });
  return countingDistrust(settle(base, { ...next, podName, podAttempts: state.attempts }, "Cancelled"), read);
}
