// The scripted node: a Node registered with the real API server whose pods no kubelet runs. The
// tests of reconcile decisions write each pod's status themselves through the API, as Kubernetes'
// Job controller integration tests do: running, ended with a given termination message, evicted,
// past its deadline, lost. Every fault is then exact and immediate, and nothing runs but the
// control plane and the controller under test. What needs a pod to really run is tested on the
// real kubelet (test/real-node/).
//
// The node keeps the two duties of a kubelet that no test wants to script each time (both can be
// turned off for a pod or a namespace, see MANUAL): a running pod deleted with a grace period is
// ended and removed (the kubelet's kill and final delete), and a running pod past its
// activeDeadlineSeconds is failed DeadlineExceeded. Neither writes a termination message: a
// runner's report is only ever what a test wrote.
import os from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import {
  ApiException,
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1ContainerStatus,
  type V1Pod,
  type V1PodCondition,
  type V1PodStatus,
} from "@kubernetes/client-node";
import { exitCodeForReason } from "../../src/api/exit-codes.js";
import { parsePlan } from "../../src/api/plan.js";
import type { TaskLimit } from "../../src/api/reasons.js";
import { encodeReport, type RunnerReason, type TaskOutcome } from "../../src/api/report.js";

export const SCRIPTED_NODE_NAME = "scripted-node";
/** The container whose termination message is the runner's report (src/controller/objects.ts). */
const RUNNER = "runner";

/**
 * On a pod or a namespace ("true"): the node leaves its pods alone entirely; the test writes
 * every status, a deletion's end and a deadline's end included.
 */
export const MANUAL = "scripted-node.test.playbook.dev/manual";

const LEASE_NAMESPACE = "kube-node-lease";
const LEASE_DURATION_SECONDS = 40;
/** How often the node renews its Lease and looks at its pods (deletions and deadlines). */
const TICK_MS = 500;
const HEARTBEAT_MS = 10_000;

const isApiError = (error: unknown, code: number) => error instanceof ApiException && error.code === code;

export interface PodRef {
  namespace: string;
  name: string;
}

const refOf = (pod: V1Pod | PodRef): PodRef =>
  "metadata" in pod
    ? { namespace: pod.metadata?.namespace ?? "", name: pod.metadata?.name ?? "" }
    : (pod as PodRef);

/**
 * Reads the pod, lets `change` rewrite its status and writes it through the status subresource,
 * again from a fresh read on a conflict (the controller and the node write the same pods).
 */
export async function writePodStatus(
  core: CoreV1Api,
  target: V1Pod | PodRef,
  change: (pod: V1Pod) => V1PodStatus,
): Promise<V1Pod> {
  const { namespace, name } = refOf(target);
  for (let attempt = 1; ; attempt++) {
    const pod = await core.readNamespacedPod({ namespace, name });
    const status = change(pod);
    try {
      return await core.replaceNamespacedPodStatus({ namespace, name, body: { ...pod, status } });
    } catch (error) {
      if (!isApiError(error, 409) || attempt >= 10) throw error;
    }
  }
}

function condition(
  pod: V1Pod,
  type: string,
  status: string,
  reason?: string,
  message?: string,
): V1PodCondition {
  const previous = pod.status?.conditions?.find((c) => c.type === type);
  const now = new Date();
  return {
    type,
    status,
    ...(reason ? { reason } : {}),
    ...(message ? { message } : {}),
    lastProbeTime: undefined,
    lastTransitionTime: previous?.status === status ? (previous.lastTransitionTime ?? now) : now,
  };
}

/** The conditions a kubelet keeps, with PodScheduled (the scheduler's) and any other kept as they were. */
function conditions(pod: V1Pod, ready: boolean, readyReason?: string, extra: V1PodCondition[] = []) {
  const ours = new Set([
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    ...extra.map((c) => c.type),
  ]);
  const kept = (pod.status?.conditions ?? []).filter((c) => !ours.has(c.type));
  const state = ready ? "True" : "False";
  return [
    ...kept,
    condition(pod, "PodReadyToStartContainers", "True"),
    condition(pod, "Initialized", "True"),
    condition(pod, "ContainersReady", state, ready ? undefined : readyReason),
    condition(pod, "Ready", state, ready ? undefined : readyReason),
    ...extra,
  ];
}

const containerId = (pod: V1Pod, container: string) => `scripted://${pod.metadata?.uid ?? ""}/${container}`;

/** The container statuses, each made by `state` from the container's name and its status so far. */
function containerStatuses(
  pod: V1Pod,
  state: (name: string, previous: V1ContainerStatus | undefined) => Partial<V1ContainerStatus>,
): V1ContainerStatus[] {
  return (pod.spec?.containers ?? []).map((container) => {
    const previous = pod.status?.containerStatuses?.find((s) => s.name === container.name);
    return {
      name: container.name,
      image: container.image ?? "",
      imageID: previous?.imageID ?? "",
      ready: false,
      restartCount: 0,
      ...state(container.name, previous),
    };
  });
}

/** The init containers (the agent's install) ended as a kubelet ends them before the others start. */
function initContainerStatuses(pod: V1Pod): V1ContainerStatus[] {
  return (pod.spec?.initContainers ?? []).map((container) => {
    const previous = pod.status?.initContainerStatuses?.find((s) => s.name === container.name);
    const at = previous?.state?.terminated?.finishedAt ?? new Date();
    return {
      name: container.name,
      image: container.image ?? "",
      imageID: previous?.imageID ?? "",
      ready: false,
      restartCount: 0,
      containerID: containerId(pod, container.name),
      state: { terminated: { exitCode: 0, reason: "Completed", startedAt: at, finishedAt: at } },
    };
  });
}

/** The pod, once the scheduler bound it to a node (the controller's pods: to the scripted node). */
export async function scheduledPod(
  core: CoreV1Api,
  namespace: string,
  name: string,
  timeoutMs = 30_000,
): Promise<V1Pod> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pod = await core.readNamespacedPod({ namespace, name }).catch((error) => {
      if (isApiError(error, 404)) return undefined;
      throw error;
    });
    if (pod?.spec?.nodeName) return pod;
    if (Date.now() > deadline) {
      throw new Error(
        `pod ${namespace}/${name} was not ${pod ? "scheduled" : "created"} within ${timeoutMs}ms`,
      );
    }
    await sleep(100);
  }
}

/**
 * Admitted and Pending, its containers waiting: ContainerCreating by default, or ErrImagePull and
 * the like. A kubelet sets startTime on admission, before any image is pulled, so
 * activeDeadlineSeconds counts from here. (A pod no node admitted has no status at all: leave it.)
 * With `only`, just those containers wait (a task image that cannot be pulled) and the others run,
 * as a kubelet starts each container whose image it has: the pod is Running, yet not started.
 */
export function holdPod(
  core: CoreV1Api,
  pod: V1Pod | PodRef,
  reason = "ContainerCreating",
  message?: string,
  only?: readonly string[],
) {
  return writePodStatus(core, pod, (current) => {
    const startedAt = new Date();
    const held = (name: string) => only === undefined || only.includes(name);
    return {
      ...current.status,
      phase: only === undefined ? "Pending" : "Running",
      hostIP: "127.0.0.1",
      startTime: current.status?.startTime ?? startedAt,
      conditions: conditions(current, false, "ContainersNotReady"),
      ...(only === undefined ? {} : { initContainerStatuses: initContainerStatuses(current) }),
      containerStatuses: containerStatuses(current, (name) =>
        held(name)
          ? { state: { waiting: { reason, ...(message ? { message } : {}) } } }
          : {
              containerID: containerId(current, name),
              ready: true,
              started: true,
              state: { running: { startedAt } },
            },
      ),
    };
  });
}

/** Running since `startedAt` (now by default): the time activeDeadlineSeconds counts from. */
export function startPod(core: CoreV1Api, pod: V1Pod | PodRef, startedAt = new Date()) {
  return writePodStatus(core, pod, (current) => ({
    ...current.status,
    phase: "Running",
    hostIP: "127.0.0.1",
    podIP: "10.88.0.2",
    startTime: current.status?.startTime ?? startedAt,
    conditions: conditions(current, true),
    initContainerStatuses: initContainerStatuses(current),
    containerStatuses: containerStatuses(current, (name) => ({
      containerID: containerId(current, name),
      ready: true,
      started: true,
      state: { running: { startedAt } },
    })),
  }));
}

export interface Ending {
  /** The runner container's exit code; 0 by default. */
  exitCode?: number;
  /** The termination message (the runner's report, or whatever else its file holds). */
  message?: string;
  /** The kubelet's reason for the container: Completed or Error by the exit code, or e.g. OOMKilled. */
  reason?: string;
  signal?: number;
  /** The pod's own reason and message (Evicted, DeadlineExceeded). */
  podReason?: string;
  podMessage?: string;
  /** Conditions to add, e.g. DisruptionTarget. */
  conditions?: V1PodCondition[];
  /** When the container ended; now by default (finishedAt has whole seconds, as the kubelet's). */
  finishedAt?: Date;
  /**
   * How other containers than the runner ended, by name (a task container OOMKilled): the
   * exit code, reason and signal; the rest end as the runner does, without its message.
   */
  containers?: Record<string, Pick<Ending, "exitCode" | "reason" | "signal">>;
}

/** The pod's containers ended: Succeeded when every exit code is 0, else Failed (restartPolicy Never). */
export function endPod(core: CoreV1Api, pod: V1Pod | PodRef, ending: Ending = {}) {
  const exitCode = ending.exitCode ?? 0;
  const finishedAt = new Date(Math.floor((ending.finishedAt ?? new Date()).getTime() / 1000) * 1000);
  return writePodStatus(core, pod, (current) => {
    const failed = exitCode !== 0 || ending.podReason !== undefined;
    const startedAt = current.status?.startTime ?? finishedAt;
    return {
      ...current.status,
      phase: failed ? "Failed" : "Succeeded",
      hostIP: "127.0.0.1",
      startTime: startedAt,
      ...(ending.podReason ? { reason: ending.podReason } : {}),
      ...(ending.podMessage ? { message: ending.podMessage } : {}),
      conditions: conditions(current, false, "PodCompleted", ending.conditions),
      containerStatuses: containerStatuses(current, (name, previous) => {
        const own = ending.containers?.[name];
        const code = own?.exitCode ?? exitCode;
        const signal = own ? own.signal : ending.signal;
        // Only the runner writes a termination message.
        const message = name === RUNNER ? ending.message : undefined;
        return {
          containerID: previous?.containerID ?? containerId(current, name),
          started: false,
          state: {
            terminated: {
              exitCode: code,
              reason: own?.reason ?? ending.reason ?? (code === 0 ? "Completed" : "Error"),
              ...(signal !== undefined ? { signal } : {}),
              ...(message !== undefined ? { message } : {}),
              startedAt: previous?.state?.running?.startedAt ?? startedAt,
              finishedAt,
              containerID: previous?.containerID ?? containerId(current, name),
            },
          },
        };
      }),
    };
  });
}

/** The exit code the runner exits with after writing `report`: its reason's (src/api/exit-codes.ts). */
export function runnerExitCode(report: string): number {
  return exitCodeForReason((JSON.parse(report) as { reason?: string }).reason ?? "");
}

/** The runner wrote its report and exited by its reason (as the runner does). */
export function reportPod(core: CoreV1Api, pod: V1Pod, report: string, ending: Omit<Ending, "message"> = {}) {
  return endPod(core, pod, { exitCode: runnerExitCode(report), ...ending, message: report });
}

/** Evicted by the kubelet (node pressure): Failed, reason Evicted, its containers killed. */
export function evictPod(
  core: CoreV1Api,
  pod: V1Pod | PodRef,
  message = "The node was low on resource: memory.",
) {
  return endPod(core, pod, {
    exitCode: 137,
    podReason: "Evicted",
    podMessage: message,
    conditions: [
      {
        type: "DisruptionTarget",
        status: "True",
        reason: "TerminationByKubelet",
        message,
        lastTransitionTime: new Date(),
      },
    ],
  });
}

/** Past activeDeadlineSeconds: the kubelet fails the pod and kills its containers (a report if the runner wrote one). */
export function exceedDeadline(core: CoreV1Api, pod: V1Pod | PodRef, report?: string) {
  return endPod(core, pod, {
    exitCode: 137,
    podReason: "DeadlineExceeded",
    podMessage: "Pod was active on the node longer than the specified deadline",
    // The runner that reported answered the kubelet's SIGTERM, and exited by its report's reason.
    ...(report !== undefined ? { message: report, exitCode: runnerExitCode(report) } : {}),
  });
}

/**
 * Taken away as PodGC takes the pods of a node that is gone: Failed with DisruptionTarget
 * (DeletionByPodGC), then force-deleted.
 */
export async function losePodToGc(core: CoreV1Api, pod: V1Pod | PodRef): Promise<void> {
  const ref = refOf(pod);
  await writePodStatus(core, ref, (current) => ({
    ...current.status,
    phase: "Failed",
    conditions: [
      ...(current.status?.conditions ?? []).filter((c) => c.type !== "DisruptionTarget"),
      {
        type: "DisruptionTarget",
        status: "True",
        reason: "DeletionByPodGC",
        message: "PodGC: node no longer exists",
        lastTransitionTime: new Date(),
      },
    ],
  }));
  await core.deleteNamespacedPod({ ...ref, gracePeriodSeconds: 0 }).catch((error) => {
    if (!isApiError(error, 404)) throw error;
  });
}

/** Leaves `pod` to the test alone: the node neither ends its deletion nor its deadline. */
export async function scriptManually(core: CoreV1Api, pod: V1Pod | PodRef): Promise<void> {
  const { namespace, name } = refOf(pod);
  for (let attempt = 1; ; attempt++) {
    const current = await core.readNamespacedPod({ namespace, name });
    current.metadata = {
      ...current.metadata,
      annotations: { ...current.metadata?.annotations, [MANUAL]: "true" },
    };
    try {
      await core.replaceNamespacedPod({ namespace, name, body: current });
      return;
    } catch (error) {
      if (!isApiError(error, 409) || attempt >= 10) throw error;
    }
  }
}

export type TaskScript = Partial<Omit<TaskOutcome, "name">>;

export interface ReportScript {
  reason: RunnerReason;
  /** The task that decided the run (0-based); the last task by default. Those before it succeeded, those after were skipped. */
  at?: number;
  /** Overrides for the deciding task's outcome. */
  task?: TaskScript;
  /** Overrides by task index, applied last. */
  tasks?: Record<number, TaskScript>;
  /** Overrides by finally task index; each of the plan's finally tasks succeeded unless told. */
  finally?: Record<number, TaskScript>;
  startTime?: Date;
  completionTime?: Date;
}

const LIMIT_OF: Partial<Record<RunnerReason, TaskLimit>> = {
  TaskTimeout: "TaskTimeout",
  StallLimit: "StallLimit",
  RunCeiling: "RunCeiling",
};

/**
 * The report a runner would write for this pod's plan (its task names and count, from the plan
 * the pod carries), encoded as the runner encodes it.
 */
export function reportFor(pod: V1Pod, script: ReportScript): string {
  const text = pod.metadata?.annotations?.["playbook.dev/plan"] ?? "";
  const read = parsePlan(text);
  if (!read.ok) throw new Error(`pod ${pod.metadata?.name} carries no plan: ${read.problem}`);
  const names = read.plan.spec.tasks.map((task) => task.name);
  const completionTime = script.completionTime ?? new Date();
  const startTime = script.startTime ?? new Date(completionTime.getTime() - 1000);
  // The runner reports its run's start as its plan gives it (runStartTime), as the real one does,
  // unless the script says when the run started.
  const runStart = script.startTime ?? new Date(read.plan.runStartTime);
  const at = script.at ?? names.length - 1;
  const deciding = (): TaskScript => {
    switch (script.reason) {
      case "Succeeded":
        return { phase: "Succeeded", exitCode: 0 };
      case "TaskFailed":
        return { phase: "Failed", exitCode: 1 };
      case "Cancelled":
        return { phase: "Cancelled", exitCode: null, signal: "SIGTERM", ending: "Exited" };
      default:
        return {
          phase: "TimedOut",
          exitCode: null,
          signal: "SIGTERM",
          limit: LIMIT_OF[script.reason],
          ending: "Exited",
        };
    }
  };
  const tasks: TaskOutcome[] = names.map((name, index) => {
    const ran: Partial<TaskOutcome> =
      index < at || script.reason === "Succeeded"
        ? { phase: "Succeeded", exitCode: 0 }
        : index === at
          ? { ...deciding(), ...script.task }
          : { phase: "Skipped", attempts: 0, exitCode: null };
    const outcome: TaskOutcome = {
      name,
      phase: "Succeeded",
      attempts: 1,
      exitCode: null,
      signal: null,
      ...(ran.phase === "Skipped" ? {} : { startTime, completionTime }),
      ...ran,
      ...script.tasks?.[index],
    } as TaskOutcome;
    return outcome;
  });
  const finallyTasks = (read.plan.spec.finally ?? []).map(
    (task, index): TaskOutcome =>
      ({
        name: task.name,
        phase: "Succeeded",
        attempts: 1,
        exitCode: 0,
        signal: null,
        startTime,
        completionTime,
        ...script.finally?.[index],
      }) as TaskOutcome,
  );
  const phase =
    script.reason === "Succeeded" ? "Succeeded" : script.reason === "Cancelled" ? "Cancelled" : "Failed";
  return encodeReport({
    phase,
    reason: script.reason,
    startTime: runStart,
    completionTime,
    tasks,
    ...(finallyTasks.length > 0 ? { finally: finallyTasks } : {}),
  });
}

/**
 * A Ready Node with no kubelet behind it, registered and kept fresh (Lease and status) so that the
 * node lifecycle controller neither taints it nor evicts its pods, and the scheduler binds the
 * controller's pods to it.
 */
export class ScriptedNode {
  private readonly core: CoreV1Api;
  private readonly coordination: CoordinationV1Api;
  private timer: NodeJS.Timeout | undefined;
  private lastHeartbeat = 0;
  private ticking = false;
  private stopped = false;
  /** Pods whose end this node wrote (deletion or deadline), by uid: written once. */
  private readonly ended = new Set<string>();

  private readonly log: (message: string) => void;
  readonly nodeName: string;

  constructor(
    kubeConfig: KubeConfig,
    log: (message: string) => void = () => {},
    nodeName = SCRIPTED_NODE_NAME,
  ) {
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.coordination = kubeConfig.makeApiClient(CoordinationV1Api);
    this.log = log;
    this.nodeName = nodeName;
  }

  async start(): Promise<void> {
    await this.register();
    await this.heartbeat();
    await this.waitSchedulable();
    this.timer = setInterval(() => void this.tick(), TICK_MS);
    this.log(`Scripted node ${this.nodeName} registered and Ready (no kubelet: the tests write pod status)`);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    while (this.ticking) await sleep(20);
  }

  private async tick(): Promise<void> {
    if (this.ticking || this.stopped) return;
    this.ticking = true;
    try {
      if (Date.now() - this.lastHeartbeat >= HEARTBEAT_MS) await this.heartbeat();
      await this.kubeletDuties();
    } catch (error) {
      // The API server may be restarting (a fault test): the next tick tries again.
      if (!this.stopped) this.log(`scripted node: ${error instanceof Error ? error.message : String(error)}`);
    } finally {
      this.ticking = false;
    }
  }

  /** Ends deleted running pods and running pods past their deadline, unless they are scripted by hand. */
  private async kubeletDuties(): Promise<void> {
    const pods = await this.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${this.nodeName}` });
    const manualNamespaces = new Set(
      (await this.core.listNamespace({ labelSelector: `${MANUAL}=true` })).items.map((n) => n.metadata?.name),
    );
    for (const pod of pods.items) {
      const uid = pod.metadata?.uid ?? "";
      if (pod.metadata?.annotations?.[MANUAL] === "true" || manualNamespaces.has(pod.metadata?.namespace))
        continue;
      const ended = pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed";
      if (pod.metadata?.deletionTimestamp) {
        // The kubelet kills the containers (no report: SIGKILL after the grace, as far as the API
        // knows) and removes the pod once they are gone.
        if (!ended && !this.ended.has(uid)) {
          this.ended.add(uid);
          await endPod(this.core, pod, { exitCode: 137 }).catch((e) => this.log(`scripted node: end ${e}`));
        }
        await this.core
          .deleteNamespacedPod({
            namespace: pod.metadata.namespace ?? "",
            name: pod.metadata.name ?? "",
            gracePeriodSeconds: 0,
            // In the body too: with a body, the API server takes the options from it alone.
            body: { gracePeriodSeconds: 0, preconditions: { uid } },
          })
          .catch((e) => this.log(`scripted node: delete ${e}`));
        continue;
      }
      const deadline = pod.spec?.activeDeadlineSeconds;
      const startTime = pod.status?.startTime;
      if (ended || deadline === undefined || !startTime || this.ended.has(uid)) continue;
      if (Date.now() >= new Date(startTime).getTime() + deadline * 1000) {
        this.ended.add(uid);
        await exceedDeadline(this.core, pod);
      }
    }
  }

  private async register(): Promise<void> {
    try {
      await this.core.createNode({
        body: {
          metadata: {
            name: this.nodeName,
            labels: {
              "kubernetes.io/hostname": this.nodeName,
              "kubernetes.io/os": "linux",
              "kubernetes.io/arch": process.arch === "x64" ? "amd64" : process.arch,
            },
          },
        },
      });
    } catch (error) {
      if (!isApiError(error, 409)) throw error;
    }
  }

  private async heartbeat(): Promise<void> {
    await this.renewLease();
    for (let attempt = 1; ; attempt++) {
      try {
        await this.writeNodeStatus();
        break;
      } catch (error) {
        // The node lifecycle controller edits a new Node (its taints) at the same moment.
        if (!isApiError(error, 409) || attempt >= 5) throw error;
      }
    }
    this.lastHeartbeat = Date.now();
  }

  private async writeNodeStatus(): Promise<void> {
    const now = new Date();
    const node = await this.core.readNode({ name: this.nodeName });
    const previous = new Map((node.status?.conditions ?? []).map((c) => [c.type, c]));
    const nodeCondition = (type: string, status: string, reason: string, message: string) => ({
      type,
      status,
      reason,
      message,
      lastHeartbeatTime: now,
      lastTransitionTime:
        previous.get(type)?.status === status ? (previous.get(type)?.lastTransitionTime ?? now) : now,
    });
    const capacity = {
      cpu: String(os.cpus().length),
      memory: `${Math.floor(os.totalmem() / 1024)}Ki`,
      pods: "250",
      "ephemeral-storage": "100Gi",
    };
    node.status = {
      ...node.status,
      capacity,
      allocatable: capacity,
      conditions: [
        nodeCondition(
          "MemoryPressure",
          "False",
          "KubeletHasSufficientMemory",
          "kubelet has sufficient memory available",
        ),
        nodeCondition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        nodeCondition(
          "PIDPressure",
          "False",
          "KubeletHasSufficientPID",
          "kubelet has sufficient PID available",
        ),
        nodeCondition("Ready", "True", "KubeletReady", "scripted node: the tests write its pods' status"),
      ],
      addresses: [
        { type: "InternalIP", address: "127.0.0.1" },
        { type: "Hostname", address: this.nodeName },
      ],
      nodeInfo: {
        architecture: process.arch === "x64" ? "amd64" : process.arch,
        bootID: "",
        containerRuntimeVersion: "scripted://",
        kernelVersion: os.release(),
        kubeProxyVersion: "",
        kubeletVersion: "scripted",
        machineID: "",
        operatingSystem: "linux",
        osImage: os.version(),
        systemUUID: "",
      },
    };
    await this.core.replaceNodeStatus({ name: this.nodeName, body: node });
  }

  private async renewLease(): Promise<void> {
    const spec = {
      holderIdentity: this.nodeName,
      leaseDurationSeconds: LEASE_DURATION_SECONDS,
      // MicroTime: client-node serialises a Date with milliseconds, which the API server refuses here.
      renewTime: new Date().toISOString().replace(/\.(\d{3})Z$/, ".$1000Z") as unknown as Date,
    };
    try {
      const lease = await this.coordination.readNamespacedLease({
        namespace: LEASE_NAMESPACE,
        name: this.nodeName,
      });
      lease.spec = { ...lease.spec, ...spec };
      await this.coordination.replaceNamespacedLease({
        namespace: LEASE_NAMESPACE,
        name: this.nodeName,
        body: lease,
      });
    } catch (error) {
      if (!isApiError(error, 404)) throw error;
      const node = await this.core.readNode({ name: this.nodeName });
      await this.coordination.createNamespacedLease({
        namespace: LEASE_NAMESPACE,
        body: {
          metadata: {
            name: this.nodeName,
            namespace: LEASE_NAMESPACE,
            ownerReferences: [
              { apiVersion: "v1", kind: "Node", name: this.nodeName, uid: node.metadata?.uid ?? "" },
            ],
          },
          spec,
        },
      });
    }
  }

  /** A new Node carries the not-ready taint until the node lifecycle controller sees it Ready. */
  private async waitSchedulable(): Promise<void> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const node = await this.core.readNode({ name: this.nodeName });
      const blocking = (node.spec?.taints ?? []).filter(
        (t) => t.effect === "NoSchedule" || t.effect === "NoExecute",
      );
      if (blocking.length === 0) return;
      if (Date.now() > deadline) {
        throw new Error(`node ${this.nodeName} still tainted: ${blocking.map((t) => t.key).join(", ")}`);
      }
      await sleep(200);
    }
  }
}
