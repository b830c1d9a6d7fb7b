// The plan the controller hands to the pod runner (env PLAYBOOK_PLAN): the Playbook's spec, the
// defaults its limits were resolved with, and when the run started, so the ceiling keeps counting
// from the first pod's start when a pod is re-created.
import { z } from "zod";
import { PlaybookSpecSchema } from "./playbook.js";

export const PLAN_ENV_VAR = "PLAYBOOK_PLAN";

const Millis = z.number().int().min(0);

export const RunPlanSchema = z.strictObject({
  name: z.string().min(1),
  namespace: z.string().optional(),
  runStartTime: z.iso.datetime(),
  defaults: z.strictObject({ ceilingMs: Millis, maxCeilingMs: Millis, stallMs: Millis, killGraceMs: Millis }),
  spec: PlaybookSpecSchema,
});
export type RunPlan = z.infer<typeof RunPlanSchema>;
