// Conditions through one helper, as apimachinery's meta.SetStatusCondition does:
// lastTransitionTime moves only when status changes; observedGeneration is always set.
import type { Condition } from "./playbook.js";

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
  const next: Condition = {
    ...input,
    lastTransitionTime:
      existing && existing.status === input.status ? existing.lastTransitionTime : now.toISOString(),
  };
  if (observedGeneration !== undefined) next.observedGeneration = observedGeneration;
  const others = conditions.filter((c) => c.type !== input.type);
  return existing ? conditions.map((c) => (c.type === input.type ? next : c)) : [...others, next];
}

export function removeCondition(conditions: readonly Condition[], type: string): Condition[] {
  return conditions.filter((c) => c.type !== type);
}
