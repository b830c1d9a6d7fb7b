// Which pod a pass reads for the run's outcome: the one the controller created (pods/pod-identity.ts).
// The pod status.podUID names (or the start record this controller has not written yet); before
// that record, one that is, field for field, what pod-builder builds from the plan it carries for
// its attempt (a controller stopped between the create and the record). Every other pod that carries
// the run's owner reference is foreign: named in a Warning event, never read, adopted or counted.
import { resolveLimits } from "../../api/limits.js";
import { PLAN_ANNOTATION, parsePlan } from "../../api/plan.js";
import { podSettings } from "../../api/policy.js";
import type { RecordedEvent } from "../../runtime/events.js";
import type { ReconcileInput } from "../decision.js";
import { type PodView, podAttemptOf } from "../objects.js";
import type { AgentDelivery } from "../pods/agent-delivery.js";
import { builtPodDifference } from "../pods/built-pod-difference.js";
import { podChanges } from "../pods/changed-pod.js";
import { buildPod } from "../pods/pod-builder.js";
import { CREATE_SKEW_MS, type ForeignPod, sortRunPods } from "../pods/pod-identity.js";
import { podPlanGeneration, runnerEndOf } from "../pods/pod-state.js";
import { podServiceAccountToken, withoutServiceAccountToken } from "../pods/service-account-token.js";
import { rulesOf } from "../run-plan.js";

export interface TrustedPods {
  /** The pod of the current attempt, if the controller created one that still exists. */
  pod?: PodView;
  foreign: ForeignPod[];
}

const DELIVERIES: readonly AgentDelivery[] = ["post-start", "image-volume"];
/** The controller's current delivery first: the pod most likely built with it. */
const deliveriesFirst = (current: AgentDelivery) => [current, ...DELIVERIES.filter((d) => d !== current)];

/**
 * What makes the pod other than the controller builds it for its attempt, from the plan it
 * carries, at its creation; undefined when it is that pod, field for field (under either agent
 * delivery and either user-namespace choice, which the controller may have switched since the
 * create, with or without the token).
 */
export function unbuiltReason(input: ReconcileInput, pod: PodView): string | undefined {
  const text = pod.metadata.annotations?.[PLAN_ANNOTATION];
  if (text === undefined) return `it has no ${PLAN_ANNOTATION} annotation`;
  const read = parsePlan(text);
  if (!read.ok) return `its ${PLAN_ANNOTATION} annotation ${read.problem}`;
  const { plan } = read;
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  if (Number.isNaN(created)) return "it has no creationTimestamp";
  const { name, namespace = "default", uid = "" } = input.playbook.metadata;
  const limits = resolveLimits(plan.spec, plan.defaults);
  const runStart = new Date(plan.runStartTime);
  const current = input.settings.agentDelivery ?? "post-start";
  const observed = input.placements?.[pod.metadata.uid ?? ""] ?? {};
  // The controller may have switched its user-namespace choice since the create too.
  const userNamespaces = input.settings.userNamespaces ?? false;
  const choices = deliveriesFirst(current).flatMap((agentDelivery) =>
    [userNamespaces, !userNamespaces].map((withUserNamespace) => ({ agentDelivery, withUserNamespace })),
  );
  let first: string | undefined;
  for (const { agentDelivery, withUserNamespace } of choices) {
    const built = buildPod({
      playbook: { name, namespace, uid },
      spec: plan.spec,
      limits,
      defaults: plan.defaults,
      generation: podPlanGeneration(pod),
      attempt: podAttemptOf(pod),
      runStart,
      queuedMs: plan.queuedMs,
      now: new Date(created),
      runnerImage: input.settings.runnerImage,
      agentDelivery,
      userNamespaces: withUserNamespace,
      pod: podSettings(plan.spec, rulesOf(input)),
      name: pod.metadata.name,
    });
    // Created without the token when its service account refuses automounting (writer.ts).
    const variants = podServiceAccountToken(built) ? [built, withoutServiceAccountToken(built)] : [built];
    for (const variant of variants) {
      const difference = builtPodDifference(pod, variant, CREATE_SKEW_MS, observed);
      if (difference === undefined) return undefined;
      first ??= difference;
    }
  }
  return first;
}

/** The pod the pass reads, and the foreign ones. */
export function trustedPods(input: ReconcileInput): TrustedPods {
  const status = input.playbook.status ?? {};
  const { name, uid = "" } = input.playbook.metadata;
  const sorted = sortRunPods(status, input.pods, { name, uid });
  if (sorted.recorded) return { pod: sorted.recorded, foreign: sorted.foreign };
  const foreign = [...sorted.foreign];
  let pod: PodView | undefined;
  // The latest attempt first: an earlier one the controller created is simply not current.
  for (const candidate of [...sorted.unrecorded].sort((a, b) => podAttemptOf(b) - podAttemptOf(a))) {
    const why = unbuiltReason(input, candidate);
    if (why !== undefined) {
      foreign.push({ pod: candidate, why: `it is not built as the controller builds its attempt: ${why}` });
    } else if (!pod) {
      pod = candidate;
    }
  }
  return { ...(pod ? { pod } : {}), foreign };
}

/** One Warning per foreign pod; `once` keeps the writer from posting it again on later passes. */
export function foreignPodEvents(foreign: readonly ForeignPod[]): RecordedEvent[] {
  return foreign.map(({ pod, why }) => ({
    type: "Warning",
    reason: "ForeignPod",
    message: `Pod ${pod.metadata.name} carries this Playbook's controller reference, but the controller did not create it (${why}): it is not read, adopted or counted`,
    once: `foreign-pod/${pod.metadata.uid ?? pod.metadata.name}`,
  }));
}

/**
 * One Warning per change of the run's pod since its creation that could reach its runner or its
 * tasks (changed-pod.ts), said once, as soon as a pass sees it: what comes of it for the run.
 */
export function podChangeEvents(pod: PodView): RecordedEvent[] {
  const name = pod.metadata.name;
  return podChanges(pod, runnerEndOf(pod)).map((change) => ({
    type: "Warning",
    reason: "PodChanged",
    message:
      change.reach === "runner"
        ? `Pod ${name} was changed after its creation: ${change.what}: its runner's report is not trusted, and the run ends RunnerLost`
        : `Pod ${name} was changed after its creation: ${change.what}: the runner's report still decides the run, marked unverified`,
    once: `pod-changed/${pod.metadata.uid ?? name}/${change.key}`,
  }));
}
