// What `playbook describe` prints of a Playbook on the cluster, as kubectl describe does: its
// outcome, each limit it is held to with its level, the pod's whole bound, the longest run, and
// its tasks. Pure: the API reads are cluster/describe.ts's.
import { SUCCEEDED } from "../api/conditions.js";
import { planDefaultsFromStatus } from "../api/held-limits.js";
import { type LimitDefaults, resolveLimits } from "../api/limits.js";
import { type PlacementRules, resolvePlacement } from "../api/placement-policy.js";
import type { PlaybookSpec, PlaybookStatus, TaskStatus } from "../api/playbook.js";
import { checkPolicy, defaultsUnder, type NamespaceRules } from "../api/policy.js";
import { escapeControls } from "../api/visible-text.js";
import { podUsersLine, type RunPodRead } from "./describe-pod-users.js";
import { describeSpec } from "./describe-spec.js";

/** The namespace's PlaybookPolicy `default` as it could be read. */
export type PolicyRead =
  | { kind: "found"; rules: NamespaceRules }
  | { kind: "none" }
  | { kind: "unreadable"; why: string };

export interface DescribedPlaybook {
  name: string;
  namespace: string;
  spec: PlaybookSpec;
  status: PlaybookStatus | undefined;
  /** The run's pod (status.podName) as it could be read; no line when not read. */
  pod?: RunPodRead;
}

function policyLine(policy: PolicyRead, namespace: string): string {
  switch (policy.kind) {
    case "found":
      return "Policy:     default";
    case "none":
      return `Policy:     none (no PlaybookPolicy default in namespace ${namespace}): the controller's defaults and maximums apply`;
    case "unreadable":
      return `Policy:     not readable (${policy.why}): shown without it`;
  }
}

/** "  build  Failed  timeout 5m (spec)  attempts 2: exited 1" */
function taskLine(task: TaskStatus, finallyTask: boolean): string {
  const fired = task.limit
    ? `  ${task.limit}${task.limitValue ? ` ${task.limitValue}` : ""}${task.limitSource ? ` (${task.limitSource})` : ""}`
    : "";
  const message = task.message ? `: ${task.message}` : "";
  return escapeControls(
    `  ${finallyTask ? "finally " : ""}${task.name}  ${task.phase}${fired}  attempts ${task.attempts}${message}`,
  );
}

/** Each placement field (or entry) the pod carries, with its level: spec, policy default, policy enforced. */
function placementLines(
  spec: PlaybookSpec,
  placement: PlacementRules | undefined,
  started: boolean,
): string[] {
  const { shown } = resolvePlacement(spec, placement);
  if (shown.length === 0) return [];
  return [
    `Placement:  ${started ? "the spec's, with the policy's defaults and enforced entries as it reads now" : "as the controller would build the pod now"}`,
    ...shown.map((entry) => escapeControls(`  ${entry.field}  ${entry.value}  (${entry.source})`)),
  ];
}

/**
 * The lines of `playbook describe`. The limits are status.limits once the run has started (what
 * it is held to, whatever the policy or the controller say since), else resolved from the spec
 * and the policy with the controller's defaults (`controllerDefaults`), as the controller would now.
 */
export function describePlaybook(
  playbook: DescribedPlaybook,
  policy: PolicyRead,
  controllerDefaults: LimitDefaults,
): string[] {
  const { status } = playbook;
  const rules = policy.kind === "found" ? policy.rules : undefined;
  const now = defaultsUnder(rules, controllerDefaults);
  const held = status ? planDefaultsFromStatus(status) : undefined;
  // The run's own levels, under the maximums that hold now (a run's plan carries none).
  const defaults = held
    ? {
        ...held,
        maxCeilingMs: now.maxCeilingMs,
        maxKillGrace: now.maxKillGrace,
        maxFinallyCeiling: now.maxFinallyCeiling,
      }
    : now;
  const condition = status?.conditions?.find((c) => c.type === SUCCEEDED);
  const tasks = [
    ...(status?.tasks ?? []).map((task) => taskLine(task, false)),
    ...(status?.finally ?? []).map((task) => taskLine(task, true)),
  ];
  return [
    `Name:       ${playbook.name}`,
    `Namespace:  ${playbook.namespace}`,
    `Phase:      ${status?.phase ?? "Pending"}`,
    condition
      ? escapeControls(
          `Succeeded:  ${condition.status} (${condition.reason})${condition.message ? `: ${condition.message}` : ""}`,
        )
      : "Succeeded:  not yet set",
    policyLine(policy, playbook.namespace),
    ...(playbook.pod ? [podUsersLine(playbook.pod)] : []),
    held
      ? "Limits:     as the run is held to them (status.limits)"
      : "Limits:     not started: as the controller would resolve it now (with its built-in defaults; its flags may set others)",
    // What the policy would refuse in a run not yet started: the controller ends it InvalidSpec.
    ...(rules && !held
      ? checkPolicy(playbook.spec, resolveLimits(playbook.spec, now), rules).map(
          (problem) => `  the policy refuses ${problem.path}: ${problem.message}`,
        )
      : []),
    ...describeSpec(playbook.spec, defaults, rules?.defaults.image, rules?.maximums, rules?.defaults),
    ...placementLines(playbook.spec, rules?.placement, held !== undefined),
    tasks.length > 0 ? "Tasks:" : "Tasks:      none reported yet",
    ...tasks,
  ];
}
