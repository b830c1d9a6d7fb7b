// The CronPlaybook API object (playbook.dev/v1alpha1, crds/playbook.dev_cronplaybooks.yaml): a
// schedule that creates Playbooks from a template. The names here are shared by the controller,
// the CLI (`playbook cron trigger`), the metrics and the docs (docs/cron.md).
import { createHash } from "node:crypto";
import { z } from "zod";
import { readSchedule } from "./cron-schedule.js";
import { ConditionSchema, DurationString, ObjectMetaSchema, PlaybookSpecSchema } from "./playbook.js";

export const CRON_KIND = "CronPlaybook";
export const CRON_PLURAL = "cronplaybooks";
export const CRON_SINGULAR = "cronplaybook";
export const CRON_SHORT_NAME = "cpb";

/** Every run carries it, its value the CronPlaybook's name: the runs are listed by it. */
export const LABEL_CRON_PLAYBOOK = "playbook.dev/cron-playbook";
/** A run's scheduled time (RFC 3339, UTC); for a manual run, the time the controller handled it. */
export const ANNOTATION_SCHEDULED_AT = "playbook.dev/scheduled-at";
/** "Run now", as an older CLI asks for it: one annotation, its value a request id. */
export const ANNOTATION_TRIGGER = "playbook.dev/trigger";
/**
 * "Run now": each request its own annotation, `playbook.dev/trigger-<8 hex>: <request id>`, so
 * that requests made at once do not overwrite each other; the controller answers each id.
 */
export const ANNOTATION_TRIGGER_PREFIX = `${ANNOTATION_TRIGGER}-`;
/** The answers status.triggers keeps besides those whose annotation is still there. */
export const TRIGGER_ANSWERS_KEPT = 10;
/** On a manual run: the request id that made it. */
export const ANNOTATION_TRIGGERED_BY = "playbook.dev/triggered-by";

export const CONCURRENCY_POLICIES = ["Allow", "Forbid", "Replace"] as const;
export type ConcurrencyPolicy = (typeof CONCURRENCY_POLICIES)[number];

export const DEFAULT_SUCCESSFUL_HISTORY = 3;
export const DEFAULT_FAILED_HISTORY = 1;
/** A run's name is the CronPlaybook's, a dash and up to 10 digits; a Playbook's pods add more. */
export const MAX_CRON_NAME = 52;

/** Conditions of a CronPlaybook. */
export const CRON_READY = "Ready";
export const CRON_STALE = "Stale";
export const CRON_REASONS = {
  ready: "Ready",
  invalidSchedule: "InvalidSchedule",
  invalidTimeZone: "InvalidTimeZone",
  invalidTemplate: "InvalidTemplate",
  policyViolation: "PolicyViolation",
} as const;

const HISTORY_MAX = 100;

export const CronTemplateSchema = z.strictObject({
  metadata: z
    .strictObject({
      labels: z.record(z.string(), z.string()).optional(),
      annotations: z.record(z.string(), z.string()).optional(),
    })
    .optional(),
  spec: PlaybookSpecSchema,
});
export type CronTemplate = z.infer<typeof CronTemplateSchema>;

export const CronPlaybookSpecSchema = z
  .strictObject({
    schedule: z.string({ error: "is required" }).max(128, "must be at most 128 characters"),
    timeZone: z.string().max(64, "must be at most 64 characters").default("UTC"),
    suspend: z.boolean().default(false),
    concurrencyPolicy: z.enum(CONCURRENCY_POLICIES).default("Allow"),
    startingDeadlineSeconds: z.number().int().min(0).optional(),
    successfulRunsHistoryLimit: z.number().int().min(0).max(HISTORY_MAX).default(DEFAULT_SUCCESSFUL_HISTORY),
    failedRunsHistoryLimit: z.number().int().min(0).max(HISTORY_MAX).default(DEFAULT_FAILED_HISTORY),
    /** When the last success (or, before any, the creation) is older, condition Stale is True. */
    staleAfter: DurationString.optional(),
    template: CronTemplateSchema,
  })
  .superRefine((spec, ctx) => {
    const read = readSchedule(spec.schedule, spec.timeZone);
    if (!read.ok) ctx.addIssue({ code: "custom", path: [read.field], message: read.message });
  });
export type CronPlaybookSpec = z.infer<typeof CronPlaybookSpecSchema>;

const Time = z.string();

export const ActiveRunSchema = z.looseObject({ name: z.string() });

export const LastTriggerSchema = z.looseObject({
  id: z.string(),
  run: z.string().optional(),
  skipped: z.string().optional(),
  handledAt: Time,
});
export type LastTrigger = z.infer<typeof LastTriggerSchema>;

export const CronPlaybookStatusSchema = z.looseObject({
  observedGeneration: z.number().int().optional(),
  active: z.array(ActiveRunSchema).optional(),
  lastScheduleTime: Time.optional(),
  lastSuccessfulTime: Time.optional(),
  missedRuns: z.number().int().optional(),
  lastTrigger: LastTriggerSchema.optional(),
  /** The answers to the latest triggers, oldest first: each request finds its own by id. */
  triggers: z.array(LastTriggerSchema).optional(),
  conditions: z.array(ConditionSchema).optional(),
});
export type CronPlaybookStatus = z.infer<typeof CronPlaybookStatusSchema>;

export const CronPlaybookSchema = z.strictObject({
  apiVersion: z.literal("playbook.dev/v1alpha1", { error: "must be playbook.dev/v1alpha1" }),
  kind: z.literal(CRON_KIND, { error: `must be ${CRON_KIND}` }),
  metadata: ObjectMetaSchema,
  spec: CronPlaybookSpecSchema,
  status: CronPlaybookStatusSchema.optional(),
});
export type CronPlaybook = z.infer<typeof CronPlaybookSchema>;

/** A scheduled run's name: the CronPlaybook's and the scheduled time in whole minutes since the epoch. */
export function scheduledRunName(cronName: string, scheduledAt: Date): string {
  return `${cronName}-${Math.floor(scheduledAt.getTime() / 60_000)}`;
}

/** A manual run's name: the CronPlaybook's, "now" and the first 8 hex of the request id's sha256. */
export function manualRunName(cronName: string, requestId: string): string {
  return `${cronName}-now-${createHash("sha256").update(requestId).digest("hex").slice(0, 8)}`;
}
