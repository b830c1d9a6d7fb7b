// How a pod as the API server shows it differs from the pod pod-builder built: the whole pod,
// field for field, so that no volume, init container, security context or other field of
// someone else's choosing passes for the controller's (docs/design.md, "Outcome integrity").
// Every field the builder sets must read back the same; a field it does not set is allowed only
// where the API server's defaulting or its default admission plugins add it, with the value they
// give. Generic over what buildPod returns: a field the builder starts to set is compared at once.
// What the pod's creator chose never widens what is allowed: whether Kueue manages the pod comes
// from the built pod (its run's queue), where Kueue and the scheduler placed it from what the
// controller observed of them (the Workload's admitted flavors, the node), each passed in. Pure.
import { CEILING_LEFT_ENV_VAR } from "../../api/plan.js";
import { quantityValue } from "../../api/quantity.js";
import { KUEUE_ADMISSION_GATE, KUEUE_MANAGED_LABEL, KUEUE_QUEUE_LABEL } from "../kueue/kueue-names.js";
import { RUNNER_CONTAINER } from "../objects.js";
import type { PodManifest } from "./pod-builder.js";

type Json = Record<string, unknown>;

/** A node's taint, as the Node object shows it. */
export interface NodeTaint {
  key: string;
  value?: string | undefined;
  effect: string;
}

/** A node as the controller reads it: what the scheduler placed a pod there by. */
export interface ObservedNode {
  name: string;
  labels: Readonly<Record<string, string>>;
  taints: readonly NodeTaint[];
}

/**
 * What Kueue gives a pod when it admits it: the node labels (as a node selector) and the
 * tolerations of the ResourceFlavors its Workload was admitted with.
 */
export interface KueuePlacement {
  nodeSelector: Readonly<Record<string, string>>;
  tolerations: readonly Json[];
}

/**
 * What the RuntimeClass admission plugin adds to a pod that names the class: its fixed overhead,
 * and its scheduling's node selector and tolerations.
 */
export interface RuntimeClassPlacement {
  name: string;
  overhead?: Readonly<Record<string, string | number>> | undefined;
  nodeSelector: Readonly<Record<string, string>>;
  tolerations: readonly Json[];
}

/**
 * Where the scheduler and Kueue placed the pod, as the controller observed them, never as the
 * pod says. Each absent when not observed: then the pod may carry nothing of it.
 */
export interface ObservedPlacement {
  /** The node the found pod's nodeName names. */
  node?: ObservedNode | undefined;
  /** Kueue's admission of the pod's Workload (with a queue only). */
  kueue?: KueuePlacement | undefined;
  /** The RuntimeClass the pod names, as the API server shows it now. */
  runtimeClass?: RuntimeClassPlacement | undefined;
}

/** What the comparison of one field sees: its place, and its parent objects in both pods. */
interface Place {
  /** The path with each list index as `[]`, for the rules below. */
  pattern: string;
  /** The path as shown to a user, list items named by their `name`. */
  shown: string;
  foundParent: Json;
  builtParent: Json;
  /** A pod built for a queue: what Kueue's webhook and its admission add is allowed (kueueAdded). */
  kueue?: boolean;
  observed: ObservedPlacement;
  /** Both pods' specs, for the rules that weigh one field against another (nodeName, requests). */
  foundSpec: Json;
  builtSpec: Json;
}

interface FieldRule {
  /** How a list or object the builder sets may read back whole, when not as the same JSON. */
  whole?: (found: unknown, built: unknown, place: Place) => boolean;
  /** How a value the builder sets may read back, when not as the same JSON. */
  same?: (found: unknown, built: unknown, place: Place, slackMs: number) => boolean;
  /** Whether a value the builder does not set is what the API server adds there. */
  added?: (found: unknown, place: Place) => boolean;
}

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function sameQuantity(found: unknown, built: unknown): boolean {
  if (
    (typeof found !== "string" && typeof found !== "number") ||
    (typeof built !== "string" && typeof built !== "number")
  )
    return false;
  const a = quantityValue(found);
  const b = quantityValue(built);
  return Number.isFinite(a) && Number.isFinite(b) && Math.abs(a - b) <= Math.abs(b) * 1e-9;
}

const isQuantity = (value: unknown) =>
  (typeof value === "string" || typeof value === "number") && Number.isFinite(quantityValue(value));
const isQuantities = (value: unknown) => isObject(value) && Object.values(value).every(isQuantity);
/** The last key of a shown path. */
const lastKey = (place: Place) => place.shown.slice(place.shown.lastIndexOf(".") + 1);

/** The API server's default pull policy for an image (SetDefaults_Container, _ImageVolumeSource). */
export function defaultPullPolicy(image: unknown): string | undefined {
  if (typeof image !== "string") return undefined;
  const at = image.indexOf("@");
  const named = at === -1 ? image : image.slice(0, at);
  const colon = named.lastIndexOf(":");
  const tag = colon > named.lastIndexOf("/") ? named.slice(colon + 1) : at === -1 ? "latest" : "";
  return tag === "latest" ? "Always" : "IfNotPresent";
}

/** The tolerations DefaultTolerationSeconds admission adds: NoExecute for a not-ready or unreachable node. */
const DEFAULT_TOLERATION_KEYS = new Set(["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]);
const isDefaultToleration = (t: unknown) =>
  isObject(t) &&
  Object.keys(t).every((k) => ["key", "operator", "effect", "tolerationSeconds"].includes(k)) &&
  DEFAULT_TOLERATION_KEYS.has(t.key as string) &&
  t.operator === "Exists" &&
  t.effect === "NoExecute" &&
  Number.isInteger(t.tolerationSeconds);

/** A remaining time fixed at the create may be lower than the build's (a sooner end), never higher. */
function atMost(found: unknown, built: unknown, slack: number): boolean {
  return (
    typeof found === "number" &&
    typeof built === "number" &&
    Number.isInteger(found) &&
    found >= 0 &&
    found <= built + slack
  );
}

/** The resources LimitRanger gives a container defaults for: a LimitRange's default and defaultRequest. */
const LIMIT_RANGER_RESOURCES = new Set(["cpu", "memory", "ephemeral-storage"]);

/** The container a place under spec.containers is in, by the name the shown path gives it. */
const containerOf = (place: Place) => /^spec\.containers\[([^\]]+)\]/.exec(place.shown)?.[1];
/** requests or limits, for a place under spec.containers[].resources.KIND.NAME. */
const kindOf = (place: Place) => /\.resources\.([^.]+)\.[^.]+$/.exec(place.shown)?.[1] ?? "";
/** The built limits of the container a place under spec.containers is in. */
function builtLimits(place: Place): Json {
  const name = containerOf(place);
  const containers = Array.isArray(place.builtSpec.containers) ? place.builtSpec.containers : [];
  const container = containers.find((c) => isObject(c) && c.name === name);
  const resources = isObject(container) && isObject(container.resources) ? container.resources : {};
  return isObject(resources.limits) ? resources.limits : {};
}

/**
 * Whether quantities the builder does not set in a container's `kind` (requests or limits) are
 * what the API server and LimitRanger add: never on the runner (its figures are the builder's
 * alone: a lower limit starves it), never an extended resource (nvidia.com/gpu), only cpu, memory
 * and ephemeral-storage, the resources a LimitRange gives defaults for; a request where the
 * builder sets a limit of that resource is the API server's default, that limit.
 */
function addedQuantities(value: unknown, kind: string, place: Place): boolean {
  if (!isObject(value) || !isQuantities(value)) return false;
  if (containerOf(place) === RUNNER_CONTAINER) return false;
  if (kind !== "requests" && kind !== "limits") return false;
  const limits = builtLimits(place);
  return Object.entries(value).every(
    ([name, quantity]) =>
      LIMIT_RANGER_RESOURCES.has(name) &&
      (kind === "limits" || limits[name] === undefined || sameQuantity(quantity, limits[name])),
  );
}

/** A toleration's keys in one order, to compare tolerations as values. */
const tolerationText = (t: unknown) =>
  isObject(t)
    ? JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => a.localeCompare(b))))
    : "";

/**
 * Tolerations the builder does not set: DefaultTolerationSeconds' two, and on a pod built for a
 * queue either none else or exactly those of the flavors its Workload was admitted with.
 */
function addedTolerations(value: unknown, place: Place): boolean {
  if (!Array.isArray(value)) return false;
  const own = value.filter((t) => !isDefaultToleration(t));
  if (own.length === 0) return true;
  return sameTolerationSet(own, placedTolerations(place));
}

/** The tolerations others append to the pod: its admitted flavors' (on a pod built for a queue) and its RuntimeClass's. */
function placedTolerations(place: Place): readonly unknown[] {
  const admitted = place.kueue ? (place.observed.kueue?.tolerations ?? []) : [];
  return [...admitted, ...(runtimeClassOf(place)?.tolerations ?? [])];
}

/** Whether two lists hold the same tolerations, as values and in any order. */
function sameTolerationSet(have: readonly unknown[], want: readonly unknown[]): boolean {
  const haveTexts = new Set(have.map(tolerationText));
  const wantTexts = new Set(want.map(tolerationText));
  return haveTexts.size === wantTexts.size && [...haveTexts].every((t) => wantTexts.has(t));
}

/**
 * Tolerations the builder sets (the spec's, the policy's), as they read back: those, plus
 * DefaultTolerationSeconds' two where the builder has none of theirs, plus on a pod built for a
 * queue exactly the tolerations of the flavors its Workload was admitted with, which Kueue appends.
 */
function sameTolerations(found: unknown, built: unknown, place: Place): boolean {
  if (!Array.isArray(found) || !Array.isArray(built)) return false;
  const want = [...built, ...placedTolerations(place)];
  const wanted = new Set(want.map(tolerationText));
  return sameTolerationSet(
    found.filter((t) => wanted.has(tolerationText(t)) || !isDefaultToleration(t)),
    want,
  );
}

/** The node selector the builder sets, as it reads back: the same, or on a pod built for a queue merged with its admitted flavors' node labels. */
function sameNodeSelector(found: unknown, built: unknown, place: Place): boolean {
  if (!isObject(built)) return false;
  const own = { ...(built as Record<string, string>), ...runtimeClassOf(place)?.nodeSelector };
  if (sameStrings(found, own)) return true;
  const admitted = place.kueue ? place.observed.kueue?.nodeSelector : undefined;
  return admitted !== undefined && sameStrings(found, { ...own, ...admitted });
}

/** The RuntimeClass observed for the pod, when it is the one the builder names. */
function runtimeClassOf(place: Place): RuntimeClassPlacement | undefined {
  const observed = place.observed.runtimeClass;
  return observed && place.builtSpec.runtimeClassName === observed.name ? observed : undefined;
}

/** A node selector the builder does not set: the observed RuntimeClass's (with Kueue's flavors on a queued pod). */
function addedNodeSelector(value: unknown, place: Place): boolean {
  const own = runtimeClassOf(place)?.nodeSelector ?? {};
  return Object.keys(own).length > 0 && sameNodeSelector(value, {}, place);
}

/** The overhead the RuntimeClass admission copies from the observed class. */
function addedOverhead(value: unknown, place: Place): boolean {
  const overhead = runtimeClassOf(place)?.overhead;
  if (!overhead || !isObject(value)) return false;
  const keys = Object.keys(value);
  return (
    keys.length === Object.keys(overhead).length &&
    keys.every((k) => overhead[k] !== undefined && sameQuantity(value[k], overhead[k]))
  );
}

/** Whether a toleration tolerates a taint (Kubernetes' ToleratesTaint). */
function tolerates(toleration: unknown, taint: NodeTaint): boolean {
  if (!isObject(toleration)) return false;
  const { key, operator, value, effect } = toleration;
  if (effect !== undefined && effect !== "" && effect !== taint.effect) return false;
  if (key !== undefined && key !== "" && key !== taint.key) return false;
  if (operator === "Exists") return true;
  if (key === undefined || key === "") return false;
  return (operator === undefined || operator === "Equal") && (value ?? "") === (taint.value ?? "");
}

/**
 * nodeName, which the builder never sets: only the node the controller sees under that name,
 * and only where the scheduler could have bound the pod, by what it carries (its node selector,
 * its tolerations, both checked above). A pod created with nodeName skips the scheduler, and its
 * object cannot show which it was (managedFields are its writer's to rewrite): a node the pod
 * could not be scheduled to (a taint it does not tolerate, a label it selects that the node lacks)
 * is a pod placed by hand.
 */
function scheduledThere(value: unknown, place: Place): boolean {
  const node = place.observed.node;
  if (typeof value !== "string" || node?.name !== value) return false;
  const selector = isObject(place.foundSpec.nodeSelector) ? place.foundSpec.nodeSelector : {};
  if (!Object.entries(selector).every(([key, want]) => node.labels[key] === want)) return false;
  const tolerations = Array.isArray(place.foundSpec.tolerations) ? place.foundSpec.tolerations : [];
  return node.taints.every(
    (taint) =>
      (taint.effect !== "NoSchedule" && taint.effect !== "NoExecute") ||
      tolerations.some((t) => tolerates(t, taint)),
  );
}

/** Two string maps with the same entries. */
function sameStrings(found: unknown, want: Readonly<Record<string, string>>): boolean {
  if (!isObject(found)) return false;
  const keys = Object.keys(found);
  return keys.length === Object.keys(want).length && keys.every((k) => found[k] === want[k]);
}

/**
 * The fields that are not simply the same JSON on both sides. Patterns name list items `[]` and
 * any key `*`. The additions are the API server's (Kubernetes' SetDefaults_Pod and friends) and
 * those of its default admission plugins: ServiceAccount (the account `default`, its image pull
 * secrets; no token volume, as the pod sets automountServiceAccountToken false), Priority,
 * DefaultTolerationSeconds, LimitRanger (requests and limits), and the scheduler's binding.
 */
const RULES: Record<string, FieldRule> = {
  "spec.dnsPolicy": { added: (v) => v === "ClusterFirst" },
  "spec.schedulerName": { added: (v) => v === "default-scheduler" },
  "spec.nodeName": { added: (v, place) => scheduledThere(v, place) },
  // Priority admission without a PriorityClass (the builder names none; a cluster's
  // globalDefault class would name itself in priorityClassName, which is never allowed).
  "spec.priority": { added: (v) => v === 0 },
  "spec.preemptionPolicy": { added: (v) => v === "PreemptLowerPriority" },
  "spec.tolerations": { added: (v, place) => addedTolerations(v, place), whole: sameTolerations },
  "spec.nodeSelector": { whole: sameNodeSelector, added: addedNodeSelector },
  "spec.overhead": { added: addedOverhead },
  "spec.serviceAccountName": { added: (v) => v === "default" },
  // The deprecated twin of serviceAccountName, filled in from it.
  "spec.serviceAccount": { added: (v, place) => v === place.foundParent.serviceAccountName },
  "spec.imagePullSecrets": {
    added: (v) =>
      Array.isArray(v) && v.every((s) => isObject(s) && Object.keys(s).every((k) => k === "name")),
  },
  "spec.activeDeadlineSeconds": { same: (f, b, _p, slack) => atMost(f, b, Math.ceil(slack / 1000)) },
  "spec.containers[].env[].value": {
    same: (f, b, place, slack) =>
      place.builtParent.name === CEILING_LEFT_ENV_VAR
        ? typeof f === "string" && /^\d+$/.test(f) && atMost(Number(f), Number(b), slack)
        : f === b,
  },
  "spec.containers[].terminationMessagePath": { added: (v) => v === "/dev/termination-log" },
  "spec.containers[].terminationMessagePolicy": { added: (v) => v === "File" },
  "spec.containers[].imagePullPolicy": {
    added: (v, place) => v === defaultPullPolicy(place.foundParent.image),
  },
  "spec.containers[].resources": {
    added: (v, place) =>
      isObject(v) &&
      Object.entries(v).every(
        ([k, q]) => (k === "requests" || k === "limits") && addedQuantities(q, k, place),
      ),
  },
  "spec.containers[].resources.*": {
    added: (v, place) => addedQuantities(v, lastKey(place), place),
  },
  "spec.containers[].resources.*.*": {
    same: sameQuantity,
    added: (v, place) => addedQuantities({ [lastKey(place)]: v }, kindOf(place), place),
  },
  "spec.volumes[].emptyDir.sizeLimit": { same: sameQuantity },
  "spec.volumes[].image.pullPolicy": {
    added: (v, place) => v === defaultPullPolicy(place.foundParent.reference),
  },
  "spec.volumes[].downwardAPI.defaultMode": { added: (v) => v === 0o644 },
  "spec.volumes[].downwardAPI.items[].fieldRef.apiVersion": { added: (v) => v === "v1" },
  "spec.volumes[].projected.sources[].downwardAPI.items[].fieldRef.apiVersion": { added: (v) => v === "v1" },
  // The defaults of a Playbook's own volumes and env sources (task-sources.ts), as SetDefaults_* give them.
  "spec.volumes[].secret.defaultMode": { added: (v) => v === 0o644 },
  "spec.volumes[].configMap.defaultMode": { added: (v) => v === 0o644 },
  "spec.volumes[].projected.defaultMode": { added: (v) => v === 0o644 },
  "spec.volumes[].projected.sources[].serviceAccountToken.expirationSeconds": { added: (v) => v === 3600 },
  "spec.volumes[].ephemeral.volumeClaimTemplate.spec.volumeMode": { added: (v) => v === "Filesystem" },
  "spec.containers[].env[].valueFrom.fieldRef.apiVersion": { added: (v) => v === "v1" },
};

/** The labels and annotations Kueue's webhook and its admission put on a pod it manages, and their values. */
const KUEUE_LABELS: Record<string, (value: string) => boolean> = {
  [KUEUE_MANAGED_LABEL]: (v) => v === "true",
  "kueue.x-k8s.io/podset": () => true,
};
const KUEUE_ANNOTATIONS: Record<string, (value: string) => boolean> = {
  "kueue.x-k8s.io/workload": () => true,
};

/**
 * What Kueue adds to a pod built for a queue: its labels and annotations (managed, podset,
 * workload: never one Kueue reads as the pod's choice, such as a priority class or a prebuilt
 * workload), its admission gate (removed at admission), and at admission the node selector of
 * the flavors its Workload was admitted with (their tolerations: addedTolerations). Where the
 * pod runs, never what it runs: the plan, the containers and the volumes are compared whole all
 * the same.
 */
function kueueAdded(place: Place, key: string, value: unknown): boolean {
  const known =
    place.pattern === "metadata.labels"
      ? KUEUE_LABELS[key]
      : place.pattern === "metadata.annotations"
        ? KUEUE_ANNOTATIONS[key]
        : undefined;
  if (known) return typeof value === "string" && known(value);
  if (place.pattern !== "spec") return false;
  if (key === "schedulingGates") {
    return (
      Array.isArray(value) && value.every((gate) => isObject(gate) && gate.name === KUEUE_ADMISSION_GATE)
    );
  }
  if (key === "nodeSelector") {
    const admitted = place.observed.kueue?.nodeSelector;
    return admitted !== undefined && Object.keys(admitted).length > 0 && sameStrings(value, admitted);
  }
  return false;
}

/** The rules whose pattern has a `*`, each compiled once. */
const WILDCARD_RULES = Object.entries(RULES)
  .filter(([key]) => key.includes("*"))
  .map(([key, rule]) => ({
    re: new RegExp(`^${key.replace(/[.[\]]/g, "\\$&").replace(/\*/g, "[^.[\\]]+")}$`),
    rule,
  }));

function ruleFor(pattern: string): FieldRule | undefined {
  return RULES[pattern] ?? WILDCARD_RULES.find(({ re }) => re.test(pattern))?.rule;
}

function quote(value: unknown): string {
  const text = JSON.stringify(value) ?? "undefined";
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

function itemName(item: unknown, index: number): string {
  return isObject(item) && typeof item.name === "string" ? item.name : String(index);
}

/** The first difference under one field, in words; undefined when the found value is as built. */
function differenceAt(found: unknown, built: unknown, place: Place, slackMs: number): string | undefined {
  const rule = ruleFor(place.pattern);
  if (rule?.whole && built !== undefined) {
    return rule.whole(found, built, place)
      ? undefined
      : `${place.shown} is ${quote(found)}, the controller builds ${quote(built)}`;
  }
  if (rule?.same) {
    if (!isObject(built) && !Array.isArray(built))
      return rule.same(found, built, place, slackMs)
        ? undefined
        : `${place.shown} is ${quote(found)}, the controller builds ${quote(built)}`;
  }
  if (Array.isArray(built)) {
    if (!Array.isArray(found) || found.length !== built.length) {
      const names = (list: unknown) =>
        Array.isArray(list) ? `[${list.map(itemName).join(", ")}]` : quote(list);
      return `${place.shown} is ${names(found)}, the controller builds ${names(built)}`;
    }
    for (const [index, want] of built.entries()) {
      const name = itemName(want, index);
      const have = found[index];
      if (itemName(have, index) !== name)
        return `${place.shown}[${index}] is ${itemName(have, index)}, the controller builds ${name}`;
      const difference = differenceAt(
        have,
        want,
        { ...place, pattern: `${place.pattern}[]`, shown: `${place.shown}[${name}]` },
        slackMs,
      );
      if (difference) return difference;
    }
    return undefined;
  }
  if (isObject(built)) {
    if (!isObject(found)) return `${place.shown} is ${quote(found)}, the controller builds an object`;
    return objectDifference(found, built, place, slackMs);
  }
  return found === built
    ? undefined
    : `${place.shown} is ${quote(found)}, the controller builds ${quote(built)}`;
}

function objectDifference(found: Json, built: Json, place: Place, slackMs: number): string | undefined {
  const child = (key: string): Place => ({
    pattern: place.pattern ? `${place.pattern}.${key}` : key,
    shown: place.shown ? `${place.shown}.${key}` : key,
    foundParent: found,
    builtParent: built,
    ...(place.kueue ? { kueue: true } : {}),
    observed: place.observed,
    foundSpec: place.foundSpec,
    builtSpec: place.builtSpec,
  });
  for (const [key, want] of Object.entries(built)) {
    if (want === undefined) continue;
    if (!(key in found) || found[key] === undefined)
      return `${child(key).shown} is not set, the controller builds ${quote(want)}`;
    const difference = differenceAt(found[key], want, child(key), slackMs);
    if (difference) return difference;
  }
  for (const [key, have] of Object.entries(found)) {
    if (have === undefined || (key in built && built[key] !== undefined)) continue;
    const at = child(key);
    if (place.kueue && kueueAdded(place, key, have)) continue;
    if (!ruleFor(at.pattern)?.added?.(have, at))
      return `${at.shown} is ${quote(have)}, the controller sets none`;
  }
  return undefined;
}

/**
 * The first difference between `found` (a pod as the API server shows it) and `built`, in words
 * naming the field; undefined when it is the pod built. Compared: the spec whole, and the
 * metadata the builder sets (name, namespace, labels, annotations, owner references); what the
 * API server keeps of its own (uid, resourceVersion, times, status) is not. The remaining times
 * fixed at the create (activeDeadlineSeconds, the runner's remaining ceiling) may be lower than
 * the build's, and higher by at most `slackMs` (the pod was built a little before its create).
 * Kueue's additions are allowed only on a pod built for a queue, and its placement only as
 * `observed` shows Kueue's admission; a nodeName only as `observed` shows that node.
 */
export function builtPodDifference(
  found: { metadata?: unknown; spec?: unknown },
  built: PodManifest,
  slackMs: number,
  observed: ObservedPlacement = {},
): string | undefined {
  const meta = isObject(found.metadata) ? found.metadata : {};
  const { name, namespace, labels, annotations, ownerReferences } = built.metadata;
  const foundSpec = isObject(found.spec) ? found.spec : {};
  // From the run's own plan, never from the found pod's labels: its creator chose those.
  const kueue = labels[KUEUE_QUEUE_LABEL] !== undefined;
  const root = (key: string): Place => ({
    pattern: key,
    shown: key,
    foundParent: {},
    builtParent: {},
    ...(kueue ? { kueue } : {}),
    observed,
    foundSpec,
    builtSpec: built.spec,
  });
  const metadata = differenceAt(
    {
      name: meta.name,
      namespace: meta.namespace,
      labels: meta.labels ?? {},
      annotations: meta.annotations ?? {},
      ownerReferences: meta.ownerReferences ?? [],
    },
    { name, namespace, labels, annotations, ownerReferences },
    root("metadata"),
    slackMs,
  );
  return metadata ?? differenceAt(found.spec ?? {}, built.spec, root("spec"), slackMs);
}
