// The controller: informers feed keys into the work queue, workers reconcile one key at a time
// and apply the decision — pods first, then one status write, then events and metrics.
import { hostname } from "node:os";
import type { V1Pod } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { API_VERSION, KIND } from "../api/playbook.js";
import { type ControllerConfig, limitDefaults, parseAddress } from "./config.js";
import { EventRecorder, type EventTarget } from "./events.js";
import { Informer, type ListResult } from "./informer.js";
import {
  apiErrorMessage,
  GROUP,
  isConflict,
  isNotFound,
  type KubeClients,
  PLURAL,
  statusCodeOf,
  VERSION,
} from "./kube.js";
import { LeaderElector } from "./leader-election.js";
import { ControllerMetrics } from "./metrics.js";
import {
  keyOf,
  ownerKeyOfPod,
  POD_SELECTOR,
  type PodView,
  parsePod,
  parseStoredPlaybook,
  type StoredPlaybook,
  splitKey,
} from "./objects.js";
import { type Action, type Decision, decide, decideRefusedPod, type ReconcileSettings } from "./reconcile.js";
import { HealthServer } from "./server.js";
import { isFinished } from "./status.js";
import { WorkQueue } from "./work-queue.js";

export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A reconcile error that retrying cannot fix; the key is dropped until its objects change. */
export class TerminalReconcileError extends Error {}

/** The API server refused the pod as invalid: the run ends InvalidSpec. */
class PodRefusedError extends TerminalReconcileError {}

export interface ControllerDeps {
  config: ControllerConfig;
  clients: KubeClients;
  log: Logger;
  clock?: Clock;
  metrics?: ControllerMetrics;
}

const LIST_PAGE = 500;
// How long a pod this controller created is trusted to exist while the cache has not shown it.
// Timed on the monotonic clock: it is about this process's cache lag, not about the run, whose
// decisions use the injected clock.
const CREATED_MEMORY_MS = 30_000;

export class PlaybookController {
  readonly metrics: ControllerMetrics;
  readonly queue: WorkQueue;
  private readonly config: ControllerConfig;
  private readonly clients: KubeClients;
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly identity: string;
  private readonly events: EventRecorder;
  private readonly settings: ReconcileSettings;
  private readonly playbooks = new Map<string, Informer<StoredPlaybook>>();
  private readonly pods = new Map<string, Informer<PodView>>();
  private readonly stopping = new AbortController();
  private workers: Promise<void>[] = [];
  /**
   * Pods this controller created that its cache may not show yet (as the Job controller's
   * expectations): a pass in that window trusts the create instead of reading the pod again.
   */
  private readonly created = new Map<string, { pod: PodView; uid: string; at: number }>();
  private elector: LeaderElector | undefined;
  private server: HealthServer | undefined;

  constructor(deps: ControllerDeps) {
    this.config = deps.config;
    this.clients = deps.clients;
    this.log = deps.log;
    this.clock = deps.clock ?? systemClock;
    this.identity = deps.config.identity ?? `${hostname()}_${process.pid}`;
    this.metrics =
      deps.metrics ??
      new ControllerMetrics({
        activeRuns: () => this.activeRuns(),
        ready: () => this.ready,
        playbookLabel: deps.config.metricsPlaybookLabel !== "",
      });
    this.queue = new WorkQueue({ onDepthChange: (depth) => this.metrics.workqueueDepth.set(depth) });
    this.events = new EventRecorder(deps.clients.core, this.identity, deps.log);
    this.settings = {
      defaults: limitDefaults(deps.config),
      runnerImage: deps.config.runnerImage,
      ttlSecondsAfterFinished: deps.config.ttlSecondsAfterFinished,
    };
    const namespaces = deps.config.namespaces.length > 0 ? deps.config.namespaces : [""];
    for (const namespace of namespaces) {
      this.playbooks.set(namespace, this.playbookInformer(namespace));
      this.pods.set(namespace, this.podInformer(namespace));
    }
  }

  private informers(): (Informer<StoredPlaybook> | Informer<PodView>)[] {
    return [...this.playbooks.values(), ...this.pods.values()];
  }

  get ready(): boolean {
    return this.informers().every((informer) => informer.hasSynced);
  }

  /** Serves health and metrics, starts the caches, and once leading, the workers. Resolves on stop. */
  async run(): Promise<void> {
    const { host, port } = parseAddress(this.config.metricsAddress);
    this.server = new HealthServer({
      host,
      port,
      registry: this.metrics.registry,
      healthy: () => true,
      ready: () => this.ready,
    });
    const address = await this.server.listen();
    this.log.info({ address: `${address.address}:${address.port}` }, "Serving metrics and health");
    for (const informer of this.informers()) informer.start();
    const stopped = new Promise<void>((resolve) =>
      this.stopping.signal.addEventListener("abort", () => resolve(), { once: true }),
    );
    // A SIGTERM while the API server is unreachable must not wait for caches that never sync.
    await Promise.race([Promise.all(this.informers().map((informer) => informer.waitForSync())), stopped]);
    if (this.stopping.signal.aborted) return this.shutDown();
    this.log.info(
      { namespaces: this.config.namespaces.length > 0 ? this.config.namespaces : "all" },
      "Caches synced",
    );
    if (this.config.leaderElection) {
      await this.lead();
    } else {
      // A single replica without a Lease is the one that reconciles: it leads, for the alerts too.
      this.metrics.isLeader.set(1);
      this.startWorkers();
      await stopped;
    }
    await this.shutDown();
  }

  /** Reconciles while this replica holds the Lease; throws when the Lease is lost. */
  private async lead(): Promise<void> {
    this.elector = new LeaderElector({
      coordination: this.clients.coordination,
      namespace: this.config.leaderElectionNamespace,
      name: this.config.leaderElectionId,
      identity: this.identity,
      leaseDurationMs: this.config.leaseDuration,
      renewDeadlineMs: this.config.renewDeadline,
      retryPeriodMs: this.config.retryPeriod,
      log: this.log,
    });
    if (!(await this.elector.acquire(this.stopping.signal))) return;
    this.metrics.isLeader.set(1);
    this.startWorkers();
    if ((await this.elector.holdUntilLost(this.stopping.signal)) === "lost") {
      // Another replica may lead now: stop at once rather than reconcile beside it.
      await this.shutDown();
      throw new Error("lost the leader Lease");
    }
  }

  /** Queues every cached Playbook again, as the periodic resync does. */
  resync(): void {
    for (const informer of this.playbooks.values()) informer.resync();
  }

  /** Stops taking work; run() resolves after in-flight reconciles finished and the Lease is released. */
  stop(): void {
    this.stopping.abort();
  }

  private async shutDown(): Promise<void> {
    await this.queue.shutDown();
    await Promise.all(this.workers);
    await this.events.flush();
    await this.elector?.release();
    this.metrics.isLeader.set(0);
    await Promise.all(this.informers().map((informer) => informer.stop()));
    await this.server?.close();
    this.log.info({}, "Stopped");
  }

  private startWorkers(): void {
    this.log.info({ workers: this.config.workers, identity: this.identity }, "Started workers");
    for (const playbook of this.allPlaybooks()) this.queue.add(keyOf(playbook.metadata));
    for (let i = 0; i < this.config.workers; i++) this.workers.push(this.work());
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      const end = this.metrics.reconcileDuration.startTimer();
      try {
        const requeueAfterMs = await this.reconcileKey(key);
        this.queue.forget(key);
        if (requeueAfterMs !== undefined) this.queue.addAfter(key, requeueAfterMs);
      } catch (error) {
        this.metrics.reconcileErrors.inc();
        if (error instanceof TerminalReconcileError) {
          this.log.error({ key, err: error.message }, "Reconcile failed, not retrying");
          this.queue.forget(key);
        } else {
          const delay = this.queue.addRateLimited(key);
          const level = isConflict(error) ? "debug" : "warn";
          this.log[level](
            { key, err: apiErrorMessage(error), retryInMs: Math.round(delay) },
            "Reconcile failed",
          );
        }
      } finally {
        end();
        this.queue.done(key);
      }
    }
  }

  private playbookInformer(namespace: string): Informer<StoredPlaybook> {
    const { custom } = this.clients;
    const informer = new Informer<StoredPlaybook>({
      resource: "playbooks",
      kubeConfig: this.clients.kubeConfig,
      watchPath: namespace
        ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}`
        : `/apis/${GROUP}/${VERSION}/${PLURAL}`,
      list: () =>
        paginate((cont) =>
          namespace
            ? custom.listNamespacedCustomObject({
                group: GROUP,
                version: VERSION,
                plural: PLURAL,
                namespace,
                limit: LIST_PAGE,
                _continue: cont,
              })
            : custom.listClusterCustomObject({
                group: GROUP,
                version: VERSION,
                plural: PLURAL,
                limit: LIST_PAGE,
                _continue: cont,
              }),
        ),
      parse: parseStoredPlaybook,
      keyOf: (playbook) => keyOf(playbook.metadata),
      resourceVersionOf: (playbook) => playbook.metadata.resourceVersion,
      watchTimeoutMs: this.config.watchTimeout,
      resyncMs: this.config.resync,
      log: this.log,
      onReconnect: (cause) => this.metrics.watchReconnects.inc({ resource: "playbooks", cause }),
      onRelist: () => this.metrics.watchRelists.inc({ resource: "playbooks" }),
    });
    informer.addHandlers({
      onUpsert: (playbook) => this.queue.add(keyOf(playbook.metadata)),
      onDelete: (playbook) => this.queue.add(keyOf(playbook.metadata)),
    });
    return informer;
  }

  private podInformer(namespace: string): Informer<PodView> {
    const { core } = this.clients;
    const informer = new Informer<PodView>({
      resource: "pods",
      kubeConfig: this.clients.kubeConfig,
      watchPath: namespace ? `/api/v1/namespaces/${namespace}/pods` : "/api/v1/pods",
      labelSelector: POD_SELECTOR,
      list: () =>
        paginate((cont) =>
          namespace
            ? core.listNamespacedPod({
                namespace,
                labelSelector: POD_SELECTOR,
                limit: LIST_PAGE,
                _continue: cont,
              })
            : core.listPodForAllNamespaces({
                labelSelector: POD_SELECTOR,
                limit: LIST_PAGE,
                _continue: cont,
              }),
        ),
      parse: parsePod,
      keyOf: (pod) => keyOf(pod.metadata),
      resourceVersionOf: (pod) => pod.metadata.resourceVersion,
      indexOf: ownerKeyOfPod,
      watchTimeoutMs: this.config.watchTimeout,
      resyncMs: 0,
      log: this.log,
      onReconnect: (cause) => this.metrics.watchReconnects.inc({ resource: "pods", cause }),
      onRelist: () => this.metrics.watchRelists.inc({ resource: "pods" }),
    });
    const enqueueOwner = (pod: PodView) => {
      this.created.delete(keyOf(pod.metadata));
      const owner = ownerKeyOfPod(pod);
      if (owner) this.queue.add(owner);
    };
    informer.addHandlers({ onUpsert: enqueueOwner, onDelete: enqueueOwner });
    return informer;
  }

  private informerFor<T>(map: Map<string, Informer<T>>, namespace: string): Informer<T> | undefined {
    return map.get(namespace) ?? map.get("");
  }

  private *allPlaybooks(): Generator<StoredPlaybook> {
    for (const informer of this.playbooks.values()) yield* informer.list();
  }

  private activeRuns(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const playbook of this.allPlaybooks()) {
      const namespace = playbook.metadata.namespace ?? "";
      if (!counts.has(namespace)) counts.set(namespace, 0);
      if (playbook.status?.startTime && !isFinished(playbook.status)) {
        counts.set(namespace, (counts.get(namespace) ?? 0) + 1);
      }
    }
    return counts;
  }

  /** One pass for one key. Returns when to look again, if time alone will change the answer. */
  async reconcileKey(key: string): Promise<number | undefined> {
    const { namespace, name } = splitKey(key);
    const playbook = this.informerFor(this.playbooks, namespace)?.get(key);
    if (!playbook) return undefined;
    const pods = await this.podsOf(key, playbook);
    const input = { playbook, pods, now: this.clock.now(), settings: this.settings };
    const decision = decide(input);
    try {
      await this.apply(playbook, decision, { namespace, name });
    } catch (error) {
      if (!(error instanceof PodRefusedError)) throw error;
      await this.apply(playbook, decideRefusedPod(input, error.message), { namespace, name });
      return undefined;
    }
    return decision.requeueAfterMs;
  }

  /**
   * The pods a Playbook controls, from the cache. When the pod its status names is missing there,
   * a live read confirms it is really gone before the pass acts on its absence: the cache may lag
   * behind a pod this controller created a moment ago.
   */
  private async podsOf(key: string, playbook: StoredPlaybook): Promise<PodView[]> {
    const uid = playbook.metadata.uid;
    const namespace = playbook.metadata.namespace ?? "";
    const cached = (this.informerFor(this.pods, namespace)?.byIndex(key) ?? []).filter((pod) =>
      isControlledBy(pod, uid),
    );
    const expected = playbook.status?.podName;
    if (!expected || isFinished(playbook.status) || cached.some((pod) => pod.metadata.name === expected)) {
      return cached;
    }
    const created = this.created.get(`${namespace}/${expected}`);
    if (created && created.uid === uid && performance.now() - created.at < CREATED_MEMORY_MS)
      return [...cached, created.pod];
    try {
      const live = parsePod(await this.clients.core.readNamespacedPod({ name: expected, namespace }));
      if (live && isControlledBy(live, uid)) return [...cached, live];
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    return cached;
  }

  private async apply(
    playbook: StoredPlaybook,
    decision: Decision,
    ref: { namespace: string; name: string },
  ): Promise<void> {
    const target = { ...ref, uid: playbook.metadata.uid, resourceVersion: playbook.metadata.resourceVersion };
    for (const action of decision.actions) await this.applyAction(action, target);
    if (decision.status) {
      const body = {
        apiVersion: API_VERSION,
        kind: KIND,
        metadata: {
          name: ref.name,
          namespace: ref.namespace,
          resourceVersion: playbook.metadata.resourceVersion,
        },
        spec: playbook.spec,
        status: decision.status,
      };
      await this.clients.custom.replaceNamespacedCustomObjectStatus({
        group: GROUP,
        version: VERSION,
        plural: PLURAL,
        namespace: ref.namespace,
        name: ref.name,
        body,
      });
      this.metrics.statusWrites.inc();
      const condition = decision.status.conditions?.find((c) => c.type === "Succeeded");
      this.log.info(
        { ...ref, phase: decision.status.phase, reason: condition?.reason },
        "Updated Playbook status",
      );
      const label = this.config.metricsPlaybookLabel;
      const labels = {
        namespace: ref.namespace,
        ...(label ? { playbook: playbook.metadata.labels?.[label] ?? "" } : {}),
      };
      if (decision.finished) this.metrics.recordFinished(decision.finished, labels);
      else this.metrics.recordStarted(labels);
    }
    const now = this.clock.now();
    for (const event of decision.events) this.events.post(target, event, now);
  }

  private async applyAction(action: Action, target: EventTarget): Promise<void> {
    if (action.type === "createPod") await this.createPod(action, target);
    else await this.deletePod(action, target);
  }

  private async createPod(action: Action & { type: "createPod" }, target: EventTarget): Promise<void> {
    const ref = { namespace: target.namespace, name: target.name };
    const { core } = this.clients;
    try {
      // The manifest is plain JSON of a v1 Pod; the typed client serializes it field by field.
      const created = parsePod(
        await core.createNamespacedPod({ namespace: ref.namespace, body: action.pod as unknown as V1Pod }),
      );
      if (created) this.rememberCreated(created, action.pod.metadata.ownerReferences[0]?.uid ?? "");
      this.log.info({ ...ref, pod: action.pod.metadata.name, attempt: action.attempt }, "Created Pod");
    } catch (error) {
      // Its deterministic name makes a second create of the same attempt fail here, never run twice.
      if (isConflict(error)) {
        this.log.debug({ ...ref, pod: action.pod.metadata.name }, "Pod already existed");
        return;
      }
      const code = statusCodeOf(error);
      if (code === 403 || code === 422) {
        // Refused by admission (Pod Security, quota) or invalid: say so where the user looks.
        const message = `Could not create pod ${action.pod.metadata.name}: ${apiErrorMessage(error)}`;
        this.events.post(target, { type: "Warning", reason: "FailedCreate", message }, this.clock.now());
        // An invalid pod stays invalid; a quota may free up, so a 403 is retried.
        if (code === 422) throw new PodRefusedError(message);
      }
      throw error;
    }
  }

  private rememberCreated(pod: PodView, uid: string): void {
    const now = performance.now();
    for (const [key, entry] of this.created) if (now - entry.at > CREATED_MEMORY_MS) this.created.delete(key);
    this.created.set(keyOf(pod.metadata), { pod, uid, at: now });
  }

  private async deletePod(action: Action & { type: "deletePod" }, target: EventTarget): Promise<void> {
    const ref = { namespace: target.namespace, name: target.name };
    try {
      await this.clients.core.deleteNamespacedPod({
        name: action.name,
        namespace: ref.namespace,
        ...(action.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: action.gracePeriodSeconds } : {}),
        propagationPolicy: "Background",
      });
      this.log.info({ ...ref, pod: action.name, why: action.why }, "Deleted Pod");
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}

function isControlledBy(pod: PodView, uid: string | undefined): boolean {
  return pod.metadata.ownerReferences?.some((ref) => ref.controller && ref.uid === uid) ?? false;
}

async function paginate(page: (cont: string | undefined) => Promise<unknown>): Promise<ListResult> {
  const items: unknown[] = [];
  let cont: string | undefined;
  let resourceVersion = "";
  do {
    const list = (await page(cont)) as {
      items?: unknown[];
      metadata?: { resourceVersion?: string; _continue?: string; continue?: string };
    };
    items.push(...(list.items ?? []));
    resourceVersion = list.metadata?.resourceVersion ?? resourceVersion;
    cont = list.metadata?._continue ?? list.metadata?.continue;
  } while (cont);
  return { items, resourceVersion };
}
