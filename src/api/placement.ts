// Where a run's pod goes and what it carries for others to read (spec.nodeSelector, tolerations,
// affinity, runtimeClassName, imagePullSecrets, podMetadata), validated as the API server
// validates a Pod's fields (ValidatePodSpec, ValidateObjectMeta), each error naming the field and
// the value. The policy's defaults and enforced entries over them: placement-policy.ts.
import { z } from "zod";
import { DNS1123_SUBDOMAIN } from "./dns-names.js";

/** A qualified name's name part, and a label value's form (IsQualifiedName, IsValidLabelValue). */
const NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

/** Why `key` is not a qualified name (`[prefix/]name`), or undefined when it is. */
export function qualifiedNameProblem(key: string): string | undefined {
  const slash = key.indexOf("/");
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (prefix !== undefined) {
    if (prefix.length === 0) return `${JSON.stringify(key)}: the prefix before "/" must not be empty`;
    if (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))
      return `${JSON.stringify(key)}: the prefix ${JSON.stringify(prefix)} must be a DNS-1123 subdomain of at most 253 characters`;
  }
  if (name.length === 0 || name.length > 63 || !NAME_PART.test(name))
    return `${JSON.stringify(key)} must be a qualified name: at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit, with an optional DNS subdomain prefix and "/"`;
  return undefined;
}

/** Why `value` is not a label value, or undefined when it is. */
export function labelValueProblem(value: string): string | undefined {
  if (value === "" || (value.length <= 63 && NAME_PART.test(value))) return undefined;
  return `${JSON.stringify(value)} must be a label value: empty, or at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit`;
}

/** A map of label keys to values (a node selector, pod labels), each entry refused naming its key. */
const LabelMap = z.record(z.string(), z.string()).superRefine((labels, ctx) => {
  for (const [key, value] of Object.entries(labels)) {
    const problem = qualifiedNameProblem(key) ?? labelValueProblem(value);
    if (problem) ctx.addIssue({ code: "custom", path: [key], message: problem });
  }
});

/** The API server's bound on a pod's annotations, keys and values together (TotalAnnotationSizeLimitB). */
export const MAX_ANNOTATION_BYTES = 256 * 1024;

const AnnotationMap = z.record(z.string(), z.string()).superRefine((annotations, ctx) => {
  let bytes = 0;
  for (const [key, value] of Object.entries(annotations)) {
    const problem = qualifiedNameProblem(key.toLowerCase());
    if (problem) ctx.addIssue({ code: "custom", path: [key], message: problem });
    bytes += Buffer.byteLength(key) + Buffer.byteLength(value);
  }
  if (bytes > MAX_ANNOTATION_BYTES)
    ctx.addIssue({
      code: "custom",
      message: `are ${bytes} bytes; a pod's annotations hold at most ${MAX_ANNOTATION_BYTES}, the controller's own included`,
    });
});

/** A Kubernetes object's name that must be a DNS-1123 subdomain (a RuntimeClass, a Secret). */
export const SubdomainName = z
  .string()
  .max(253, "must be at most 253 characters")
  .refine((name) => DNS1123_SUBDOMAIN.test(name), {
    error: (issue) =>
      `${JSON.stringify(issue.input)} must be a DNS-1123 subdomain (lower case letters, digits, '-' and '.')`,
  });

export const TOLERATION_OPERATORS = ["Exists", "Equal"] as const;
export const TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"] as const;

/** A pod's toleration, checked as ValidateTolerations checks it. */
export const TolerationSchema = z
  .strictObject({
    key: z.string().optional(),
    operator: z
      .enum(TOLERATION_OPERATORS, {
        error: "must be Exists or Equal",
      })
      .optional(),
    value: z.string().optional(),
    effect: z
      .enum(TAINT_EFFECTS, {
        error: "must be NoSchedule, PreferNoSchedule or NoExecute (or left out for every effect)",
      })
      .optional(),
    tolerationSeconds: z.number().int("must be a whole number of seconds").optional(),
  })
  .superRefine((t, ctx) => {
    const key = t.key ?? "";
    if (key !== "") {
      const problem = qualifiedNameProblem(key);
      if (problem) ctx.addIssue({ code: "custom", path: ["key"], message: problem });
    }
    if (key === "" && t.operator !== "Exists")
      ctx.addIssue({
        code: "custom",
        path: ["operator"],
        message: `${JSON.stringify(t.operator ?? "Equal")} must be Exists when the key is empty (a toleration of every taint)`,
      });
    if (t.operator === "Exists" && (t.value ?? "") !== "")
      ctx.addIssue({
        code: "custom",
        path: ["value"],
        message: `${JSON.stringify(t.value)} must be empty when the operator is Exists`,
      });
    if (t.operator !== "Exists" && t.value !== undefined) {
      const problem = labelValueProblem(t.value);
      if (problem) ctx.addIssue({ code: "custom", path: ["value"], message: problem });
    }
    if (t.tolerationSeconds !== undefined && t.effect !== "NoExecute")
      ctx.addIssue({
        code: "custom",
        path: ["tolerationSeconds"],
        message: `${t.tolerationSeconds} is allowed only with effect NoExecute, not ${JSON.stringify(t.effect ?? "")}`,
      });
  });
export type Toleration = z.infer<typeof TolerationSchema>;

const NODE_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] as const;
const LABEL_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist"] as const;

/** A selector requirement: `operators` as the API server allows them for its kind. */
function requirement(operators: readonly [string, ...string[]], keyKind: "label" | "field") {
  return z
    .strictObject({
      key: z.string(),
      operator: z.enum(operators, {
        error: `must be one of ${operators.join(", ")}`,
      }),
      values: z.array(z.string()).optional(),
    })
    .superRefine((r, ctx) => {
      const problem =
        keyKind === "label"
          ? qualifiedNameProblem(r.key)
          : r.key === "metadata.name"
            ? undefined
            : `${JSON.stringify(r.key)} must be metadata.name, the one node field a selector can match`;
      if (problem) ctx.addIssue({ code: "custom", path: ["key"], message: problem });
      const values = r.values ?? [];
      if ((r.operator === "In" || r.operator === "NotIn") && values.length === 0)
        ctx.addIssue({ code: "custom", path: ["values"], message: `must not be empty with ${r.operator}` });
      if ((r.operator === "Exists" || r.operator === "DoesNotExist") && values.length > 0)
        ctx.addIssue({ code: "custom", path: ["values"], message: `must be empty with ${r.operator}` });
      if (
        (r.operator === "Gt" || r.operator === "Lt") &&
        (values.length !== 1 || !/^-?\d+$/.test(values[0] ?? ""))
      )
        ctx.addIssue({
          code: "custom",
          path: ["values"],
          message: `${JSON.stringify(values)} must be one whole number with ${r.operator}`,
        });
    });
}

const NodeSelectorTerm = z.strictObject({
  matchExpressions: z.array(requirement(NODE_OPERATORS, "label")).optional(),
  matchFields: z.array(requirement(NODE_OPERATORS, "field")).optional(),
});

const LabelSelector = z.strictObject({
  matchLabels: LabelMap.optional(),
  matchExpressions: z.array(requirement(LABEL_OPERATORS, "label")).optional(),
});

const Weight = z.number().int().min(1, "must be from 1 to 100").max(100, "must be from 1 to 100");

const PodAffinityTerm = z.strictObject({
  labelSelector: LabelSelector.optional(),
  namespaceSelector: LabelSelector.optional(),
  namespaces: z.array(z.string()).optional(),
  topologyKey: z.string().superRefine((key, ctx) => {
    const problem = key === "" ? "must not be empty" : qualifiedNameProblem(key);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  }),
  matchLabelKeys: z.array(z.string()).optional(),
  mismatchLabelKeys: z.array(z.string()).optional(),
});

const PodAffinity = z.strictObject({
  requiredDuringSchedulingIgnoredDuringExecution: z.array(PodAffinityTerm).optional(),
  preferredDuringSchedulingIgnoredDuringExecution: z
    .array(z.strictObject({ weight: Weight, podAffinityTerm: PodAffinityTerm }))
    .optional(),
});

/** A pod's affinity, as in a Pod: node affinity, pod affinity and anti-affinity. */
export const AffinitySchema = z.strictObject({
  nodeAffinity: z
    .strictObject({
      requiredDuringSchedulingIgnoredDuringExecution: z
        .strictObject({
          nodeSelectorTerms: z.array(NodeSelectorTerm).min(1, "must list at least one term"),
        })
        .optional(),
      preferredDuringSchedulingIgnoredDuringExecution: z
        .array(z.strictObject({ weight: Weight, preference: NodeSelectorTerm }))
        .optional(),
    })
    .optional(),
  podAffinity: PodAffinity.optional(),
  podAntiAffinity: PodAffinity.optional(),
});
export type Affinity = z.infer<typeof AffinitySchema>;

/**
 * Label and annotation keys the controller, Kueue and the workload controllers own: a run's pod
 * never carries a team's value for them. A key ending in `/` is a prefix (every key under it).
 */
export const RESERVED_POD_KEYS = [
  "playbook.dev/",
  "kueue.x-k8s.io/",
  "kubectl.kubernetes.io/default-container",
  "pod-template-hash",
  "controller-revision-hash",
  "controller-uid",
  "job-name",
  "batch.kubernetes.io/",
  "statefulset.kubernetes.io/",
  "apps.kubernetes.io/",
] as const;

/** The reserved entry `key` falls under, or undefined when a team may set it. */
export function reservedKey(key: string): string | undefined {
  const lower = key.toLowerCase();
  // A subdomain of a reserved prefix is the same owner's (sub.playbook.dev/x).
  const prefix = lower.includes("/") ? lower.slice(0, lower.indexOf("/")) : undefined;
  return RESERVED_POD_KEYS.find((reserved) =>
    reserved.endsWith("/")
      ? lower.startsWith(reserved) || prefix?.endsWith(`.${reserved.slice(0, -1)}`) === true
      : lower === reserved,
  );
}

function refuseReserved(kind: string) {
  return (map: Record<string, string>, ctx: z.RefinementCtx) => {
    for (const key of Object.keys(map)) {
      const reserved = reservedKey(key);
      if (reserved)
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: `${JSON.stringify(key)} is reserved (${reserved}${reserved.endsWith("/") ? "*" : ""}): the controller, Kueue or Kubernetes sets this ${kind} on the pod`,
        });
    }
  };
}

/** spec.podMetadata: labels and annotations put on the run's pods, never a reserved key. */
export const PodMetadataSchema = z.strictObject({
  labels: LabelMap.superRefine(refuseReserved("label")).optional(),
  annotations: AnnotationMap.superRefine(refuseReserved("annotation")).optional(),
});
export type PodMetadata = z.infer<typeof PodMetadataSchema>;

export const MAX_TOLERATIONS = 64;
export const MAX_PULL_SECRETS = 16;

/** The placement fields a Playbook's spec and a policy's defaults share. */
export const PLACEMENT_FIELDS_SHAPE = {
  /** The nodes the pod may run on, by label (a Pod's nodeSelector). */
  nodeSelector: LabelMap.optional(),
  tolerations: z
    .array(TolerationSchema)
    .max(MAX_TOLERATIONS, `must list at most ${MAX_TOLERATIONS} tolerations`)
    .optional(),
  affinity: AffinitySchema.optional(),
  /** The RuntimeClass the pod runs under (gVisor, Kata); the policy's allowedRuntimeClasses. */
  runtimeClassName: SubdomainName.optional(),
  /** Secrets the kubelet pulls the task images with. */
  imagePullSecrets: z
    .array(z.strictObject({ name: SubdomainName }))
    .max(MAX_PULL_SECRETS, `must list at most ${MAX_PULL_SECRETS} secrets`)
    .optional(),
  podMetadata: PodMetadataSchema.optional(),
};

/** The placement fields `playbook run` has no cluster for, as they are set in a spec. */
export function placementFieldsSet(spec: Record<string, unknown>): string[] {
  return Object.keys(PLACEMENT_FIELDS_SHAPE).filter((field) => spec[field] !== undefined);
}
