// The manager: start-up, the leader Lease, the informers and the workers, wired together. Informers
// feed keys into the work queue; a worker hands each key to the Playbook's reconciler
// (playbook/playbook-reconciler.ts), which reads these caches through the listers it is given and
// applies its decision with the writer; the CronPlaybook's controller (cron/) runs beside it.
import { hostname } from "node:os";
import { setTimeout as delay } from "node:timers/promises";
import type { Logger } from "pino";
import { CRON_PLURAL } from "../api/cron-playbook.js";
import { GROUP, PLURAL, VERSION } from "../api/playbook.js";
import { POLICY_PLURAL } from "../api/policy.js";
import { type Clock, systemClock } from "../runtime/clock.js";
import { Informer } from "../runtime/informer.js";
import type { KubeClients } from "../runtime/kube-config.js";
import { LeaderElector } from "../runtime/leader-election.js";
import { apiPodLogSource, type PodLogSource } from "../runtime/pod-log.js";
import { HealthServer } from "../runtime/server.js";
import { WorkQueue } from "../runtime/work-queue.js";
import { describeProblem } from "./cache-problems.js";
import { type ControllerConfig, limitDefaults, parseAddress } from "./config.js";
import { CronController } from "./cron/cron-controller.js";
import type { CronMetricsSink } from "./cron/cron-writer.js";
import type { ReconcileSettings } from "./decision.js";
import { workloadOf } from "./kueue/kueue-hold.js";
import { WorkloadCache } from "./kueue/workload-cache.js";
import { type ArchiveStore, archiveStoreFromConfig } from "./log-archive/archive-store.js";
import { type LogApiServer, startLogApi } from "./log-archive/log-api.js";
import { logArchiverOf } from "./log-archive/log-archiver.js";
import { runRetentionFor } from "./log-archive/run-retention.js";
import { runnerUploadsOf } from "./log-archive/upload-secret.js";
import { ControllerMetrics } from "./metrics.js";
import { NodeRuntimesWatch } from "./node-runtimes-watch.js";
import {
  keyOf,
  ownerIndex,
  ownerIndexOfPod,
  POD_SELECTOR,
  type PodView,
  parsePod,
  parseStoredPlaybook,
  type StoredPlaybook,
  splitKey,
  withoutUnreadFields,
} from "./objects.js";
import { type PlaybookListers, PlaybookReconciler } from "./playbook/playbook-reconciler.js";
import { workPlaybookQueue } from "./playbook/playbook-worker.js";
import { PROGRESS_LINES, ProgressLooks } from "./playbook/progress-looks.js";
import { activeRuns, queuedBudgets, queuedRuns } from "./playbook/run-gauges.js";
import { PlaybookWriter } from "./playbook/writer.js";
import { observePlacement } from "./pods/observed-placement.js";
import { isPodPhaseTerminal } from "./pods/pod-state.js";
import { PolicyGovernor } from "./policy/policy-governor.js";
import { isQueued } from "./policy/policy-queue.js";
import { isFinished } from "./status.js";

export type { Clock };

export interface ControllerDeps {
  config: ControllerConfig;
  clients: KubeClients;
  log: Logger;
  clock?: Clock;
  /** The clock CronPlaybook schedules are read against; default `clock` (tests move it alone). */
  scheduleClock?: Clock;
  metrics?: ControllerMetrics;
  cronMetrics?: CronMetricsSink;
  /**
   * Where runner logs are read for live progress: the API server's pods/log unless given (the
   * control-plane tests have no kubelet to answer it and serve a runner's lines themselves).
   */
  podLogs?: PodLogSource;
}

/** The Lease went unrenewed for the renew deadline: another replica may lead now. */
export class LeaseLostError extends Error {
  constructor() {
    super("lost the leader Lease");
    this.name = "LeaseLostError";
  }
}

const LIST_PAGE = 500;

export class PlaybookController {
  readonly metrics: ControllerMetrics;
  readonly queue: WorkQueue;
  private readonly config: ControllerConfig;
  private readonly clients: KubeClients;
  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly identity: string;
  private readonly writer: PlaybookWriter;
  private readonly settings: ReconcileSettings;
  /** How task containers get the agent, and whether they get their own user namespace, in the pods created now. */
  private readonly nodeRuntimes: NodeRuntimesWatch;
  private readonly playbooks = new Map<string, Informer<StoredPlaybook>>();
  private readonly pods = new Map<string, Informer<PodView>>();
  private readonly governor: PolicyGovernor;
  /** Kueue's Workloads of the runs' pods, with --kueue (kueue/workload-cache.ts). */
  private readonly workloads: WorkloadCache | undefined;
  /** The Playbook's reconcile: one pass per key, on the caches below. */
  private readonly reconciler: PlaybookReconciler;
  /** CronPlaybooks: their own informer and queue, fed the runs from this controller's Playbook cache. */
  readonly cron: CronController;
  private readonly stopping = new AbortController();
  private workers: Promise<void>[] = [];
  private elector: LeaderElector | undefined;
  private server: HealthServer | undefined;
  /** The log archive's one store (S3 client), for its writer, retention and the log API; none while off. */
  private readonly archiveStore: ArchiveStore | undefined;
  private logApi: LogApiServer | undefined;

  constructor(deps: ControllerDeps) {
    this.config = deps.config;
    this.clients = deps.clients;
    this.log = deps.log;
    this.clock = deps.clock ?? systemClock;
    this.identity = deps.config.identity ?? `${hostname()}_${process.pid}`;
    this.metrics =
      deps.metrics ??
      new ControllerMetrics({
        activeRuns: () =>
          activeRuns(
            this.allPlaybooks(),
            (playbook) =>
              this.reconciler.ownedPods(playbook.metadata.namespace ?? "", playbook.metadata.uid).length > 0,
          ),
        queuedRuns: () => queuedRuns(this.allPlaybooks()),
        queuedBudgets: () => queuedBudgets(this.allPlaybooks(), this.clock.now()),
        ready: () => this.ready,
        apiThrottled: () => deps.clients.api.throttledAnswers,
        playbookLabel: deps.config.metricsPlaybookLabel !== "",
        taskLabel: deps.config.metricsTaskLabel,
      });
    this.queue = new WorkQueue({ onDepthChange: (depth) => this.metrics.workqueueDepth.set(depth) });
    this.archiveStore = archiveStoreFromConfig(deps.config);
    const uploads = runnerUploadsOf(this.archiveStore, deps.config, deps);
    this.writer = new PlaybookWriter({
      clients: deps.clients,
      log: deps.log,
      clock: this.clock,
      metrics: this.metrics,
      identity: this.identity,
      metricsPlaybookLabel: deps.config.metricsPlaybookLabel,
      observePlacement: (pod, signal) =>
        observePlacement(deps.clients.api, pod, workloadOf(pod, this.workloads?.of([pod])), { signal }),
      ...(uploads ? { logUpload: uploads } : {}),
    });
    this.settings = {
      defaults: limitDefaults(deps.config),
      runnerImage: deps.config.runnerImage,
      ttlSecondsAfterFinished: deps.config.ttlSecondsAfterFinished,
      allowedServiceAccounts: deps.config.allowedServiceAccounts,
      allowedImages: deps.config.allowedImages,
      defaultQueueName: deps.config.defaultQueueName,
      ...(uploads ? { logUpload: true } : {}),
    };
    const namespaces = deps.config.namespaces.length > 0 ? deps.config.namespaces : [""];
    for (const namespace of namespaces) {
      this.playbooks.set(namespace, this.playbookInformer(namespace));
      this.pods.set(namespace, this.podInformer(namespace));
    }
    this.nodeRuntimes = new NodeRuntimesWatch({
      agentDelivery: deps.config.agentDelivery,
      userNamespaces: deps.config.userNamespaces,
      api: deps.clients.api,
      log: deps.log,
      metrics: this.metrics,
      watchTimeoutMs: deps.config.watchTimeout,
      // The settings object is the controller's own: each pod built from now on takes the choices.
      onAgentDelivery: (delivery) => {
        this.settings.agentDelivery = delivery;
      },
      onUserNamespaces: (enabled) => {
        this.settings.userNamespaces = enabled;
      },
    });
    this.governor = this.policyGovernor(namespaces);
    this.workloads = deps.config.kueue
      ? new WorkloadCache({
          namespaces,
          api: deps.clients.api,
          log: deps.log,
          watchTimeoutMs: deps.config.watchTimeout,
          onChange: (namespace, podName) => {
            const pod = this.informerFor(this.pods, namespace)?.get(keyOf({ namespace, name: podName }));
            if (pod) this.wakeOwner(pod);
          },
          onProblemChange: () => this.noteReadiness(),
          onReconnect: (cause) => this.metrics.watchReconnects.inc({ resource: "workloads", cause }),
          onRelist: () => this.metrics.watchRelists.inc({ resource: "workloads" }),
        })
      : undefined;
    const retentionDeps = { writer: this.writer, metrics: this.metrics, clock: this.clock, log: deps.log };
    this.reconciler = new PlaybookReconciler({
      archive: logArchiverOf(this.archiveStore, deps, this.metrics, this.queue, this.listers(), uploads),
      listers: this.listers(),
      writer: this.writer,
      api: deps.clients.api,
      log: deps.log,
      clock: this.clock,
      settings: this.settings,
      governor: this.governor,
      workloads: this.workloads,
      progress: new ProgressLooks(
        deps.config.progressInterval,
        deps.podLogs ?? apiPodLogSource(deps.clients.api, PROGRESS_LINES.prefix, PROGRESS_LINES.maxLineBytes),
      ),
      retention: runRetentionFor(deps.config, this.archiveStore, retentionDeps),
    });
    this.cron = new CronController({
      namespaces,
      clients: deps.clients,
      log: deps.log,
      clock: deps.scheduleClock ?? this.clock,
      events: this.writer.events,
      metrics: deps.cronMetrics ?? this.metrics.cron,
      settings: this.settings,
      watchTimeoutMs: deps.config.watchTimeout,
      resyncMs: deps.config.resync,
      playbooksIn: (namespace) => this.playbooksIn(namespace),
      rulesFor: (namespace) => this.governor.rulesFor(namespace),
      onProblemChange: () => this.noteReadiness(),
      onReconnect: (cause) => this.metrics.watchReconnects.inc({ resource: CRON_PLURAL, cause }),
      onRelist: () => this.metrics.watchRelists.inc({ resource: CRON_PLURAL }),
    });
  }

  private informers(): { waitForSync(): Promise<void>; start(): void; stop(): Promise<void> }[] {
    return [
      ...this.playbooks.values(),
      ...this.pods.values(),
      ...this.governor.informers.values(),
      ...this.cron.informers.values(),
    ];
  }

  get ready(): boolean {
    return this.readiness().ready;
  }

  /**
   * What /readyz answers: ready while every cache is synced and its watch current. Leading plays
   * no part (a standby with warm caches is ready to take over); shutting down does.
   */
  readiness(): { ready: boolean; reason: string } {
    if (this.stopping.signal.aborted) return { ready: false, reason: "shutting down" };
    const problems: string[] = [];
    for (const [namespace, informer] of this.playbooks)
      problems.push(...describeProblem("playbooks", namespace, informer));
    for (const [namespace, informer] of this.pods)
      problems.push(...describeProblem("pods", namespace, informer));
    for (const [namespace, informer] of this.governor.informers)
      problems.push(...describeProblem("playbookpolicies", namespace, informer));
    problems.push(...this.cron.problems());
    problems.push(...(this.workloads?.problems() ?? []));
    return problems.length === 0
      ? { ready: true, reason: "ok" }
      : { ready: false, reason: problems.join("; ") };
  }

  private lastReadiness = "";
  private everReady = false;

  /**
   * Logs readiness when its reason changes, so the log says why /readyz answers 503. Start-up's
   * caches that have not listed yet and shutting down are not news ("Caches synced" and
   * "Stopping" say them); a failed first list is.
   */
  private noteReadiness(): void {
    const { ready, reason } = this.readiness();
    if (reason === this.lastReadiness) return;
    this.lastReadiness = reason;
    if (ready) {
      if (this.everReady) this.log.info({}, "Ready");
      this.everReady = true;
      return;
    }
    if (this.stopping.signal.aborted) return;
    if (!this.everReady && reason.split("; ").every((problem) => problem.endsWith(": has not listed yet")))
      return;
    this.log.warn({ reason }, "Not ready");
  }

  /** Serves health and metrics, starts the caches, and once leading, the workers. Resolves on stop. */
  async run(): Promise<void> {
    const { host, port } = parseAddress(this.config.metricsAddress);
    this.server = new HealthServer({
      host,
      port,
      registry: this.metrics.registry,
      healthy: () => true,
      readiness: () => this.readiness(),
    });
    const address = await this.server.listen();
    this.log.info({ address: `${address.address}:${address.port}` }, "Serving metrics and health");
    const { config, archiveStore: store, log } = this;
    this.logApi = await startLogApi({ config, api: this.clients.api, log, store }, this.listers().playbook);
    await this.nodeRuntimes.start();
    await this.workloads?.start();
    for (const informer of this.informers()) informer.start();
    const stopped = new Promise<void>((resolve) =>
      this.stopping.signal.addEventListener("abort", () => resolve(), { once: true }),
    );
    // A SIGTERM while the API server is unreachable must not wait for caches that never sync.
    await Promise.race([
      Promise.all([
        ...this.informers().map((informer) => informer.waitForSync()),
        this.nodeRuntimes.waitForSync(),
        this.workloads?.waitForSync(),
      ]),
      stopped,
    ]);
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

  /**
   * Reconciles while this replica holds the Lease; throws when the Lease is lost. On stop, the
   * Lease is renewed until the workers have drained, so no standby takes over while this replica
   * still writes; then it is released.
   */
  private async lead(): Promise<void> {
    const elector = new LeaderElector({
      coordination: this.clients.api,
      namespace: this.config.leaderElectionNamespace,
      name: this.config.leaderElectionId,
      identity: this.identity,
      leaseDurationMs: this.config.leaseDuration,
      renewDeadlineMs: this.config.renewDeadline,
      retryPeriodMs: this.config.retryPeriod,
      log: this.log,
    });
    this.elector = elector;
    if (!(await elector.acquire(this.stopping.signal))) return;
    this.metrics.isLeader.set(1);
    this.startWorkers();
    const renewing = new AbortController();
    const held = elector.holdUntilLost(renewing.signal);
    const stopped = new Promise<"stopped">((resolve) => {
      if (this.stopping.signal.aborted) resolve("stopped");
      this.stopping.signal.addEventListener("abort", () => resolve("stopped"), { once: true });
    });
    let outcome: "lost" | "stopped" | "drained" = await Promise.race([held, stopped]);
    if (outcome === "stopped")
      outcome = await Promise.race([held, this.drain().then(() => "drained" as const)]);
    renewing.abort();
    if (outcome !== "lost") {
      await held;
      return;
    }
    // Another replica may lead now: stop at once rather than reconcile beside it, ending the writes in
    // flight too. A worker stuck in a call that never answers does not hold the error up past the renew deadline.
    this.writer.stopWriting();
    this.metrics.isLeader.set(0);
    await Promise.race([this.shutDown(), delay(this.config.renewDeadline, undefined, { ref: false })]);
    throw new LeaseLostError();
  }

  /** Queues every cached Playbook and CronPlaybook again, as the periodic resync does. */
  resync(): void {
    for (const informer of this.playbooks.values()) informer.resync();
    this.cron.resync();
  }

  /** Stops taking work; run() resolves after in-flight reconciles finished and the Lease is released. */
  stop(): void {
    this.stopping.abort();
    this.noteReadiness();
  }

  private draining: Promise<void> | undefined;

  /** Takes no more work and waits for the reconciles in flight and the events they sent. */
  private drain(): Promise<void> {
    this.draining ??= (async () => {
      await Promise.all([this.queue.shutDown(), this.cron.drain()]);
      await Promise.all(this.workers);
      this.governor.stop();
      await this.writer.events.flush();
    })();
    return this.draining;
  }

  private async shutDown(): Promise<void> {
    await this.drain();
    await this.elector?.release();
    this.metrics.isLeader.set(0);
    await Promise.all(this.informers().map((informer) => informer.stop()));
    await this.nodeRuntimes.stop();
    await Promise.all([this.workloads?.stop(), this.reconciler.stopArchive()]);
    await this.server?.close();
    await this.logApi?.close();
    this.archiveStore?.destroy();
    this.log.info({}, "Stopped");
  }

  private startWorkers(): void {
    this.log.info({ workers: this.config.workers, identity: this.identity }, "Started workers");
    for (const playbook of this.allPlaybooks()) this.queue.add(keyOf(playbook.metadata));
    for (let i = 0; i < this.config.workers; i++)
      this.workers.push(
        workPlaybookQueue({
          queue: this.queue,
          reconciler: this.reconciler,
          metrics: this.metrics,
          log: this.log,
        }),
      );
    this.governor.startWriting(this.writer.leadingSignal);
    this.cron.startWorkers(1, this.writer.leadingSignal);
  }

  private playbookInformer(namespace: string): Informer<StoredPlaybook> {
    const { api } = this.clients;
    const path = namespace
      ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}`
      : `/apis/${GROUP}/${VERSION}/${PLURAL}`;
    const informer = new Informer<StoredPlaybook>({
      resource: "playbooks",
      api: this.clients.api,
      watchPath: path,
      list: (cont) => api.listPage(path, { limit: LIST_PAGE, continue: cont }),
      parse: parseStoredPlaybook,
      transform: withoutUnreadFields,
      keyOf: (playbook) => keyOf(playbook.metadata),
      resourceVersionOf: (playbook) => playbook.metadata.resourceVersion,
      // Its pods name it by UID: a pod's event wakes the Playbook that UID is.
      indexOf: (playbook) => ownerIndex(playbook.metadata.namespace ?? "", playbook.metadata.uid),
      watchTimeoutMs: this.config.watchTimeout,
      resyncMs: this.config.resync,
      log: this.log,
      onReconnect: (cause) => this.metrics.watchReconnects.inc({ resource: "playbooks", cause }),
      onRelist: () => this.metrics.watchRelists.inc({ resource: "playbooks" }),
      onProblemChange: () => this.noteReadiness(),
    });
    informer.addHandlers({
      onUpsert: (playbook, old) => {
        this.queue.add(keyOf(playbook.metadata));
        this.cron.runChanged(playbook);
        const namespace = playbook.metadata.namespace ?? "";
        if (isFinished(playbook.status) && !(old && isFinished(old.status))) this.wakeQueued(namespace);
        if (!old || isFinished(playbook.status)) this.governor.scheduleStatus(namespace);
      },
      onDelete: (playbook) => {
        this.queue.add(keyOf(playbook.metadata));
        this.cron.runChanged(playbook);
        this.wakeQueued(playbook.metadata.namespace ?? "");
        this.governor.scheduleStatus(playbook.metadata.namespace ?? "");
      },
    });
    return informer;
  }

  private podInformer(namespace: string): Informer<PodView> {
    const { api } = this.clients;
    const path = namespace ? `/api/v1/namespaces/${namespace}/pods` : "/api/v1/pods";
    const informer = new Informer<PodView>({
      resource: "pods",
      api: this.clients.api,
      watchPath: path,
      labelSelector: POD_SELECTOR,
      list: (cont) => api.listPage(path, { limit: LIST_PAGE, continue: cont, labelSelector: POD_SELECTOR }),
      parse: parsePod,
      transform: withoutUnreadFields,
      keyOf: (pod) => keyOf(pod.metadata),
      resourceVersionOf: (pod) => pod.metadata.resourceVersion,
      indexOf: ownerIndexOfPod,
      watchTimeoutMs: this.config.watchTimeout,
      resyncMs: 0,
      log: this.log,
      onReconnect: (cause) => this.metrics.watchReconnects.inc({ resource: "pods", cause }),
      onRelist: () => this.metrics.watchRelists.inc({ resource: "pods" }),
      onProblemChange: () => this.noteReadiness(),
    });
    const enqueueOwner = (pod: PodView) => {
      this.writer.sawPod(pod);
      this.wakeOwner(pod);
    };
    informer.addHandlers({
      onUpsert: (pod, old) => {
        enqueueOwner(pod);
        // A pod whose phase turned terminal frees its slot of the namespace's running-Playbooks cap.
        if (isPodPhaseTerminal(pod) && !(old && isPodPhaseTerminal(old)))
          this.wakeQueued(pod.metadata.namespace ?? "");
      },
      onDelete: (pod) => {
        enqueueOwner(pod);
        this.wakeQueued(pod.metadata.namespace ?? "");
      },
    });
    return informer;
  }

  /** The Playbook that owns the pod looks again. */
  private wakeOwner(pod: PodView): void {
    const index = ownerIndexOfPod(pod);
    if (!index) return;
    const owners = this.informerFor(this.playbooks, pod.metadata.namespace ?? "")?.byIndex(index) ?? [];
    for (const owner of owners) this.queue.add(keyOf(owner.metadata));
    // Its Playbook is gone: the pass for its name takes the controller's finalizer off.
    const orphanOf = this.reconciler.noteOrphan(pod, owners.length > 0);
    if (orphanOf) this.queue.add(orphanOf);
  }

  private informerFor<T>(map: Map<string, Informer<T>>, namespace: string): Informer<T> | undefined {
    return map.get(namespace) ?? map.get("");
  }

  /** What the reconciler reads: the caches of the namespace a key names. */
  private listers(): PlaybookListers {
    return {
      playbook: (key) => this.informerFor(this.playbooks, splitKey(key).namespace)?.get(key),
      playbooksIn: (namespace) => this.playbooksIn(namespace),
      pod: (key) => this.informerFor(this.pods, splitKey(key).namespace)?.get(key),
      podsNaming: (namespace, uid) =>
        this.informerFor(this.pods, namespace)?.byIndex(ownerIndex(namespace, uid)) ?? [],
      podsIn: (namespace) =>
        (this.informerFor(this.pods, namespace)?.list() ?? []).filter(
          (pod) => (pod.metadata.namespace ?? "") === namespace,
        ),
    };
  }

  private *allPlaybooks(): Generator<StoredPlaybook> {
    for (const informer of this.playbooks.values()) yield* informer.list();
  }

  private playbooksIn(namespace: string): StoredPlaybook[] {
    const informer = this.informerFor(this.playbooks, namespace);
    return (informer?.list() ?? []).filter((p) => (p.metadata.namespace ?? "") === namespace);
  }

  /** A slot may have freed: the namespace's queued runs look again, first created first. */
  private wakeQueued(namespace: string): void {
    if (!this.governor.capOf(namespace)) return;
    for (const playbook of this.playbooksIn(namespace)) {
      if (isQueued(playbook)) this.queue.add(keyOf(playbook.metadata));
    }
  }

  /** The policy changed: the runs not started yet are decided again under it. */
  private policyChanged(namespace: string): void {
    this.cron.policyChanged(namespace);
    for (const playbook of this.playbooksIn(namespace)) {
      if (!playbook.status?.startTime && !isFinished(playbook.status))
        this.queue.add(keyOf(playbook.metadata));
    }
  }

  private policyGovernor(namespaces: string[]): PolicyGovernor {
    const { api } = this.clients;
    return new PolicyGovernor({
      namespaces,
      clients: this.clients,
      log: this.log,
      metrics: this.metrics,
      cluster: {
        runnerImage: this.config.runnerImage,
        allowedServiceAccounts: this.config.allowedServiceAccounts,
        allowedImages: this.config.allowedImages,
        defaultQueueName: this.config.defaultQueueName,
      },
      controllerMaxCeilingMs: this.config.maxCeiling,
      controllerMaxKillGraceMs: this.config.maxKillGrace,
      controllerMaxFinallyCeilingMs: this.config.maxFinallyCeiling,
      watchTimeoutMs: this.config.watchTimeout,
      resyncMs: this.config.resync,
      list: (namespace, cont) =>
        api.listPage(
          namespace
            ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${POLICY_PLURAL}`
            : `/apis/${GROUP}/${VERSION}/${POLICY_PLURAL}`,
          { limit: LIST_PAGE, continue: cont },
        ),
      playbooksIn: (namespace) => this.playbooksIn(namespace),
      onPolicyChange: (namespace) => this.policyChanged(namespace),
      onProblemChange: () => this.noteReadiness(),
      onReconnect: (cause) => this.metrics.watchReconnects.inc({ resource: POLICY_PLURAL, cause }),
      onRelist: () => this.metrics.watchRelists.inc({ resource: POLICY_PLURAL }),
      now: () => this.clock.now(),
    });
  }
}
