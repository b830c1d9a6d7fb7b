// A CronPlaybook as the controller reads it from the API server (its spec read apart, so a bad one
// still gets a status), and its runs: the Playbooks labelled with its name that it controls.
import { z } from "zod";
import {
  ANNOTATION_SCHEDULED_AT,
  CronPlaybookStatusSchema,
  LABEL_CRON_PLAYBOOK,
} from "../../api/cron-playbook.js";
import { keyOf, MetaSchema, type StoredPlaybook } from "../objects.js";

export const StoredCronPlaybookSchema = z.looseObject({
  apiVersion: z.string(),
  kind: z.string(),
  metadata: MetaSchema,
  spec: z.unknown(),
  status: CronPlaybookStatusSchema.optional(),
});
export type StoredCronPlaybook = z.infer<typeof StoredCronPlaybookSchema>;

export function parseStoredCronPlaybook(raw: unknown): StoredCronPlaybook | null {
  const parsed = StoredCronPlaybookSchema.safeParse(raw);
  return parsed.success ? parsed.data : null;
}

/** The CronPlaybook key a Playbook is a run of, from its label; null for a Playbook of no schedule. */
export function cronKeyOfRun(playbook: StoredPlaybook): string | null {
  const name = playbook.metadata.labels?.[LABEL_CRON_PLAYBOOK];
  return name ? keyOf({ name, namespace: playbook.metadata.namespace }) : null;
}

/** A run of this CronPlaybook: labelled with its name and controlled by it (its UID). */
export function isRunOf(playbook: StoredPlaybook, cron: StoredCronPlaybook): boolean {
  return (
    playbook.metadata.labels?.[LABEL_CRON_PLAYBOOK] === cron.metadata.name &&
    (playbook.metadata.ownerReferences?.some((ref) => ref.controller && ref.uid === cron.metadata.uid) ??
      false)
  );
}

/** When a run was scheduled (its annotation), else when it was created; 0 when neither says. */
export function scheduledAtOf(run: StoredPlaybook): number {
  const at = Date.parse(run.metadata.annotations?.[ANNOTATION_SCHEDULED_AT] ?? "");
  if (!Number.isNaN(at)) return at;
  const created = Date.parse(run.metadata.creationTimestamp ?? "");
  return Number.isNaN(created) ? 0 : created;
}

/** RFC 3339 in UTC to the second, as the API server writes times. */
export function rfc3339(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}
