// The pod for one attempt of a run: deterministic name, owned by its Playbook, restricted-PSS
// security context, the plan in an annotation shown to the runner as a file, and the kubelet's
// deadline as backstop. The runner container runs the plan; each task runs in the container of its
// image (task-containers.ts), started there by the agent on the runner's word.
import { createHash } from "node:crypto";
import { formatDuration } from "../../api/duration.js";
import { finallyWindowMs, type LimitDefaults, type ResolvedLimits } from "../../api/limits.js";
import { resolvePlacement } from "../../api/placement-policy.js";
import {
  CEILING_LEFT_ENV_VAR,
  PLAN_ANNOTATION,
  PLAN_DIGEST_ENV_VAR,
  PLAN_FILE,
  PLAN_FILE_NAME,
  PLAN_GENERATION_ANNOTATION,
  PLAN_MOUNT_DIR,
  parsePlan,
  planDigest,
  type RunPlan,
  serializePlan,
} from "../../api/plan.js";
import { API_VERSION, KIND, type PlaybookSpec } from "../../api/playbook.js";
import { DEADLINE_MARGIN_SECONDS } from "../../api/pod-bound.js";
import type { PodSettings } from "../../api/policy.js";
import {
  allTasksOf,
  resolveTaskContainers,
  TASK_CONTAINERS_ENV_VAR,
  TASK_UIDS_ENV_VAR,
  type TaskContainers,
  taskContainersEnv,
  taskUidsEnv,
} from "../../api/task-images.js";
import { PREEMPTION_FINALIZER } from "../kueue/kueue-names.js";
import { kueueLabels, queuedTaskResources } from "../kueue/kueue-pod.js";
import {
  ANNOTATION_RUN_START,
  LABEL_MANAGED_BY,
  LABEL_NAME,
  LABEL_POD_ATTEMPT,
  MANAGED_BY,
  type OwnedMetadata,
  RUNNER_CONTAINER,
} from "../objects.js";
import type { AgentDelivery } from "./agent-delivery.js";
import { logUploadMounts } from "./log-upload-volume.js";
import { maskMounts } from "./mask-volumes.js";
import { serviceAccountTokenVolume } from "./service-account-token.js";
import {
  RESTRICTED_CONTAINER,
  RUN_DIR,
  RUN_VOLUME,
  runnerAgentDelivery,
  TASK_GID,
  taskContainers,
  taskContainerUid,
  taskVolumes,
} from "./task-containers.js";

// Slack on top of the remaining ceiling and killGrace, so the runner's own limit fires first.
export { DEADLINE_MARGIN_SECONDS } from "../../api/pod-bound.js";
/** The runner's own user: not the tasks', so no task can signal, trace or overwrite it. */
export const RUNNER_UID = 65532;
/**
 * The sandbox's user (the pause process, PID 1 of the pod's shared process namespace): the
 * runtime runs it as the pod-level runAsUser and runAsGroup, which no container uses (each sets
 * its own), so no task can signal PID 1 (ending the pod), trace it or read its environment.
 */
export const SANDBOX_UID = 65535;
export const SANDBOX_GID = 65535;
/** The runner's fixed share: it only reads output and keeps a bounded tail, whatever the tasks take. */
export const RUNNER_RESOURCES = { requests: { cpu: "50m", memory: "128Mi" }, limits: { memory: "512Mi" } };
const MAX_NAME = 63;

function shortHash(text: string): string {
  return createHash("sha256").update(text).digest("hex").slice(0, 8);
}

/** Fits `text` into `max` characters, keeping it unique with a hash when it must be cut. */
function fitName(text: string, max: number): string {
  if (text.length <= max) return text;
  const cut = text.slice(0, max - 9).replace(/[-.]+$/, "");
  return `${cut}-${shortHash(text)}`;
}

export function podNameFor(playbookName: string, attempt: number): string {
  const suffix = `-${attempt}`;
  return `${fitName(playbookName, MAX_NAME - suffix.length)}${suffix}`;
}

/**
 * The name of an attempt's pod when `<playbook>-<attempt>` is held by a pod this Playbook does not
 * control (a lingering pod of a deleted Playbook of the same name, anyone's pod):
 * `<playbook>-<attempt>-<first 8 characters of the Playbook's UID>`. Deterministic, so a repeated
 * create of it still fails with AlreadyExists instead of running twice.
 */
export function alternatePodName(playbookName: string, attempt: number, uid: string): string {
  const suffix = `-${attempt}-${uid
    .toLowerCase()
    .replace(/[^a-z0-9]/g, "")
    .slice(0, 8)}`;
  return `${fitName(playbookName, MAX_NAME - suffix.length)}${suffix}`;
}

/** Label values are limited to 63 characters; long Playbook names are shortened with a hash. */
export function nameLabelValue(playbookName: string): string {
  return fitName(playbookName, MAX_NAME);
}

/**
 * Seconds the kubelet lets the pod run: what is left of the ceiling, plus killGrace and a margin,
 * plus the finally tasks' window (their ceiling and its killGrace), which begins only when the main
 * tasks end and is not taken from the ceiling.
 */
export function activeDeadlineSeconds(limits: ResolvedLimits, runStart: Date, now: Date): number {
  const remainingMs = runStart.getTime() + limits.ceiling.ms - now.getTime();
  const remaining = Math.max(0, Math.ceil(remainingMs / 1000));
  return Math.max(
    1,
    remaining +
      Math.ceil(limits.killGrace.ms / 1000) +
      finallyWindowSeconds(limits) +
      DEADLINE_MARGIN_SECONDS,
  );
}

/** The finally tasks' window in whole seconds: 0 for a run without finally tasks. */
export function finallyWindowSeconds(limits: ResolvedLimits): number {
  return Math.ceil(finallyWindowMs(limits) / 1000);
}

/** ", the finally tasks' 5m ceiling (default) and their killGrace" for a run with finally tasks; else "". */
export function describeFinallyWindow(limits: ResolvedLimits): string {
  if (limits.finally.length === 0) return "";
  return `, the finally tasks' ${formatDuration(limits.finallyCeiling.ms)} ceiling (${limits.finallyCeiling.field}) and their killGrace`;
}

/** When the run's ceiling started counting: its start, moved on by its earlier pods' time in Kueue's queue. */
function ceilingStart(request: PodRequest): Date {
  return new Date(request.runStart.getTime() + (request.queuedMs ?? 0));
}

/** What is left of the run's ceiling at `now`, in whole milliseconds, never below 0. */
export function ceilingLeftMs(limits: ResolvedLimits, runStart: Date, now: Date): number {
  return Math.max(0, Math.round(runStart.getTime() + limits.ceiling.ms - now.getTime()));
}

/**
 * The pod's grace when the kubelet stops it (a cancel lowers its deadline to now): killGrace for the
 * running task, then the finally tasks' window, which a cancel leaves them, and a margin for the report.
 */
export function terminationGraceSeconds(limits: ResolvedLimits): number {
  return Math.ceil(limits.killGrace.ms / 1000) + finallyWindowSeconds(limits) + DEADLINE_MARGIN_SECONDS;
}

export interface PodRequest {
  playbook: { name: string; namespace: string; uid: string };
  spec: PlaybookSpec;
  limits: ResolvedLimits;
  defaults: LimitDefaults;
  attempt: number;
  /** The Playbook's generation the spec is from, if known. */
  generation?: number | undefined;
  runStart: Date;
  /** Time the run's earlier pods waited in Kueue's queue: the ceiling counts from that much after runStart. */
  queuedMs?: number | undefined;
  now: Date;
  /** The controller's --runner-image: the runner container's and the agent's, never the user's. */
  runnerImage: string;
  /** How the agent reaches the task containers (agent-delivery.ts); post-start unless told. */
  agentDelivery?: AgentDelivery;
  /** true: the pod gets its own user namespace (`hostUsers: false`, user-namespaces.ts); the node's unless told. */
  userNamespaces?: boolean;
  /** true: the runner uploads its own log, from the plan in the pod's Secret (log-upload-volume.ts). */
  logUpload?: boolean;
  /** Default task image, service account and resources as the namespace's policy fills them in; the spec's alone when absent. */
  pod?: PodSettings | undefined;
  /** The pod's name: `<playbook>-<attempt>` when not given. */
  name?: string | undefined;
}

export interface PodManifest {
  apiVersion: "v1";
  kind: "Pod";
  metadata: OwnedMetadata;
  spec: Record<string, unknown>;
}

/** What the pod is built with: the request's settings, else the spec's alone. */
function settingsOf(request: PodRequest): PodSettings | Omit<PodSettings, "backoffLimit"> {
  const { spec } = request;
  return (
    request.pod ?? {
      image: spec.image ?? request.runnerImage,
      serviceAccountName: spec.serviceAccountName,
      resources: spec.resources,
      ...(spec.queueName ? { queue: { name: spec.queueName, source: "spec" as const } } : {}),
      placement: resolvePlacement(spec, undefined).pod,
    }
  );
}

/**
 * Each task's container and image for the pod `request` builds: the main tasks' then spec.finally's
 * (in `tasks`, counted on after the main ones, as the runner counts them), one container per
 * distinct image of either.
 */
export function podTaskContainers(request: PodRequest): TaskContainers {
  const tasks = allTasksOf(request.spec).map(({ task }) => task);
  return resolveTaskContainers(tasks, settingsOf(request).image);
}

export function buildPlan(request: PodRequest): RunPlan {
  // The maximums (killGrace, finallyCeiling) are checked when the run starts; the plan carries the
  // limits it resolved.
  const {
    maxKillGrace: _checkedAtStart,
    maxFinallyCeiling: _alsoCheckedAtStart,
    ...defaults
  } = request.defaults;
  const placed = podTaskContainers(request).tasks.map((task) => ({ container: task.container }));
  const mainCount = request.spec.tasks.length;
  return {
    name: request.playbook.name,
    namespace: request.playbook.namespace,
    runStartTime: request.runStart.toISOString(),
    // Only after a pod that queued: the plan of a run without Kueue is the one it always was.
    ...(request.queuedMs ? { queuedMs: request.queuedMs } : {}),
    defaults,
    spec: request.spec,
    tasks: placed.slice(0, mainCount),
    // Only with finally tasks: the plan of a run without them is the one it always was.
    ...(request.spec.finally?.length ? { finally: placed.slice(mainCount) } : {}),
  };
}

const PLAN_VOLUME = "plan";

/** Throws PlanTooLargeError when the plan cannot fit in the pod's annotations. */
export function buildPod(request: PodRequest): PodManifest {
  const { playbook, limits } = request;
  const plan = serializePlan(buildPlan(request));
  const read = parsePlan(plan);
  if (!read.ok) throw new Error(`the plan built for the pod ${read.problem}`);
  const settings = settingsOf(request);
  const tasks = podTaskContainers(request);
  const agentDelivery = request.agentDelivery ?? "post-start";
  const delivery = runnerAgentDelivery(agentDelivery);
  const withToken = settings.serviceAccountName !== undefined;
  // Through Kueue, every task container requests something, so the quota counts the whole pod.
  const taskResources = settings.queue
    ? queuedTaskResources(request.spec, settings.resources).resources
    : settings.resources;
  const masks = maskMounts(request.spec);
  const upload = request.logUpload
    ? logUploadMounts(request.name ?? podNameFor(request.playbook.name, request.attempt))
    : { env: [], volumeMounts: [], volumes: [] };
  const runner: Record<string, unknown> = {
    name: RUNNER_CONTAINER,
    image: request.runnerImage,
    command: ["playbook", "pod-runner", "--plan", PLAN_FILE],
    env: [
      // Fixed at creation, unlike the annotation the plan file shows: the runner checks the file against it.
      { name: PLAN_DIGEST_ENV_VAR, value: planDigest(read.plan) },
      { name: TASK_CONTAINERS_ENV_VAR, value: taskContainersEnv(tasks.containers) },
      // What is left of the ceiling now: the runner counts it on its node's own clock.
      {
        name: CEILING_LEFT_ENV_VAR,
        value: String(ceilingLeftMs(limits, ceilingStart(request), request.now)),
      },
      { name: TASK_UIDS_ENV_VAR, value: taskUidsEnv(tasks.containers, taskContainerUid) },
      ...masks.env,
      ...upload.env,
    ],
    volumeMounts: [
      { name: PLAN_VOLUME, mountPath: PLAN_MOUNT_DIR, readOnly: true },
      { name: RUN_VOLUME, mountPath: RUN_DIR },
      ...delivery.volumeMounts,
      ...masks.volumeMounts,
      ...upload.volumeMounts,
    ],
    ...(delivery.lifecycle ? { lifecycle: delivery.lifecycle } : {}),
    // The report comes only from the file the runner writes, never from its log's tail, which
    // task output fills.
    terminationMessagePolicy: "File",
    securityContext: { ...RESTRICTED_CONTAINER, runAsUser: RUNNER_UID, runAsGroup: TASK_GID },
    resources: RUNNER_RESOURCES,
  };
  const podSpec: Record<string, unknown> = {
    restartPolicy: "Never",
    activeDeadlineSeconds: activeDeadlineSeconds(limits, ceilingStart(request), request.now),
    terminationGracePeriodSeconds: terminationGraceSeconds(limits),
    enableServiceLinks: false,
    // One process namespace: the runner's word reaches every task through the agents, the fence
    // at the end of the run sees every process, and the sandbox's pause process (PID 1) reaps
    // what tasks orphan.
    shareProcessNamespace: true,
    // The token lets tasks act as the service account: only one named for that gets it, and
    // only in the task containers (service-account-token.ts), never in the runner's.
    automountServiceAccountToken: false,
    // Its own user namespace: a task that escapes its container is an unmapped user on the node.
    // Never set to true: a cluster too old for the field would drop it, and the pod would differ.
    ...(request.userNamespaces ? { hostUsers: false } : {}),
    // The pod-level user and group are the sandbox's alone: every container names its own.
    securityContext: {
      runAsNonRoot: true,
      runAsUser: SANDBOX_UID,
      runAsGroup: SANDBOX_GID,
      fsGroup: TASK_GID,
      seccompProfile: { type: "RuntimeDefault" },
    },
    containers: [runner, ...taskContainers(tasks, taskResources, agentDelivery, withToken)],
    volumes: [
      {
        name: PLAN_VOLUME,
        downwardAPI: {
          items: [
            { path: PLAN_FILE_NAME, fieldRef: { fieldPath: `metadata.annotations['${PLAN_ANNOTATION}']` } },
          ],
        },
      },
      ...taskVolumes(agentDelivery, request.runnerImage),
      ...(withToken ? [serviceAccountTokenVolume()] : []),
      // The Playbook's own volumes (task-sources.ts), then the runner's Secrets to mask.
      ...(request.spec.volumes ?? []),
      ...masks.volumes,
      ...upload.volumes,
    ],
  };
  if (settings.serviceAccountName) podSpec.serviceAccountName = settings.serviceAccountName;
  // Placement, as the spec and the namespace's policy give it (placement-policy.ts).
  const placement = settings.placement;
  if (placement?.nodeSelector) podSpec.nodeSelector = placement.nodeSelector;
  if (placement?.tolerations) podSpec.tolerations = placement.tolerations;
  if (placement?.affinity) podSpec.affinity = placement.affinity;
  if (placement?.runtimeClassName) podSpec.runtimeClassName = placement.runtimeClassName;
  if (placement?.imagePullSecrets) podSpec.imagePullSecrets = placement.imagePullSecrets;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: request.name ?? podNameFor(playbook.name, request.attempt),
      namespace: playbook.namespace,
      labels: {
        // The team's first: no reserved key passes validation, and the controller's win all the same.
        ...placement?.labels,
        [LABEL_NAME]: nameLabelValue(playbook.name),
        [LABEL_POD_ATTEMPT]: String(request.attempt),
        [LABEL_MANAGED_BY]: MANAGED_BY,
        ...kueueLabels(settings.queue, request.spec),
      },
      annotations: {
        ...placement?.annotations,
        // `kubectl logs POD` shows the runner's output (every task's, prefixed) without -c.
        "kubectl.kubernetes.io/default-container": RUNNER_CONTAINER,
        [ANNOTATION_RUN_START]: request.runStart.toISOString(),
        [PLAN_ANNOTATION]: plan,
        ...(request.generation !== undefined
          ? { [PLAN_GENERATION_ANNOTATION]: String(request.generation) }
          : {}),
      },
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: KIND,
          name: playbook.name,
          uid: playbook.uid,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
      // Through Kueue: kept until the controller has read the pod's end (Kueue deletes a pod it preempts).
      ...(settings.queue ? { finalizers: [PREEMPTION_FINALIZER] } : {}),
    },
    spec: podSpec,
  };
}
