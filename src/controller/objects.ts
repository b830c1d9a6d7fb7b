// What the controller reads from the API server, parsed with zod at the edge: the parts of a Pod
// it decides on, a Playbook's metadata and status even when its spec is not valid, and a
// PlaybookPolicy with its spec read apart (a policy that cannot be read still has a status).
import { z } from "zod";
import { zodProblems } from "../api/manifest.js";
import { type PlaybookStatus, PlaybookStatusSchema } from "../api/playbook.js";
import { type PolicySpec, PolicySpecSchema, PolicyStatusSchema } from "../api/policy.js";

export const LABEL_NAME = "playbook.dev/name";
export const LABEL_POD_ATTEMPT = "playbook.dev/pod-attempt";
export const LABEL_MANAGED_BY = "app.kubernetes.io/managed-by";
export const MANAGED_BY = "playbook-controller";
export const ANNOTATION_RUN_START = "playbook.dev/run-start-time";
export const RUNNER_CONTAINER = "runner";
export const POD_SELECTOR = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;

/** Typed list calls of client-node give Dates, watches give strings; both become RFC 3339 text. */
const Timestamp = z.union([z.string(), z.date().transform((d) => d.toISOString())]);

const OwnerReferenceSchema = z.looseObject({
  apiVersion: z.string(),
  kind: z.string(),
  name: z.string(),
  uid: z.string(),
  controller: z.boolean().optional(),
});

export const MetaSchema = z.looseObject({
  name: z.string(),
  namespace: z.string().optional(),
  uid: z.string().optional(),
  generation: z.number().int().optional(),
  resourceVersion: z.string().optional(),
  creationTimestamp: Timestamp.optional(),
  deletionTimestamp: Timestamp.nullable().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
  ownerReferences: z.array(OwnerReferenceSchema).optional(),
  finalizers: z.array(z.string()).nullable().optional(),
});
export type Meta = z.infer<typeof MetaSchema>;

/** The metadata of an object the controller creates and owns (a run's pod, a CronPlaybook's run). */
// A type, not an interface: it must fit the looser shapes the readers take (an index signature).
export type OwnedMetadata = {
  name: string;
  namespace: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  ownerReferences: {
    apiVersion: string;
    kind: string;
    name: string;
    uid: string;
    controller: true;
    blockOwnerDeletion: true;
  }[];
  /** The controller's own finalizer on a pod that goes through Kueue (kueue/kueue-finalizer.ts). */
  finalizers?: string[];
};

const TerminatedSchema = z.looseObject({
  exitCode: z.number().int(),
  signal: z.number().int().optional(),
  reason: z.string().optional(),
  message: z.string().optional(),
  startedAt: Timestamp.nullable().optional(),
  finishedAt: Timestamp.nullable().optional(),
});
export type ContainerTerminated = z.infer<typeof TerminatedSchema>;

const ContainerStatusSchema = z.looseObject({
  name: z.string(),
  image: z.string().optional(),
  state: z
    .looseObject({
      running: z.looseObject({}).optional(),
      waiting: z.looseObject({ reason: z.string().optional(), message: z.string().optional() }).optional(),
      terminated: TerminatedSchema.optional(),
    })
    .optional(),
  lastState: z.looseObject({ terminated: TerminatedSchema.optional() }).optional(),
});

export const PodSchema = z.looseObject({
  metadata: MetaSchema,
  spec: z
    .looseObject({
      nodeName: z.string().optional(),
      /** The RuntimeClass whose admission additions the exact-pod comparison reads (observed-placement.ts). */
      runtimeClassName: z.string().optional(),
      containers: z.array(z.looseObject({ name: z.string(), image: z.string().optional() })).optional(),
      initContainers: z.array(z.looseObject({ name: z.string(), image: z.string().optional() })).optional(),
      /** Kueue's admission gate while it holds the pod (kueue/kueue-hold.ts). */
      schedulingGates: z
        .array(z.looseObject({ name: z.string() }))
        .nullable()
        .optional(),
    })
    .optional(),
  status: z
    .looseObject({
      phase: z.string().optional(),
      reason: z.string().optional(),
      message: z.string().optional(),
      qosClass: z.string().optional(),
      containerStatuses: z.array(ContainerStatusSchema).optional(),
      initContainerStatuses: z.array(ContainerStatusSchema).optional(),
      conditions: z
        .array(
          z.looseObject({
            type: z.string(),
            status: z.string(),
            reason: z.string().nullable().optional(),
            message: z.string().nullable().optional(),
            lastTransitionTime: z.string().nullable().optional(),
          }),
        )
        .nullable()
        .optional(),
    })
    .optional(),
});
export type PodView = z.infer<typeof PodSchema>;

/** A Playbook as stored: the spec is checked later, so that a bad spec can still get a status. */
export const StoredPlaybookSchema = z.looseObject({
  apiVersion: z.string(),
  kind: z.string(),
  metadata: MetaSchema,
  spec: z.unknown(),
  status: PlaybookStatusSchema.optional(),
});
export type StoredPlaybook = z.infer<typeof StoredPlaybookSchema>;

const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

/**
 * The informers' transform: an object without what the controller never reads — managedFields
 * and kubectl's last-applied copy of the whole object, often most of a small object's bytes.
 * Copies what it changes; the object from the API server is not the cache's to share anyway.
 */
export function withoutUnreadFields(raw: unknown): unknown {
  if (typeof raw !== "object" || raw === null) return raw;
  const { metadata } = raw as { metadata?: unknown };
  if (typeof metadata !== "object" || metadata === null) return raw;
  const { managedFields: _managed, annotations, ...rest } = metadata as Record<string, unknown>;
  const kept: Record<string, unknown> = rest;
  if (typeof annotations === "object" && annotations !== null) {
    const { [LAST_APPLIED]: _applied, ...others } = annotations as Record<string, unknown>;
    if (Object.keys(others).length > 0) kept.annotations = others;
  }
  return { ...raw, metadata: kept };
}

export function parsePod(raw: unknown): PodView | null {
  const parsed = PodSchema.safeParse(raw);
  return parsed.success ? parsed.data : null;
}

/**
 * The lastTransitionTime of the status the CRD's schema serves until the controller writes one
 * (status.default in crds/playbook.dev_playbooks.yaml): Pending, so that `kubectl get pb` never
 * shows empty columns.
 */
export const SCHEMA_DEFAULT_TRANSITION = "1970-01-01T00:00:00Z";

/** The schema's default status: the controller never wrote it (it always sets observedGeneration). */
export function isSchemaDefaultStatus(status: PlaybookStatus): boolean {
  const conditions = status.conditions ?? [];
  return (
    status.observedGeneration === undefined &&
    status.startTime === undefined &&
    status.phase === "Pending" &&
    conditions.length > 0 &&
    conditions.every(
      (c) => new Date(c.lastTransitionTime).getTime() === Date.parse(SCHEMA_DEFAULT_TRANSITION),
    )
  );
}

/** A Playbook as stored; the schema's default status is read as none, as the controller wrote none. */
export function parseStoredPlaybook(raw: unknown): StoredPlaybook | null {
  const parsed = StoredPlaybookSchema.safeParse(raw);
  if (!parsed.success) return null;
  if (parsed.data.status && isSchemaDefaultStatus(parsed.data.status)) {
    const { status: _default, ...rest } = parsed.data;
    return rest;
  }
  return parsed.data;
}

export function keyOf(meta: { name: string; namespace?: string | undefined }): string {
  return `${meta.namespace ?? ""}/${meta.name}`;
}

export function splitKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf("/");
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}

/**
 * The index of a pod by the Playbook that controls it: its namespace and the controller's UID, not
 * its name (a Playbook deleted and made again under the same name is another owner).
 */
export function ownerIndexOfPod(pod: PodView): string | null {
  const owner = pod.metadata.ownerReferences?.find((ref) => ref.controller && ref.kind === "Playbook");
  if (!owner) return null;
  return ownerIndex(pod.metadata.namespace ?? "", owner.uid);
}

/** The index value of the pods a Playbook of that namespace and UID controls. */
export function ownerIndex(namespace: string, uid: string | undefined): string {
  return `${namespace}/${uid ?? ""}`;
}

export function podAttemptOf(pod: PodView): number {
  const value = Number(pod.metadata.labels?.[LABEL_POD_ATTEMPT]);
  return Number.isInteger(value) && value > 0 ? value : 0;
}

const StoredPolicySchema = z.looseObject({
  apiVersion: z.string(),
  kind: z.string(),
  metadata: MetaSchema,
  spec: z.unknown(),
  status: PolicyStatusSchema.optional(),
});
export type StoredPolicy = z.infer<typeof StoredPolicySchema>;

export function parseStoredPolicy(raw: unknown): StoredPolicy | null {
  const parsed = StoredPolicySchema.safeParse(raw);
  return parsed.success ? parsed.data : null;
}

export type ReadPolicy = { ok: true; spec: PolicySpec } | { ok: false; problem: string };

export function readPolicySpec(policy: StoredPolicy): ReadPolicy {
  const parsed = PolicySpecSchema.safeParse(policy.spec ?? {});
  if (parsed.success) return { ok: true, spec: parsed.data };
  const problems = zodProblems(parsed.error, policy.spec);
  return { ok: false, problem: problems.map((p) => `spec.${p.path}: ${p.message}`).join("; ") };
}
