// Conditions through one helper, as apimachinery's meta.SetStatusCondition does:
// lastTransitionTime moves only when status changes; observedGeneration is always set.
import type { Condition } from "./playbook.js";
import { isLimitReason } from "./reasons.js";
import { escapeControls } from "./visible-text.js";

export const SUCCEEDED = "Succeeded";
export const LIMIT_EXCEEDED = "LimitExceeded";

export interface ConditionInput {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
}

export function setCondition(
  conditions: readonly Condition[],
  input: ConditionInput,
  now: Date,
  observedGeneration?: number,
): Condition[] {
  const existing = conditions.find((c) => c.type === input.type);
  // A message quotes what a report, a kubelet or a spec said: its control characters show as
  // escapes, not as line ends or terminal commands in `kubectl describe`.
  const next: Condition = {
    ...input,
    message: escapeControls(input.message),
    lastTransitionTime:
      existing && existing.status === input.status ? existing.lastTransitionTime : now.toISOString(),
  };
  if (observedGeneration !== undefined) next.observedGeneration = observedGeneration;
  return existing ? conditions.map((c) => (c.type === input.type ? next : c)) : [...conditions, next];
}

/**
 * The conditions of a finished run: Succeeded True or False with its reason, and LimitExceeded
 * True when one of the limit reasons ended it.
 */
export function setFinishedConditions(
  conditions: readonly Condition[],
  outcome: { reason: string; message: string },
  now: Date,
  observedGeneration?: number,
): Condition[] {
  const { reason, message } = outcome;
  const status = reason === "Succeeded" ? "True" : "False";
  const finished = setCondition(
    conditions,
    { type: SUCCEEDED, status, reason, message },
    now,
    observedGeneration,
  );
  if (!isLimitReason(reason)) return finished;
  return setCondition(
    finished,
    { type: LIMIT_EXCEEDED, status: "True", reason, message },
    now,
    observedGeneration,
  );
}
