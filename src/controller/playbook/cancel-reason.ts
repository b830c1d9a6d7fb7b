// A cancelled run says who cancelled it and why when the canceller wrote it down: the annotation
// playbook.dev/cancel-reason (a CronPlaybook's Replace names the run that replaced it) begins the
// message of the run's Cancelled condition and of its RunCancelled event.
import { ANNOTATION_CANCEL_REASON } from "../../api/playbook.js";
import type { Decision } from "../decision.js";
import type { StoredPlaybook } from "../objects.js";

export function withCancelReason(playbook: StoredPlaybook, decision: Decision): Decision {
  const why = playbook.metadata.annotations?.[ANNOTATION_CANCEL_REASON];
  if (!why || decision.finished?.reason !== "Cancelled" || !decision.status) return decision;
  const explain = (message: string) => (message.startsWith(why) ? message : `${why}; ${message}`);
  const conditions = decision.status.conditions?.map((c) =>
    c.type === "Succeeded" && c.reason === "Cancelled" ? { ...c, message: explain(c.message) } : c,
  );
  const prefix = "Run finished with reason Cancelled: ";
  const events = decision.events.map((e) =>
    e.reason === "RunCancelled" && e.message.startsWith(prefix)
      ? { ...e, message: `${prefix}${explain(e.message.slice(prefix.length))}` }
      : e,
  );
  return { ...decision, status: { ...decision.status, ...(conditions ? { conditions } : {}) }, events };
}
