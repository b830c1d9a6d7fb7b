// Creating the run's pods: the first attempt, the next one after a loss (while backoffLimit
// allows), each checked against the namespace's policy and named so a held name is never reused.
import { formatDuration } from "../../api/duration.js";
import { PLAN_ANNOTATION, PlanTooLargeError, parsePlan, planDigest } from "../../api/plan.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import { checkPolicy } from "../../api/policy.js";
import type { RecordedEvent } from "../../runtime/events.js";
import {
  type Action,
  capitalise,
  type Decision,
  progress,
  type ReconcileInput,
  type RunState,
  settle,
} from "../decision.js";
import { ceilingStartMs, queuedMsAfter } from "../kueue/queued-time.js";
import { archivedLogCap } from "../log-archive/archive-pass.js";
import type { PodView } from "../objects.js";
import { alternatePodName, buildPod, podNameFor } from "../pods/pod-builder.js";
import { rulesOf } from "../run-plan.js";
import { describeDeadline, progressStatus, settledStatus } from "../status.js";

/**
 * No pod was ever created: create the first attempt. The run starts at the first try, so a pod
 * the API server keeps refusing (403, a missing service account) ends when the ceiling passes.
 */
export function decideFirstPod(state: RunState): Decision {
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
  // A run that shows a status already (queued, a refused create) is told of its pod at once, in
  // the same pass. Otherwise no status write: the start record (startTime, podName, podUID,
  // planDigest) rides on the next one, when the pod runs, shows what holds it, or has been pending
  // START_RECORD_WAIT_MS (reconcile.ts); `pending` is shown only if the create fails.
  if (base.previous.conditions !== undefined) return progress(base, next, { actions: [action], events });
  return { status: null, pending: next, actions: [action], events };
}

/** The pod was lost: create the next attempt while backoffLimit allows, else the run fails PodLost. */
export function decideLost(state: RunState, what: string, lost?: PodView): Decision {
  const { base } = state;
  const { backoffLimit } = state.pod;
  const ended = ceilingPassed(state, what, lost);
  if (ended) return ended;
  // Pods re-created after a preemption spent no attempt of backoffLimit (kueue-preemption.ts).
  const preemptions = base.previous.preemptions ?? 0;
  if (state.attempts - 1 - preemptions < backoffLimit) {
    return nextPod(state, lost, {}, (action, attempt, counts) => [
      {
        type: "Warning",
        reason: "PodLost",
        message: `${capitalise(what)}; created pod ${action.pod.metadata.name} (attempt ${attempt} of ${backoffLimit + 1 + preemptions}), ${counts}`,
      },
    ]);
  }
  const losses = state.attempts - preemptions;
  const message = `${what}; the pod was lost ${losses} time${losses === 1 ? "" : "s"}, more than backoffLimit ${backoffLimit} allows`;
  const next = settledStatus(base, {
    reason: "PodLost",
    message,
  });
  return settle(base, next, "PodLost");
}

/**
 * The run's ceiling passed: a new pod would have no time left, so the ceiling, not `what`, ends the
 * run. It counts from the run's start, less the time its pods, `ended` the last, waited in Kueue's queue.
 */
export function ceilingPassed(state: RunState, what: string, ended?: PodView): Decision | undefined {
  const { base } = state;
  const queued = queuedMsAfter(base.previous, ended, state.input.workloads);
  const ceilingAt = Date.parse(state.startTime) + queued + base.limits.ceiling.ms;
  if (ceilingAt > state.input.now.getTime()) return undefined;
  const message = `the run's ${formatDuration(base.limits.ceiling.ms)} ceiling (${base.limits.ceiling.field}) passed; ${what}`;
  return settle(base, settledStatus(base, { reason: "RunCeiling", message }), "RunCeiling");
}

/**
 * The run's next pod after its pod `ended` was lost or preempted: it runs the plan from its first
 * task, the ceiling still counting from the run's start, less the time its pods waited in Kueue's
 * queue (status.queuedMs). `said` are the events that say why, before the pod's own, given the
 * words on the ceiling; `extra` goes on the status (preemptions).
 */
export function nextPod(
  state: RunState,
  ended: PodView | undefined,
  extra: Pick<PlaybookStatus, "preemptions">,
  said: (action: Action & { type: "createPod" }, attempt: number, ceiling: string) => RecordedEvent[],
): Decision {
  const { base } = state;
  const attempt = state.attempts + 1;
  const name = attemptPodName(state.input, attempt);
  if (name === undefined) return decideNamesTaken(state, attempt);
  const refused = policyRefusal(state, attempt);
  if (refused) return refused;
  const queued = queuedMsAfter(base.previous, ended, state.input.workloads);
  const action = createPodAction(state, attempt, new Date(state.startTime), name, queued);
  // The new pod runs the plan from its first task: the lost pod's live progress is not its.
  const { tasks: _tasks, currentTask: _current, ...fresh } = base.previous;
  const next: PlaybookStatus = {
    ...progressStatus(
      { ...base, previous: fresh },
      {
        phase: "Pending",
        message: pendingMessage(action.pod.metadata.name, attempt),
        startTime: state.startTime,
        podName: action.pod.metadata.name,
        podAttempts: attempt,
      },
    ),
    ...extra,
    ...(queued > 0 ? { queuedMs: queued } : {}),
    planDigest: action.planDigest,
  };
  const counts = `the ceiling still counts from ${state.startTime}${queued > 0 ? `, less the ${formatDuration(queued)} its pods waited in Kueue's queue` : ""}`;
  return progress(base, next, {
    actions: [action],
    events: [
      ...said(action, attempt, counts),
      ...nameTakenEvents(state.input, attempt, name),
      podCreatedEvent(state, action),
    ],
  });
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
  const ceilingAt = ceilingStartMs(state.startTime, base.previous) + base.limits.ceiling.ms;
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
  queuedMs?: number,
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
    queuedMs,
    now: state.input.now,
    runnerImage: state.input.settings.runnerImage,
    ...(state.input.settings.agentDelivery ? { agentDelivery: state.input.settings.agentDelivery } : {}),
    ...(state.input.settings.userNamespaces ? { userNamespaces: true } : {}),
    ...(state.input.settings.logUpload ? { logUpload: true } : {}),
    pod: state.pod,
    name,
  });
  const text = pod.metadata.annotations[PLAN_ANNOTATION] ?? "";
  const read = parsePlan(text);
  // The digest of what the pod carries, read back as the controller reads any pod's plan.
  if (!read.ok) throw new Error(`the plan built for pod ${name} ${read.problem}`);
  const logUpload = state.input.settings.logUpload
    ? {
        capBytes: archivedLogCap(rulesOf(state.input)),
        // The URLs outlive the run's ceiling by an hour: a runner's last flush is never refused for age.
        validForSeconds: Math.ceil(state.base.limits.ceiling.ms / 1000) + 3600,
      }
    : undefined;
  return {
    type: "createPod",
    pod,
    attempt,
    planDigest: planDigest(read.plan),
    ...(logUpload ? { logUpload } : {}),
  };
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
  const next = settledStatus(base, { reason: "InvalidSpec", message });
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

/**
 * The same words at creation and while pending, so that a pass in between writes nothing; what
 * holds the pod (ErrImagePull, Unschedulable...) once it shows, so the run says why it waits.
 */
export function pendingMessage(podName: string, attempt: number, hold?: string): string {
  return `pod ${podName} is pending (attempt ${attempt})${hold ? `: ${hold}` : ""}`;
}
