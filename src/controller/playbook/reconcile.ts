// Reconcile decisions as a pure function of (Playbook, its pods, now, config): which spec governs
// the run (its pod's plan, the plan on record rebuilt, or a new one from the spec), then the
// decision against it: what to create or delete, the status to write and the events to record.
// The controller applies the decision.

import { canonical } from "../../api/plan.js";
import type { PlaybookSpec, PlaybookStatus } from "../../api/playbook.js";
import { podSettings } from "../../api/policy.js";
import { allTasksOf, resolveTaskContainers } from "../../api/task-images.js";
import type { RecordedEvent } from "../../runtime/events.js";
import {
  type Action,
  capitalise,
  type Decision,
  type ReconcileInput,
  type ReconcileSettings,
  type RunState,
  settle,
} from "../decision.js";
import { releaseActions } from "../kueue/kueue-finalizer.js";
import { queueStatus } from "../kueue/kueue-pod.js";
import { type PodView, podAttemptOf, type StoredPlaybook } from "../objects.js";
import type { FinishedRun } from "../pods/finished-run.js";
import { containersOutlivingRunner } from "../pods/outlived-runner.js";
import { podNameFor, RUNNER_RESOURCES } from "../pods/pod-builder.js";
import type { ForeignPod } from "../pods/pod-identity.js";
import { isPodFinished } from "../pods/pod-state.js";
import {
  adoptedPlan,
  newPlan,
  podPlanned,
  type RunPlanned,
  rebuiltPlan,
  rulesOf,
  validateSpec,
} from "../run-plan.js";
import { isFinished, type StatusBase, settledStatus } from "../status.js";
import { withCancelReason } from "./cancel-reason.js";
import { decideActivePod } from "./decide-active.js";
import { decideCancel } from "./decide-cancel.js";
import { decideEndedPod } from "./decide-ended.js";
import { queuedDecision } from "./decide-queued.js";
import { decideFirstPod, decideLost, pendingMessage } from "./decide-start.js";
import { foreignPodEvents, podChangeEvents, type TrustedPods, trustedPods } from "./trusted-pod.js";

// decide's input and output, named where its callers and tests look for it.
export type { Action, Decision, FinishedRun, ReconcileInput, ReconcileSettings };

/** The whole decision for one Playbook: which plan governs its run, then the decision against it. */
export function decide(stored: ReconcileInput): Decision {
  const decision = decideOnce(stored);
  // The finalizer comes off the pods the status on record shows the controller done with.
  const releases = releaseActions(stored.playbook.status, stored.pods);
  return releases.length > 0 ? { ...decision, actions: [...decision.actions, ...releases] } : decision;
}

function decideOnce(stored: ReconcileInput): Decision {
  const input = withUnrecordedStart(stored);
  const previous = input.playbook.status ?? {};
  // A finished run that recorded no pod UID (one finished before the record existed) is not sorted.
  if (isFinished(previous) && previous.podUID === undefined)
    return withCancelReason(input.playbook, decideFinished(input));
  const trusted = trustedPods(input);
  const decision = isFinished(previous)
    ? decideFinished(input, trusted.foreign)
    : decideRunOf({ ...input, pods: trustedOnly(input.pods, trusted) }, trusted, stored.playbook.status);
  const events = [
    ...foreignPodEvents(trusted.foreign),
    ...(trusted.pod && !isFinished(previous) ? podChangeEvents(trusted.pod) : []),
  ];
  return withCancelReason(
    input.playbook,
    events.length > 0 ? { ...decision, events: [...decision.events, ...events] } : decision,
  );
}

/**
 * The Playbook as if the start record of the first pod this controller created (and has not
 * written yet) were on it: the record rides on the run's next status write.
 */
function withUnrecordedStart(input: ReconcileInput): ReconcileInput {
  const record = input.unrecordedStart;
  const status = input.playbook.status;
  if (!record || status?.startTime !== undefined || isFinished(status)) return input;
  return { ...input, playbook: { ...input.playbook, status: { ...status, ...record } } };
}

/** The pods a decision may look at: every pod but the foreign ones. */
function trustedOnly(pods: readonly PodView[], trusted: TrustedPods): PodView[] {
  const foreign = new Set(trusted.foreign.map((f) => f.pod));
  return pods.filter((pod) => !foreign.has(pod));
}

function decideRunOf(
  input: ReconcileInput,
  trusted: TrustedPods,
  stored: PlaybookStatus | undefined,
): Decision {
  const previous = input.playbook.status ?? {};
  const pod = trusted.pod;
  const planned = governingPlan(input, pod);
  if (!planned.ok) {
    return pod ? decideUnverifiedPod(input, pod, planned.message) : decideInvalidSpec(input, planned);
  }
  const state = runStateOf(input, pod, planned);
  const decision = recordPod(
    deferStartRecord(input, stored, pod, withQueueStatus(state, decideRun(state, pod))),
    pod,
  );
  // An adopted pod's plan goes on record with this pass's status.
  if (previous.planDigest !== undefined || planned.recordDigest === undefined || !decision.status)
    return decision;
  return { ...decision, status: { ...decision.status, planDigest: planned.recordDigest } };
}

/**
 * How long a first pod may be merely pending (no hold to show) before its run's start record is
 * written on its own: the record rides on the Running write when the pod starts within this.
 */
export const START_RECORD_WAIT_MS = 3000;

/**
 * A run that has recorded nothing yet, whose first pod is only on its way up: the Pending status
 * and the start record wait for the next news (Running, a hold, the outcome) up to
 * START_RECORD_WAIT_MS after the pod's creation, so that a common run writes its status twice.
 */
function deferStartRecord(
  input: ReconcileInput,
  stored: PlaybookStatus | undefined,
  pod: PodView | undefined,
  decision: Decision,
): Decision {
  const status = decision.status;
  if (!pod || !status || decision.finished || stored?.startTime !== undefined) return decision;
  if (status.phase !== "Pending" || decision.actions.length > 0) return decision;
  const said = status.conditions?.find((c) => c.type === "Succeeded")?.message;
  if (said !== pendingMessage(pod.metadata.name, podAttemptOf(pod))) return decision;
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  const waitMs = Number.isNaN(created) ? 0 : created + START_RECORD_WAIT_MS - input.now.getTime();
  if (waitMs <= 0) return decision;
  const requeueAfterMs = Math.min(decision.requeueAfterMs ?? waitMs, waitMs);
  return { ...decision, status: null, requeueAfterMs };
}

/**
 * The pod's UID goes on record with the status that names it (the start record rides on the
 * first status write after the create). A status naming a pod about to be created gets its UID from
 * the writer, after the create.
 */
function recordPod(decision: Decision, pod: PodView | undefined): Decision {
  const status = decision.status;
  if (!status) return decision;
  if (pod?.metadata.uid !== undefined && status.podName === pod.metadata.name) {
    return status.podUID === pod.metadata.uid
      ? decision
      : { ...decision, status: { ...status, podUID: pod.metadata.uid } };
  }
  if (status.podUID === undefined) return decision;
  const { podUID: _other, ...rest } = status;
  return { ...decision, status: rest };
}

/**
 * Which plan governs the run: the one its pod carries (checked against the digest on record, or
 * adopted when none was recorded yet), else the recorded one rebuilt, else a new one from the spec.
 */
function governingPlan(input: ReconcileInput, pod: PodView | undefined): RunPlanned {
  const digest = input.playbook.status?.planDigest;
  if (pod) return digest === undefined ? adoptedPlan(input, pod) : podPlanned(pod, digest);
  return digest === undefined ? newPlan(input) : rebuiltPlan(input, digest);
}

/** No pod, and the spec gives no plan the namespace allows: the run ends before a pod exists. */
function decideInvalidSpec(input: ReconcileInput, planned: Extract<RunPlanned, { ok: false }>): Decision {
  const { playbook, now } = input;
  const base: StatusBase = {
    previous: playbook.status ?? {},
    generation: playbook.metadata.generation,
    now,
    limits: null,
  };
  const next = settledStatus(base, { reason: "InvalidSpec", message: planned.message });
  return settle(base, next, "InvalidSpec", {
    ...(planned.policyRefusals ? { policyRefusals: planned.policyRefusals } : {}),
    events: [{ type: "Warning", reason: "InvalidSpec", message: `Refused the spec: ${planned.message}` }],
  });
}

/** The run as decided against its plan: the plan's spec and limits, and what its status kept. */
function runStateOf(
  input: ReconcileInput,
  pod: PodView | undefined,
  planned: Extract<RunPlanned, { ok: true }>,
): RunState {
  const { playbook, now, settings } = input;
  const previous = playbook.status ?? {};
  const { specGeneration } = planned;
  const generation = pod
    ? appliedGeneration(playbook, planned.spec, specGeneration, settings)
    : specGeneration;
  const podChoices = podSettings(planned.spec, rulesOf(input));
  // The finally tasks' images count on after the main tasks', as the pod's containers are resolved.
  const placed = resolveTaskContainers(
    allTasksOf(planned.spec).map(({ task }) => task),
    podChoices.image,
  ).tasks;
  const images = placed.map((t) => t.image);
  const mainCount = planned.spec.tasks.length;
  return {
    base: { previous, generation, now, limits: planned.limits },
    spec: planned.spec,
    defaults: planned.defaults,
    pod: podChoices,
    taskImages: images.slice(0, mainCount),
    finallyImages: images.slice(mainCount),
    taskContainers: placed.map((t) => t.container),
    specGeneration,
    cancel: (playbook.spec as { cancel?: unknown } | undefined)?.cancel === true,
    input,
    attempts: Math.max(previous.podAttempts ?? 0, pod ? podAttemptOf(pod) : 0),
    startTime: previous.startTime ?? planned.runStart ?? now.toISOString(),
    planDigest: previous.planDigest ?? planned.recordDigest,
  };
}

/**
 * A run through Kueue shows its queue and what its pod asks of the quota on every status it
 * writes (kueue-pod.ts); a run without a queue shows none.
 */
function withQueueStatus(state: RunState, decision: Decision): Decision {
  const queue = state.pod.queue;
  if (!queue) return decision;
  const containers = new Set([...state.taskImages, ...state.finallyImages]).size;
  const shown = queueStatus(queue, state.spec, state.pod.resources, RUNNER_RESOURCES.requests, containers);
  const { status, pending } = decision;
  return {
    ...decision,
    status: status ? { ...status, queue: shown } : status,
    ...(pending ? { pending: { ...pending, queue: shown } } : {}),
  };
}

/** The decision against the governing plan: cancel, queue, create, re-create after a loss, or follow the pod. */
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
 * A finished run: nothing to decide but removing its pods once ttlSecondsAfterFinished passed.
 * Foreign pods (pod-identity.ts) are not the run's: they are left to their owner's deletion.
 */
export function decideFinished(input: ReconcileInput, foreign: readonly ForeignPod[] = []): Decision {
  const status = input.playbook.status ?? {};
  const spec = input.playbook.spec as { ttlSecondsAfterFinished?: unknown } | undefined;
  const ttlSeconds =
    typeof spec?.ttlSecondsAfterFinished === "number"
      ? spec.ttlSecondsAfterFinished
      : (rulesOf(input).defaults.ttlSecondsAfterFinished ?? input.settings.ttlSecondsAfterFinished);
  const actions: Action[] = [];
  const events: RecordedEvent[] = [];
  const notOurs = new Set(foreign.map((f) => f.pod));
  const live = input.pods.filter((pod) => !pod.metadata.deletionTimestamp && !notOurs.has(pod));
  for (const pod of live) {
    const outliving = containersOutlivingRunner(pod);
    if (!isPodFinished(pod) || outliving.length > 0) {
      actions.push({ type: "deletePod", name: pod.metadata.name, why: "finished" });
    }
    if (outliving.length > 0) {
      events.push({
        type: "Warning",
        reason: "TaskContainersOutlivedRunner",
        message: `Deleted pod ${pod.metadata.name}: its runner ended while task container(s) ${outliving.join(", ")} still ran`,
      });
    }
  }
  const finishedPods = live.filter(
    (pod) => isPodFinished(pod) && containersOutlivingRunner(pod).length === 0,
  );
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
  const next = settledStatus(base, { reason: "RunnerLost", message });
  return settle(base, { ...next, podName: pod.metadata.name }, "RunnerLost", {
    events: [{ type: "Warning", reason: "PlanRefused", message: capitalise(problem) }],
    actions: input.pods
      .filter((p) => !isPodFinished(p) && !p.metadata.deletionTimestamp)
      .map((p) => ({ type: "deletePod" as const, name: p.metadata.name, why: "finished" as const })),
  });
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
