// The Playbook API object (playbook.dev/v1alpha1), parsed with zod wherever one enters a process:
// a file given to the CLI, an object read from the API server, the plan handed to the pod runner.
import { z } from "zod";
import { DNS1123_LABEL, DNS1123_SUBDOMAIN } from "./dns-names.js";
import { parseDuration } from "./duration.js";
import { PLACEMENT_FIELDS_SHAPE } from "./placement.js";
import { ENDINGS, LIMIT_SOURCES, RUN_PHASES, TASK_LIMITS, TASK_PHASES } from "./reasons.js";
import { ShellCommand } from "./shell.js";
import { checkTaskContainerCount, checkTaskImageCount, ImageReference } from "./task-images.js";
import {
  checkTaskSources,
  EnvFromSource,
  EnvVarSource,
  MAX_ENV_FROM,
  MAX_VOLUME_MOUNTS,
  MAX_VOLUMES,
  Volume,
  VolumeMount,
} from "./task-sources.js";

/** The API group, version and resource the Playbook is served as (crds/playbook.dev_playbooks.yaml). */
export const GROUP = "playbook.dev";
export const VERSION = "v1alpha1";
export const PLURAL = "playbooks";
export const API_VERSION = "playbook.dev/v1alpha1";
export const KIND = "Playbook";
export const MAX_TASKS = 200;
/** spec.finally: cleanup tasks, a handful, not a second playbook. */
export const MAX_FINALLY_TASKS = 20;
/**
 * Why a run was cancelled, set with spec.cancel by whoever cancels it (a CronPlaybook replacing
 * it): the run's Cancelled condition and event begin with it.
 */
export const ANNOTATION_CANCEL_REASON = "playbook.dev/cancel-reason";
/** Pods re-created after a loss when neither the Playbook nor its namespace's policy says. */
export const DEFAULT_BACKOFF_LIMIT = 2;

/** spec.onPreemption: a new pod that queues again, spending no attempt, or the run ends Preempted. */
export const ON_PREEMPTION = ["Requeue", "Fail"] as const;
export type OnPreemption = (typeof ON_PREEMPTION)[number];
/** The most spec.maxPreemptions (and a policy's default or maximum) may be. */
export const MAX_PREEMPTIONS_LIMIT = 100;

const ENV_NAME = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;
/** The CRD's pattern for a quantity (its exponent may have a fraction, as the API server's has). */
const QUANTITY =
  /^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$/;
/** The CRD's pattern for a duration: Go's syntax without a sign. */
const DURATION = /^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$/;
/** format: int32, which the API server checks. */
const INT32_MAX = 2_147_483_647;

/** Text that reaches exec (argv, env, cwd): the kernel cannot take a NUL byte in any of them. */
const NO_NUL = /^[^\0]*$/;
const NO_NUL_MESSAGE = "must not contain a NUL byte";

/** The kernel's MAX_ARG_STRLEN less the NUL: the longest one argv or environment string exec takes. */
const MAX_EXEC_STRING = 131_071;

function execStringTooLong(text: string, shown: string, ctx: z.RefinementCtx, path: string[] = []) {
  const bytes = Buffer.byteLength(text);
  if (bytes > MAX_EXEC_STRING) {
    ctx.addIssue({
      code: "custom",
      path,
      message: `${shown}is ${bytes} bytes; one exec argument holds at most ${MAX_EXEC_STRING}`,
    });
  }
}

/**
 * The CRD's maxLength: the API server counts characters (code points), not UTF-16 units or
 * bytes, so the two agree on every string (test/controller/admission-properties.test.ts).
 */
function maxCharacters(max: number) {
  return [(text: string) => [...text].length <= max, `must be at most ${max} characters`] as const;
}

/** A Go duration string; the parsed value is checked but the text is kept as the user wrote it. */
export const DurationString = z
  .string({ error: 'must be a duration string with a unit, such as "10s" or "10m"' })
  .refine(...maxCharacters(64))
  .superRefine((value, ctx) => {
    try {
      parseDuration(value);
    } catch (error) {
      ctx.addIssue({ code: "custom", message: (error as Error).message });
      return;
    }
    // Go reads "+5m" too; the API server does not.
    if (!DURATION.test(value)) {
      ctx.addIssue({
        code: "custom",
        message: `${JSON.stringify(value)} must be a duration without a sign, such as 90s, 10m or 1h30m`,
      });
    }
  });

/**
 * A Kueue object's name that the pod carries as a label value (a LocalQueue, a
 * WorkloadPriorityClass): a DNS-1123 subdomain that fits a label value, 63 characters.
 */
export const KueueName = z
  .string()
  .max(63, "must be at most 63 characters (it is a label value)")
  .regex(DNS1123_SUBDOMAIN, "must be a DNS-1123 subdomain (lower case letters, digits, '-' and '.')");

const EnvVar = z
  .strictObject({
    name: z
      .string()
      .regex(ENV_NAME, "must be a C-style environment variable name")
      .max(256, "must be at most 256 characters")
      .refine(
        (name) => !name.startsWith("PLAYBOOK_"),
        "is reserved: the runner sets PLAYBOOK_* variables itself",
      ),
    // The CRD's bound: 32000 characters of up to 4 bytes fit one exec string beside any name.
    value: z
      .string()
      .refine(...maxCharacters(32_000))
      .regex(NO_NUL, NO_NUL_MESSAGE)
      .default(""),
    /** The value from a Secret's or ConfigMap's key or the pod's own fields: set on the task's container. */
    valueFrom: EnvVarSource.optional(),
  })
  .superRefine((env, ctx) => execStringTooLong(`${env.name}=${env.value}`, `${env.name}=… `, ctx, ["value"]))
  .superRefine((env, ctx) => {
    if (env.valueFrom && env.value !== "") {
      ctx.addIssue({ code: "custom", path: ["valueFrom"], message: "must not be set together with value" });
    }
  });

/** How much each wait between a task's attempts grows: 1 keeps it, 2 doubles it. */
export const RetryBackoff = z
  .number({ error: "must be a number such as 2" })
  .refine((n) => Number.isFinite(n) && n >= 1 && n <= 10, {
    error: (issue) =>
      `${JSON.stringify(issue.input)} must be a factor from 1 (the same wait each time) to 10`,
  });

export const TaskSpecSchema = z.strictObject({
  name: z.string().max(63, "must be at most 63 characters").regex(DNS1123_LABEL, "must be a DNS-1123 label"),
  run: z
    .string()
    .min(1, "must not be empty")
    .refine(...maxCharacters(65_536))
    .regex(NO_NUL, NO_NUL_MESSAGE)
    .superRefine((run, ctx) => execStringTooLong(run, "", ctx)),
  timeout: DurationString.optional(),
  stall: DurationString.optional(),
  retries: z.number().int().min(0).max(100).default(0),
  /** The wait before the first retry; default spec.retryDelay, the policy's, else 1s (limits.ts). */
  retryDelay: DurationString.optional(),
  /** The factor each further wait grows by; default spec.retryBackoff, the policy's, else 2. */
  retryBackoff: RetryBackoff.optional(),
  /** The longest wait between two attempts, before jitter; default spec.retryMaxDelay, the policy's, else 1m. */
  retryMaxDelay: DurationString.optional(),
  env: z.array(EnvVar).max(128, "must list at most 128 variables").default([]),
  workingDir: z
    .string()
    .min(1)
    .refine(...maxCharacters(4096))
    .regex(NO_NUL, NO_NUL_MESSAGE)
    .optional(),
  /** The image this task runs in; default spec.image, else the policy's, else the runner image. */
  image: ImageReference.optional(),
  /** The shell its run goes to, as `WORDS -c RUN`; default spec.shell, else `sh` (shell.ts). */
  shell: ShellCommand.optional(),
  /** Whole Secrets and ConfigMaps as env, on this task's container only (task-sources.ts). */
  envFrom: z.array(EnvFromSource).max(MAX_ENV_FROM, `must list at most ${MAX_ENV_FROM} sources`).optional(),
  /** spec.volumes this task's container mounts; no other task's container does. */
  volumeMounts: z
    .array(VolumeMount)
    .max(MAX_VOLUME_MOUNTS, `must list at most ${MAX_VOLUME_MOUNTS} mounts`)
    .optional(),
});
export type TaskSpec = z.infer<typeof TaskSpecSchema>;

export const Quantity = z.union([
  z.string().regex(QUANTITY, "must be a resource quantity such as 500m or 1Gi"),
  // x-kubernetes-int-or-string: a number must be a whole one that fits in 64 bits.
  z.number().refine((n) => Number.isInteger(n) && Math.abs(n) < 2 ** 63, "must be a whole number"),
]);
export const ResourceRequirements = z.strictObject({
  limits: z.record(z.string(), Quantity).optional(),
  requests: z.record(z.string(), Quantity).optional(),
  claims: z
    .array(z.looseObject({ name: z.string() }))
    .max(16, "must list at most 16 claims")
    .optional(),
});

/** The CRD's bound on spec.tasks (see planTextSize): what the plan's pod annotation can hold. */
export const MAX_PLAN_TEXT = 204_800;

/** Code points, as CEL's size() counts a string. */
const characters = (text: string | undefined): number => (text === undefined ? 0 : [...text].length);

/**
 * The size the CRD bounds, counted as its CEL rule counts it: the tasks' names, run scripts,
 * timeouts, stalls, working directories, images, shells and env, plus 96 per task and 32 per env entry for
 * the JSON around them. The finally tasks count too (pass them all).
 */
export function planTextSize(tasks: readonly TaskSpec[]): number {
  let total = 0;
  for (const task of tasks) {
    total += 96 + characters(task.name) + characters(task.run) + characters(task.timeout);
    total += characters(task.stall) + characters(task.workingDir) + characters(task.image);
    total += characters(task.shell);
    for (const env of task.env) total += 32 + characters(env.name) + characters(env.value);
  }
  return total;
}

export const PlaybookSpecSchema = z
  .strictObject({
    ceiling: DurationString.optional(),
    stall: DurationString.optional(),
    killGrace: DurationString.optional(),
    /** From the pod's creation until its runner starts; default from the policy or the controller. */
    startTimeout: DurationString.optional(),
    cancel: z.boolean().default(false),
    /** The retry waits of tasks that set none: the first wait, its factor, the longest (limits.ts). */
    retryDelay: DurationString.optional(),
    retryBackoff: RetryBackoff.optional(),
    retryMaxDelay: DurationString.optional(),
    /** Absent: the namespace policy's default, else the controller's (DEFAULT_BACKOFF_LIMIT). */
    backoffLimit: z.number().int().min(0).max(100).optional(),
    /** The image of tasks that name none; default the policy's, else the runner image. */
    image: ImageReference.optional(),
    /** The shell of tasks that name none, as `WORDS -c RUN`; default `sh` (shell.ts). */
    shell: ShellCommand.optional(),
    serviceAccountName: z
      .string()
      .max(253, "must be at most 253 characters")
      .regex(DNS1123_SUBDOMAIN, "must be a DNS-1123 subdomain")
      .optional(),
    resources: ResourceRequirements.optional(),
    ttlSecondsAfterFinished: z.number().int().min(0).max(INT32_MAX).optional(),
    tasks: z
      .array(TaskSpecSchema)
      .min(1, "must list at least one task")
      .max(MAX_TASKS, `must list at most ${MAX_TASKS} tasks`),
    /**
     * Cleanup: tasks that run after the main tasks end, however they ended (success, failure, a
     * limit, cancel), each under its own timeout and stall, within finallyCeiling.
     */
    finally: z
      .array(TaskSpecSchema)
      .max(MAX_FINALLY_TASKS, `must list at most ${MAX_FINALLY_TASKS} tasks`)
      .optional(),
    /**
     * The finally tasks' own ceiling, counted from the main tasks' end, not taken from spec.ceiling;
     * default from the policy or the controller.
     */
    finallyCeiling: DurationString.optional(),
    /**
     * Kueue's LocalQueue in the Playbook's namespace: the pod carries kueue.x-k8s.io/queue-name and
     * waits, gated, until Kueue admits it (docs/kueue.md). Default from the policy or the controller.
     */
    queueName: KueueName.optional(),
    /** Kueue's WorkloadPriorityClass for the run's Workload (the kueue.x-k8s.io/priority-class label). */
    priorityClassName: KueueName.optional(),
    /** From the pod's creation until Kueue admits it; none unless the spec, the policy or the controller sets one. */
    queueTimeout: DurationString.optional(),
    /** What a pod Kueue stops (preemption, eviction) does to the run; absent: Requeue. */
    onPreemption: z.enum(ON_PREEMPTION, { error: "must be Requeue or Fail" }).optional(),
    /**
     * Pods Kueue may stop that the run re-creates (onPreemption Requeue): past it the run ends
     * Preempted. Absent: the policy's default, else the controller's.
     */
    maxPreemptions: z.number().int().min(0).max(MAX_PREEMPTIONS_LIMIT).optional(),
    /**
     * Placement and pod metadata, as in a Pod (placement.ts): nodeSelector, tolerations, affinity,
     * runtimeClassName, imagePullSecrets, podMetadata; the namespace policy's defaults and enforced
     * entries apply (placement-policy.ts). `playbook run` ignores them.
     */
    ...PLACEMENT_FIELDS_SHAPE,
    /** Volumes the tasks' volumeMounts name, as in a Pod (task-sources.ts VOLUME_TYPES; never hostPath). */
    volumes: z.array(Volume).max(MAX_VOLUMES, `must list at most ${MAX_VOLUMES} volumes`).optional(),
  })
  .superRefine((spec, ctx) => checkTaskSources(spec, ctx))
  .superRefine((spec, ctx) => {
    const size = planTextSize([...spec.tasks, ...(spec.finally ?? [])]);
    if (size > MAX_PLAN_TEXT) {
      ctx.addIssue({
        code: "custom",
        path: ["tasks"],
        message: `is too large to run: ${size} characters of names, run scripts, limits, working directories, images, shells and env (plus 96 per task and 32 per env entry${spec.finally?.length ? ", spec.finally's included" : ""}), at most ${MAX_PLAN_TEXT}, so that the plan fits in the pod's annotations`,
      });
    }
  })
  .superRefine((spec, ctx) => checkTaskImageCount(spec, ctx))
  .superRefine((spec, ctx) => checkTaskContainerCount(spec, ctx));
export type PlaybookSpec = z.infer<typeof PlaybookSpecSchema>;

const Time = z.string();

export const EffectiveLimitSchema = z.strictObject({
  value: z.string(),
  source: z.enum(LIMIT_SOURCES),
});

/** A limit that is a count (maxPreemptions), with the level it came from. */
export const CountLimitSchema = z.strictObject({
  value: z.number().int().min(0),
  source: z.enum(LIMIT_SOURCES),
});

export const TaskStatusSchema = z.looseObject({
  name: z.string(),
  phase: z.enum(TASK_PHASES),
  limit: z.enum(TASK_LIMITS).optional(),
  limitValue: z.string().optional(),
  limitSource: z.enum(LIMIT_SOURCES).optional(),
  /** The image the task ran in (its container's). */
  image: z.string().optional(),
  ending: z.enum(ENDINGS).optional(),
  attempts: z.number().int().min(0),
  exitCode: z.number().int().nullable().optional(),
  signal: z.string().nullable().optional(),
  startTime: Time.optional(),
  /** A retried task's last attempt's start: what its timeout and advise count from. */
  lastAttemptStartTime: Time.optional(),
  completionTime: Time.optional(),
  message: z.string().optional(),
  /** CPU seconds (user + system) the task's last attempt used, as the runner measured them */
  cpuSeconds: z.number().min(0).optional(),
  /** the peak resident memory of the task's last attempt (its largest process), in bytes */
  peakMemoryBytes: z.number().int().min(0).optional(),
  /**
   * The last attempt's longest time with no output, from its start to its end, as a duration
   * (e.g. "1m2.5s", whole ms): what a stall limit has to allow (`playbook advise`).
   */
  longestSilence: z.string().optional(),
  /**
   * false on a row the runner's progress record gave (its log), not its trusted report: progress,
   * not an outcome. Absent on the report's rows.
   */
  verified: z.boolean().optional(),
});
export type TaskStatus = z.infer<typeof TaskStatusSchema>;

export const ConditionSchema = z.looseObject({
  type: z.string(),
  status: z.enum(["True", "False", "Unknown"]),
  reason: z.string(),
  message: z.string(),
  lastTransitionTime: Time,
  observedGeneration: z.number().int().optional(),
});
export type Condition = z.infer<typeof ConditionSchema>;

export const PlaybookStatusSchema = z.looseObject({
  observedGeneration: z.number().int().optional(),
  phase: z.enum(RUN_PHASES).optional(),
  startTime: Time.optional(),
  completionTime: Time.optional(),
  podName: z.string().optional(),
  /** The UID of the pod podName names, as the controller created it: only that pod is read. */
  podUID: z.string().optional(),
  podAttempts: z.number().int().optional(),
  /** Pods Kueue stopped (preempted, evicted) that were re-created under onPreemption Requeue: no attempt of backoffLimit spent. */
  preemptions: z.number().int().optional(),
  /** sha256 of the plan the run's pods are built from, written before its first pod is created. */
  planDigest: z.string().optional(),
  limits: z
    .strictObject({
      ceiling: EffectiveLimitSchema,
      stall: EffectiveLimitSchema,
      killGrace: EffectiveLimitSchema,
      // Absent from the status of a run started by an earlier version.
      startTimeout: EffectiveLimitSchema.optional(),
      // Only for a run with spec.finally.
      finallyCeiling: EffectiveLimitSchema.optional(),
      // Only when a queue timeout is set (spec, policy or controller): none otherwise.
      queueTimeout: EffectiveLimitSchema.optional(),
      // Only under a policy's maximums.taskTimeout: the timeout of a task that sets none.
      taskTimeout: EffectiveLimitSchema.optional(),
      // Absent from the status of a run started by an earlier version (it has the default's cap).
      maxPreemptions: CountLimitSchema.optional(),
      // Only where the namespace policy gave them (the spec shows its own; the defaults are constants).
      retryDelay: EffectiveLimitSchema.optional(),
      retryBackoff: EffectiveLimitSchema.optional(),
      retryMaxDelay: EffectiveLimitSchema.optional(),
    })
    .optional(),
  tasks: z.array(TaskStatusSchema).optional(),
  /** spec.finally's tasks, apart from the main ones, in order. */
  finally: z.array(TaskStatusSchema).optional(),
  /** For a run through Kueue: its queue and what its pod asks of the quota (controller/kueue/kueue-pod.ts). */
  queue: z
    .looseObject({
      name: z.string(),
      source: z.enum(["spec", "policy", "default"]),
      priorityClassName: z.string().optional(),
      requests: z.looseObject({
        runner: z.record(z.string(), z.string()),
        task: z.record(
          z.string(),
          z.strictObject({ value: z.string(), source: z.enum(["spec", "policy", "default"]) }),
        ),
        taskContainers: z.number().int(),
      }),
    })
    .optional(),
  /** Milliseconds the run's earlier pods (before a preemption or a loss) waited in Kueue's queue: the ceiling does not count them. */
  queuedMs: z.number().int().min(0).optional(),
  /** While Kueue holds the run's pod: when that pod was created; gone once Kueue admits it or the run ends. */
  queuedSince: Time.optional(),
  /** While the run goes on: its running task as `index/count name` (e.g. `3/7 migrate`), from the runner's progress record */
  currentTask: z.string().optional(),
  /** The recorded attempt's output in the log archive (docs/log-archive.md), once its upload completed. */
  log: z
    .looseObject({
      bucket: z.string(),
      key: z.string(),
      bytes: z.number().int().min(0),
      sha256: z.string(),
    })
    .optional(),
  conditions: z.array(ConditionSchema).optional(),
});
export type PlaybookStatus = z.infer<typeof PlaybookStatusSchema>;

export const ObjectMetaSchema = z.looseObject({
  name: z
    .string({ error: "is required" })
    .max(253, "must be at most 253 characters")
    .regex(DNS1123_SUBDOMAIN, "must be a DNS-1123 subdomain (lower case letters, digits, '-' and '.')"),
  namespace: z.string().optional(),
  uid: z.string().optional(),
  generation: z.number().int().optional(),
  resourceVersion: z.string().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
});

export const PlaybookSchema = z.strictObject({
  apiVersion: z.literal(API_VERSION, { error: `must be ${API_VERSION}` }),
  kind: z.literal(KIND, { error: `must be ${KIND}` }),
  metadata: ObjectMetaSchema,
  spec: PlaybookSpecSchema,
  status: PlaybookStatusSchema.optional(),
});
export type Playbook = z.infer<typeof PlaybookSchema>;
