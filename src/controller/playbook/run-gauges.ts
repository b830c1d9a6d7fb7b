// The gauges read from the Playbook cache at each scrape: the runs active and queued per
// namespace, and the share of its queueTimeout each run Kueue holds has used.
import { queueBudgetUsed } from "../kueue/kueue-hold.js";
import type { StoredPlaybook } from "../objects.js";
import { isQueued } from "../policy/policy-queue.js";
import { isFinished } from "../status.js";

/** The runs started and not finished, per namespace (every namespace with a Playbook counted). */
export function activeRuns(
  playbooks: Iterable<StoredPlaybook>,
  hasPods: (playbook: StoredPlaybook) => boolean,
): Map<string, number> {
  const counts = new Map<string, number>();
  for (const playbook of playbooks) {
    const namespace = playbook.metadata.namespace ?? "";
    if (!counts.has(namespace)) counts.set(namespace, 0);
    // A run counts from its first pod's create; its status shows the start right after it.
    const started = playbook.status?.startTime !== undefined || hasPods(playbook);
    if (started && !isFinished(playbook.status)) {
      counts.set(namespace, (counts.get(namespace) ?? 0) + 1);
    }
  }
  return counts;
}

/** The runs waiting for a slot or for Kueue, per namespace (every namespace with a Playbook counted). */
export function queuedRuns(playbooks: Iterable<StoredPlaybook>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const playbook of playbooks) {
    const namespace = playbook.metadata.namespace ?? "";
    if (!counts.has(namespace)) counts.set(namespace, 0);
    if (isQueued(playbook)) counts.set(namespace, (counts.get(namespace) ?? 0) + 1);
  }
  return counts;
}

/** Each run Kueue holds under a queueTimeout, with the share of that budget it has used. */
export function queuedBudgets(
  playbooks: Iterable<StoredPlaybook>,
  now: Date,
): { namespace: string; queue: string; ratio: number }[] {
  const budgets: { namespace: string; queue: string; ratio: number }[] = [];
  for (const playbook of playbooks) {
    const used = queueBudgetUsed(playbook.status, now);
    if (used) budgets.push({ namespace: playbook.metadata.namespace ?? "", ...used });
  }
  return budgets;
}
