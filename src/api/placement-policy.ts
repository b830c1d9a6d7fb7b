// The namespace policy over a run's placement and pod metadata: its defaults for each field (a
// Playbook that sets none gets them), its enforced node selector entries and tolerations (always on
// the pod, as the PodNodeSelector and PodTolerationRestriction admission plugins add theirs), the
// runtime classes and tolerations a Playbook may ask for, and the label and annotation keys a
// team may not set. Pure: the pod builder, the controller's checks and `playbook describe` share it.
import { z } from "zod";
import {
  type Affinity,
  MAX_TOLERATIONS,
  PLACEMENT_FIELDS_SHAPE,
  type PodMetadata,
  qualifiedNameProblem,
  SubdomainName,
  type Toleration,
  TolerationSchema,
} from "./placement.js";
import type { PlaybookSpec } from "./playbook.js";

/** A label or annotation key a policy refuses: exact, or every key under a prefix, `example.com/*`. */
export const KeyPattern = z.string().superRefine((pattern, ctx) => {
  const problem = pattern.endsWith("/*")
    ? qualifiedNameProblem(`${pattern.slice(0, -1)}x`)
    : qualifiedNameProblem(pattern);
  if (problem)
    ctx.addIssue({
      code: "custom",
      message: `${JSON.stringify(pattern)} must be a label or annotation key, or a prefix of them ending in "/*"`,
    });
});

const NodeSelectorEntries = z.record(z.string(), z.string()).superRefine((labels, ctx) => {
  for (const key of Object.keys(labels)) {
    const problem = qualifiedNameProblem(key);
    if (problem) ctx.addIssue({ code: "custom", path: [key], message: problem });
  }
});

/** A policy's fields beside defaults and maximums that govern placement and pod metadata. */
export const PLACEMENT_POLICY_SHAPE = {
  /** Always on the pod, whatever the Playbook says; an entry of the Playbook's that differs is InvalidSpec. */
  enforced: z
    .strictObject({
      nodeSelector: NodeSelectorEntries.optional(),
      tolerations: z
        .array(TolerationSchema)
        .max(MAX_TOLERATIONS, `must list at most ${MAX_TOLERATIONS} tolerations`)
        .optional(),
    })
    .optional(),
  /** The RuntimeClasses a Playbook may name (its default is allowed too); absent: any. */
  allowedRuntimeClasses: z.array(SubdomainName).max(64, "must list at most 64 names").optional(),
  /** The tolerations a Playbook may carry (the enforced and default ones are allowed too); absent: any. */
  allowedTolerations: z
    .array(TolerationSchema)
    .max(MAX_TOLERATIONS, `must list at most ${MAX_TOLERATIONS} tolerations`)
    .optional(),
  /** Label keys a Playbook's podMetadata may not set, beside the reserved ones. */
  forbiddenLabelKeys: z.array(KeyPattern).max(64, "must list at most 64 keys").optional(),
  /** Annotation keys a Playbook's podMetadata may not set, beside the reserved ones. */
  forbiddenAnnotationKeys: z.array(KeyPattern).max(64, "must list at most 64 keys").optional(),
};

type PlacementPolicyShape = {
  [K in keyof typeof PLACEMENT_POLICY_SHAPE]: z.infer<(typeof PLACEMENT_POLICY_SHAPE)[K]>;
};

/** What a namespace's rules say of placement: the policy's fields, and its defaults of the spec's fields. */
export interface PlacementRules extends Partial<PlacementPolicyShape> {
  /** The policy's name, for messages; undefined when no policy governs. */
  policy?: string | undefined;
  defaults?: Pick<
    PlaybookSpec,
    "nodeSelector" | "tolerations" | "affinity" | "runtimeClassName" | "imagePullSecrets" | "podMetadata"
  >;
}

/** The level a field's value came from, as `playbook describe` shows it. */
export type PlacementSource = "spec" | "policy default" | "policy enforced";

/** What the run's pod carries of placement and metadata. */
export interface PodPlacement {
  nodeSelector?: Record<string, string>;
  tolerations?: Toleration[];
  affinity?: Affinity;
  runtimeClassName?: string;
  imagePullSecrets?: { name: string }[];
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/** One line of describe: a field (or one entry of it), its value, and where it came from. */
export interface PlacementEntry {
  field: string;
  value: string;
  source: PlacementSource;
}

/** A toleration as one comparable text, its keys in one order and Equal written out. */
export function tolerationText(t: Toleration): string {
  const { key = "", operator = "Equal", value = "", effect = "", tolerationSeconds } = t;
  return JSON.stringify([key, operator, value, effect, tolerationSeconds ?? null]);
}

/** "dedicated=batch:NoSchedule", "dedicated:NoSchedule (Exists)", "(every taint)". */
export function showToleration(t: Toleration): string {
  const key = t.key ?? "";
  const effect = t.effect ? `:${t.effect}` : "";
  const seconds = t.tolerationSeconds !== undefined ? ` for ${t.tolerationSeconds}s` : "";
  if (t.operator === "Exists") return `${key === "" ? "(every taint)" : `${key} exists`}${effect}${seconds}`;
  return `${key}=${t.value ?? ""}${effect}${seconds}`;
}

/** The pod's placement and metadata with each value's level: the spec's, else the policy's default, plus its enforced entries. */
export function resolvePlacement(
  spec: PlaybookSpec,
  rules: PlacementRules | undefined,
): { pod: PodPlacement; shown: PlacementEntry[] } {
  const defaults = rules?.defaults ?? {};
  const enforced = rules?.enforced ?? {};
  const shown: PlacementEntry[] = [];
  const pick = <T>(own: T | undefined, fallback: T | undefined) =>
    own !== undefined
      ? { value: own, source: "spec" as const }
      : fallback !== undefined
        ? { value: fallback, source: "policy default" as const }
        : undefined;
  const pod: PodPlacement = { labels: {}, annotations: {} };

  const selector = pick(spec.nodeSelector, defaults.nodeSelector);
  const nodeSelector: Record<string, string> = { ...(selector?.value ?? {}) };
  for (const [key, value] of Object.entries(selector?.value ?? {}))
    shown.push({ field: "nodeSelector", value: `${key}=${value}`, source: selector?.source ?? "spec" });
  for (const [key, value] of Object.entries(enforced.nodeSelector ?? {})) {
    if (nodeSelector[key] === value) {
      const entry = shown.find((e) => e.field === "nodeSelector" && e.value === `${key}=${value}`);
      if (entry) entry.source = "policy enforced";
    } else shown.push({ field: "nodeSelector", value: `${key}=${value}`, source: "policy enforced" });
    nodeSelector[key] = value;
  }
  if (Object.keys(nodeSelector).length > 0) pod.nodeSelector = nodeSelector;

  const own = pick(spec.tolerations, defaults.tolerations);
  const tolerations = [...(own?.value ?? [])];
  for (const t of tolerations)
    shown.push({ field: "tolerations", value: showToleration(t), source: own?.source ?? "spec" });
  const have = new Set(tolerations.map(tolerationText));
  for (const t of enforced.tolerations ?? []) {
    if (have.has(tolerationText(t))) {
      const entry = shown.find((e) => e.field === "tolerations" && e.value === showToleration(t));
      if (entry) entry.source = "policy enforced";
      continue;
    }
    have.add(tolerationText(t));
    tolerations.push(t);
    shown.push({ field: "tolerations", value: showToleration(t), source: "policy enforced" });
  }
  if (tolerations.length > 0) pod.tolerations = tolerations;

  const affinity = pick(spec.affinity, defaults.affinity);
  if (affinity) {
    pod.affinity = affinity.value;
    shown.push({ field: "affinity", value: Object.keys(affinity.value).join(", "), source: affinity.source });
  }
  const runtimeClass = pick(spec.runtimeClassName, defaults.runtimeClassName);
  if (runtimeClass) {
    pod.runtimeClassName = runtimeClass.value;
    shown.push({ field: "runtimeClassName", value: runtimeClass.value, source: runtimeClass.source });
  }
  const secrets = pick(spec.imagePullSecrets, defaults.imagePullSecrets);
  if (secrets && secrets.value.length > 0) {
    pod.imagePullSecrets = secrets.value.map(({ name }) => ({ name }));
    shown.push({
      field: "imagePullSecrets",
      value: secrets.value.map(({ name }) => name).join(", "),
      source: secrets.source,
    });
  }
  // Labels and annotations key by key: the spec's over the policy's defaults.
  for (const kind of ["labels", "annotations"] as const) {
    const fallback: PodMetadata[typeof kind] = defaults.podMetadata?.[kind] ?? {};
    const mine: PodMetadata[typeof kind] = spec.podMetadata?.[kind] ?? {};
    for (const [key, value] of Object.entries({ ...fallback, ...mine })) {
      pod[kind][key] = value;
      shown.push({
        field: `podMetadata.${kind}`,
        value: `${key}=${value}`,
        source: key in mine ? "spec" : "policy default",
      });
    }
  }
  return { pod, shown };
}

/** A refusal of the placement the rules make, naming the field, the value and the rule. */
export interface PlacementProblem {
  path: string;
  field: "spec.nodeSelector" | "spec.tolerations" | "spec.runtimeClassName" | "spec.podMetadata";
  message: string;
}

/** Whether an allowed toleration admits `t`: the same key, operator and value; any effect if it names none; no longer a tolerationSeconds. */
function admits(allowed: Toleration, t: Toleration): boolean {
  const same = (a: string | undefined, b: string | undefined) => (a ?? "") === (b ?? "");
  if (!same(allowed.key, t.key) || (allowed.operator ?? "Equal") !== (t.operator ?? "Equal")) return false;
  if (!same(allowed.value, t.value)) return false;
  if (allowed.effect !== undefined && allowed.effect !== t.effect) return false;
  if (allowed.tolerationSeconds === undefined) return true;
  return t.tolerationSeconds !== undefined && t.tolerationSeconds <= allowed.tolerationSeconds;
}

function keyRefused(key: string, patterns: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  return patterns.find((p) =>
    p.endsWith("/*") ? lower.startsWith(p.slice(0, -1).toLowerCase()) : lower === p.toLowerCase(),
  );
}

/** What the rules refuse of the Playbook's own placement and metadata (a policy's defaults are its own choice). */
export function checkPlacement(spec: PlaybookSpec, rules: PlacementRules | undefined): PlacementProblem[] {
  if (!rules) return [];
  const policy = `PlaybookPolicy ${rules.policy ?? "default"}`;
  const problems: PlacementProblem[] = [];
  const enforced = rules.enforced ?? {};
  for (const [key, value] of Object.entries(spec.nodeSelector ?? {})) {
    const want = enforced.nodeSelector?.[key];
    if (want !== undefined && want !== value)
      problems.push({
        path: `spec.nodeSelector.${key}`,
        field: "spec.nodeSelector",
        message: `${key}=${value} conflicts with ${key}=${want}, which ${policy} enforces on every pod (spec.enforced.nodeSelector)`,
      });
  }
  for (const [index, t] of (spec.tolerations ?? []).entries()) {
    const clash = (enforced.tolerations ?? []).find(
      (e) =>
        (e.key ?? "") === (t.key ?? "") &&
        (e.effect ?? "") === (t.effect ?? "") &&
        tolerationText(e) !== tolerationText(t),
    );
    if (clash) {
      problems.push({
        path: `spec.tolerations[${index}]`,
        field: "spec.tolerations",
        message: `${showToleration(t)} conflicts with ${showToleration(clash)}, which ${policy} enforces on every pod (spec.enforced.tolerations)`,
      });
      continue;
    }
    const allowed = rules.allowedTolerations;
    const admitted = [
      ...(allowed ?? []),
      ...(enforced.tolerations ?? []),
      ...(rules.defaults?.tolerations ?? []),
    ];
    if (allowed !== undefined && !admitted.some((a) => admits(a, t)))
      problems.push({
        path: `spec.tolerations[${index}]`,
        field: "spec.tolerations",
        message: `${showToleration(t)} is not an allowed toleration: ${policy} allows ${
          allowed.length === 0 ? "none" : allowed.map(showToleration).join(", ")
        } (spec.allowedTolerations)`,
      });
  }
  const runtimeClass = spec.runtimeClassName;
  const allowedClasses = rules.allowedRuntimeClasses;
  if (
    runtimeClass !== undefined &&
    allowedClasses !== undefined &&
    runtimeClass !== rules.defaults?.runtimeClassName &&
    !allowedClasses.includes(runtimeClass)
  )
    problems.push({
      path: "spec.runtimeClassName",
      field: "spec.runtimeClassName",
      message: `${JSON.stringify(runtimeClass)} is not an allowed runtime class: ${policy} allows ${
        allowedClasses.length === 0 ? "none" : allowedClasses.join(", ")
      } (spec.allowedRuntimeClasses)${rules.defaults?.runtimeClassName ? ` and its default ${rules.defaults.runtimeClassName}` : ""}`,
    });
  for (const [kind, patterns, field] of [
    ["labels", rules.forbiddenLabelKeys, "spec.forbiddenLabelKeys"],
    ["annotations", rules.forbiddenAnnotationKeys, "spec.forbiddenAnnotationKeys"],
  ] as const) {
    for (const key of Object.keys(spec.podMetadata?.[kind] ?? {})) {
      const refused = keyRefused(key, patterns ?? []);
      if (refused)
        problems.push({
          path: `spec.podMetadata.${kind}.${key}`,
          field: "spec.podMetadata",
          message: `${JSON.stringify(key)} is a key ${policy} does not let a Playbook set (${field}: ${refused})`,
        });
    }
  }
  return problems;
}

/** Why a policy's placement cannot govern as written: a default node selector entry that its enforced one contradicts. */
export function placementPolicyProblems(rules: PlacementRules): string[] {
  const problems: string[] = [];
  for (const [key, value] of Object.entries(rules.defaults?.nodeSelector ?? {})) {
    const want = rules.enforced?.nodeSelector?.[key];
    if (want !== undefined && want !== value)
      problems.push(
        `spec.defaults.nodeSelector.${key}: ${value} conflicts with spec.enforced.nodeSelector.${key} ${want}`,
      );
  }
  return problems;
}

/** A policy's spec as placement rules (its defaults of the placement fields, its enforced entries and lists). */
export function placementRulesOf(
  name: string | undefined,
  spec: Partial<PlacementPolicyShape> & { defaults?: PlacementRules["defaults"] | undefined },
): PlacementRules {
  const defaults: Record<string, unknown> = spec.defaults ?? {};
  return {
    policy: name,
    defaults: Object.fromEntries(
      Object.keys(PLACEMENT_FIELDS_SHAPE)
        .filter((key) => defaults[key] !== undefined)
        .map((key) => [key, defaults[key]]),
    ),
    ...Object.fromEntries(
      (Object.keys(PLACEMENT_POLICY_SHAPE) as (keyof PlacementPolicyShape)[])
        .filter((key) => spec[key] !== undefined)
        .map((key) => [key, spec[key]]),
    ),
  };
}
