// Reconcile decisions as a pure function of (Playbook, its pods, now, config): what to create or
// delete, the status to write and the events to record. The controller applies the decision.
import { formatDuration } from "../api/duration.js";
import type { LimitDefaults, ResolvedLimits } from "../api/limits.js";
import { canonical, PLAN_ANNOTATION, PlanTooLargeError, parsePlan, planDigest } from "../api/plan.js";
import type { PlaybookSpec, PlaybookStatus, TaskStatus } from "../api/playbook.js";
import { checkPolicy, type NamespaceRules, type PodSettings, podSettings } from "../api/policy.js";
import { isLimitReason, type TerminalReason } from "../api/reasons.js";
import type { RecordedEvent } from "../runtime/events.js";
import { type PodView, podAttemptOf, type StoredPlaybook } from "./objects.js";
import {
  alternatePodName,
  buildPod,
  DEADLINE_MARGIN_SECONDS,
  type PodManifest,
  podNameFor,
  terminationGraceSeconds,
} from "./pod-builder.js";
import {
  currentPod,
  describeHold,
  describeKubeletVerdict,
  describeWaiting,
  disruptionOf,
  isPodFinished,
  podActiveDeadlineSeconds,
  podDeadline,
  type ReadReport,
  readReport,
  runnerEnded,
  runnerOomHint,
  settleWaitMs,
} from "./pod-state.js";
import { queuedDecision, type SlotState } from "./policy-queue.js";
import { adoptedPlan, newPlan, podPlanned, rebuiltPlan, rulesOf, validateSpec } from "./run-plan.js";
import {
  describeDeadline,
  isFinished,
  markUnfinished,
  progressStatus,
  runStatusFromReport,
  type StatusBase,
  sameStatus,
  settledStatus,
} from "./status.js";
import { describeStuckTermination, type Termination, terminationOf } from "./terminating.js";

export interface ReconcileSettings {
  defaults: LimitDefaults;
  runnerImage: string;
  ttlSecondsAfterFinished: number;
  /** --allowed-service-accounts and --allowed-images: allowed where no policy says otherwise. */
  allowedServiceAccounts?: readonly string[];
  allowedImages?: readonly string[];
}

export interface ReconcileInput {
  playbook: StoredPlaybook;
  /** Pods this Playbook controls (owner reference), from the cache or confirmed by a live read. */
  pods: readonly PodView[];
  now: Date;
  settings: ReconcileSettings;
  /** What governs the namespace: its PlaybookPolicy named default, else the controller's flags. */
  rules?: NamespaceRules;
  /** The namespace's running-Playbooks cap and who holds its slots, when it has one. */
  slots?: SlotState;
  /**
   * Pod names held by pods this Playbook does not control (a lingering pod of a deleted Playbook
   * of the same name, anyone's pod), as the cache or a create's AlreadyExists showed them.
   */
  takenPodNames?: readonly string[];
}

export type Action =
  /** planDigest: the digest of the plan the pod carries, as status.planDigest records it. */
  | { type: "createPod"; pod: PodManifest; attempt: number; planDigest: string }
  | { type: "deletePod"; name: string; gracePeriodSeconds?: number; why: "cancel" | "ttl" | "finished" }
  /** Cancel: the kubelet stops the pod at its lowered deadline and keeps it for its logs. */
  | { type: "lowerDeadline"; name: string; activeDeadlineSeconds: number };

/** How much of an effective limit a run or task used, for the near-miss histogram. */
export interface LimitUsage {
  limit: "TaskTimeout" | "RunCeiling";
  ratio: number;
}

/** What a finished run contributes to the metrics, counted when its terminal status is written. */
export interface FinishedRun {
  reason: TerminalReason;
  limit?: string;
  durationSeconds: number;
  tasks: { phase: string; durationSeconds: number }[];
  /** Duration over the effective limit, for tasks and runs that ended before their limit fired. */
  usage: LimitUsage[];
  /** The fields the namespace's policy refused, when it refused the run. */
  policyRefusals?: string[];
}

export interface Decision {
  /** The status to write, or null when it would not change. */
  status: PlaybookStatus | null;
  actions: Action[];
  events: RecordedEvent[];
  finished?: FinishedRun;
  requeueAfterMs?: number;
}

function durationMs(start: string | undefined, end: string | undefined): number | undefined {
  if (!start || !end) return undefined;
  return Math.max(0, Date.parse(end) - Date.parse(start));
}

function durationSeconds(start: string | undefined, end: string | undefined): number {
  return (durationMs(start, end) ?? 0) / 1000;
}

/**
 * Each task that ended on its own (Succeeded or Failed) against its timeout, and the run against
 * its ceiling unless the ceiling is what ended it: a limit that fired used all of it by
 * definition and is counted by playbook_limit_fired_total instead.
 */
function limitUsage(
  status: PlaybookStatus,
  reason: TerminalReason,
  limits: ResolvedLimits | null,
): LimitUsage[] {
  if (!limits) return [];
  const usage: LimitUsage[] = [];
  for (const task of status.tasks ?? []) {
    if (task.phase !== "Succeeded" && task.phase !== "Failed") continue;
    const timeout = limits.tasks.find((t) => t.name === task.name)?.timeout;
    const took = durationMs(task.startTime, task.completionTime);
    if (!timeout || timeout.ms <= 0 || took === undefined) continue;
    // The timeout bounds each attempt: a retried task's span is held against all its attempts.
    usage.push({ limit: "TaskTimeout", ratio: took / (timeout.ms * Math.max(1, task.attempts)) });
  }
  const took = durationMs(status.startTime, status.completionTime);
  const ceilingFired = reason === "RunCeiling" || reason === "PodDeadlineExceeded";
  if (!ceilingFired && took !== undefined && limits.ceiling.ms > 0) {
    usage.push({ limit: "RunCeiling", ratio: took / limits.ceiling.ms });
  }
  return usage;
}

function finishedRun(
  status: PlaybookStatus,
  reason: TerminalReason,
  limits: ResolvedLimits | null,
): FinishedRun {
  const run: FinishedRun = {
    reason,
    durationSeconds: durationSeconds(status.startTime, status.completionTime),
    tasks: (status.tasks ?? [])
      .filter((task) => task.startTime && task.completionTime)
      .map((task) => ({
        phase: task.phase,
        durationSeconds: durationSeconds(task.startTime, task.completionTime),
      })),
    usage: limitUsage(status, reason, limits),
  };
  if (isLimitReason(reason)) run.limit = reason;
  return run;
}

function finishEvents(
  status: PlaybookStatus,
  reason: TerminalReason,
  limits: ResolvedLimits | null,
): RecordedEvent[] {
  const condition = status.conditions?.find((c) => c.type === "Succeeded");
  const message = condition?.message ?? reason;
  const events: RecordedEvent[] = [];
  if (isLimitReason(reason)) {
    events.push({
      type: "Warning",
      reason: "LimitFired",
      message: `${reason} fired: ${describeFiredLimit(status, reason, limits)}`,
    });
  }
  // A cancel is what someone asked for, not a failure.
  const normal = reason === "Succeeded" || reason === "Cancelled";
  events.push({
    type: normal ? "Normal" : "Warning",
    reason: reason === "Succeeded" ? "RunSucceeded" : reason === "Cancelled" ? "RunCancelled" : "RunFailed",
    message: `Run finished with reason ${reason}: ${message}`,
  });
  return events;
}

/** "limit 10m from task (spec.tasks[0].timeout)" for the limit that ended the run. */
function describeFiredLimit(status: PlaybookStatus, reason: string, limits: ResolvedLimits | null): string {
  const task = status.tasks?.find((t) => t.limit === reason);
  const condition = status.conditions?.find((c) => c.type === "Succeeded");
  if (reason === "StartTimeout" && limits) {
    const limit = limits.startTimeout;
    return `start timeout ${formatDuration(limit.ms)} (source ${limit.source}, ${limit.field}): ${condition?.message ?? ""}`;
  }
  if (task?.limitValue && task.limitSource) {
    return `limit ${task.limitValue} (source ${task.limitSource}) on task ${task.name}: ${condition?.message ?? ""}`;
  }
  if (limits) {
    return `ceiling ${formatDuration(limits.ceiling.ms)} (source ${limits.ceiling.source}, ${limits.ceiling.field}): ${condition?.message ?? ""}`;
  }
  return condition?.message ?? reason;
}

/** The tasks of the last status, those not ended marked Cancelled. */
function cancelledTasks(base: StatusBase): TaskStatus[] {
  return markUnfinished(base.previous.tasks ?? [], "Cancelled");
}

function settle(
  base: StatusBase,
  next: PlaybookStatus,
  reason: TerminalReason,
  extra: Partial<Decision> & { policyRefusals?: string[] } = {},
): Decision {
  const finished = finishedRun(next, reason, base.limits);
  if (extra.policyRefusals) finished.policyRefusals = extra.policyRefusals;
  return {
    status: next,
    actions: extra.actions ?? [],
    events: [...(extra.events ?? []), ...finishEvents(next, reason, base.limits)],
    finished,
  };
}

function progress(base: StatusBase, next: PlaybookStatus, extra: Partial<Decision> = {}): Decision {
  return {
    status: sameStatus(base.previous, next) ? null : next,
    actions: extra.actions ?? [],
    events: extra.events ?? [],
    ...(extra.requeueAfterMs !== undefined ? { requeueAfterMs: extra.requeueAfterMs } : {}),
  };
}

/** A finished run: nothing to decide but removing its pods once ttlSecondsAfterFinished passed. */
export function decideFinished(input: ReconcileInput): Decision {
  const status = input.playbook.status ?? {};
  const spec = input.playbook.spec as { ttlSecondsAfterFinished?: unknown } | undefined;
  const ttlSeconds =
    typeof spec?.ttlSecondsAfterFinished === "number"
      ? spec.ttlSecondsAfterFinished
      : (rulesOf(input).defaults.ttlSecondsAfterFinished ?? input.settings.ttlSecondsAfterFinished);
  const actions: Action[] = [];
  const events: RecordedEvent[] = [];
  const live = input.pods.filter((pod) => !pod.metadata.deletionTimestamp);
  for (const pod of live) {
    if (!isPodFinished(pod)) actions.push({ type: "deletePod", name: pod.metadata.name, why: "finished" });
  }
  const finishedPods = live.filter(isPodFinished);
  if (finishedPods.length === 0) return { status: null, actions, events };
  const completion = Date.parse(status.completionTime ?? "") || input.now.getTime();
  const expiresAt = completion + ttlSeconds * 1000;
  if (expiresAt <= input.now.getTime()) {
    for (const pod of finishedPods) {
      actions.push({ type: "deletePod", name: pod.metadata.name, why: "ttl" });
      events.push({
        type: "Normal",
        reason: "PodDeleted",
        message: `Deleted finished pod ${pod.metadata.name}: ttlSecondsAfterFinished (${ttlSeconds}s) passed`,
      });
    }
    return { status: null, actions, events };
  }
  return { status: null, actions, events, requeueAfterMs: expiresAt - input.now.getTime() };
}

interface RunState {
  base: StatusBase & { limits: ResolvedLimits };
  /** The spec the run is decided against: its pod's plan once a pod exists. */
  spec: PlaybookSpec;
  /** The defaults the plan's limits were resolved with. */
  defaults: LimitDefaults;
  /** Image, service account, resources and backoffLimit: the spec's, else the policy's, else the controller's. */
  pod: PodSettings;
  /** The Playbook's generation the spec is from. */
  specGeneration: number | undefined;
  /** spec.cancel as the Playbook says now: the one field that may change during a run. */
  cancel: boolean;
  input: ReconcileInput;
  attempts: number;
  startTime: string;
  /** The plan's digest the status records; undefined for a run that has not recorded one yet. */
  planDigest: string | undefined;
}

/**
 * The name of an attempt's pod: `<playbook>-<attempt>`, else its alternate when a pod this
 * Playbook does not control holds that name; undefined when both are held.
 */
export function attemptPodName(input: ReconcileInput, attempt: number): string | undefined {
  const { name, uid = "" } = input.playbook.metadata;
  const taken = new Set(input.takenPodNames ?? []);
  return [podNameFor(name, attempt), alternatePodName(name, attempt, uid)].find((n) => !taken.has(n));
}

/** A warning naming the pod that holds the attempt's usual name, when the alternate is used. */
function nameTakenEvents(input: ReconcileInput, attempt: number, created: string): RecordedEvent[] {
  const plain = podNameFor(input.playbook.metadata.name, attempt);
  if (created === plain) return [];
  return [
    {
      type: "Warning",
      reason: "PodNameTaken",
      message: `Pod name ${plain} is held by a pod this Playbook does not control; created pod ${created} (attempt ${attempt}) instead`,
    },
  ];
}

/**
 * Both names of the attempt's pod are held by pods of others: the run stays Pending, saying so,
 * and ends RunCeiling (with this message) when its ceiling passes, as a refused create does.
 */
function decideNamesTaken(state: RunState, attempt: number): Decision {
  const { base, input } = state;
  const { name, uid = "" } = input.playbook.metadata;
  const message = `pod names ${podNameFor(name, attempt)} and ${alternatePodName(name, attempt, uid)} are held by pods this Playbook does not control: attempt ${attempt} cannot be created until one is removed or the run's ceiling passes`;
  const { podName: _shown, ...rest } = progressStatus(base, {
    phase: "Pending",
    message,
    startTime: state.startTime,
    podName: "",
    podAttempts: state.attempts,
  });
  const next: PlaybookStatus =
    base.previous.podName !== undefined ? { ...rest, podName: base.previous.podName } : rest;
  const ceilingAt = Date.parse(state.startTime) + base.limits.ceiling.ms;
  return progress(base, next, {
    events: [{ type: "Warning", reason: "PodNameTaken", message: capitalise(message) }],
    requeueAfterMs: Math.max(1, ceilingAt - input.now.getTime()),
  });
}

function createPodAction(
  state: RunState,
  attempt: number,
  runStart: Date,
  name: string,
): Action & { type: "createPod" } {
  const { playbook } = state.input;
  const pod = buildPod({
    playbook: {
      name: playbook.metadata.name,
      namespace: playbook.metadata.namespace ?? "default",
      uid: playbook.metadata.uid ?? "",
    },
    spec: state.spec,
    limits: state.base.limits,
    defaults: state.defaults,
    generation: state.specGeneration,
    attempt,
    runStart,
    now: state.input.now,
    runnerImage: state.input.settings.runnerImage,
    pod: state.pod,
    name,
  });
  const text = pod.metadata.annotations[PLAN_ANNOTATION] ?? "";
  const read = parsePlan(text);
  // The digest of what the pod carries, read back as the controller reads any pod's plan.
  if (!read.ok) throw new Error(`the plan built for pod ${name} ${read.problem}`);
  return { type: "createPod", pod, attempt, planDigest: planDigest(read.plan) };
}

/**
 * The namespace's policy as it is now, against the pod about to be created: every pod, a first one
 * or one re-created after a loss, is checked. Undefined when it allows the pod.
 */
function policyRefusal(state: RunState, attempt: number): Decision | undefined {
  const { base } = state;
  const rules = rulesOf(state.input);
  const refused = checkPolicy(state.spec, base.limits, rules);
  if (refused.length === 0) return undefined;
  const why = refused.map((p) => `${p.path}: ${p.message}`).join("; ");
  const message =
    attempt === 1
      ? why
      : `pod ${podNameFor(state.input.playbook.metadata.name, attempt)} (attempt ${attempt}) was not created: the namespace's policy refuses the run's plan: ${why}`;
  const next = settledStatus(base, { reason: "InvalidSpec", message, tasks: cancelledTasks(base) });
  return settle(base, next, "InvalidSpec", {
    policyRefusals: [...new Set(refused.map((p) => p.field))],
    events: [{ type: "Warning", reason: "InvalidSpec", message: `Refused the spec: ${message}` }],
  });
}

function podCreatedEvent(state: RunState, action: Action & { type: "createPod" }): RecordedEvent {
  const deadline = Number(action.pod.spec.activeDeadlineSeconds);
  return {
    type: "Normal",
    reason: "PodCreated",
    message: `Created pod ${action.pod.metadata.name} (attempt ${action.attempt}) with activeDeadlineSeconds ${describeDeadline(state.base.limits, deadline)}`,
  };
}

/** The pod was lost: create the next attempt while backoffLimit allows, else the run fails PodLost. */
function decideLost(state: RunState, what: string): Decision {
  const { base } = state;
  const { backoffLimit } = state.pod;
  const ceilingAt = Date.parse(state.startTime) + base.limits.ceiling.ms;
  if (ceilingAt <= state.input.now.getTime()) {
    // A new pod would have no time left: the ceiling, not the loss, ends the run.
    const message = `the run's ${formatDuration(base.limits.ceiling.ms)} ceiling (${base.limits.ceiling.field}) passed; ${what}`;
    const next = settledStatus(base, {
      reason: "RunCeiling",
      message,
      tasks: cancelledTasks(base),
    });
    return settle(base, next, "RunCeiling");
  }
  if (state.attempts - 1 < backoffLimit) {
    const attempt = state.attempts + 1;
    const name = attemptPodName(state.input, attempt);
    if (name === undefined) return decideNamesTaken(state, attempt);
    const refused = policyRefusal(state, attempt);
    if (refused) return refused;
    const action = createPodAction(state, attempt, new Date(state.startTime), name);
    const next: PlaybookStatus = {
      ...progressStatus(base, {
        phase: "Pending",
        message: pendingMessage(action.pod.metadata.name, attempt),
        startTime: state.startTime,
        podName: action.pod.metadata.name,
        podAttempts: attempt,
      }),
      planDigest: action.planDigest,
    };
    return progress(base, next, {
      actions: [action],
      events: [
        {
          type: "Warning",
          reason: "PodLost",
          message: `${capitalise(what)}; created pod ${action.pod.metadata.name} (attempt ${attempt} of ${backoffLimit + 1}), the ceiling still counts from ${state.startTime}`,
        },
        ...nameTakenEvents(state.input, attempt, name),
        podCreatedEvent(state, action),
      ],
    });
  }
  const message = `${what}; the pod was lost ${state.attempts} time${state.attempts === 1 ? "" : "s"}, more than backoffLimit ${backoffLimit} allows`;
  const next = settledStatus(base, {
    reason: "PodLost",
    message,
    tasks: cancelledTasks(base),
  });
  return settle(base, next, "PodLost");
}

/** "killGrace 10s (spec.killGrace)": the grace a cancelled task gets, as the user set it. */
function describeKillGrace(limits: ResolvedLimits): string {
  return `killGrace ${formatDuration(limits.killGrace.ms)} (${limits.killGrace.field})`;
}

/** A cancel's deletion: the task's killGrace first, then the pod's grace period that covers it. */
function describeCancelGrace(limits: ResolvedLimits, graceSeconds: number): string {
  return `the runner gives the running task ${describeKillGrace(limits)}; the pod's grace period is ${graceSeconds}s, killGrace plus a margin for the report`;
}

/** How long past its activeDeadlineSeconds a running pod may go before the controller acts. */
export const BACKSTOP_SLACK_MS = 30_000;

/**
 * The same words at creation and while pending, so that a pass in between writes nothing; what
 * holds the pod (ErrImagePull, Unschedulable...) once it shows, so the run says why it waits.
 */
function pendingMessage(podName: string, attempt: number, hold?: string): string {
  return `pod ${podName} is pending (attempt ${attempt})${hold ? `: ${hold}` : ""}`;
}

function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
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
  if (read.ok) return settle(base, runStatusFromReport(base, read.report, run), read.report.reason);
  const deadline = podDeadline(pod);
  const waitUntil = (deadline?.at ?? 0) + terminationGraceSeconds(base.limits) * 1000 + BACKSTOP_SLACK_MS;
  if (!runnerEnded(pod) && waitUntil > state.input.now.getTime()) {
    return progress(base, base.previous, { requeueAfterMs: waitUntil - state.input.now.getTime() });
  }
  const message = `the run was cancelled (spec.cancel); pod ${podName} was stopped at its lowered activeDeadlineSeconds without a valid runner report (${describeKubeletVerdict(pod)}): ${read.ok ? "" : read.problem}`;
  const next = settledStatus(base, { reason: "Cancelled", message, tasks: cancelledTasks(base) });
  return settle(base, { ...next, podName, podAttempts: state.attempts }, "Cancelled");
}

/** A pod that ended: the runner's report decides, unless the kubelet's deadline or an eviction did. */
function decideEndedPod(state: RunState, pod: PodView): Decision {
  const { base, spec } = state;
  const podName = pod.metadata.name;
  const run = { startTime: state.startTime, podName, podAttempts: state.attempts };
  const disruption = disruptionOf(pod);
  // A cancelled run is not re-created after a disruption: the cancel decides its end.
  if (disruption && !state.cancel) return decideLost(state, `pod ${podName} ${disruption}`);
  const read = readReport(pod, spec.tasks.length);
  if (pod.status?.reason === "DeadlineExceeded" && state.cancel) return decideCancelledPod(state, pod, read);
  if (pod.status?.reason === "DeadlineExceeded") {
    const tasks = read.ok ? runStatusFromReport(base, read.report, run).tasks : base.previous.tasks;
    const message = `the kubelet stopped pod ${podName} at its activeDeadlineSeconds backstop: the run's ${formatDuration(base.limits.ceiling.ms)} ceiling (${base.limits.ceiling.field}) plus killGrace and a margin passed before the runner reported`;
    const next = settledStatus(base, {
      reason: "PodDeadlineExceeded",
      message,
      tasks: markUnfinished(tasks ?? [], "Cancelled"),
    });
    return settle(base, { ...next, podName, podAttempts: state.attempts }, "PodDeadlineExceeded");
  }
  if (read.ok) {
    if (read.report.reason === "Cancelled" && !state.cancel) {
      // The runner was interrupted by someone else than us: a node drain, a deletion.
      return decideLost(state, `pod ${podName} was stopped from outside (${describeKubeletVerdict(pod)})`);
    }
    const next = runStatusFromReport(base, read.report, run);
    return settle(base, next, read.report.reason);
  }
  if (pod.metadata.deletionTimestamp && !state.cancel) {
    return decideLost(
      state,
      `pod ${podName} was deleted before the runner reported (${describeKubeletVerdict(pod)})`,
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
  return settle(
    base,
    { ...next, podName, podAttempts: state.attempts },
    state.cancel ? "Cancelled" : "RunnerLost",
  );
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
  const giveUpAt = Date.parse(state.startTime) + base.limits.ceiling.ms + base.limits.killGrace.ms;
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
          message: `Lowered activeDeadlineSeconds of pod ${name} to ${elapsedSeconds}: spec.cancel is true; the kubelet stops it and keeps it for its logs, and the runner gives the running task ${describeKillGrace(base.limits)} between the cancel file and SIGTERM and the SIGKILL`,
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

function decideCancel(state: RunState, pod: PodView | undefined): Decision {
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
    tasks: cancelledTasks(base),
  });
  return settle(base, next, "Cancelled");
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
  const settled = settledStatus(base, { reason: "Cancelled", message, tasks: cancelledTasks(base) });
  return settle(base, { ...settled, podName: pod.metadata.name, podAttempts: state.attempts }, "Cancelled");
}

/**
 * The generation observedGeneration may claim for a run decided against its pod's plan: the
 * current one when the spec still says what the plan says (spec.cancel aside, which is applied),
 * else the one the plan was made from, as an edit after the pod's start is not applied.
 */
function appliedGeneration(
  playbook: StoredPlaybook,
  planSpec: PlaybookSpec,
  planGeneration: number | undefined,
  settings: ReconcileSettings,
): number | undefined {
  const current = validateSpec(playbook, settings.defaults);
  const same =
    current.ok && canonical({ ...current.spec, cancel: false }) === canonical({ ...planSpec, cancel: false });
  return same ? playbook.metadata.generation : (planGeneration ?? playbook.status?.observedGeneration);
}

/**
 * A pod whose plan the controller cannot check against what it recorded (changed after it was
 * created, or a pod it never recorded a plan for): what it runs is not the run's plan, so its
 * report cannot be the run's outcome. The run ends RunnerLost naming what was wrong, and the pod
 * is deleted.
 */
function decideUnverifiedPod(input: ReconcileInput, pod: PodView, problem: string): Decision {
  const previous = input.playbook.status ?? {};
  const base: StatusBase = {
    previous,
    generation: input.playbook.metadata.generation,
    now: input.now,
    limits: null,
  };
  const message = `${problem}; the controller takes no plan it did not record, so the run cannot go on and the pod was deleted`;
  const next = settledStatus(base, { reason: "RunnerLost", message, tasks: cancelledTasks(base) });
  return settle(base, { ...next, podName: pod.metadata.name }, "RunnerLost", {
    events: [{ type: "Warning", reason: "PlanRefused", message: capitalise(problem) }],
    actions: input.pods
      .filter((p) => !isPodFinished(p) && !p.metadata.deletionTimestamp)
      .map((p) => ({ type: "deletePod" as const, name: p.metadata.name, why: "finished" as const })),
  });
}

/** The whole decision for one Playbook. */
export function decide(input: ReconcileInput): Decision {
  const { playbook, now, settings } = input;
  const previous = playbook.status ?? {};
  if (isFinished(previous)) return decideFinished(input);
  const pod = currentPod(input.pods);
  const digest = previous.planDigest;
  const planned = pod
    ? digest === undefined
      ? adoptedPlan(input, pod)
      : podPlanned(pod, digest)
    : digest !== undefined
      ? rebuiltPlan(input, digest)
      : newPlan(input);
  if (!planned.ok && pod) return decideUnverifiedPod(input, pod, planned.message);
  const specGeneration = planned.ok ? planned.specGeneration : playbook.metadata.generation;
  const generation =
    pod && planned.ok ? appliedGeneration(playbook, planned.spec, specGeneration, settings) : specGeneration;
  const rules = rulesOf(input);
  if (!planned.ok) {
    const base: StatusBase = { previous, generation, now, limits: null };
    const next = settledStatus(base, { reason: "InvalidSpec", message: planned.message });
    return settle(base, next, "InvalidSpec", {
      ...(planned.policyRefusals ? { policyRefusals: planned.policyRefusals } : {}),
      events: [{ type: "Warning", reason: "InvalidSpec", message: `Refused the spec: ${planned.message}` }],
    });
  }
  const base = { previous, generation, now, limits: planned.limits };
  const attempts = Math.max(previous.podAttempts ?? 0, pod ? podAttemptOf(pod) : 0);
  const startTime = previous.startTime ?? planned.runStart ?? now.toISOString();
  const state: RunState = {
    base,
    spec: planned.spec,
    defaults: planned.defaults,
    pod: podSettings(planned.spec, rules),
    specGeneration,
    cancel: (playbook.spec as { cancel?: unknown } | undefined)?.cancel === true,
    input,
    attempts,
    startTime,
    planDigest: digest ?? planned.recordDigest,
  };
  const decision = decideRun(state, pod);
  // An adopted pod's plan goes on record with this pass's status.
  if (digest !== undefined || planned.recordDigest === undefined) return decision;
  return { ...decision, status: { ...(decision.status ?? previous), planDigest: planned.recordDigest } };
}

function decideRun(state: RunState, pod: PodView | undefined): Decision {
  const { input, base, attempts } = state;
  const previous = base.previous;

  if (state.cancel) return decideCancel(state, pod);
  if (!pod) {
    if (attempts === 0) {
      if (input.slots && !input.slots.free) return queuedDecision(base, input.slots);
      return decideFirstPod(state);
    }
    return decideLost(
      state,
      `pod ${previous.podName ?? podNameFor(input.playbook.metadata.name, attempts)} was deleted or lost with its node`,
    );
  }
  if (isPodFinished(pod)) return decideEndedPod(state, pod);
  return decideActivePod(state, pod);
}

/**
 * No pod was ever created: create the first attempt. The run starts at the first try, so a pod
 * the API server keeps refusing (403, a missing service account) ends when the ceiling passes.
 */
function decideFirstPod(state: RunState): Decision {
  const { base } = state;
  const { now } = state.input;
  if (Date.parse(state.startTime) + base.limits.ceiling.ms <= now.getTime()) {
    const why = base.previous.conditions?.find((c) => c.type === "Succeeded")?.message;
    const message = `the run's ${formatDuration(base.limits.ceiling.ms)} ceiling (${base.limits.ceiling.field}) passed before its pod could be created${why ? `: ${why}` : ""}`;
    return settle(base, settledStatus(base, { reason: "RunCeiling", message }), "RunCeiling");
  }
  const name = attemptPodName(state.input, 1);
  if (name === undefined) return decideNamesTaken(state, 1);
  const refused = policyRefusal(state, 1);
  if (refused) return refused;
  let action: Action & { type: "createPod" };
  try {
    action = createPodAction(state, 1, new Date(state.startTime), name);
  } catch (error) {
    if (!(error instanceof PlanTooLargeError)) throw error;
    // The CRD bounds the plan's text; escaped characters can still make its JSON too large.
    const next = settledStatus(base, { reason: "InvalidSpec", message: error.message });
    return settle(base, next, "InvalidSpec", {
      events: [{ type: "Warning", reason: "InvalidSpec", message: `Refused the spec: ${error.message}` }],
    });
  }
  const next: PlaybookStatus = {
    ...progressStatus(base, {
      phase: "Pending",
      message: pendingMessage(action.pod.metadata.name, 1),
      startTime: state.startTime,
      podName: action.pod.metadata.name,
      podAttempts: 1,
    }),
    planDigest: action.planDigest,
  };
  const events = [...nameTakenEvents(state.input, 1, name), podCreatedEvent(state, action)];
  // The start record, written right after the create in the same pass (its resourceVersion the
  // one this decision read: a spec edited since makes it conflict, and the next pass finds a pod
  // whose plan the spec no longer gives). From then on the API server refuses edits of the spec.
  return progress(base, next, { actions: [action], events });
}

/** A pod that has not ended: report its progress, unless it never started or outlived its deadline. */
function decideActivePod(state: RunState, pod: PodView): Decision {
  const { base, attempts, startTime } = state;
  const { now } = state.input;
  const running = pod.status?.phase === "Running";
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
  const hold = running ? undefined : describeHold(pod);
  const next = progressStatus(base, {
    phase: running ? "Running" : "Pending",
    message: running
      ? `pod ${pod.metadata.name} is running (attempt ${attempts})${pod.metadata.deletionTimestamp ? "; it is being deleted" : ""}`
      : pendingMessage(pod.metadata.name, attempts, hold),
    startTime,
    podName: pod.metadata.name,
    podAttempts: attempts,
  });
  const lookAgainAt = running ? backstopAt : Math.min(endsAt, startBy ?? endsAt);
  return progress(base, next, { requeueAfterMs: lookAgainAt - now.getTime() });
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
  const message = `pod ${pod.metadata.name} (attempt ${state.attempts}) never started: its runner did not start within the ${formatDuration(limit.ms)} start timeout (${limit.field}); ${why}`;
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
  const waiting = pod.status?.containerStatuses?.[0]?.state?.waiting;
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

/** The API server refused the pod as invalid (e.g. requests above limits): the run cannot start. */
export function decideRefusedPod(input: ReconcileInput, message: string): Decision {
  const { playbook, now, settings } = input;
  const previous = playbook.status ?? {};
  if (isFinished(previous)) return { status: null, actions: [], events: [] };
  const validated = validateSpec(playbook, settings.defaults, rulesOf(input), false);
  const base: StatusBase = {
    previous,
    generation: playbook.metadata.generation,
    now,
    limits: validated.ok ? validated.limits : null,
  };
  const next = settledStatus(base, { reason: "InvalidSpec", message });
  return settle(base, next, "InvalidSpec");
}
