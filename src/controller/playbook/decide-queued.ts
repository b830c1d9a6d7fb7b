// A run waiting for a slot of its namespace's running-Playbooks cap (policy-queue.ts says who
// holds the slots): it stays Pending, saying so, and looks again now and then.
import { setCondition } from "../../api/conditions.js";
import { describeRunLimits } from "../../api/limits.js";
import type { PlaybookStatus } from "../../api/playbook.js";
import type { Decision } from "../decision.js";
import { QUEUED_REASON, type SlotState } from "../policy/policy-queue.js";
import { type StatusBase, SUCCEEDED, sameStatus } from "../status.js";

/** How often a waiting run looks again should the event of a freed slot be missed. */
export const QUEUED_RECHECK_MS = 30_000;

/**
 * The run waits Pending for a slot: no pod, no startTime (its ceiling has not started), its
 * limits shown. The words stay the same while it waits, so that waiting writes nothing.
 */
export function queuedDecision(base: StatusBase, slots: SlotState): Decision {
  const message = `waiting for one of the namespace's ${slots.cap} running-Playbook slot${slots.cap === 1 ? "" : "s"} (${slots.where}); queued runs start in creation order`;
  const previous = base.previous;
  const conditions = setCondition(
    previous.conditions ?? [],
    { type: SUCCEEDED, status: "Unknown", reason: QUEUED_REASON, message },
    base.now,
    base.generation,
  );
  const next: PlaybookStatus = { ...previous, phase: "Pending", conditions };
  if (base.generation !== undefined) next.observedGeneration = base.generation;
  if (base.limits) next.limits = describeRunLimits(base.limits);
  const firstTime = previous.conditions?.find((c) => c.type === SUCCEEDED)?.reason !== QUEUED_REASON;
  return {
    status: sameStatus(previous, next) ? null : next,
    actions: [],
    events: firstTime
      ? [
          {
            type: "Normal",
            reason: QUEUED_REASON,
            message: `Waiting for a slot: ${slots.running} of ${slots.cap} running Playbooks (${slots.where}), ${slots.ahead} queued ahead`,
          },
        ]
      : [],
    requeueAfterMs: QUEUED_RECHECK_MS,
  };
}
