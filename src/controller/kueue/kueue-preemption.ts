// A run's pod that Kueue stopped: Kueue marks it with its TerminationTarget condition (reason
// WorkloadEvictedDueTo<why>, a message naming what took its place) and deletes it. That is never
// a task's failure. The runner takes the SIGTERM as a cancel and reports; the controller reads the
// report and Kueue's words (its finalizer keeps the pod until then, kueue-finalizer.ts), then
// either starts a new pod that queues again, spending no attempt of backoffLimit
// (onPreemption: Requeue) while maxPreemptions allows, or ends the run Preempted (Fail, or the
// cap spent). Pure (docs/design.md, "Kueue").
import { preemptionCap } from "../../api/limits.js";
import type { RecordedEvent } from "../../runtime/events.js";
import { capitalise, type Decision, type RunState, settle } from "../decision.js";
import type { PodView } from "../objects.js";
import { ceilingPassed, nextPod } from "../playbook/decide-start.js";
import { describeKubeletVerdict, type ReadReport } from "../pods/pod-state.js";
import { runStatusFromReport, settledStatus } from "../status.js";
import { KUEUE_TERMINATION_CONDITION } from "./kueue-names.js";

/** The prefix of the TerminationTarget condition's reason; the rest is the Workload's Evicted reason. */
export const EVICTED_REASON_PREFIX = "WorkloadEvictedDueTo";

/** What Kueue said when it stopped a pod: its condition's reason and message. */
export interface KueueStop {
  /** The condition's reason as Kueue wrote it, e.g. WorkloadEvictedDueToPreempted. */
  condition: string;
  /** Why the Workload was evicted (the reason without its prefix): Preempted, PodsReadyTimeout... */
  reason: string;
  message: string;
}

/** Kueue's words on a pod it is stopping (its TerminationTarget condition), if it is stopping it. */
export function kueueStopOf(pod: PodView): KueueStop | undefined {
  const target = pod.status?.conditions?.find(
    (c) => c.type === KUEUE_TERMINATION_CONDITION && c.status === "True",
  );
  if (!target) return undefined;
  const condition = target.reason ?? `${EVICTED_REASON_PREFIX}Unknown`;
  const reason = condition.startsWith(EVICTED_REASON_PREFIX)
    ? condition.slice(EVICTED_REASON_PREFIX.length) || "Unknown"
    : condition;
  return { condition, reason, message: target.message ?? "" };
}

/** "Kueue stopped pod x-1 (attempt 1): WorkloadEvictedDueToPreempted: Preempted to accommodate ..." */
export function describeStop(pod: PodView, attempt: number, stop: KueueStop): string {
  return `Kueue stopped pod ${pod.metadata.name} (attempt ${attempt}): ${stop.condition}${stop.message ? `: ${stop.message}` : ""}`;
}

/**
 * Whether the pod's end is Kueue's stop: the runner reported it cancelled (the SIGTERM of the
 * deletion), or left no report (stopped before it started, or while it wrote none). A report of
 * the run's own outcome (it ended as Kueue came) decides the run as any report does.
 */
export function endedByKueue(read: ReadReport): boolean {
  return !read.ok || read.report.reason === "Cancelled";
}

/**
 * The run's pod ended because Kueue stopped it. Requeue (the default): a new pod that queues
 * again, the tasks from the first (a Playbook is one script), the ceiling still counting from the
 * run's start, no attempt of backoffLimit spent, while the run's maxPreemptions allows; the stop
 * past it ends the run Preempted, naming the count. Fail: the run ends Preempted with Kueue's
 * reason and message, its tasks as the runner reported them. Either way a Warning event says
 * what Kueue said.
 */
export function decideStoppedByKueue(
  state: RunState,
  pod: PodView,
  stop: KueueStop,
  read: ReadReport,
): Decision {
  const { base } = state;
  const said = describeStop(pod, state.attempts, stop);
  const progressed = progressOf(state, pod, read);
  if ((state.spec.onPreemption ?? "Requeue") === "Fail") {
    return endPreempted(
      state,
      pod,
      stop,
      read,
      `${said}; spec.onPreemption is Fail${progressed}`,
      `${said}${progressed}; the run ends Preempted (spec.onPreemption: Fail)`,
    );
  }
  const ended = ceilingPassed(state, `${said}${progressed}`, pod);
  if (ended) return { ...ended, preempted: { reason: stop.reason } };
  const preemptions = (base.previous.preemptions ?? 0) + 1;
  const cap = preemptionCap(base.limits);
  if (preemptions > cap.value) {
    const past = `preempted ${preemptions} time${preemptions === 1 ? "" : "s"}, past maxPreemptions ${cap.value} (${cap.source})`;
    return endPreempted(
      state,
      pod,
      stop,
      read,
      `${said}${progressed}; ${past}`,
      `${said}${progressed}; the run ends Preempted: ${past}`,
    );
  }
  const decision = nextPod(state, pod, { preemptions }, (action, attempt, counts) => [
    stopEvent(
      `${said}${progressed}; created pod ${action.pod.metadata.name} (attempt ${attempt}), which queues again and runs the tasks from the first; no attempt of backoffLimit spent (preemption ${preemptions} of maxPreemptions ${cap.value}), ${counts}`,
    ),
  ]);
  return { ...decision, preempted: { reason: stop.reason } };
}

/**
 * The run ends Preempted (onPreemption Fail, or maxPreemptions spent): `message` on its condition,
 * its tasks as the stopped pod's runner reported them, `event` in a Warning.
 */
function endPreempted(
  state: RunState,
  pod: PodView,
  stop: KueueStop,
  read: ReadReport,
  message: string,
  event: string,
): Decision {
  const { base } = state;
  const reported = read.ok
    ? runStatusFromReport(
        base,
        read.report,
        { startTime: state.startTime, podName: pod.metadata.name, podAttempts: state.attempts },
        { images: state.taskImages, finallyImages: state.finallyImages },
      )
    : undefined;
  const next = settledStatus(base, {
    reason: "Preempted",
    message,
    ...(reported?.tasks ? { tasks: reported.tasks } : {}),
    ...(reported?.finally ? { finally: reported.finally } : {}),
  });
  const decision = settle(
    base,
    { ...next, podName: pod.metadata.name, podAttempts: state.attempts },
    "Preempted",
    { events: [stopEvent(event)] },
  );
  return { ...decision, preempted: { reason: stop.reason } };
}

function stopEvent(message: string): RecordedEvent {
  return { type: "Warning", reason: "Preempted", message: capitalise(message) };
}

/** How far the stopped pod got, from its runner's report: "; 2 of 3 tasks had succeeded". */
function progressOf(state: RunState, pod: PodView, read: ReadReport): string {
  if (!read.ok) return `; its runner left no report (${describeKubeletVerdict(pod)})`;
  const succeeded = read.report.tasks.filter((task) => task.p === "Succeeded").length;
  return `; ${succeeded} of ${state.spec.tasks.length} task${state.spec.tasks.length === 1 ? "" : "s"} had succeeded`;
}
