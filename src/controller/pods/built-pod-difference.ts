// How a pod as the API server shows it differs from the pod pod-builder built: the whole pod,
// field for field, so that no volume, init container, security context or other field of
// someone else's choosing passes for the controller's (docs/design.md, "Outcome integrity").
// Every field the builder sets must read back the same; a field it does not set is allowed only
// where the API server's defaulting or its default admission plugins add it, with the value they
// give. Generic over what buildPod returns: a field the builder starts to set is compared at once.
// Pure.
import { CEILING_LEFT_ENV_VAR } from "../../api/plan.js";
import { quantityValue } from "../../api/policy.js";
import {
  isKueueKey,
  KUEUE_ADMISSION_GATE,
  KUEUE_MANAGED_LABEL,
  KUEUE_QUEUE_LABEL,
} from "../kueue/kueue-names.js";
import type { PodManifest } from "./pod-builder.js";

type Json = Record<string, unknown>;

/** What the comparison of one field sees: its place, and its parent objects in both pods. */
interface Place {
  /** The path with each list index as `[]`, for the rules below. */
  pattern: string;
  /** The path as shown to a user, list items named by their `name`. */
  shown: string;
  foundParent: Json;
  builtParent: Json;
  /** A pod Kueue manages: what its webhook and its admission add is allowed (kueueAdded). */
  kueue?: boolean;
}

interface FieldRule {
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
  "spec.nodeName": { added: (v) => typeof v === "string" },
  "spec.priority": { added: (v) => Number.isInteger(v) },
  "spec.priorityClassName": { added: (v) => typeof v === "string" },
  "spec.preemptionPolicy": { added: (v) => v === "PreemptLowerPriority" || v === "Never" },
  "spec.tolerations": { added: (v) => Array.isArray(v) && v.every(isDefaultToleration) },
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
    added: (v) =>
      isObject(v) &&
      Object.entries(v).every(([k, q]) => (k === "requests" || k === "limits") && isQuantities(q)),
  },
  "spec.containers[].resources.*": {
    added: (v, place) => ["requests", "limits"].includes(lastKey(place)) && isQuantities(v),
  },
  "spec.containers[].resources.*.*": { same: sameQuantity, added: isQuantity },
  "spec.volumes[].emptyDir.sizeLimit": { same: sameQuantity },
  "spec.volumes[].image.pullPolicy": {
    added: (v, place) => v === defaultPullPolicy(place.foundParent.reference),
  },
  "spec.volumes[].downwardAPI.defaultMode": { added: (v) => v === 0o644 },
  "spec.volumes[].downwardAPI.items[].fieldRef.apiVersion": { added: (v) => v === "v1" },
  "spec.volumes[].projected.sources[].downwardAPI.items[].fieldRef.apiVersion": { added: (v) => v === "v1" },
};

/**
 * What Kueue adds to a pod it manages: its labels and annotations (managed, podset, workload),
 * its admission gate (removed at admission), and the node selector and tolerations of the
 * ResourceFlavor it admits the pod to. Where the pod runs, never what it runs: the plan, the
 * containers and the volumes are compared whole all the same.
 */
function kueueAdded(place: Place, key: string, value: unknown): boolean {
  if (place.pattern === "metadata.labels" || place.pattern === "metadata.annotations") {
    return isKueueKey(key) && typeof value === "string";
  }
  if (place.pattern !== "spec") return false;
  if (key === "schedulingGates") {
    return (
      Array.isArray(value) && value.every((gate) => isObject(gate) && gate.name === KUEUE_ADMISSION_GATE)
    );
  }
  if (key === "nodeSelector") {
    return isObject(value) && Object.values(value).every((v) => typeof v === "string");
  }
  if (key === "tolerations") return Array.isArray(value) && value.every(isObject);
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
 */
export function builtPodDifference(
  found: { metadata?: unknown; spec?: unknown },
  built: PodManifest,
  slackMs: number,
): string | undefined {
  const meta = isObject(found.metadata) ? found.metadata : {};
  const { name, namespace, labels, annotations, ownerReferences } = built.metadata;
  const foundLabels = isObject(meta.labels) ? meta.labels : {};
  // A pod built for a queue, or one Kueue took on its own (manageJobsWithoutQueueName).
  const kueue = labels[KUEUE_QUEUE_LABEL] !== undefined || foundLabels[KUEUE_MANAGED_LABEL] === "true";
  const root = (key: string): Place => ({
    pattern: key,
    shown: key,
    foundParent: {},
    builtParent: {},
    ...(kueue ? { kueue } : {}),
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
