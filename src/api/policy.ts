// The namespace policy (PlaybookPolicy, playbook.dev/v1alpha1): what Playbooks in a namespace get
// by default and what they may ask for. Only the one named `default` governs its namespace; without
// it the controller's flags do. The checks are pure functions shared by the controller and the CLI.
import { z } from "zod";
import { DNS1123_SUBDOMAIN } from "./dns-names.js";
import { formatDuration, parseDuration } from "./duration.js";
import {
  finallyWindowMs,
  type LimitDefaults,
  type LimitProblem,
  type PolicyLimitDefaults,
  type ResolvedLimits,
} from "./limits.js";
import { MIN_ARCHIVED_LOG_BYTES } from "./log-archive.js";
import { PLACEMENT_FIELDS_SHAPE } from "./placement.js";
import {
  checkPlacement,
  PLACEMENT_POLICY_SHAPE,
  type PlacementRules,
  type PodPlacement,
  placementRulesOf,
  resolvePlacement,
} from "./placement-policy.js";
import {
  API_VERSION,
  ConditionSchema,
  DEFAULT_BACKOFF_LIMIT,
  DurationString,
  KueueName,
  MAX_PREEMPTIONS_LIMIT,
  ObjectMetaSchema,
  type PlaybookSpec,
  Quantity,
  ResourceRequirements,
  RetryBackoff,
} from "./playbook.js";
import { AllowedVolumes, checkVolumes } from "./policy-volumes.js";
import { quantityValue } from "./quantity.js";
import { allTasksOf, ImageReference } from "./task-images.js";

export const POLICY_KIND = "PlaybookPolicy";
export const POLICY_PLURAL = "playbookpolicies";
/** The one policy of a namespace that governs it. */
export const GOVERNING_POLICY_NAME = "default";
/** The service account every namespace has: allowed unless a policy says otherwise. */
export const DEFAULT_SERVICE_ACCOUNT = "default";
const INT32_MAX = 2_147_483_647;

const ServiceAccountName = z
  .string()
  .max(253, "must be at most 253 characters")
  .regex(DNS1123_SUBDOMAIN, "must be a DNS-1123 subdomain");

/**
 * Whether `pattern` is a usable image pattern: an exact reference (no `*`), or a prefix ending at a
 * path boundary, `/*`, with no other `*`. `registry.example.com*` is not: it would match
 * `registry.example.com.evil.io/x` too.
 */
export function isImagePattern(pattern: string): boolean {
  const star = pattern.indexOf("*");
  if (star < 0) return true;
  return star === pattern.length - 1 && pattern.endsWith("/*");
}

/** Why an image pattern is refused, naming its value (the path names its index). */
export const imagePatternMessage = (pattern: string) =>
  `${JSON.stringify(pattern)} must be an exact image or end in "/*"`;

/** An image reference, or a prefix of one ending at a path boundary: `/*`. */
export const ImagePattern = z
  .string()
  .min(1, "must not be empty")
  .max(1024, "must be at most 1024 characters")
  .refine(isImagePattern, { error: (issue) => imagePatternMessage(String(issue.input)) });

const PolicyDefaultsSchema = z.strictObject({
  ceiling: DurationString.optional(),
  stall: DurationString.optional(),
  killGrace: DurationString.optional(),
  startTimeout: DurationString.optional(),
  /** The finally tasks' ceiling of a Playbook that sets no spec.finallyCeiling. */
  finallyCeiling: DurationString.optional(),
  ttlSecondsAfterFinished: z.number().int().min(0).max(INT32_MAX).optional(),
  backoffLimit: z.number().int().min(0).max(100).optional(),
  serviceAccountName: ServiceAccountName.optional(),
  /** The image of tasks that name none and whose Playbook sets no spec.image. */
  image: ImageReference.optional(),
  resources: ResourceRequirements.optional(),
  /** The Kueue LocalQueue of a Playbook that names none (spec.queueName). */
  queueName: KueueName.optional(),
  /** The queue timeout of a Playbook that sets no spec.queueTimeout. */
  queueTimeout: DurationString.optional(),
  /** The maxPreemptions of a Playbook that sets no spec.maxPreemptions. */
  maxPreemptions: z.number().int().min(0).max(MAX_PREEMPTIONS_LIMIT).optional(),
  /** The retry waits of tasks whose task and Playbook set none. */
  retryDelay: DurationString.optional(),
  retryBackoff: RetryBackoff.optional(),
  retryMaxDelay: DurationString.optional(),
  /** The placement and pod metadata of a Playbook that sets none of a field (placement-policy.ts). */
  ...PLACEMENT_FIELDS_SHAPE,
});
export type PolicyDefaults = z.infer<typeof PolicyDefaultsSchema>;

const PolicyMaximumsSchema = z.strictObject({
  ceiling: DurationString.optional(),
  /** The longest grace after the ceiling (or a task's limit, or a cancel) before SIGKILL. */
  killGrace: DurationString.optional(),
  /** The longest finallyCeiling: the time the finally tasks may add after the main tasks end. */
  finallyCeiling: DurationString.optional(),
  taskTimeout: DurationString.optional(),
  /** The longest time a run's pod may wait for Kueue's admission; also the value of a Playbook that sets none. */
  queueTimeout: DurationString.optional(),
  /** The most pods Kueue stops that a run may re-create; bounds the default as queueTimeout's does. */
  maxPreemptions: z.number().int().min(0).max(MAX_PREEMPTIONS_LIMIT).optional(),
  runningPlaybooks: z.number().int().min(1).max(100_000).optional(),
  /** The most bytes of one attempt's output the log archive keeps (head and tail past it); default 1Gi. */
  archivedLogBytes: Quantity.refine(
    (q) => quantityValue(q) >= MIN_ARCHIVED_LOG_BYTES,
    `must be at least ${MIN_ARCHIVED_LOG_BYTES / 1024 ** 2}Mi (spec.maximums.archivedLogBytes)`,
  ).optional(),
  resources: z
    .strictObject({
      limits: z.record(z.string(), Quantity).optional(),
      requests: z.record(z.string(), Quantity).optional(),
    })
    .optional(),
});
export type PolicyMaximums = z.infer<typeof PolicyMaximumsSchema>;

export const PolicySpecSchema = z.strictObject({
  defaults: PolicyDefaultsSchema.optional(),
  maximums: PolicyMaximumsSchema.optional(),
  allowedServiceAccounts: z.array(ServiceAccountName).max(256, "must list at most 256 names").optional(),
  allowedImages: z.array(ImagePattern).max(256, "must list at most 256 images").optional(),
  /** enforced, allowedRuntimeClasses, allowedTolerations, forbidden label and annotation keys. */
  ...PLACEMENT_POLICY_SHAPE,
  /** The volume types the namespace's Playbooks may name; absent: all of them (policy-volumes.ts). */
  allowedVolumes: AllowedVolumes.optional(),
});
export type PolicySpec = z.infer<typeof PolicySpecSchema>;

export const PolicyStatusSchema = z.looseObject({
  observedGeneration: z.number().int().optional(),
  governed: z.number().int().optional(),
  conditions: z.array(ConditionSchema).optional(),
});
export type PolicyStatus = z.infer<typeof PolicyStatusSchema>;

export const PlaybookPolicySchema = z.strictObject({
  apiVersion: z.literal(API_VERSION, { error: `must be ${API_VERSION}` }),
  kind: z.literal(POLICY_KIND, { error: `must be ${POLICY_KIND}` }),
  metadata: ObjectMetaSchema,
  spec: PolicySpecSchema.default({}),
  status: PolicyStatusSchema.optional(),
});
export type PlaybookPolicy = z.infer<typeof PlaybookPolicySchema>;

/** The cluster-wide side: what governs a namespace that has no policy. */
export interface ClusterAllowances {
  runnerImage: string;
  /** --allowed-service-accounts: allowed in every namespace without a policy, besides `default`. */
  allowedServiceAccounts: readonly string[];
  /** --allowed-images: allowed in every namespace without a policy, besides the runner image. */
  allowedImages: readonly string[];
  /** --default-queue-name: the Kueue LocalQueue of a run whose spec and policy name none. */
  defaultQueueName?: string | undefined;
}

/** What governs one namespace: its policy named default, or the controller's flags. */
export interface NamespaceRules {
  /** The policy's name and generation, or null when the controller's flags govern. */
  policy: { name: string; generation?: number | undefined } | null;
  defaults: PolicyDefaults;
  maximums: PolicyMaximums;
  allowedServiceAccounts: readonly string[];
  allowedImages: readonly string[];
  /** spec.allowedVolumes; absent: every type a Playbook may name. */
  allowedVolumes?: readonly string[] | undefined;
  runnerImage: string;
  /** The controller's --default-queue-name, under the policy's defaults.queueName. */
  defaultQueueName?: string | undefined;
  /** Why the policy named default cannot be applied: every new run is refused until it is fixed. */
  problem?: string | undefined;
  /** The policy's placement rules (placement-policy.ts); absent without a policy: the spec's alone. */
  placement?: PlacementRules | undefined;
}

export function clusterRules(cluster: ClusterAllowances): NamespaceRules {
  return {
    policy: null,
    defaults: {},
    maximums: {},
    allowedServiceAccounts: [DEFAULT_SERVICE_ACCOUNT, ...cluster.allowedServiceAccounts],
    allowedImages: [cluster.runnerImage, ...cluster.allowedImages],
    runnerImage: cluster.runnerImage,
    ...(cluster.defaultQueueName ? { defaultQueueName: cluster.defaultQueueName } : {}),
  };
}

/**
 * The rules of a namespace governed by `policy`. Lists the policy leaves out keep what the
 * cluster allows without a policy; the policy's own default service account and image are allowed.
 */
export function policyRules(
  policy: { name: string; generation?: number | undefined; spec: PolicySpec } | null,
  cluster: ClusterAllowances,
): NamespaceRules {
  const base = clusterRules(cluster);
  if (!policy) return base;
  const { spec } = policy;
  return {
    policy: { name: policy.name, generation: policy.generation },
    defaults: spec.defaults ?? {},
    maximums: spec.maximums ?? {},
    allowedServiceAccounts: spec.allowedServiceAccounts ?? base.allowedServiceAccounts,
    allowedImages: spec.allowedImages ?? base.allowedImages,
    ...(spec.allowedVolumes ? { allowedVolumes: spec.allowedVolumes } : {}),
    runnerImage: cluster.runnerImage,
    ...(base.defaultQueueName ? { defaultQueueName: base.defaultQueueName } : {}),
    placement: placementRulesOf(policy.name, spec),
  };
}

/**
 * A policy's rules as the `playbook` command applies them (validate --policy, describe): the
 * cluster's runner image and allowances are the controller's, not known there; only the policy's
 * lists allow images.
 */
export function policyRulesOf(policy: Pick<PlaybookPolicy, "metadata" | "spec">): NamespaceRules {
  return policyRules(
    { name: policy.metadata.name, generation: policy.metadata.generation, spec: policy.spec },
    { runnerImage: "", allowedServiceAccounts: [], allowedImages: [] },
  );
}

/** "PlaybookPolicy default, spec.maximums.ceiling", or the controller flag it came from. */
function where(rules: NamespaceRules, policyField: string, flag: string): string {
  return rules.policy ? `PlaybookPolicy ${rules.policy.name}, ${policyField}` : `the controller's ${flag}`;
}

/**
 * The policy's limit defaults in milliseconds, and its maximums.taskTimeout, for resolveLimits;
 * undefined without a policy.
 */
export function policyLimitDefaults(rules: NamespaceRules): PolicyLimitDefaults | undefined {
  if (!rules.policy) return undefined;
  const ms = (text: string | undefined) => (text === undefined ? undefined : parseDuration(text));
  const { ceiling, stall, killGrace, startTimeout, finallyCeiling, queueTimeout, maxPreemptions } =
    rules.defaults;
  const { retryDelay, retryBackoff, retryMaxDelay } = rules.defaults;
  return {
    ceilingMs: ms(ceiling),
    stallMs: ms(stall),
    killGraceMs: ms(killGrace),
    startTimeoutMs: ms(startTimeout),
    finallyCeilingMs: ms(finallyCeiling),
    queueTimeoutMs: ms(queueTimeout),
    retryDelayMs: ms(retryDelay),
    retryBackoff,
    retryMaxDelayMs: ms(retryMaxDelay),
    // A maximum, not a default: it bounds every task, so a task without a timeout takes it.
    taskTimeoutMs: ms(rules.maximums.taskTimeout),
    maxPreemptions,
    maximumQueueTimeoutMs: ms(rules.maximums.queueTimeout),
    maximumMaxPreemptions: rules.maximums.maxPreemptions,
  };
}

/** The given defaults (the controller's, or `playbook run`'s) with the policy's level between the Playbook's and them. */
export function defaultsUnder(rules: NamespaceRules | undefined, local: LimitDefaults): LimitDefaults {
  const policy = rules ? policyLimitDefaults(rules) : undefined;
  return policy ? { ...local, policy } : local;
}

/**
 * Whether `image` matches one of the patterns: exactly, or as a name below the path of a pattern
 * ending in `/*` (`registry.example/*` admits `registry.example/a:1`, never `registry.example.evil/x`).
 * Any other pattern holding a `*` admits nothing: a policy stored before the CRD refused them.
 */
export function imageAllowed(image: string, patterns: readonly string[]): boolean {
  return patterns.some((pattern) => {
    if (!isImagePattern(pattern)) return false;
    if (!pattern.endsWith("/*")) return image === pattern;
    const prefix = pattern.slice(0, -1);
    return image.length > prefix.length && image.startsWith(prefix);
  });
}

type Resources = NonNullable<PlaybookSpec["resources"]>;

/** The container's resources: the Playbook's, each map filled in from the policy's default. */
export function effectiveResources(spec: PlaybookSpec, rules: NamespaceRules): Resources | undefined {
  const fallback = rules.defaults.resources;
  if (!fallback) return spec.resources;
  if (!spec.resources) return fallback;
  const merged: Resources = { ...fallback, ...spec.resources };
  for (const key of ["limits", "requests"] as const) {
    const both = { ...(fallback[key] ?? {}), ...(spec.resources[key] ?? {}) };
    if (Object.keys(both).length > 0) merged[key] = both;
  }
  return merged;
}

/** What the pod is built with beyond the limits: the Playbook's choice, else the policy's, else the controller's. */
export interface PodSettings {
  /** The image of tasks that name none: spec.image, else the policy's default, else the runner image. */
  image: string;
  serviceAccountName?: string | undefined;
  resources?: Resources | undefined;
  backoffLimit: number;
  ttlSecondsAfterFinished?: number | undefined;
  /** Kueue's LocalQueue the pod waits in, and the level it came from; absent: Kueue is not asked. */
  queue?: { name: string; source: "spec" | "policy" | "default" } | undefined;
  /** Where the pod goes and its own labels and annotations: the spec's, the policy's defaults and enforced entries. */
  placement?: PodPlacement | undefined;
}

/** The run's Kueue LocalQueue: spec.queueName, else the policy's default, else the controller's. */
export function queueOf(spec: PlaybookSpec, rules: NamespaceRules): PodSettings["queue"] {
  if (spec.queueName !== undefined) return { name: spec.queueName, source: "spec" };
  if (rules.defaults.queueName !== undefined) return { name: rules.defaults.queueName, source: "policy" };
  if (rules.defaultQueueName) return { name: rules.defaultQueueName, source: "default" };
  return undefined;
}

export function podSettings(spec: PlaybookSpec, rules: NamespaceRules): PodSettings {
  const queue = queueOf(spec, rules);
  return {
    ...(queue ? { queue } : {}),
    image: spec.image ?? rules.defaults.image ?? rules.runnerImage,
    serviceAccountName: spec.serviceAccountName ?? rules.defaults.serviceAccountName,
    resources: effectiveResources(spec, rules),
    backoffLimit: spec.backoffLimit ?? rules.defaults.backoffLimit ?? DEFAULT_BACKOFF_LIMIT,
    ttlSecondsAfterFinished: spec.ttlSecondsAfterFinished ?? rules.defaults.ttlSecondsAfterFinished,
    placement: resolvePlacement(spec, rules.placement).pod,
  };
}

/** The fields a refusal names, the `field` label of playbook_policy_refusals_total. */
export const POLICY_FIELDS = [
  "spec.ceiling",
  "spec.killGrace",
  "spec.finallyCeiling",
  "spec.queueTimeout",
  "spec.maxPreemptions",
  "spec.tasks[].timeout",
  "spec.finally[].timeout",
  "spec.serviceAccountName",
  "spec.image",
  "spec.tasks[].image",
  "spec.finally[].image",
  "spec.resources",
  "spec.nodeSelector",
  "spec.tolerations",
  "spec.runtimeClassName",
  "spec.podMetadata",
  "spec.volumes",
  "policy",
] as const;

/** A Playbook refused by its namespace's rules: the field for the metric, and the message. */
export interface PolicyProblem extends LimitProblem {
  /** The refused field with list indexes dropped, for playbook_policy_refusals_total. */
  field: (typeof POLICY_FIELDS)[number];
}

const list = (names: readonly string[]) => (names.length === 0 ? "none" : names.join(", "));

/**
 * What the namespace's rules refuse in a Playbook whose limits resolved as `limits`: each problem
 * names the field, the value and the bound with where it is set.
 */
export function checkPolicy(
  spec: PlaybookSpec,
  limits: ResolvedLimits,
  rules: NamespaceRules,
): PolicyProblem[] {
  const problems: PolicyProblem[] = [];
  if (rules.problem) return [{ path: "(namespace policy)", field: "policy", message: rules.problem }];
  const { maximums } = rules;
  if (maximums.ceiling !== undefined && limits.ceiling.ms > parseDuration(maximums.ceiling)) {
    const path = limits.ceiling.source === "spec" ? "spec.ceiling" : "spec";
    const value = formatDuration(limits.ceiling.ms);
    const shown = limits.ceiling.source === "spec" ? value : `${value} (${limits.ceiling.field})`;
    problems.push({
      path,
      field: "spec.ceiling",
      message: `${shown} is longer than the namespace's maximum ceiling ${maximums.ceiling} (${where(rules, "spec.maximums.ceiling", "--max-ceiling")})`,
    });
  }
  if (maximums.killGrace !== undefined && limits.killGrace.ms > parseDuration(maximums.killGrace)) {
    const value = formatDuration(limits.killGrace.ms);
    const own = limits.killGrace.source === "spec";
    problems.push({
      path: own ? "spec.killGrace" : "spec",
      field: "spec.killGrace",
      message: `${own ? value : `${value} (${limits.killGrace.field})`} is longer than the namespace's maximum killGrace ${maximums.killGrace} (${where(rules, "spec.maximums.killGrace", "--max-kill-grace")})`,
    });
  }
  // Only a run with finally tasks uses its finallyCeiling: an unused default refuses nothing.
  const finallyCeiling = limits.finallyCeiling;
  if (
    maximums.finallyCeiling !== undefined &&
    (limits.finally.length > 0 || finallyCeiling.source === "spec") &&
    finallyCeiling.ms > parseDuration(maximums.finallyCeiling)
  ) {
    const value = formatDuration(finallyCeiling.ms);
    const own = finallyCeiling.source === "spec";
    problems.push({
      path: own ? "spec.finallyCeiling" : "spec",
      field: "spec.finallyCeiling",
      message: `${own ? value : `${value} (${finallyCeiling.field})`} is longer than the namespace's maximum finallyCeiling ${maximums.finallyCeiling} (${where(rules, "spec.maximums.finallyCeiling", "--max-finally-ceiling")})`,
    });
  }
  problems.push(...checkFinallyWithinCeiling(limits, rules));
  const queueTimeout = limits.queueTimeout;
  if (
    maximums.queueTimeout !== undefined &&
    queueTimeout !== null &&
    queueTimeout.ms > parseDuration(maximums.queueTimeout)
  ) {
    const value = formatDuration(queueTimeout.ms);
    const own = queueTimeout.source === "spec";
    problems.push({
      path: own ? "spec.queueTimeout" : "spec",
      field: "spec.queueTimeout",
      message: `${own ? value : `${value} (${queueTimeout.field})`} is longer than the namespace's maximum queueTimeout ${maximums.queueTimeout} (${where(rules, "spec.maximums.queueTimeout", "configuration")})`,
    });
  }
  const maxPreemptions = limits.maxPreemptions;
  if (
    maximums.maxPreemptions !== undefined &&
    maxPreemptions !== null &&
    maxPreemptions.value > maximums.maxPreemptions
  ) {
    const own = maxPreemptions.source === "spec";
    problems.push({
      path: own ? "spec.maxPreemptions" : "spec",
      field: "spec.maxPreemptions",
      message: `${own ? maxPreemptions.value : `${maxPreemptions.value} (${maxPreemptions.field})`} is more than the namespace's maximum maxPreemptions ${maximums.maxPreemptions} (${where(rules, "spec.maximums.maxPreemptions", "configuration")})`,
    });
  }
  if (maximums.taskTimeout !== undefined) {
    const maxMs = parseDuration(maximums.taskTimeout);
    for (const {
      task,
      path: [list, index],
    } of allTasksOf(spec)) {
      if (task.timeout !== undefined && parseDuration(task.timeout) > maxMs) {
        problems.push({
          path: `spec.${list}[${index}].timeout`,
          field: `spec.${list}[].timeout`,
          message: `${task.timeout} is longer than the namespace's maximum task timeout ${maximums.taskTimeout} (${where(rules, "spec.maximums.taskTimeout", "configuration")})`,
        });
      }
    }
  }
  const fallback = rules.defaults.serviceAccountName;
  if (
    spec.serviceAccountName !== undefined &&
    spec.serviceAccountName !== fallback &&
    !rules.allowedServiceAccounts.includes(spec.serviceAccountName)
  ) {
    const allowed = list(rules.allowedServiceAccounts);
    problems.push({
      path: "spec.serviceAccountName",
      field: "spec.serviceAccountName",
      message: `${JSON.stringify(spec.serviceAccountName)} is not an allowed service account: ${
        rules.policy
          ? `PlaybookPolicy ${rules.policy.name} allows ${allowed} (spec.allowedServiceAccounts${fallback ? `, spec.defaults.serviceAccountName ${fallback}` : ""})`
          : `without a PlaybookPolicy named default only ${allowed} (the namespace's default and the controller's --allowed-service-accounts)`
      }`,
    });
  }
  problems.push(...checkImages(spec, rules));
  problems.push(...checkVolumes(spec, rules));
  problems.push(...checkResources(effectiveResources(spec, rules), spec.resources, rules));
  problems.push(...checkPlacement(spec, rules.placement));
  return problems;
}

/** "1h (spec.finallyCeiling)": a limit's value and where it is set. */
const shownAt = (limit: { ms: number; source: string; field: string }, specField: string) =>
  `${formatDuration(limit.ms)} (${limit.source === "spec" ? specField : limit.field})`;

/**
 * A policy that bounds the ceiling (maximums.ceiling) and says nothing of finally tasks (no
 * maximums.finallyCeiling) bounds their window too: the ceiling plus the finally window
 * (finallyCeiling plus killGrace) must fit in maximums.ceiling, so the pod's whole life stays
 * within maximums.ceiling plus killGrace, the bound such a policy gave before finally tasks existed.
 */
function checkFinallyWithinCeiling(limits: ResolvedLimits, rules: NamespaceRules): PolicyProblem[] {
  const { maximums } = rules;
  if (maximums.ceiling === undefined || maximums.finallyCeiling !== undefined) return [];
  const maxMs = parseDuration(maximums.ceiling);
  // A ceiling over the maximum on its own is refused as such.
  if (limits.finally.length === 0 || limits.ceiling.ms > maxMs) return [];
  const wholeMs = limits.ceiling.ms + finallyWindowMs(limits);
  if (wholeMs <= maxMs) return [];
  const finallyCeiling = limits.finallyCeiling;
  return [
    {
      path: finallyCeiling.source === "spec" ? "spec.finallyCeiling" : "spec",
      field: "spec.finallyCeiling",
      message: `the ceiling ${shownAt(limits.ceiling, "spec.ceiling")} plus the finally tasks' window, finallyCeiling ${shownAt(finallyCeiling, "spec.finallyCeiling")} and killGrace ${shownAt(limits.killGrace, "spec.killGrace")}, is ${formatDuration(wholeMs)}, longer than the namespace's maximum ceiling ${maximums.ceiling} (${where(rules, "spec.maximums.ceiling", "--max-ceiling")}), which bounds the finally tasks too: the policy sets no spec.maximums.finallyCeiling`,
    },
  ];
}

/**
 * Every image a task runs in must be allowed: the runner image, the policy's own default image, or
 * one its allowedImages (without a policy, the controller's --allowed-images) admit. A task's own
 * image is refused at spec.tasks[i].image (spec.finally[i].image), the Playbook's default at spec.image.
 */
function checkImages(spec: PlaybookSpec, rules: NamespaceRules): PolicyProblem[] {
  const allowed = (image: string) =>
    image === rules.runnerImage || image === rules.defaults.image || imageAllowed(image, rules.allowedImages);
  const why = rules.policy
    ? `PlaybookPolicy ${rules.policy.name} allows ${list(rules.allowedImages)} (spec.allowedImages)${rules.runnerImage ? `, the runner image ${rules.runnerImage}` : ""}${rules.defaults.image ? ` and its default ${rules.defaults.image}` : ""}`
    : `without a PlaybookPolicy named default only ${list(rules.allowedImages)} (the runner image and the controller's --allowed-images)`;
  const refused = (image: string) => `${JSON.stringify(image)} is not an allowed image: ${why}`;
  const problems: PolicyProblem[] = [];
  if (spec.image !== undefined && !allowed(spec.image)) {
    problems.push({ path: "spec.image", field: "spec.image", message: refused(spec.image) });
  }
  for (const {
    task,
    path: [list, index],
  } of allTasksOf(spec)) {
    if (task.image !== undefined && !allowed(task.image)) {
      problems.push({
        path: `spec.${list}[${index}].image`,
        field: `spec.${list}[].image`,
        message: refused(task.image),
      });
    }
  }
  return problems;
}

function checkResources(
  resources: Resources | undefined,
  own: Resources | undefined,
  rules: NamespaceRules,
): PolicyProblem[] {
  const bounds = rules.maximums.resources;
  if (!bounds) return [];
  const problems: PolicyProblem[] = [];
  const bound = (kind: "limits" | "requests", name: string, max: string | number) => {
    const value = resources?.[kind]?.[name];
    const from = own?.[kind]?.[name] !== undefined ? "" : " (the policy's default)";
    const path = `spec.resources.${kind}.${name}`;
    const set = where(rules, `spec.maximums.resources.${kind}.${name}`, "configuration");
    if (value === undefined) {
      // As a LimitRange's max does: a bounded resource needs a limit, or the pod could use any amount.
      if (kind === "limits") {
        problems.push({
          path,
          field: "spec.resources",
          message: `is required: the namespace's maximum ${name} limit is ${max} (${set})`,
        });
      }
      return;
    }
    if (quantityValue(value) > quantityValue(max)) {
      problems.push({
        path,
        field: "spec.resources",
        message: `${value}${from} is more than the namespace's maximum ${max} (${set})`,
      });
    }
  };
  for (const [name, max] of Object.entries(bounds.limits ?? {})) {
    bound("limits", name, max);
    // A request above the maximum limit could never fit under it either.
    if (bounds.requests?.[name] === undefined) bound("requests", name, max);
  }
  for (const [name, max] of Object.entries(bounds.requests ?? {})) bound("requests", name, max);
  return problems;
}
