// Where a run's plan comes from, as pure functions of the Playbook, its pod and the rules: a new
// run's spec checked against the namespace's rules, the pod's plan when it hashes to the digest the
// run recorded (status.planDigest), a plan rebuilt from the frozen spec and the status for a pod
// re-created after a loss, or a pod found before the run recorded its plan, adopted only when its
// plan is the one the spec gives.
import { parseDuration } from "../api/duration.js";
import {
  type LimitDefaults,
  type PolicyLimitDefaults,
  type ResolvedLimits,
  resolveLimits,
} from "../api/limits.js";
import { InvalidPlaybookError, validatePlaybook } from "../api/manifest.js";
import { PLAN_ANNOTATION, parsePlan, planDigest, type RunPlan } from "../api/plan.js";
import type { PlaybookSpec, PlaybookStatus } from "../api/playbook.js";
import {
  checkPolicy,
  clusterRules,
  type NamespaceRules,
  podSettings,
  policyLimitDefaults,
} from "../api/policy.js";
import type { ReconcileInput, ReconcileSettings } from "./decision.js";
import type { PodView, StoredPlaybook } from "./objects.js";
import { planDefaults, planDefaultsFromStatus, verifiedPodPlan } from "./plan-digest.js";
import { buildPlan } from "./pods/pod-builder.js";
import { podPlanGeneration } from "./pods/pod-state.js";

/** The rules the input names, or those of the controller's flags. */
export function rulesOf(input: {
  rules?: NamespaceRules | undefined;
  settings: ReconcileSettings;
}): NamespaceRules {
  return (
    input.rules ??
    clusterRules({
      runnerImage: input.settings.runnerImage,
      allowedServiceAccounts: input.settings.allowedServiceAccounts ?? [],
      allowedImages: input.settings.allowedImages ?? [],
      defaultQueueName: input.settings.defaultQueueName,
    })
  );
}

export type Validated =
  | { ok: true; spec: PlaybookSpec; limits: ResolvedLimits; defaults: LimitDefaults }
  | { ok: false; message: string; policyRefusals?: string[] };

/**
 * The spec checked and its limits resolved under the namespace's rules: their defaults always,
 * their maximums and allowlists only when `enforce` (a run not started yet: a policy edited later
 * does not end a run that started under the old one).
 */
export function validateSpec(
  playbook: StoredPlaybook,
  controllerDefaults: LimitDefaults,
  rules?: NamespaceRules,
  enforce = true,
  startedWith?: PolicyLimitDefaults,
): Validated {
  const policy = startedWith ?? (rules ? policyLimitDefaults(rules) : undefined);
  const defaults: LimitDefaults = policy ? { ...controllerDefaults, policy } : controllerDefaults;
  try {
    const parsed = validatePlaybook(
      {
        apiVersion: playbook.apiVersion,
        kind: playbook.kind,
        metadata: { name: playbook.metadata.name, namespace: playbook.metadata.namespace },
        spec: playbook.spec,
      },
      defaults,
      `${playbook.metadata.namespace}/${playbook.metadata.name}`,
    );
    const limits = resolveLimits(parsed.spec, defaults);
    const refused = rules && enforce ? checkPolicy(parsed.spec, limits, rules) : [];
    if (refused.length > 0) {
      return {
        ok: false,
        message: refused.map((p) => `${p.path}: ${p.message}`).join("; "),
        policyRefusals: [...new Set(refused.map((p) => p.field))],
      };
    }
    return { ok: true, spec: parsed.spec, limits, defaults };
  } catch (error) {
    if (error instanceof InvalidPlaybookError) {
      return { ok: false, message: error.problems.map((p) => `${p.path}: ${p.message}`).join("; ") };
    }
    throw error;
  }
}

/**
 * The policy's limits a started run took, from its status: a pod re-created after a loss keeps
 * them whatever the policy says now (its lost pod's plan carried them).
 */
function policyLimitsStartedWith(status: PlaybookStatus): PolicyLimitDefaults | undefined {
  if (!status.startTime || !status.limits) return undefined;
  const from = (limit: { value: string; source: string } | undefined) =>
    limit?.source === "policy" ? parseDuration(limit.value) : undefined;
  const {
    ceiling,
    stall,
    killGrace,
    startTimeout,
    finallyCeiling,
    queueTimeout,
    taskTimeout,
    maxPreemptions,
  } = status.limits;
  const { retryDelay, retryBackoff, retryMaxDelay } = status.limits;
  return {
    ceilingMs: from(ceiling),
    stallMs: from(stall),
    killGraceMs: from(killGrace),
    startTimeoutMs: from(startTimeout),
    finallyCeilingMs: from(finallyCeiling),
    queueTimeoutMs: from(queueTimeout),
    taskTimeoutMs: from(taskTimeout),
    maxPreemptions: maxPreemptions?.source === "policy" ? maxPreemptions.value : undefined,
    retryDelayMs: from(retryDelay),
    retryBackoff: retryBackoff?.source === "policy" ? Number(retryBackoff.value) : undefined,
    retryMaxDelayMs: from(retryMaxDelay),
  };
}

/** The plan a run is decided against: its spec, limits and the defaults they resolved with. */
export type RunPlanned =
  | (Validated & {
      ok: true;
      runStart?: string;
      specGeneration: number | undefined;
      /** The digest to record: the plan of a pod adopted before the run recorded one. */
      recordDigest?: string;
    })
  | (Validated & { ok: false });

/** How far a plan's runStartTime may be after its pod's creationTimestamp (the two clocks differ). */
const CLOCK_SKEW_MS = 2_000;

/** The digest of a plan built from `spec` and `defaults`, started at `runStart`. */
function digestOfPlan(
  input: ReconcileInput,
  spec: PlaybookSpec,
  defaults: LimitDefaults,
  runStart: string,
): string {
  const { name, namespace = "default", uid = "" } = input.playbook.metadata;
  const plan = buildPlan({
    playbook: { name, namespace, uid },
    spec,
    limits: resolveLimits(spec, defaults),
    defaults,
    attempt: 0,
    runStart: new Date(runStart),
    now: input.now,
    runnerImage: input.settings.runnerImage,
    // The tasks' containers follow the default image the namespace's rules give, as the pod's did.
    pod: podSettings(spec, rulesOf(input)),
  });
  const read = parsePlan(JSON.stringify(plan));
  return read.ok ? planDigest(read.plan) : "an invalid plan";
}

/**
 * A pod of a run whose status recorded no plan: the controller stopped between the pod's create
 * and the start record written right after it. Its plan is taken, and recorded, only when it is
 * the very plan the spec gives now under the namespace's rules, started no later than the pod.
 */
export function adoptedPlan(input: ReconcileInput, pod: PodView): RunPlanned {
  const refused = (why: string): RunPlanned => ({
    ok: false,
    message: `pod ${pod.metadata.name} exists but the run recorded no plan (status.planDigest is not set), and ${why}`,
  });
  const text = pod.metadata.annotations?.[PLAN_ANNOTATION];
  if (text === undefined) return refused(`it has no ${PLAN_ANNOTATION} annotation`);
  const read = parsePlan(text);
  if (!read.ok) return refused(`its ${PLAN_ANNOTATION} annotation ${read.problem}`);
  const { plan } = read;
  const fresh = newPlan(input);
  if (!fresh.ok) return refused(`the spec gives no plan: ${fresh.message}`);
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  if (Number.isNaN(created) || Date.parse(plan.runStartTime) > created + CLOCK_SKEW_MS) {
    return refused(
      `its plan's runStartTime ${plan.runStartTime} is after the pod's creation ${pod.metadata.creationTimestamp ?? "(unknown)"}`,
    );
  }
  const found = planDigest(plan);
  const given = digestOfPlan(input, fresh.spec, fresh.defaults, plan.runStartTime);
  if (found !== given) {
    return refused(
      `its ${PLAN_ANNOTATION} annotation is not the plan the spec gives: it hashes to ${found}, the spec and the namespace's rules give ${given}`,
    );
  }
  return { ...plannedFromPod(plan, pod), recordDigest: found };
}

/** The plan of the run's pod, when it is the one the status records (status.planDigest). */
export function podPlanned(pod: PodView, digest: string): RunPlanned {
  const read = verifiedPodPlan(pod, digest);
  if (!read.ok) return { ok: false, message: read.problem };
  return plannedFromPod(read.plan, pod);
}

/** What a run is decided against when its pod's plan was taken. */
function plannedFromPod(plan: RunPlan, pod: PodView): RunPlanned & { ok: true } {
  return {
    ok: true,
    spec: plan.spec,
    limits: resolveLimits(plan.spec, plan.defaults),
    defaults: plan.defaults,
    runStart: plan.runStartTime,
    specGeneration: podPlanGeneration(pod),
  };
}

/**
 * The plan of a run that recorded one but has no pod (lost, or not created yet): rebuilt from the
 * spec (frozen since the digest was written) and the status, and checked against the digest.
 */
export function rebuiltPlan(input: ReconcileInput, digest: string): RunPlanned {
  const { playbook } = input;
  const previous = playbook.status ?? {};
  const defaults = planDefaultsFromStatus(previous);
  const unrebuildable = (why: string): RunPlanned => ({
    ok: false,
    message: `the run's plan (status.planDigest ${digest}) cannot be rebuilt for its next pod: ${why}`,
  });
  if (!defaults || !previous.startTime) return unrebuildable("its status has no startTime or limits");
  const validated = validateSpec(playbook, defaults, undefined, false);
  if (!validated.ok) return unrebuildable(validated.message);
  // spec.cancel, the one field that may change during a run, was false in every plan with a pod.
  const spec = { ...validated.spec, cancel: false };
  const found = digestOfPlan(input, spec, defaults, previous.startTime);
  if (found !== digest) return unrebuildable(`the spec and status now give ${found}`);
  return {
    ok: true,
    spec,
    limits: resolveLimits(spec, defaults),
    defaults,
    specGeneration: playbook.metadata.generation,
  };
}

/** The plan of a run that recorded none: the spec, checked against the namespace's rules. */
export function newPlan(input: ReconcileInput): RunPlanned {
  const { playbook, settings } = input;
  const previous = playbook.status ?? {};
  const validated = validateSpec(
    playbook,
    settings.defaults,
    rulesOf(input),
    true,
    policyLimitsStartedWith(previous),
  );
  if (!validated.ok) return validated;
  // The plan carries the limits as resolved: the spec and status.limits are enough to rebuild it.
  return {
    ...validated,
    defaults: planDefaults(validated.limits),
    specGeneration: playbook.metadata.generation,
  };
}
