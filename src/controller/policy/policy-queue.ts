// The namespace's cap on running Playbooks (spec.maximums.runningPlaybooks): who holds a slot,
// derived from what the caches show (never from this process's memory, so a restarted controller
// counts the same), and who waits for one, in creation order. The Pending status of a waiting run
// is decide-queued.ts's.
import { keyOf, type PodView, type StoredPlaybook } from "../objects.js";
import { isPodPhaseTerminal } from "../pods/pod-state.js";
import { isFinished, SUCCEEDED } from "../status.js";

/** The Succeeded condition's reason (status Unknown) of a run waiting for a slot. */
export const QUEUED_REASON = "Queued";

export interface SlotState {
  cap: number;
  /** Playbooks holding a slot now. */
  running: number;
  /** Playbooks waiting ahead of this one, in creation order. */
  ahead: number;
  /** Whether this Playbook may start now. */
  free: boolean;
  /** Where the cap is set, e.g. "PlaybookPolicy default, spec.maximums.runningPlaybooks". */
  where: string;
}

/** A run that started or was refused a slot never waits again; one that has not may. */
function hasStarted(playbook: StoredPlaybook): boolean {
  return playbook.status?.startTime !== undefined || (playbook.status?.podAttempts ?? 0) > 0;
}

/**
 * The Playbooks holding a slot: those started and not finished, and the owners of every pod whose
 * phase is not terminal yet (a pod the status does not show yet, or one still stopping after its
 * run was settled: its runner reported, but its task containers may still run and the scheduler
 * counts its requests until the kubelet gives it phase Succeeded or Failed).
 */
export function slotHolders(playbooks: readonly StoredPlaybook[], pods: readonly PodView[]): Set<string> {
  const holders = new Set<string>();
  for (const playbook of playbooks) {
    if (hasStarted(playbook) && !isFinished(playbook.status)) holders.add(keyOf(playbook.metadata));
  }
  // A pod is its run's by its controller's UID: a lingering pod of a deleted Playbook of the same
  // name holds its own slot (it still runs), not the new Playbook's.
  const keyByUid = new Map(playbooks.map((p) => [p.metadata.uid, keyOf(p.metadata)]));
  for (const pod of pods) {
    const owner = pod.metadata.ownerReferences?.find((ref) => ref.controller && ref.kind === "Playbook");
    if (!owner || isPodPhaseTerminal(pod)) continue;
    holders.add(keyByUid.get(owner.uid) ?? `uid:${owner.uid}`);
  }
  return holders;
}

function creationOrder(a: StoredPlaybook, b: StoredPlaybook): number {
  const at = (p: StoredPlaybook) => Date.parse(p.metadata.creationTimestamp ?? "") || 0;
  // creationTimestamp has whole seconds: names order a burst created within one.
  return at(a) - at(b) || a.metadata.name.localeCompare(b.metadata.name);
}

/** The Playbooks of a namespace that wait for a slot, first created first. */
export function waitingPlaybooks(
  playbooks: readonly StoredPlaybook[],
  holders: ReadonlySet<string>,
): StoredPlaybook[] {
  return playbooks
    .filter(
      (p) =>
        !hasStarted(p) &&
        !isFinished(p.status) &&
        !holders.has(keyOf(p.metadata)) &&
        (p.spec as { cancel?: unknown } | undefined)?.cancel !== true,
    )
    .sort(creationOrder);
}

/** Whether the Playbook `key` may start in a namespace capped at `cap` running Playbooks. */
export function slotState(
  key: string,
  playbooks: readonly StoredPlaybook[],
  pods: readonly PodView[],
  cap: number,
  where: string,
): SlotState {
  const holders = slotHolders(playbooks, pods);
  const waiting = waitingPlaybooks(playbooks, holders);
  const index = waiting.findIndex((p) => keyOf(p.metadata) === key);
  const ahead = Math.max(0, index);
  // Asked only for a run with no start record: a pod that names it its controller and yet holds a
  // slot for it is one the run does not follow (a foreign one), and takes no slot from it.
  const others = holders.size - (holders.has(key) ? 1 : 0);
  return { cap, running: holders.size, ahead, free: others + ahead < cap, where };
}

/** Whether a Playbook is waiting for a slot, as its status says: for the playbook_queued_runs gauge. */
export function isQueued(playbook: StoredPlaybook): boolean {
  const condition = playbook.status?.conditions?.find((c) => c.type === SUCCEEDED);
  return condition?.status === "Unknown" && condition.reason === QUEUED_REASON && !hasStarted(playbook);
}
