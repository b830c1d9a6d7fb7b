// A policy's own consistency: do its defaults fit its maximums and the controller's (its Ready condition).
import { formatDuration, parseDuration } from "./duration.js";
import { placementPolicyProblems, placementRulesOf } from "./placement-policy.js";
import type { PolicySpec } from "./policy.js";
import { quantityValue } from "./quantity.js";

/**
 * A duration default within the policy's maximum of the same field and the controller's. With
 * `positive` (a ceiling, not a grace), the default and the maximum must be longer than 0s too.
 */
function defaultWithinMaximums(
  field: "ceiling" | "killGrace" | "finallyCeiling" | "queueTimeout",
  defaults: { [K in typeof field]?: string | undefined },
  maximums: { [K in typeof field]?: string | undefined },
  controllerMaxMs: number,
  positive: boolean,
): string[] {
  const problems: string[] = [];
  const value = defaults[field];
  const max = maximums[field];
  if (value !== undefined) {
    const ms = parseDuration(value);
    if (positive && ms <= 0) problems.push(`spec.defaults.${field}: ${value} must be longer than 0s`);
    if (max !== undefined && ms > parseDuration(max)) {
      problems.push(`spec.defaults.${field}: ${value} is longer than spec.maximums.${field} ${max}`);
    }
    if (ms > controllerMaxMs) {
      problems.push(
        `spec.defaults.${field}: ${value} is longer than the controller's maximum ${field} ${formatDuration(controllerMaxMs)}`,
      );
    }
  }
  if (positive && max !== undefined && parseDuration(max) <= 0) {
    problems.push(`spec.maximums.${field}: ${max} must be longer than 0s`);
  }
  return problems;
}

/** Why a policy cannot govern as written, in words for its Ready condition; empty when it can. */
export function policyProblems(
  policy: { name: string; spec: PolicySpec },
  controllerMaxCeilingMs: number,
  controllerMaxKillGraceMs = Number.POSITIVE_INFINITY,
  controllerMaxFinallyCeilingMs = Number.POSITIVE_INFINITY,
): string[] {
  const problems: string[] = [];
  const { defaults = {}, maximums = {} } = policy.spec;
  problems.push(
    ...defaultWithinMaximums("ceiling", defaults, maximums, controllerMaxCeilingMs, true),
    ...defaultWithinMaximums("killGrace", defaults, maximums, controllerMaxKillGraceMs, false),
    ...defaultWithinMaximums("finallyCeiling", defaults, maximums, controllerMaxFinallyCeilingMs, true),
    // The controller sets no maximum queue timeout: a platform team bounds it per namespace.
    ...defaultWithinMaximums("queueTimeout", defaults, maximums, Number.POSITIVE_INFINITY, true),
  );
  // A task without a timeout of its own takes maximums.taskTimeout: 0s would stop it at once.
  if (maximums.taskTimeout !== undefined && parseDuration(maximums.taskTimeout) <= 0) {
    problems.push(`spec.maximums.taskTimeout: ${maximums.taskTimeout} must be longer than 0s`);
  }
  if (
    defaults.maxPreemptions !== undefined &&
    maximums.maxPreemptions !== undefined &&
    defaults.maxPreemptions > maximums.maxPreemptions
  ) {
    problems.push(
      `spec.defaults.maxPreemptions: ${defaults.maxPreemptions} is more than spec.maximums.maxPreemptions ${maximums.maxPreemptions}`,
    );
  }
  problems.push(...placementPolicyProblems(placementRulesOf(policy.name, policy.spec)));
  for (const kind of ["limits", "requests"] as const) {
    for (const [name, value] of Object.entries(defaults.resources?.[kind] ?? {})) {
      const max = maximums.resources?.[kind]?.[name] ?? maximums.resources?.limits?.[name];
      if (max !== undefined && quantityValue(value) > quantityValue(max)) {
        problems.push(
          `spec.defaults.resources.${kind}.${name}: ${value} is more than the maximum ${max} (spec.maximums.resources)`,
        );
      }
    }
  }
  return problems;
}
