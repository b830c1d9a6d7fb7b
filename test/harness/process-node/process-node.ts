import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  ApiException,
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  ListWatch,
  type V1ContainerStateTerminated,
  type V1ContainerStatus,
  type V1Lease,
  type V1Pod,
  type V1PodCondition,
  type V1PodStatus,
  type V1Taint,
  Watch,
} from "@kubernetes/client-node";
import { repoRoot } from "../binaries.js";
import {
  type ContainerProcess,
  detectIsolation,
  detectMountNamespaces,
  type Isolation,
  type ProcessExit,
  reaperInstalled,
  startContainerProcess,
} from "./container-process.js";
import { startLogServer } from "./log-server.js";
import { type MountTools, planMounts } from "./mounts.js";
import {
  detectNetworkNamespaces,
  killAllRelaysSync,
  type PodNetwork,
  startApiRelay,
  startPodNetwork,
} from "./network.js";
import { type CommandMapping, containerEnv, resolveArgv } from "./pod-spec.js";
import { PodVolumes, type VolumeApi } from "./volumes.js";

export interface ProcessNodeOptions {
  kubeConfig: KubeConfig;
  nodeName?: string;
  /** Per-pod working folders, container logs and termination-message files go here. */
  workDir: string;
  mapping: CommandMapping;
  log?: (fields: Record<string, unknown>, message: string) => void;
  /** Fault injection for tests. */
  faults?: {
    /** Called between a resync's list and its use: a slow list. */
    resyncListed?: () => Promise<void>;
    /** Called as each attempt to start a pod begins; what it throws fails that attempt. */
    setUp?: (pod: V1Pod) => void;
  };
  /** Registered with the node, e.g. a NoSchedule taint for a node only tests bind pods to. */
  taints?: V1Taint[];
}

/** The kubelet's limits on termination messages (pkg/kubelet/container/runtime.go). */
const MAX_TERMINATION_MESSAGE_BYTES = 4096;
const MAX_FALLBACK_LOG_BYTES = 2048;
const MAX_FALLBACK_LOG_LINES = 80;
const LEASE_DURATION_SECONDS = 40;
const LEASE_RENEW_MS = 10_000;
const RESYNC_MS = 5_000;
/** A failed pod start is tried again after this, doubling (the kubelet's pod workers back off too). */
const SETUP_RETRY_FIRST_MS = 1_000;
const SETUP_RETRY_MAX_MS = 10_000;
/** A failed status write is tried again after this, doubling, until it lands. */
const STATUS_RETRY_FIRST_MS = 200;
const STATUS_RETRY_MAX_MS = 5_000;
/** A pod start that has hung this long on one step is logged, once. */
const SLOW_START_MS = 20_000;
/** Pod network namespaces set up at once; each starts a relay process. */
const NETWORK_SETUPS_AT_ONCE = 4;

export const TERMINATION_MESSAGE_ENV = "PLAYBOOK_TERMINATION_MESSAGE_PATH";
export const DEADLINE_EXCEEDED_MESSAGE = "Pod was active on the node longer than the specified deadline";

interface ContainerRun {
  name: string;
  image: string;
  process?: ContainerProcess;
  /** Why a container that has not started is waiting, when it is not just being created. */
  waiting?: { reason: string; message: string };
  startedAt?: Date;
  finishedAt?: Date;
  exit?: ProcessExit;
  reason?: string;
  message?: string;
  restartCount: number;
  lastTerminated?: V1ContainerStateTerminated;
  terminationMessageFile: string;
  logFile: string;
  /** Where the mount setup writes its StartError message. */
  startErrorFile: string;
  cookie: string;
}

interface PodRun {
  uid: string;
  namespace: string;
  name: string;
  pod: V1Pod;
  dir: string;
  volumes: PodVolumes;
  /** The pod's own network namespace, once made. */
  network?: PodNetwork;
  startTime: Date;
  containers: ContainerRun[];
  phase: "Pending" | "Running" | "Succeeded" | "Failed";
  reason?: string;
  message?: string;
  /** Set once the pod is being torn down (deadline, deletion, loss); containers are not restarted. */
  stopping: boolean;
  deadlineTimer?: NodeJS.Timeout;
  /** Settles once the latest status is in the API server (or the pod is gone). */
  writes: Promise<void>;
  /** Bumped on every change to report; the status sync writes until the last one has landed. */
  statusVersion: number;
  statusSyncing: boolean;
  /** The resourceVersion of the node's last status write: what the API server shows before it is stale. */
  writtenResourceVersion?: string;
  /** What the pod's start is doing, and since when; cleared once its containers have started. */
  setup?: { step: string; since: number; reported?: boolean };
}

const isApiError = (error: unknown, code: number): boolean =>
  error instanceof ApiException && error.code === code;

function tailBytes(file: string, max: number): string {
  try {
    const data = readFileSync(file);
    return data.subarray(Math.max(0, data.length - max)).toString("utf8");
  } catch {
    return "";
  }
}

function sameCondition(a: V1PodCondition | undefined, status: string): boolean {
  return a?.status === status;
}

/**
 * client-node sends a Date as an ISO string with milliseconds, which the apiserver refuses for
 * MicroTime fields (RFC 3339 with exactly six fractional digits); a preformatted string passes
 * through its serializer untouched.
 */
function microTime(date: Date): Date {
  return date.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z") as unknown as Date;
}

/**
 * The environment the kubelet gives every container for the `kubernetes` Service in `default`
 * (pkg/kubelet/kubelet_pods.go, whatever enableServiceLinks says). With no kube-proxy here, it
 * names the API server this node talks to; its serving certificate covers that address.
 */
export function kubernetesServiceEnv(server: string): Record<string, string> {
  const url = new URL(server);
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = url.port || "443";
  const address = `tcp://${url.hostname}:${port}`;
  return {
    KUBERNETES_SERVICE_HOST: host,
    KUBERNETES_SERVICE_PORT: port,
    KUBERNETES_SERVICE_PORT_HTTPS: port,
    KUBERNETES_PORT: address,
    [`KUBERNETES_PORT_${port}_TCP`]: address,
    [`KUBERNETES_PORT_${port}_TCP_PROTO`]: "tcp",
    [`KUBERNETES_PORT_${port}_TCP_PORT`]: port,
    [`KUBERNETES_PORT_${port}_TCP_ADDR`]: host,
  };
}

/**
 * A test double of the kubelet: registers a Ready Node, keeps its Lease fresh, runs the pods the
 * scheduler binds to it as local processes and reports their status as the kubelet does.
 * See docs/development.md for the kubelet behaviours it follows and those it does not.
 */
export class ProcessNode {
  readonly nodeName: string;
  readonly isolation: Isolation;
  /** tini is there to play the pod sandbox's PID 1 for pods with shareProcessNamespace */
  readonly hasReaper: boolean;
  /** Set when containers can have a private mount namespace for their volumes. */
  readonly mountTools: MountTools | undefined;
  private readonly serviceEnv: Record<string, string>;
  /** `ip`, when pods get a network namespace of their own. */
  readonly podNetworkTool: string | undefined;
  private apiRelay?: { socket: string; port: number; close(): Promise<void> };
  private readonly volumeApi: VolumeApi;
  private readonly core: CoreV1Api;
  private readonly coordination: CoordinationV1Api;
  private readonly runs = new Map<string, PodRun>();
  private readonly networkSetups = new Limiter(NETWORK_SETUPS_AT_ONCE);
  /** Pods this node has let go of (lost, deleted); later events for them are ignored. */
  private readonly forgotten = new Set<string>();
  private readonly timers: NodeJS.Timeout[] = [];
  private informer?: ListWatch<V1Pod>;
  private controlServer?: http.Server;
  private logServer?: { port: number; close(): Promise<void> };
  private stopped = false;
  private readonly options: ProcessNodeOptions;
  private readonly log: (fields: Record<string, unknown>, message: string) => void;

  constructor(options: ProcessNodeOptions) {
    this.options = options;
    this.nodeName = options.nodeName ?? "process-node";
    this.core = options.kubeConfig.makeApiClient(CoreV1Api);
    this.coordination = options.kubeConfig.makeApiClient(CoordinationV1Api);
    this.isolation = detectIsolation();
    this.hasReaper = reaperInstalled();
    this.mountTools = this.isolation === "pid-namespace" ? detectMountNamespaces() : undefined;
    const server = options.kubeConfig.getCurrentCluster()?.server;
    this.serviceEnv = server ? kubernetesServiceEnv(server) : {};
    const loopbackServer = server !== undefined && new URL(server).hostname === "127.0.0.1";
    this.podNetworkTool =
      this.isolation === "pid-namespace" && loopbackServer && process.env.PROCESS_NODE_POD_NETWORK !== "host"
        ? detectNetworkNamespaces()
        : undefined;
    this.volumeApi = {
      read: (kind, namespace, name) => this.readObjectData(kind, namespace, name),
      requestToken: async (request) => {
        const response = await this.core.createNamespacedServiceAccountToken({
          namespace: request.namespace,
          name: request.serviceAccount,
          body: {
            spec: {
              audiences: request.audience ? [request.audience] : [],
              expirationSeconds: request.expirationSeconds,
              boundObjectRef: { apiVersion: "v1", kind: "Pod", name: request.pod.name, uid: request.pod.uid },
            },
          },
        });
        const token = response.status?.token;
        if (!token)
          throw new Error(
            `TokenRequest for ${request.namespace}/${request.serviceAccount} returned no token`,
          );
        return token;
      },
    };
    this.log = options.log ?? (() => {});
  }

  /** Registers the node, starts the lease and the pod watch, and waits until pods can be scheduled. */
  async start(): Promise<void> {
    await mkdir(this.options.workDir, { recursive: true });
    this.logServer = await startLogServer(this.options.workDir, {
      logFile: (namespace, pod, container) => this.findContainer(namespace, pod, container)?.logFile,
      isRunning: (namespace, pod, container) => {
        const found = this.findContainer(namespace, pod, container);
        return found?.process !== undefined && found.exit === undefined;
      },
    });
    if (this.podNetworkTool) await this.startApiRelay();
    await this.registerNode();
    await this.renewLease();
    this.timers.push(
      setInterval(
        () => void this.renewLease().catch((error) => this.logError(error, "Failed to renew Lease")),
        LEASE_RENEW_MS,
      ),
      setInterval(
        () =>
          void this.postNodeStatus().catch((error) => this.logError(error, "Failed to update Node status")),
        60_000,
      ),
      setInterval(
        () => void this.resync().catch((error) => this.logError(error, "Failed to resync pods")),
        RESYNC_MS,
      ),
    );
    this.startWatch();
    await this.waitSchedulable();
    this.log(
      { node: this.nodeName, isolation: this.isolation, mountNamespaces: this.mountTools !== undefined },
      "Started process node",
    );
  }

  /** The node's end of the pods' API relays, on a unix socket (path at most 107 bytes). */
  private async startApiRelay(): Promise<void> {
    const server = new URL(this.options.kubeConfig.getCurrentCluster()?.server ?? "");
    const port = Number(server.port || "443");
    let socket = path.join(this.options.workDir, "apiserver.sock");
    if (Buffer.byteLength(socket) > 100)
      socket = path.join(await mkdtemp(path.join(os.tmpdir(), "pn-")), "api.sock");
    const relay = await startApiRelay(socket, server.hostname, port);
    this.apiRelay = { socket, port, close: relay.close };
  }

  /** Kills every pod process (as a node shutting down would) and stops watching. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers) clearInterval(timer);
    await this.informer?.stop();
    await new Promise<void>((resolve) =>
      this.controlServer ? this.controlServer.close(() => resolve()) : resolve(),
    );
    await this.logServer?.close();
    const exits: Promise<unknown>[] = [];
    for (const run of this.runs.values()) {
      run.stopping = true;
      if (run.deadlineTimer) clearTimeout(run.deadlineTimer);
      for (const container of run.containers) {
        container.process?.signal("SIGKILL");
        if (container.process) exits.push(container.process.exited);
      }
    }
    await Promise.all(exits);
    for (const run of this.runs.values()) this.releaseNetwork(run);
    // Relays of pods still being set up are not in their runs yet.
    killAllRelaysSync();
    await this.apiRelay?.close();
    await Promise.all([...this.runs.values()].map((run) => run.volumes.release()));
  }

  private releaseNetwork(run: PodRun): void {
    run.network?.stop();
  }

  private findContainer(namespace: string, pod: string, container: string): ContainerRun | undefined {
    const run = [...this.runs.values()].find((r) => r.namespace === namespace && r.name === pod);
    return run?.containers.find((c) => c.name === container);
  }

  /** Synchronous last resort for an exiting test process: SIGKILL every pod process. */
  killAllSync(): void {
    for (const run of this.runs.values()) {
      for (const container of run.containers) container.process?.signal("SIGKILL");
      this.releaseNetwork(run);
    }
    killAllRelaysSync();
  }

  /**
   * Simulates losing the pod with its node: its processes are killed without a word to the API,
   * then it is marked Failed with a DisruptionTarget condition and force-deleted, as PodGC does for
   * a pod whose node no longer exists (pkg/controller/podgc).
   */
  async losePod(namespace: string, name: string): Promise<boolean> {
    const run = [...this.runs.values()].find((r) => r.namespace === namespace && r.name === name);
    if (!run) return false;
    run.stopping = true;
    if (run.deadlineTimer) clearTimeout(run.deadlineTimer);
    this.forget(run.uid);
    await Promise.all(
      run.containers.map(async (container) => {
        container.process?.signal("SIGKILL");
        await container.process?.exited;
      }),
    );
    await run.writes;
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        const pod = await this.core.readNamespacedPod({ namespace, name });
        if (pod.metadata?.uid !== run.uid) break;
        const status: V1PodStatus = { ...pod.status };
        if (status.phase !== "Succeeded" && status.phase !== "Failed") {
          status.phase = "Failed";
          status.conditions = [
            ...(status.conditions ?? []).filter((c) => c.type !== "DisruptionTarget"),
            {
              type: "DisruptionTarget",
              status: "True",
              reason: "DeletionByPodGC",
              message: "PodGC: node no longer exists",
              lastTransitionTime: new Date(),
            },
          ];
          await this.core.replaceNamespacedPodStatus({ namespace, name, body: { ...pod, status } });
        }
        break;
      } catch (error) {
        if (isApiError(error, 404)) return true;
        if (!isApiError(error, 409)) throw error;
      }
    }
    await this.forceDelete(run);
    this.log({ namespace, pod: name }, "Lost pod");
    return true;
  }

  /** A loopback HTTP endpoint so tests in other processes can call losePod: POST /lose/NAMESPACE/NAME. */
  async listenControl(): Promise<string> {
    const server = http.createServer((request, response) => {
      const match = /^\/lose\/([^/]+)\/([^/]+)$/.exec(request.url ?? "");
      if (request.method !== "POST" || !match) {
        response.writeHead(404).end();
        return;
      }
      this.losePod(decodeURIComponent(match[1] ?? ""), decodeURIComponent(match[2] ?? ""))
        .then((found) => response.writeHead(found ? 204 : 404).end())
        .catch((error: unknown) => response.writeHead(500).end(String(error)));
    });
    this.controlServer = server;
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (!address || typeof address !== "object") throw new Error("control server has no address");
    return `http://127.0.0.1:${address.port}`;
  }

  private logError(error: unknown, message: string, fields: Record<string, unknown> = {}) {
    if (this.stopped) return;
    const detail =
      error instanceof ApiException ? `${error.code} ${JSON.stringify(error.body)}` : String(error);
    this.log({ ...fields, err: detail }, message);
  }

  private async registerNode(): Promise<void> {
    try {
      await this.core.createNode({
        body: {
          metadata: {
            name: this.nodeName,
            labels: {
              "kubernetes.io/hostname": this.nodeName,
              "kubernetes.io/os": "linux",
              "kubernetes.io/arch": process.arch === "x64" ? "amd64" : process.arch,
              "playbook.dev/process-node": "true",
            },
          },
          ...(this.options.taints ? { spec: { taints: this.options.taints } } : {}),
        },
      });
      this.log({ node: this.nodeName }, "Registered Node");
    } catch (error) {
      if (!isApiError(error, 409)) throw error;
    }
    await this.postNodeStatus();
  }

  /**
   * Writes the node's status from a fresh read; the node lifecycle controller edits a new Node
   * (its taints) at the same moment, so a conflict re-reads and tries again, as the kubelet does.
   */
  private async postNodeStatus(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.writeNodeStatus();
        return;
      } catch (error) {
        if (!isApiError(error, 409) || attempt >= 5) throw error;
      }
    }
  }

  private async writeNodeStatus(): Promise<void> {
    const now = new Date();
    const node = await this.core.readNode({ name: this.nodeName });
    const previous = new Map((node.status?.conditions ?? []).map((c) => [c.type, c]));
    const condition = (type: string, status: string, reason: string, message: string) => ({
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
      pods: "110",
      "ephemeral-storage": "100Gi",
    };
    node.status = {
      ...node.status,
      capacity,
      allocatable: capacity,
      conditions: [
        condition(
          "MemoryPressure",
          "False",
          "KubeletHasSufficientMemory",
          "kubelet has sufficient memory available",
        ),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        condition("Ready", "True", "KubeletReady", "process node is posting ready status"),
      ],
      addresses: [
        { type: "InternalIP", address: "127.0.0.1" },
        { type: "Hostname", address: this.nodeName },
      ],
      daemonEndpoints: { kubeletEndpoint: { Port: this.logServer?.port ?? 10250 } },
      nodeInfo: {
        architecture: process.arch === "x64" ? "amd64" : process.arch,
        bootID: "",
        containerRuntimeVersion: `process-node://${this.isolation}`,
        kernelVersion: os.release(),
        kubeProxyVersion: "",
        kubeletVersion: "process-node",
        machineID: "",
        operatingSystem: "linux",
        osImage: os.version(),
        systemUUID: "",
      },
    };
    await this.core.replaceNodeStatus({ name: this.nodeName, body: node });
  }

  private async renewLease(): Promise<void> {
    const namespace = "kube-node-lease";
    const body: V1Lease = {
      metadata: { name: this.nodeName, namespace },
      spec: {
        holderIdentity: this.nodeName,
        leaseDurationSeconds: LEASE_DURATION_SECONDS,
        renewTime: microTime(new Date()),
      },
    };
    try {
      const lease = await this.coordination.readNamespacedLease({ namespace, name: this.nodeName });
      lease.spec = { ...lease.spec, ...body.spec };
      await this.coordination.replaceNamespacedLease({ namespace, name: this.nodeName, body: lease });
    } catch (error) {
      if (!isApiError(error, 404)) throw error;
      const node = await this.core.readNode({ name: this.nodeName });
      body.metadata = {
        ...body.metadata,
        ownerReferences: [
          { apiVersion: "v1", kind: "Node", name: this.nodeName, uid: node.metadata?.uid ?? "" },
        ],
      };
      await this.coordination.createNamespacedLease({ namespace, body });
    }
  }

  /** New nodes carry the not-ready taint until the node lifecycle controller sees them Ready. */
  private async waitSchedulable(): Promise<void> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const node = await this.core.readNode({ name: this.nodeName });
      const own = new Set((this.options.taints ?? []).map((t) => t.key));
      const blocking = (node.spec?.taints ?? []).filter(
        (t) => (t.effect === "NoSchedule" || t.effect === "NoExecute") && !own.has(t.key),
      );
      if (blocking.length === 0) return;
      if (Date.now() > deadline) {
        throw new Error(`node ${this.nodeName} still tainted: ${blocking.map((t) => t.key).join(", ")}`);
      }
      await sleep(200);
    }
  }

  private startWatch(): void {
    const fieldSelector = `spec.nodeName=${this.nodeName}`;
    const informer = new ListWatch<V1Pod>(
      "/api/v1/pods",
      new Watch(this.options.kubeConfig),
      () => this.core.listPodForAllNamespaces({ fieldSelector }),
      false,
      undefined,
      fieldSelector,
    );
    informer.on("add", (pod) => this.onPod(pod));
    informer.on("update", (pod) => this.onPod(pod));
    informer.on("delete", (pod) => this.onPodGone(pod.metadata?.uid ?? ""));
    informer.on("error", (error) => {
      if (this.stopped) return;
      this.logError(error, "Pod watch failed; restarting");
      // client-node's watch stays down after an error; the resync covers the gap.
      setTimeout(
        () => void (this.stopped ? undefined : informer.start().catch(() => {})),
        1_000 + Math.random() * 1_000,
      );
    });
    this.informer = informer;
    void informer.start().catch((error) => this.logError(error, "Pod watch failed to start"));
  }

  /** Level-triggered safety net behind the watch: every bound pod is looked at again. */
  private async resync(): Promise<void> {
    if (this.stopped) return;
    // Only pods known before the list was asked for can be missing from it: one the watch
    // admitted while a slow list was in flight is not in it and is not gone.
    const known = [...this.runs.values()];
    const list = await this.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${this.nodeName}` });
    await this.options.faults?.resyncListed?.();
    const present = new Set<string>();
    for (const pod of list.items) {
      present.add(pod.metadata?.uid ?? "");
      this.onPod(pod);
    }
    for (const run of known) {
      if (!present.has(run.uid) && this.runs.has(run.uid)) void this.confirmGone(run);
    }
    this.reportSlowStarts();
  }

  /** A pod missing from a list is killed only once a read says it is gone (deleted or replaced). */
  private async confirmGone(run: PodRun): Promise<void> {
    try {
      const pod = await this.core.readNamespacedPod({ namespace: run.namespace, name: run.name });
      if (pod.metadata?.uid === run.uid) return;
    } catch (error) {
      if (!isApiError(error, 404)) return;
    }
    this.onPodGone(run.uid);
  }

  /** A pod whose start has hung on one step says so once, with the step. */
  private reportSlowStarts(): void {
    for (const run of this.runs.values()) {
      const setup = run.setup;
      if (!setup || setup.reported || Date.now() - setup.since < SLOW_START_MS) continue;
      setup.reported = true;
      this.log(
        {
          namespace: run.namespace,
          pod: run.name,
          step: setup.step,
          seconds: (Date.now() - setup.since) / 1000,
        },
        "Pod start is slow",
      );
    }
  }

  private forget(uid: string): void {
    const run = this.runs.get(uid);
    this.runs.delete(uid);
    this.forgotten.add(uid);
    // As the kubelet tears down a deleted pod's volumes, once its processes are gone.
    if (run) {
      void Promise.all(run.containers.map((c) => c.process?.exited)).then(() => {
        this.releaseNetwork(run);
        return run.volumes.release();
      });
    }
  }

  private onPod(pod: V1Pod): void {
    if (this.stopped) return;
    const uid = pod.metadata?.uid;
    if (!uid || this.forgotten.has(uid)) return;
    const run = this.runs.get(uid);
    if (run) {
      // A resync's list can be older than what the watch already delivered.
      if (olderThan(pod, run.pod)) return;
      const lowered = pod.spec?.activeDeadlineSeconds !== run.pod.spec?.activeDeadlineSeconds;
      run.pod = pod;
      // The kubelet follows an activeDeadlineSeconds lowered on a running pod (a cancel does so).
      if (lowered && run.deadlineTimer) this.armDeadline(run);
      // As the kubelet's status manager does: what the API server shows is compared with what the
      // node knows, and written again when they differ (a write lost in an outage, a relist).
      const stale = olderThan(pod, { metadata: { resourceVersion: run.writtenResourceVersion } });
      const undoesEnd = terminalPhase(pod.status?.phase) && !terminalPhase(run.phase);
      if (
        !run.statusSyncing &&
        !stale &&
        !undoesEnd &&
        statusFingerprint(pod.status) !== this.reportedFingerprint(run)
      )
        this.writeStatus(run);
    }
    if (pod.metadata?.deletionTimestamp) {
      void this.terminateForDeletion(pod, run).catch((error) =>
        this.logError(error, "Failed to terminate pod", {
          namespace: pod.metadata?.namespace,
          pod: pod.metadata?.name,
        }),
      );
      return;
    }
    if (run) return;
    const phase = pod.status?.phase;
    if (phase === "Succeeded" || phase === "Failed") return;
    void this.admit(pod).catch((error) =>
      this.logError(error, "Failed to start pod", {
        namespace: pod.metadata?.namespace,
        pod: pod.metadata?.name,
      }),
    );
  }

  /** The pod object is gone (force-deleted): kill its processes at once, as the kubelet does for orphans. */
  private onPodGone(uid: string): void {
    const run = this.runs.get(uid);
    if (!run) return;
    this.log(
      { namespace: run.namespace, pod: run.name },
      "Pod is gone from the API server; killing its processes",
    );
    this.forget(uid);
    run.stopping = true;
    if (run.deadlineTimer) clearTimeout(run.deadlineTimer);
    for (const container of run.containers) container.process?.signal("SIGKILL");
  }

  private async admit(pod: V1Pod): Promise<void> {
    const uid = pod.metadata?.uid ?? "";
    const namespace = pod.metadata?.namespace ?? "default";
    const name = pod.metadata?.name ?? "";
    const dir = path.join(this.options.workDir, `${namespace}_${name}_${uid}`);
    const previouslyStarted = pod.status?.startTime !== undefined;
    const run: PodRun = {
      uid,
      namespace,
      name,
      pod,
      dir,
      volumes: new PodVolumes(dir),
      startTime: pod.status?.startTime ? new Date(pod.status.startTime) : new Date(),
      containers: (pod.spec?.containers ?? []).map((container) => ({
        name: container.name,
        image: container.image ?? "",
        restartCount: 0,
        terminationMessageFile: path.join(dir, `${container.name}.termination-log`),
        logFile: path.join(dir, `${container.name}.log`),
        startErrorFile: path.join(dir, `${container.name}.start-error`),
        cookie: randomUUID(),
      })),
      phase: "Pending",
      stopping: false,
      writes: Promise.resolve(),
      statusVersion: 0,
      statusSyncing: false,
    };
    this.runs.set(uid, run);

    if (previouslyStarted) {
      // A pod this node ran before it restarted: its processes are gone and cannot be found again.
      run.stopping = true;
      run.phase = "Failed";
      for (const container of run.containers) {
        container.finishedAt = new Date();
        container.exit = { exitCode: 137 };
        container.reason = "ContainerStatusUnknown";
        container.message = "The container could not be located when the pod was terminated";
      }
      this.writeStatus(run);
      return;
    }

    this.log({ namespace, pod: name }, "Starting pod");
    this.armDeadline(run);
    // As the kubelet's pod worker: a start that fails is retried with back-off until the pod stops,
    // and the containers say why they wait meanwhile; never left half-started in silence.
    for (let delay = SETUP_RETRY_FIRST_MS; ; delay = Math.min(delay * 2, SETUP_RETRY_MAX_MS)) {
      try {
        await this.setUpPod(run);
        return;
      } catch (error) {
        if (run.stopping || this.stopped || !this.runs.has(uid)) return;
        const sandbox = run.setup?.step === "network";
        const message = error instanceof Error ? error.message : String(error);
        for (const container of run.containers) {
          if (container.process || container.exit !== undefined) continue;
          container.waiting = sandbox
            ? { reason: "ContainerCreating", message: `Failed to create pod sandbox: ${message}` }
            : { reason: "CreateContainerError", message };
        }
        this.logError(error, "Failed to start pod; retrying", {
          namespace,
          pod: name,
          step: run.setup?.step,
        });
        this.writeStatus(run);
        await sleep(delay);
        if (run.stopping || this.stopped || !this.runs.has(uid)) return;
      }
    }
  }

  /** Volumes, the pod's network namespace, then its containers; each step can be run again. */
  private async setUpPod(run: PodRun): Promise<void> {
    const { pod, namespace, name, uid } = run;
    run.setup = { step: "folder", since: Date.now() };
    this.options.faults?.setUp?.(pod);
    await mkdir(run.dir, { recursive: true });
    run.setup = { step: "volumes", since: Date.now() };
    let waiting = false;
    await run.volumes.prepare(pod, this.volumeApi, {
      isStopping: () => run.stopping || this.stopped,
      onRetry: (message) => {
        // Containers stay ContainerCreating until their volumes can be set up, as with the kubelet.
        if (!waiting) this.writeStatus(run);
        waiting = true;
        this.log({ namespace, pod: name, err: message }, "Waiting for volumes (FailedMount)");
      },
      onRefreshError: (error) =>
        this.logError(error, "Failed to refresh service account token", { namespace, pod: name }),
    });
    if (run.stopping) return;
    const relay = this.apiRelay;
    if (this.podNetworkTool && relay && pod.spec?.hostNetwork !== true && !run.network) {
      run.setup = { step: "network", since: Date.now() };
      const ip = this.podNetworkTool;
      // A few namespaces at a time: a burst of pods would otherwise start all their relays at once.
      run.network = await this.networkSetups.run(() =>
        startPodNetwork({ ip, apiPort: relay.port, relaySocket: relay.socket, cwd: run.dir }),
      );
      // Torn down meanwhile: the sandbox goes too.
      if (run.stopping || !this.runs.has(uid)) {
        this.releaseNetwork(run);
        return;
      }
    }
    run.phase = "Running";
    run.setup = { step: "containers", since: Date.now() };
    await Promise.all(
      run.containers
        .filter((container) => !container.process && container.exit === undefined)
        .map((container) => this.startContainer(run, container)),
    );
    run.setup = undefined;
    this.log({ namespace, pod: name }, "Started pod");
    this.writeStatus(run);
  }

  /** A Secret's or ConfigMap's bytes for volumes (configMap binaryData included). */
  private async readObjectData(kind: "Secret" | "ConfigMap", namespace: string, name: string) {
    const decode = (data: Record<string, string> | undefined) =>
      Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64")] as const);
    try {
      if (kind === "ConfigMap") {
        const map = await this.core.readNamespacedConfigMap({ namespace, name });
        return Object.fromEntries([
          ...Object.entries(map.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "utf8")] as const),
          ...decode(map.binaryData),
        ]);
      }
      return Object.fromEntries(decode((await this.core.readNamespacedSecret({ namespace, name })).data));
    } catch (error) {
      if (isApiError(error, 404)) return undefined;
      throw error;
    }
  }

  private async readSecretOrConfigMap(kind: "Secret" | "ConfigMap", namespace: string, name: string) {
    try {
      if (kind === "ConfigMap")
        return (await this.core.readNamespacedConfigMap({ namespace, name })).data ?? {};
      const secret = await this.core.readNamespacedSecret({ namespace, name });
      return Object.fromEntries(
        Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString("utf8")]),
      );
    } catch (error) {
      if (isApiError(error, 404)) return undefined;
      throw error;
    }
  }

  private async startContainer(run: PodRun, container: ContainerRun): Promise<void> {
    if (run.stopping) return;
    const spec = run.pod.spec?.containers.find((c) => c.name === container.name);
    if (!spec) return;
    const terminationPath = spec.terminationMessagePath ?? "/dev/termination-log";
    await writeFile(container.terminationMessageFile, "");
    const finish = (exit: ProcessExit, reason: string, message?: string) => {
      container.finishedAt = new Date();
      container.exit = exit;
      container.reason = reason;
      container.message = message;
    };
    let env: Record<string, string>;
    try {
      env = await containerEnv(
        run.pod,
        spec,
        {
          PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
          HOME: run.dir,
          HOSTNAME: run.name,
          // As the image's ENV does: one cache folder for every pod, so that a pod's `playbook`
          // starts from the code cache the pods before it left (src/cli/code-cache.ts).
          XDG_CACHE_HOME: path.join(this.options.workDir, "cache"),
          ...this.serviceEnv,
        },
        (kind, namespace, name) => this.readSecretOrConfigMap(kind, namespace, name),
      );
    } catch (error) {
      // The kubelet keeps such a container Waiting (CreateContainerConfigError); here it fails at once.
      finish({ exitCode: 128 }, "CreateContainerConfigError", String(error));
      this.containerEnded(run, container);
      return;
    }
    env[TERMINATION_MESSAGE_ENV] = container.terminationMessageFile;
    const resolved = resolveArgv(spec, env, this.options.mapping);
    if ("error" in resolved) {
      container.startedAt = new Date();
      finish({ exitCode: 128 }, "StartError", resolved.error);
      this.containerEnded(run, container);
      return;
    }
    // No mount namespace: an argument naming the termination path is pointed at the host file.
    const argv = resolved.argv.map((arg) =>
      arg === terminationPath ? container.terminationMessageFile : arg,
    ) as [string, ...string[]];
    const sharedPidNamespace = run.pod.spec?.shareProcessNamespace === true;
    if (sharedPidNamespace && !this.hasReaper) {
      container.startedAt = new Date();
      finish(
        { exitCode: 128 },
        "StartError",
        "shareProcessNamespace needs tini on the process node's machine, to play the pod sandbox's reaping PID 1",
      );
      this.containerEnded(run, container);
      return;
    }
    const mounts = await run.volumes.mountsFor(spec, env);
    const plan =
      "error" in mounts
        ? mounts
        : mounts.length === 0
          ? { steps: [] }
          : !this.mountTools
            ? {
                error: `the process node cannot make a mount namespace on this machine (unshare --mount failed), so it cannot mount ${mounts.map((m) => m.target).join(", ")}`,
              }
            : // What runs the container's command must stay in its view: the checkout and Node.
              planMounts(mounts, [run.dir, repoRoot(), path.dirname(process.execPath)]);
    if ("error" in plan) {
      container.startedAt = new Date();
      finish({ exitCode: 128 }, "StartError", plan.error);
      this.containerEnded(run, container);
      return;
    }
    const inMount = (dir: string) =>
      "error" in mounts ? false : mounts.some((m) => dir === m.target || dir.startsWith(`${m.target}/`));
    const workingDir =
      spec.workingDir && (existsSync(spec.workingDir) || inMount(spec.workingDir))
        ? spec.workingDir
        : run.dir;
    await rm(container.startErrorFile, { force: true });
    const stash = path.join(run.dir, ".machine");
    if (plan.steps.length > 0) await mkdir(stash, { recursive: true });
    // Checked after the last wait: the pod may have been deleted or lost meanwhile (and its
    // network namespace with it).
    if (run.stopping || !this.runs.has(run.uid)) return;
    container.waiting = undefined;
    const child = startContainerProcess({
      argv,
      env,
      cwd: workingDir,
      logFile: container.logFile,
      cookie: container.cookie,
      isolation: this.isolation,
      sharedPidNamespace,
      ...(plan.steps.length > 0 && this.mountTools
        ? {
            mounts: { tools: this.mountTools, steps: plan.steps, errorFile: container.startErrorFile, stash },
          }
        : {}),
      ...(run.network ? { network: run.network.path } : {}),
    });
    container.process = child;
    container.startedAt = new Date();
    container.finishedAt = undefined;
    container.exit = undefined;
    void child.exited.then((exit) => {
      if (container.process !== child) return;
      const fallback = spec.terminationMessagePolicy === "FallbackToLogsOnError" && exit.exitCode !== 0;
      let message = tailBytes(container.terminationMessageFile, MAX_TERMINATION_MESSAGE_BYTES);
      if (message === "" && fallback) {
        message = tailBytes(container.logFile, MAX_FALLBACK_LOG_BYTES)
          .split("\n")
          .slice(-MAX_FALLBACK_LOG_LINES - 1)
          .join("\n");
      }
      if (exit.startError !== undefined) finish(exit, "StartError", exit.startError);
      else finish(exit, exit.exitCode === 0 ? "Completed" : "Error", message || undefined);
      this.containerEnded(run, container);
    });
  }

  private containerEnded(run: PodRun, container: ContainerRun): void {
    // A lost or vanished pod's node says nothing more about it.
    if (!this.runs.has(run.uid)) return;
    this.log(
      {
        namespace: run.namespace,
        pod: run.name,
        container: container.name,
        exitCode: container.exit?.exitCode,
      },
      "Container exited",
    );
    const policy = run.pod.spec?.restartPolicy ?? "Always";
    const failed = (container.exit?.exitCode ?? 0) !== 0;
    if (!run.stopping && (policy === "Always" || (policy === "OnFailure" && failed))) {
      container.lastTerminated = this.terminatedState(container);
      container.restartCount += 1;
      // CrashLoopBackOff's shape: 10s doubling up to 5 minutes.
      const backoff = Math.min(10_000 * 2 ** (container.restartCount - 1), 300_000);
      this.writeStatus(run);
      setTimeout(() => void this.startContainer(run, container).then(() => this.writeStatus(run)), backoff);
      return;
    }
    if (run.containers.every((c) => c.exit !== undefined)) {
      if (run.reason !== "DeadlineExceeded") {
        run.phase = run.containers.every((c) => c.exit?.exitCode === 0) ? "Succeeded" : "Failed";
      }
      if (run.deadlineTimer) clearTimeout(run.deadlineTimer);
      // A finished pod's volumes and sandbox are torn down (its token stops being refreshed); logs stay.
      this.releaseNetwork(run);
      void run.volumes.release();
    }
    this.writeStatus(run);
  }

  /** pkg/kubelet/active_deadline.go: the pod fails at once, then its containers are killed. */
  /** activeDeadlineSeconds counts from the pod's start on this node. */
  private armDeadline(run: PodRun): void {
    if (run.deadlineTimer) clearTimeout(run.deadlineTimer);
    run.deadlineTimer = undefined;
    const deadlineSeconds = run.pod.spec?.activeDeadlineSeconds;
    if (deadlineSeconds === undefined) return;
    const remaining = run.startTime.getTime() + deadlineSeconds * 1000 - Date.now();
    run.deadlineTimer = setTimeout(() => this.deadlineExceeded(run), Math.max(0, remaining));
  }

  private deadlineExceeded(run: PodRun): void {
    if (run.phase === "Succeeded" || run.phase === "Failed" || run.stopping) return;
    run.phase = "Failed";
    run.reason = "DeadlineExceeded";
    run.message = DEADLINE_EXCEEDED_MESSAGE;
    this.log({ namespace: run.namespace, pod: run.name }, "Pod exceeded its active deadline");
    this.writeStatus(run);
    void this.killContainers(run, this.gracePeriodSeconds(run.pod));
  }

  /** calculateEffectiveGracePeriod in pkg/kubelet/pod_workers.go: never below one second. */
  private gracePeriodSeconds(pod: V1Pod): number {
    const requested =
      pod.metadata?.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
    return Math.max(1, requested);
  }

  private async killContainers(run: PodRun, graceSeconds: number): Promise<void> {
    run.stopping = true;
    const live = run.containers.filter((c) => c.process && c.exit === undefined);
    for (const container of live) container.process?.signal("SIGTERM");
    const exited = Promise.all(live.map((c) => c.process?.exited));
    const timer = setTimeout(() => {
      for (const container of live) if (container.exit === undefined) container.process?.signal("SIGKILL");
    }, graceSeconds * 1000);
    await exited;
    clearTimeout(timer);
    // The exit handlers record each container's end on a later tick.
    await sleep(0);
  }

  private terminating = new Set<string>();

  private async terminateForDeletion(pod: V1Pod, run: PodRun | undefined): Promise<void> {
    const uid = pod.metadata?.uid ?? "";
    if (this.terminating.has(uid)) return;
    this.terminating.add(uid);
    try {
      if (run) {
        if (run.deadlineTimer) clearTimeout(run.deadlineTimer);
        await this.killContainers(run, this.gracePeriodSeconds(pod));
        for (const container of run.containers) {
          if (container.exit === undefined) {
            // Never started (or already gone): the kubelet reports it as unlocatable.
            container.finishedAt = new Date();
            container.exit = { exitCode: 137 };
            container.reason = "ContainerStatusUnknown";
            container.message = "The container could not be located when the pod was deleted";
          }
        }
        if (run.phase !== "Succeeded" && run.phase !== "Failed") {
          run.phase = run.containers.every((c) => c.exit?.exitCode === 0) ? "Succeeded" : "Failed";
        }
        this.writeStatus(run);
        await run.writes;
        this.forget(uid);
      }
      await this.forceDelete(
        run ?? { uid, namespace: pod.metadata?.namespace ?? "", name: pod.metadata?.name ?? "" },
      );
      this.log({ namespace: pod.metadata?.namespace, pod: pod.metadata?.name }, "Deleted pod");
    } finally {
      this.terminating.delete(uid);
    }
  }

  private async forceDelete(run: Pick<PodRun, "uid" | "namespace" | "name">): Promise<void> {
    try {
      await this.core.deleteNamespacedPod({
        namespace: run.namespace,
        name: run.name,
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid: run.uid } },
      });
    } catch (error) {
      if (!isApiError(error, 404) && !isApiError(error, 409)) throw error;
    }
  }

  private terminatedState(container: ContainerRun): V1ContainerStateTerminated {
    return {
      exitCode: container.exit?.exitCode ?? 0,
      reason: container.reason,
      ...(container.message !== undefined ? { message: container.message } : {}),
      startedAt: container.startedAt,
      finishedAt: container.finishedAt,
      containerID: `process-node://${container.cookie}`,
    };
  }

  private containerStatus(container: ContainerRun): V1ContainerStatus {
    const running = container.process !== undefined && container.exit === undefined;
    return {
      name: container.name,
      image: container.image,
      imageID: "",
      containerID: `process-node://${container.cookie}`,
      ready: running,
      started: running,
      restartCount: container.restartCount,
      state:
        container.exit !== undefined
          ? { terminated: this.terminatedState(container) }
          : running
            ? { running: { startedAt: container.startedAt } }
            : {
                waiting: container.waiting ?? {
                  reason: container.restartCount > 0 ? "CrashLoopBackOff" : "ContainerCreating",
                },
              },
      ...(container.lastTerminated ? { lastState: { terminated: container.lastTerminated } } : {}),
    };
  }

  private desiredStatus(run: PodRun, current: V1PodStatus | undefined): V1PodStatus {
    const now = new Date();
    const previous = new Map((current?.conditions ?? []).map((c) => [c.type, c]));
    const condition = (type: string, status: string, reason?: string, message?: string): V1PodCondition => ({
      type,
      status,
      ...(reason ? { reason } : {}),
      ...(message ? { message } : {}),
      lastProbeTime: undefined,
      lastTransitionTime: sameCondition(previous.get(type), status)
        ? (previous.get(type)?.lastTransitionTime ?? now)
        : now,
    });
    const terminal = run.phase === "Succeeded" || run.phase === "Failed";
    const unready = run.containers.filter((c) => !(c.process && c.exit === undefined)).map((c) => c.name);
    const readyStatus = !terminal && unready.length === 0 ? "True" : "False";
    const readyReason = terminal ? "PodCompleted" : unready.length > 0 ? "ContainersNotReady" : undefined;
    const readyMessage =
      !terminal && unready.length > 0 ? `containers with unready status: [${unready.join(" ")}]` : undefined;
    const managed = new Set(["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"]);
    return {
      ...current,
      phase: run.phase,
      ...(run.reason ? { reason: run.reason } : {}),
      ...(run.message ? { message: run.message } : {}),
      hostIP: "127.0.0.1",
      hostIPs: [{ ip: "127.0.0.1" }],
      podIP: "127.0.0.1",
      podIPs: [{ ip: "127.0.0.1" }],
      startTime: run.startTime,
      conditions: [
        ...(current?.conditions ?? []).filter((c) => !managed.has(c.type)),
        condition("PodReadyToStartContainers", terminal ? "False" : "True"),
        condition("Initialized", "True"),
        condition("ContainersReady", readyStatus, readyReason, readyMessage),
        condition("Ready", readyStatus, readyReason, readyMessage),
      ],
      containerStatuses: run.containers.map((c) => this.containerStatus(c)),
    };
  }

  /**
   * Reports the pod's status as the kubelet's status manager does: the latest status is kept and
   * written through the status subresource, one write at a time per pod, re-read on a conflict and
   * retried with back-off on any other failure (the API server down or overloaded) until it lands,
   * the pod is gone, or the node lets go of it.
   */
  private writeStatus(run: PodRun): void {
    run.statusVersion += 1;
    if (run.statusSyncing) return;
    run.statusSyncing = true;
    run.writes = this.syncStatus(run).finally(() => {
      run.statusSyncing = false;
    });
  }

  private async syncStatus(run: PodRun): Promise<void> {
    let failures = 0;
    for (let delay = STATUS_RETRY_FIRST_MS; ; ) {
      // A lost pod's node says nothing more; a deleted one's status was written before it was let go.
      if (this.stopped || !this.runs.has(run.uid)) return;
      const version = run.statusVersion;
      try {
        await this.putStatus(run);
        if (failures > 0)
          this.log({ namespace: run.namespace, pod: run.name, failures }, "Wrote pod status after retrying");
        if (run.statusVersion === version) return;
        failures = 0;
        delay = STATUS_RETRY_FIRST_MS;
      } catch (error) {
        // A write the API server finds malformed will not get better by being sent again.
        if (isApiError(error, 400) || isApiError(error, 422)) {
          this.logError(error, "Failed to write pod status", { namespace: run.namespace, pod: run.name });
          return;
        }
        failures += 1;
        if (failures === 1)
          this.logError(error, "Failed to write pod status; retrying", {
            namespace: run.namespace,
            pod: run.name,
          });
        await sleep(delay);
        delay = Math.min(delay * 2, STATUS_RETRY_MAX_MS);
      }
    }
  }

  /** One status write from a fresh read; a conflict reads again. Nothing to do for a pod that is gone. */
  private async putStatus(run: PodRun): Promise<void> {
    for (;;) {
      let pod: V1Pod;
      try {
        pod = await this.core.readNamespacedPod({ namespace: run.namespace, name: run.name });
      } catch (error) {
        if (isApiError(error, 404)) return;
        throw error;
      }
      if (pod.metadata?.uid !== run.uid) return;
      // A terminal phase is never undone (the API server refuses it, and the kubelet does not try).
      if (terminalPhase(pod.status?.phase) && !terminalPhase(run.phase)) return;
      pod.status = this.desiredStatus(run, pod.status);
      try {
        const written = await this.core.replaceNamespacedPodStatus({
          namespace: run.namespace,
          name: run.name,
          body: pod,
        });
        run.writtenResourceVersion = written.metadata?.resourceVersion;
        return;
      } catch (error) {
        if (isApiError(error, 404)) return;
        if (!isApiError(error, 409)) throw error;
      }
    }
  }

  /** What the node would report now, in the terms statusFingerprint compares. */
  private reportedFingerprint(run: PodRun): string {
    return statusFingerprint(this.desiredStatus(run, undefined));
  }
}

const terminalPhase = (phase: string | undefined): boolean => phase === "Succeeded" || phase === "Failed";

/** The parts of a pod's status the node owns and a lost write would leave wrong. */
function statusFingerprint(status: V1PodStatus | undefined): string {
  const containers = (status?.containerStatuses ?? []).map((c) => {
    const state = c.state?.terminated
      ? `terminated:${c.state.terminated.exitCode}:${c.state.terminated.reason ?? ""}`
      : c.state?.running
        ? "running"
        : `waiting:${c.state?.waiting?.reason ?? ""}`;
    return `${c.name}=${state}/${c.restartCount}`;
  });
  return JSON.stringify([status?.phase ?? "", status?.reason ?? "", containers.sort()]);
}

/** resourceVersions are opaque, but the API server's are etcd revisions: a smaller one is older. */
function olderThan(pod: V1Pod, than: V1Pod): boolean {
  const version = Number(pod.metadata?.resourceVersion);
  const known = Number(than.metadata?.resourceVersion);
  return Number.isSafeInteger(version) && Number.isSafeInteger(known) && version < known;
}

/** Runs at most `limit` tasks at once, the rest in order of arrival. */
class Limiter {
  private active = 0;
  private readonly queue: (() => void)[] = [];
  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    // A finishing task hands its slot to the next in line, so no newcomer slips in between.
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.queue.push(resolve));
    else this.active += 1;
    try {
      return await task();
    } finally {
      const next = this.queue.shift();
      if (next) next();
      else this.active -= 1;
    }
  }
}
