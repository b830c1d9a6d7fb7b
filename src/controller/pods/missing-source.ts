// A Secret, ConfigMap, PersistentVolumeClaim or key a task names that does not exist
// (docs/secrets.md): the kubelet or the scheduler keeps the pod waiting and retries, so the pod
// would wait out its start timeout. The run ends at once instead, in their own words (the object
// and the key). Where each says it:
// - env and envFrom: the container's waiting reason CreateContainerConfigError, in the pod's status;
// - a secret, configMap or projected volume: the kubelet's FailedMount event on the pod only
//   ("MountVolume.SetUp failed for volume \"x\" : secret \"y\" not found"); the pod's status shows
//   no more than ContainerCreating, so the controller reads those events while the pod waits for
//   its volumes (mount-events.ts);
// - a claim: the scheduler's PodScheduled=False condition ("persistentvolumeclaim \"x\" not found").
//   A claim that exists but is not bound yet (WaitForFirstConsumer, provisioning) says otherwise.
// An optional reference that is missing never shows here: the kubelet starts without it. Pure:
// reads the pod and the events as observed.
import { z } from "zod";
import type { PodView } from "../objects.js";
import { MASK_VOLUME_PREFIX } from "./mask-volumes.js";
import { nameContainer } from "./pod-state.js";
import { SERVICE_ACCOUNT_TOKEN_VOLUME } from "./service-account-token.js";

/** The kubelet's waiting reason for a container whose env or envFrom names what does not exist. */
export const MISSING_SOURCE_REASON = "CreateContainerConfigError";

/**
 * How often the kubelet's FailedMount events are read while a pod waits for its volumes: its
 * first attempt at a missing Secret fails within a second of the pod reaching its node.
 */
export const MOUNT_LOOK_INTERVAL_MS = 3_000;

/** The kubelet's event reason for a volume it could not set up. */
export const FAILED_MOUNT_REASON = "FailedMount";

/** "task container task-1 (image ...): CreateContainerConfigError: secret \"db\" not found", or undefined. */
export function missingSourceOf(pod: PodView): string | undefined {
  for (const status of pod.status?.containerStatuses ?? []) {
    const waiting = status.state?.waiting;
    if (waiting?.reason !== MISSING_SOURCE_REASON) continue;
    const message = waiting.message?.trim();
    return `${nameContainer(pod, status.name)}: ${waiting.reason}${message ? `: ${message}` : ""}`;
  }
  return undefined;
}

// The scheduler's volume-binding plugin, for a claim the pod names that does not exist.
const MISSING_CLAIM = /persistentvolumeclaim "[^"]*" not found/;

/**
 * "scheduler: PodScheduled=False Unschedulable: 0/1 nodes are available: persistentvolumeclaim
 * \"dumps\" not found. ...", or undefined: a claim only not bound yet never says "not found".
 */
export function missingClaimOf(pod: PodView): string | undefined {
  const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled");
  if (scheduled?.status !== "False") return undefined;
  const message = scheduled.message?.trim() ?? "";
  if (!MISSING_CLAIM.test(message)) return undefined;
  return `scheduler: PodScheduled=False ${scheduled.reason ?? "Unschedulable"}: ${message}`;
}

/** A core/v1 Event as the mount check reads it. */
export const MountEventSchema = z.looseObject({
  reason: z.string().optional(),
  message: z.string().optional(),
  involvedObject: z.looseObject({ uid: z.string().optional() }).optional(),
  source: z.looseObject({ component: z.string().optional() }).optional(),
  reportingComponent: z.string().optional(),
});
export type MountEvent = z.infer<typeof MountEventSchema>;

// The kubelet's words for a secret, configMap or projected volume whose object or key is missing:
// `secret "db" not found`, `configmap "cfg" not found`, `references non-existent secret key: k`,
// `configmap references non-existent config key: k`. Anything else (a slow API server: "failed to
// sync secret cache") may pass, and is left to the start timeout.
const MOUNT_SETUP = /^MountVolume\.SetUp failed for volume "([^"]*)" : /;
const MISSING_OBJECT =
  /\b(secret|configmap) "[^"]*" not found|references non-existent (secret|config) key: \S+/;

/**
 * Whether the pod may still be waiting for its volumes: it is on a node, and no container has
 * been created yet (each waits ContainerCreating, or has no status), nor has its sandbox been made
 * ready (PodReadyToStartContainers, which the kubelet sets only after the volumes are mounted).
 */
export function awaitingVolumes(pod: PodView): boolean {
  if (!pod.spec?.nodeName || pod.metadata.deletionTimestamp) return false;
  if (pod.status?.phase !== undefined && pod.status.phase !== "Pending") return false;
  const ready = pod.status?.conditions?.find((c) => c.type === "PodReadyToStartContainers");
  if (ready?.status === "True") return false;
  const statuses = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  return statuses.every(({ state }) => {
    if (state?.running || state?.terminated) return false;
    const reason = state?.waiting?.reason;
    return reason === undefined || reason === "ContainerCreating" || reason === "PodInitializing";
  });
}

const PodVolumesSchema = z.looseObject({
  spec: z
    .looseObject({
      volumes: z
        .array(
          z.looseObject({
            name: z.string(),
            secret: z.looseObject({ optional: z.boolean().optional() }).optional(),
            configMap: z.looseObject({ optional: z.boolean().optional() }).optional(),
            projected: z.looseObject({}).optional(),
          }),
        )
        .optional(),
    })
    .optional(),
});

/**
 * The pod's volumes whose Secret, ConfigMap or key may be missing: the Playbook's own secret,
 * configMap and projected volumes (an optional one never fails). Not the runner's masks (optional)
 * nor the service account token's (its kube-root-ca.crt may lag a new namespace for a moment).
 */
export function mountSourceVolumes(pod: PodView): string[] {
  const parsed = PodVolumesSchema.safeParse(pod);
  if (!parsed.success) return [];
  return (parsed.data.spec?.volumes ?? [])
    .filter(
      (v) =>
        v.name !== SERVICE_ACCOUNT_TOKEN_VOLUME &&
        !v.name.startsWith(MASK_VOLUME_PREFIX) &&
        ((v.secret && v.secret.optional !== true) ||
          (v.configMap && v.configMap.optional !== true) ||
          v.projected),
    )
    .map((v) => v.name);
}

/** Whether the kubelet's FailedMount events are worth reading for this pod now. */
export function mountEventsDue(pod: PodView): boolean {
  return awaitingVolumes(pod) && mountSourceVolumes(pod).length > 0;
}

/**
 * "kubelet: FailedMount: MountVolume.SetUp failed for volume \"secret\" : secret \"db\" not found",
 * from the kubelet's events on this pod, while it waits for its volumes; else undefined.
 */
export function missingVolumeSourceOf(
  pod: PodView,
  events: readonly MountEvent[] | undefined,
): string | undefined {
  if (!events || !awaitingVolumes(pod)) return undefined;
  const uid = pod.metadata.uid;
  const volumes = new Set(mountSourceVolumes(pod));
  if (volumes.size === 0) return undefined;
  for (const event of events) {
    if (event.reason !== FAILED_MOUNT_REASON || !uid || event.involvedObject?.uid !== uid) continue;
    if ((event.source?.component ?? event.reportingComponent) !== "kubelet") continue;
    const message = event.message?.trim() ?? "";
    const volume = MOUNT_SETUP.exec(message)?.[1];
    if (volume !== undefined && volumes.has(volume) && MISSING_OBJECT.test(message)) {
      return `kubelet: ${FAILED_MOUNT_REASON}: ${message}`;
    }
  }
  return undefined;
}
