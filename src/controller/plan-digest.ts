// The plan a run's pods are built from, anchored in the run's status. Its digest is written to
// status.planDigest (which only the status subresource, the controller's, can change) with the
// first pod's create; a pod's playbook.dev/plan annotation is taken only when it hashes to that
// digest, and a pod re-created after a loss is built from a plan rebuilt from the frozen spec and
// the status, checked against the same digest. The plan's defaults are the run's resolved limits,
// so that the spec and status.limits are enough to rebuild it, whatever the controller's
// configuration or the namespace's policy say by then.
import { PLAN_ANNOTATION, parsePlan, planDigest, type RunPlan } from "../api/plan.js";
import type { PodView } from "./objects.js";

export { planDefaults, planDefaultsFromStatus } from "../api/held-limits.js";

export type PodPlan = { ok: true; plan: RunPlan } | { ok: false; problem: string };

/**
 * The pod's plan when it is the one the run recorded (status.planDigest), else what is wrong with
 * it, in words naming the pod, the annotation and both digests.
 */
export function verifiedPodPlan(pod: PodView, digest: string): PodPlan {
  const name = pod.metadata.name;
  const text = pod.metadata.annotations?.[PLAN_ANNOTATION];
  if (text === undefined) {
    return { ok: false, problem: `pod ${name} has no ${PLAN_ANNOTATION} annotation` };
  }
  const read = parsePlan(text);
  if (!read.ok) {
    return { ok: false, problem: `the ${PLAN_ANNOTATION} annotation of pod ${name} ${read.problem}` };
  }
  const found = planDigest(read.plan);
  if (found !== digest) {
    return {
      ok: false,
      problem: `the ${PLAN_ANNOTATION} annotation of pod ${name} is not the plan the run started with: it hashes to ${found}, status.planDigest is ${digest}; it was changed after the controller created the pod`,
    };
  }
  return { ok: true, plan: read.plan };
}
