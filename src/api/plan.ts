// The plan the controller hands to the pod runner: the Playbook's spec, the defaults its limits
// were resolved with, and when the run started, so the ceiling keeps counting from the first
// pod's start when a pod is re-created. It travels in a pod annotation, which a downwardAPI
// volume shows the runner as a file: an environment string would be limited to 128 KiB (E2BIG),
// and the annotation also tells the controller which plan the pod was started with.
import { createHash } from "node:crypto";
import { z } from "zod";
import { PlaybookSpecSchema } from "./playbook.js";

/** Read by `playbook pod-runner` when no --plan FILE is given. */
export const PLAN_ENV_VAR = "PLAYBOOK_PLAN";
export const PLAN_ANNOTATION = "playbook.dev/plan";
/**
 * The plan's digest (planDigest), on the runner container: pod specs cannot change after creation,
 * so the runner refuses a plan file (from the annotation, which can) that does not hash to it.
 */
export const PLAN_DIGEST_ENV_VAR = "PLAYBOOK_PLAN_DIGEST";
/**
 * On the runner container: what was left of the run's ceiling, in milliseconds, when the
 * controller built the pod. A duration, not a time: the runner counts it from its pod's start as
 * its own node sees it, so a node whose clock is skewed neither shortens nor lengthens the run.
 */
export const CEILING_LEFT_ENV_VAR = "PLAYBOOK_CEILING_LEFT_MS";
/** The Playbook's metadata.generation the plan was made from. */
export const PLAN_GENERATION_ANNOTATION = "playbook.dev/plan-generation";
export const PLAN_MOUNT_DIR = "/run/playbook";
export const PLAN_FILE_NAME = "plan.json";
export const PLAN_FILE = `${PLAN_MOUNT_DIR}/${PLAN_FILE_NAME}`;

/** All of a pod's annotations (keys and values) may take 256 KiB; the rest is left to the others. */
export const MAX_PLAN_BYTES = 256 * 1024 - 2048;

const Millis = z.number().int().min(0);
const TaskPlacement = z.strictObject({ container: z.string().regex(/^task-[1-9][0-9]*$/, "must be task-K") });

export const RunPlanSchema = z
  .strictObject({
    name: z.string().min(1),
    namespace: z.string().optional(),
    runStartTime: z.iso.datetime(),
    /**
     * Time the run's earlier pods waited in Kueue's queue (creation to admission): the ceiling
     * does not count it, so it starts that much after runStartTime. Absent: none.
     */
    queuedMs: Millis.optional(),
    defaults: z.strictObject({
      ceilingMs: Millis,
      maxCeilingMs: Millis,
      stallMs: Millis,
      killGraceMs: Millis,
      // Absent from the plans of an earlier version: DEFAULT_START_TIMEOUT_MS.
      startTimeoutMs: Millis.optional(),
      // Absent from the plans of an earlier version: DEFAULT_FINALLY_CEILING_MS.
      finallyCeilingMs: Millis.optional(),
      // Only for a run with a queue timeout from the controller's default.
      queueTimeoutMs: Millis.optional(),
      // Only for a run whose maxPreemptions is the controller's default (absent from earlier plans).
      maxPreemptions: z.number().int().min(0).optional(),
      // Absent from the plans of an earlier version: the controller's defaults (limits.ts).
      retryDelayMs: Millis.optional(),
      retryBackoff: z.number().min(1).max(10).optional(),
      retryMaxDelayMs: Millis.optional(),
      // The namespace policy's defaults the run started with: a later edit of the policy changes nothing.
      policy: z
        .strictObject({
          ceilingMs: Millis.optional(),
          stallMs: Millis.optional(),
          killGraceMs: Millis.optional(),
          startTimeoutMs: Millis.optional(),
          finallyCeilingMs: Millis.optional(),
          queueTimeoutMs: Millis.optional(),
          retryDelayMs: Millis.optional(),
          retryBackoff: z.number().min(1).max(10).optional(),
          retryMaxDelayMs: Millis.optional(),
          // The policy's maximums.taskTimeout: the timeout of a task that sets none.
          taskTimeoutMs: Millis.optional(),
          maxPreemptions: z.number().int().min(0).optional(),
        })
        .optional(),
    }),
    spec: PlaybookSpecSchema,
    /**
     * Per task (by index), the pod container it runs in (task-K), resolved by the controller so the
     * runner never guesses; the images are the runner's PLAYBOOK_TASK_CONTAINERS. Absent from the
     * plans of an earlier version and of local runs.
     */
    tasks: z.array(TaskPlacement).optional(),
    /** Per finally task (by index), the pod container it runs in; as `tasks`, for spec.finally. */
    finally: z.array(TaskPlacement).optional(),
  })
  .refine((plan) => plan.tasks === undefined || plan.tasks.length === plan.spec.tasks.length, {
    path: ["tasks"],
    message: "must name one container per task of spec.tasks",
  })
  .refine(
    (plan) =>
      plan.tasks === undefined
        ? plan.finally === undefined
        : (plan.finally?.length ?? 0) === (plan.spec.finally?.length ?? 0),
    { path: ["finally"], message: "must name one container per task of spec.finally" },
  );
export type RunPlan = z.infer<typeof RunPlanSchema>;

export class PlanTooLargeError extends Error {}

/** The plan as the pod carries it; refuses one the pod's annotations could not hold. */
export function serializePlan(plan: RunPlan): string {
  const text = JSON.stringify(plan);
  const bytes = Buffer.byteLength(text);
  if (bytes > MAX_PLAN_BYTES) {
    throw new PlanTooLargeError(
      `the run's plan is ${bytes} bytes as JSON, more than the ${MAX_PLAN_BYTES} a pod annotation can hold (escaped characters such as control characters count several times)`,
    );
  }
  return text;
}

export type ReadPlan = { ok: true; plan: RunPlan } | { ok: false; problem: string };

/** The plan text a pod carries, checked with the same schema the runner uses. */
export function parsePlan(text: string): ReadPlan {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, problem: "is not JSON" };
  }
  const parsed = RunPlanSchema.safeParse(json);
  if (!parsed.success) {
    return {
      ok: false,
      problem: parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "),
    };
  }
  return { ok: true, plan: parsed.data };
}

/** JSON with object keys sorted, so that equal values compare equal whatever their key order. */
export function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  );
}

/** "sha256:<hex>" of a plan, whatever its key order or spacing: what status.planDigest records. */
export function planDigest(plan: RunPlan): string {
  return `sha256:${createHash("sha256").update(canonical(plan)).digest("hex")}`;
}
