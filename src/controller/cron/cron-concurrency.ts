// The concurrency policy over everything that would start a run in one pass (the triggers, in the
// order they were asked for, then the scheduled time): Allow starts each; Forbid starts the first,
// and none while a run is active; Replace starts the last and cancels the active runs. Under
// Forbid and Replace a pass never starts more than one run, whatever arrived in it.
import type { ConcurrencyPolicy } from "../../api/cron-playbook.js";
import type { StoredPlaybook } from "../objects.js";

/** Why a start was passed over: the policy and the runs it names, for the event and the answer. */
export interface PassedOver {
  policy: "Forbid" | "Replace";
  /** The runs named: the active ones (Forbid), or the one started in this pass instead. */
  runs: string;
  /** The run named was started in this same pass. */
  samePass: boolean;
}

export interface ConcurrencyChoice<T> {
  start: T[];
  passOver: { start: T; why: PassedOver }[];
  /** Replace: the active runs to cancel, and the run that replaces them. */
  replace?: { runs: StoredPlaybook[]; by: T };
}

export function chooseStarts<T>(
  policy: ConcurrencyPolicy,
  active: readonly StoredPlaybook[],
  starts: readonly T[],
  nameOf: (start: T) => string,
): ConcurrencyChoice<T> {
  const first = starts[0];
  const last = starts[starts.length - 1];
  if (policy === "Allow" || first === undefined || last === undefined)
    return { start: [...starts], passOver: [] };
  if (policy === "Forbid") {
    if (active.length > 0) {
      const runs = describeRuns(active);
      return {
        start: [],
        passOver: starts.map((start) => ({ start, why: { policy, runs, samePass: false } })),
      };
    }
    const why: PassedOver = { policy, runs: nameOf(first), samePass: true };
    return { start: [first], passOver: starts.slice(1).map((start) => ({ start, why })) };
  }
  const why: PassedOver = { policy, runs: nameOf(last), samePass: true };
  return {
    start: [last],
    passOver: starts.slice(0, -1).map((start) => ({ start, why })),
    replace: { runs: [...active], by: last },
  };
}

/** "concurrencyPolicy Forbid: run x has not finished", as a trigger's answer says it. */
export function passedOverText(why: PassedOver): string {
  return why.policy === "Forbid"
    ? `concurrencyPolicy Forbid: run ${why.runs}${why.samePass ? ", started in the same pass," : ""} has not finished`
    : `concurrencyPolicy Replace: run ${why.runs}, started in the same pass, replaces it`;
}

export function describeRuns(runs: readonly StoredPlaybook[]): string {
  const names = runs.map((run) => run.metadata.name);
  return names.length <= 3
    ? names.join(", ")
    : `${names.slice(0, 3).join(", ")} and ${names.length - 3} more`;
}
