// "Run now" requests on a CronPlaybook: each is an annotation (playbook.dev/trigger-<8 hex>, or an
// older CLI's one playbook.dev/trigger) holding a request id. Which ids wait for an answer, and
// the answers status keeps: every one whose annotation is still there (so an id is never
// answered twice), and the latest few others (so a CLI that removed its request late still
// finds its answer).
import {
  ANNOTATION_TRIGGER,
  ANNOTATION_TRIGGER_PREFIX,
  type CronPlaybookStatus,
  type LastTrigger,
  TRIGGER_ANSWERS_KEPT,
} from "../../api/cron-playbook.js";

/** The request ids in the annotations. */
export function requestedTriggers(annotations: Record<string, string> | undefined): Set<string> {
  const ids = new Set<string>();
  for (const [key, value] of Object.entries(annotations ?? {})) {
    if ((key === ANNOTATION_TRIGGER || key.startsWith(ANNOTATION_TRIGGER_PREFIX)) && value !== "")
      ids.add(value);
  }
  return ids;
}

/** The requests not answered yet, in the order they were asked for (an id begins with its time). */
export function pendingTriggers(requested: Set<string>, status: CronPlaybookStatus): string[] {
  const answered = new Set((status.triggers ?? []).map((answer) => answer.id));
  if (status.lastTrigger) answered.add(status.lastTrigger.id);
  return [...requested].filter((id) => !answered.has(id)).sort();
}

/** status.triggers with this pass's answers: those still requested, and the latest others. */
export function keptAnswers(
  previous: readonly LastTrigger[],
  answers: readonly LastTrigger[],
  requested: Set<string>,
): LastTrigger[] {
  const all = [...previous, ...answers];
  const others = all.filter((answer) => !requested.has(answer.id));
  const recent = new Set(others.slice(-TRIGGER_ANSWERS_KEPT));
  return all.filter((answer) => requested.has(answer.id) || recent.has(answer));
}
