// The manager: start-up, the leader Lease, the informers and the workers. Informers feed keys into
// the work queue; a worker reconciles one key at a time and hands the decision to the writer.
import { hostname } from "node:os";
import { setTimeout as delay } from "node:timers/promises";
import type { Logger } from "pino";
import { CRON_PLURAL } from "../api/cron-playbook.js";
import { GROUP, KIND, PLURAL, VERSION } from "../api/playbook.js";
import { POLICY_PLURAL } from "../api/policy.js";
import { apiErrorMessage, isConflict, isNotFound } from "../runtime/api-errors.js";
import { type Clock, systemClock } from "../runtime/clock.js";
import { Informer } from "../runtime/informer.js";
import type { KubeClients } from "../runtime/kube-config.js";
import { LeaderElector } from "../runtime/leader-election.js";
import { apiPodLogSource, type PodLogSource } from "../runtime/pod-log.js";
import { HealthServer } from "../runtime/server.js";
import { WorkQueue } from "../runtime/work-queue.js";
import { AgentDeliveryWatch } from "./agent-delivery-watch.js";
import { type ControllerConfig, limitDefaults, parseAddress } from "./config.js";
import { CronController } from "./cron/cron-controller.js";
import type { CronMetricsSink } from "./cron/cron-writer.js";
import type { ReconcileInput, ReconcileSettings } from "./decision.js";
import { orphanToRelease } from "./kueue/kueue-finalizer.js";
import { queueBudgetUsed, workloadOf } from "./kueue/kueue-hold.js";
import { WorkloadCache } from "./kueue/workload-cache.js";
import type { WorkloadView } from "./kueue/workload-view.js";
import { ControllerMetrics } from "./metrics.js";
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
import type { ProgressLook } from "./playbook/live-progress.js";
import { passPods } from "./playbook/pass-pods.js";
import { PROGRESS_LINES, ProgressLooks } from "./playbook/progress-looks.js";
import { decide, decideRefusedPod } from "./playbook/reconcile.js";
import { PlaybookWriter } from "./playbook/writer.js";
import type { ObservedPlacement } from "./pods/built-pod-difference.js";
import { admittedFlavors, observePlacement } from "./pods/observed-placement.js";
import { alternatePodName, podNameFor } from "./pods/pod-builder.js";
import { sortRunPods } from "./pods/pod-identity.js";
import { isPodPhaseTerminal } from "./pods/pod-state.js";
import { PolicyGovernor } from "./policy/policy-governor.js";
import { isQueued, slotState } from "./policy/policy-queue.js";
import {
  PodCreateFailedError,
  PodNameTakenError,
  PodRefusedError,
  TerminalReconcileError,
} from "./reconcile-errors.js";
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
// When to look again at a Playbook whose cache has not shown this controller's last status write
// yet, should the watch event that normally brings it be lost.
const BEHIND_RETRY_MS = 5_000;

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
  /** How task containers get the agent in the pods created now (--agent-delivery). */
  private readonly agentDelivery: AgentDeliveryWatch;
  private readonly playbooks = new Map<string, Informer<StoredPlaybook>>();
  private readonly pods = new Map<string, Informer<PodView>>();
  /**
   * Pods being deleted that hold the controller's finalizer and whose Playbook (by UID) is gone,
   * by pod key: the pass for the owner's name releases them, whether or not a Playbook of that
   * name exists again.
   */
  private readonly orphans = new Set<string>();
  private readonly governor: PolicyGovernor;
  /** Kueue's Workloads of the runs' pods, with --kueue (kueue/workload-cache.ts). */
  private readonly workloads: WorkloadCache | undefined;
  /** When each running run's progress was last read (--progress-interval). */
  private readonly progress: ProgressLooks;
  /** CronPlaybooks: their own informer and queue, fed the runs from this controller's Playbook cache. */
  readonly cron: CronController;
  private readonly stopping = new AbortController();
  private workers: Promise<void>[] = [];
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
        queuedRuns: () => this.queuedRuns(),
        queuedBudgets: () => this.queuedBudgets(),
        ready: () => this.ready,
        apiThrottled: () => deps.clients.api.throttledAnswers,
        playbookLabel: deps.config.metricsPlaybookLabel !== "",
        taskLabel: deps.config.metricsTaskLabel,
      });
    this.queue = new WorkQueue({ onDepthChange: (depth) => this.metrics.workqueueDepth.set(depth) });
    this.writer = new PlaybookWriter({
      clients: deps.clients,
      log: deps.log,
      clock: this.clock,
      metrics: this.metrics,
      identity: this.identity,
      metricsPlaybookLabel: deps.config.metricsPlaybookLabel,
      observePlacement: (pod, signal) =>
        observePlacement(deps.clients.api, pod, workloadOf(pod, this.workloads?.of([pod])), { signal }),
    });
    this.progress = new ProgressLooks(
      deps.config.progressInterval,
      deps.podLogs ?? apiPodLogSource(deps.clients.api, PROGRESS_LINES.prefix, PROGRESS_LINES.maxLineBytes),
    );
    this.settings = {
      defaults: limitDefaults(deps.config),
      runnerImage: deps.config.runnerImage,
      ttlSecondsAfterFinished: deps.config.ttlSecondsAfterFinished,
      allowedServiceAccounts: deps.config.allowedServiceAccounts,
      allowedImages: deps.config.allowedImages,
      defaultQueueName: deps.config.defaultQueueName,
    };
    const namespaces = deps.config.namespaces.length > 0 ? deps.config.namespaces : [""];
    for (const namespace of namespaces) {
      this.playbooks.set(namespace, this.playbookInformer(namespace));
      this.pods.set(namespace, this.podInformer(namespace));
    }
    this.agentDelivery = new AgentDeliveryWatch({
      setting: deps.config.agentDelivery,
      api: deps.clients.api,
      log: deps.log,
      metrics: this.metrics,
      watchTimeoutMs: deps.config.watchTimeout,
      // The settings object is the controller's own: each pod built from now on takes the choice.
      onChoice: (delivery) => {
        this.settings.agentDelivery = delivery;
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
    await this.agentDelivery.start();
    await this.workloads?.start();
    for (const informer of this.informers()) informer.start();
    const stopped = new Promise<void>((resolve) =>
      this.stopping.signal.addEventListener("abort", () => resolve(), { once: true }),
    );
    // A SIGTERM while the API server is unreachable must not wait for caches that never sync.
    await Promise.race([
      Promise.all([
        ...this.informers().map((informer) => informer.waitForSync()),
        this.agentDelivery.waitForSync(),
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
    // Another replica may lead now: stop at once rather than reconcile beside it, ending the
    // writes in flight too. A worker stuck in a call that never answers does not hold the
    // error up past the renew deadline.
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
    await this.agentDelivery.stop();
    await this.workloads?.stop();
    await this.server?.close();
    this.log.info({}, "Stopped");
  }

  private startWorkers(): void {
    this.log.info({ workers: this.config.workers, identity: this.identity }, "Started workers");
    for (const playbook of this.allPlaybooks()) this.queue.add(keyOf(playbook.metadata));
    for (let i = 0; i < this.config.workers; i++) this.workers.push(this.work());
    this.governor.startWriting(this.writer.leadingSignal);
    this.cron.startWorkers(1, this.writer.leadingSignal);
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      const end = this.metrics.reconcileDuration.startTimer();
      try {
        const pass = await this.reconcileKey(key);
        // A pass that only waited for the cache decided nothing: the key keeps its backoff.
        if (!pass.waited) this.queue.forget(key);
        if (pass.requeueAfterMs !== undefined) this.queue.addAfter(key, pass.requeueAfterMs);
      } catch (error) {
        this.metrics.reconcileErrors.inc();
        if (error instanceof PodCreateFailedError) {
          const delay = this.queue.addRateLimited(key);
          // Back off, but look again when the ceiling passes: the run ends then.
          if (error.retryWithinMs !== undefined) this.queue.addAfter(key, error.retryWithinMs);
          this.log.warn({ key, err: error.message, retryInMs: Math.round(delay) }, "Failed to create Pod");
        } else if (error instanceof TerminalReconcileError) {
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
    const owner = pod.metadata.ownerReferences?.find((ref) => ref.controller && ref.kind === KIND);
    if (owner && orphanToRelease(pod, owners.length > 0)) {
      this.orphans.add(keyOf(pod.metadata));
      this.queue.add(keyOf({ namespace: pod.metadata.namespace ?? "", name: owner.name }));
    }
  }

  private informerFor<T>(map: Map<string, Informer<T>>, namespace: string): Informer<T> | undefined {
    return map.get(namespace) ?? map.get("");
  }

  private *allPlaybooks(): Generator<StoredPlaybook> {
    for (const informer of this.playbooks.values()) yield* informer.list();
  }

  private playbooksIn(namespace: string): StoredPlaybook[] {
    const informer = this.informerFor(this.playbooks, namespace);
    return (informer?.list() ?? []).filter((p) => (p.metadata.namespace ?? "") === namespace);
  }

  /** The namespace's pods, with those created but not yet in the cache. */
  private podsIn(namespace: string): PodView[] {
    const informer = this.informerFor(this.pods, namespace);
    const cached = (informer?.list() ?? []).filter((p) => (p.metadata.namespace ?? "") === namespace);
    const seen = new Set(cached.map((p) => p.metadata.name));
    return [...cached, ...this.writer.createdPods(namespace).filter((p) => !seen.has(p.metadata.name))];
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

  private queuedRuns(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const playbook of this.allPlaybooks()) {
      const namespace = playbook.metadata.namespace ?? "";
      if (!counts.has(namespace)) counts.set(namespace, 0);
      if (isQueued(playbook)) counts.set(namespace, (counts.get(namespace) ?? 0) + 1);
    }
    return counts;
  }

  /** Each run Kueue holds under a queueTimeout, with the share of that budget it has used. */
  private queuedBudgets(): { namespace: string; queue: string; ratio: number }[] {
    const now = this.clock.now();
    const budgets: { namespace: string; queue: string; ratio: number }[] = [];
    for (const playbook of this.allPlaybooks()) {
      const used = queueBudgetUsed(playbook.status, now);
      if (used) budgets.push({ namespace: playbook.metadata.namespace ?? "", ...used });
    }
    return budgets;
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

  private activeRuns(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const playbook of this.allPlaybooks()) {
      const namespace = playbook.metadata.namespace ?? "";
      if (!counts.has(namespace)) counts.set(namespace, 0);
      // A run counts from its first pod's create; its status shows the start right after it.
      const started =
        playbook.status?.startTime !== undefined ||
        this.ownedPods(namespace, playbook.metadata.uid).length > 0;
      if (started && !isFinished(playbook.status)) {
        counts.set(namespace, (counts.get(namespace) ?? 0) + 1);
      }
    }
    return counts;
  }

  /**
   * One pass for one key. Returns when to look again, if time alone will change the answer, and
   * whether the pass only waited for the cache to show this controller's last write.
   */
  private async reconcileKey(key: string): Promise<{ requeueAfterMs?: number; waited?: true }> {
    const { namespace } = splitKey(key);
    const playbook = this.informerFor(this.playbooks, namespace)?.get(key);
    // A deleted Playbook's pods, even when a new Playbook has taken its name.
    if (this.orphans.size > 0)
      await this.releaseOrphans(namespace, splitKey(key).name, playbook?.metadata.uid);
    if (!playbook) {
      this.progress.forget(key);
      return {};
    }
    // The watch event of this controller's own last write re-queues the key when it arrives.
    if (this.writer.isBehind(playbook)) return { requeueAfterMs: BEHIND_RETRY_MS, waited: true };
    const pods = await this.podsOf(playbook);
    const cap = this.governor.capOf(namespace);
    // A run with pods but no start record waits too: its pods may all be foreign (pod-identity.ts),
    // and a pod of someone else's making does not let a run pass the queue.
    const waits = cap && !playbook.status?.startTime && !isFinished(playbook.status);
    if (!waits)
      return this.decideAndApply({ playbook, pods, now: this.clock.now(), settings: this.settings });
    // One start at a time per capped namespace, counted from the caches and this writer's own
    // creates: two workers never take the same slot, and a restarted controller counts the same.
    return this.governor.withNamespaceLock(namespace, async () => {
      const current = this.informerFor(this.playbooks, namespace)?.get(key) ?? playbook;
      const slots = slotState(key, this.playbooksIn(namespace), this.podsIn(namespace), cap.cap, cap.where);
      return this.decideAndApply({
        playbook: current,
        pods,
        now: this.clock.now(),
        settings: this.settings,
        slots,
      });
    });
  }

  /**
   * The pods of a deleted Playbook that still carry the controller's finalizer, once the garbage
   * collector deletes them: nobody is left to read them, so the finalizer comes off. `liveUid`: the
   * Playbook of that name now, if any, whose own pods are not orphans.
   */
  private async releaseOrphans(namespace: string, name: string, liveUid: string | undefined): Promise<void> {
    for (const podKey of [...this.orphans]) {
      const pod = this.informerFor(this.pods, splitKey(podKey).namespace)?.get(podKey);
      const owner = pod?.metadata.ownerReferences?.find((ref) => ref.controller && ref.kind === KIND);
      if (pod && (pod.metadata.namespace !== namespace || owner?.name !== name)) continue;
      // Kept until released: a failed release fails the pass, which is retried.
      if (pod && owner?.uid !== liveUid && orphanToRelease(pod, false))
        await this.writer.releasePod(namespace, pod.metadata.name);
      this.orphans.delete(podKey);
    }
  }

  /**
   * Where the run's pods were placed, read for a run whose status records no pod yet: a pod found
   * then is adopted only as what the controller builds, placed where the controller sees it was
   * (pods/observed-placement.ts). Nothing is read for a pod that carries no placement.
   */
  private async placementsBeforeRecord(
    input: ReconcileInput,
    workloads: readonly WorkloadView[] | undefined,
  ): Promise<Record<string, ObservedPlacement> | undefined> {
    const status = input.playbook.status ?? {};
    if (status.podUID !== undefined) return undefined;
    const { name, uid = "" } = input.playbook.metadata;
    // Only the pods named for an attempt are candidates (pod-identity.ts): no read for the others.
    const placed = sortRunPods(status, input.pods, { name, uid }).unrecorded.filter(
      (pod) =>
        pod.metadata.uid &&
        (pod.spec?.nodeName || pod.spec?.runtimeClassName || admittedFlavors(workloadOf(pod, workloads))),
    );
    if (placed.length === 0) return undefined;
    const signal = this.writer.leadingSignal;
    const seen = await Promise.all(
      placed.map((pod) => observePlacement(this.clients.api, pod, workloadOf(pod, workloads), { signal })),
    );
    return Object.fromEntries(placed.map((pod, i) => [pod.metadata.uid ?? "", seen[i] ?? {}]));
  }

  private async decideAndApply(input: ReconcileInput): Promise<{ requeueAfterMs?: number }> {
    const { playbook } = input;
    const start = this.writer.unrecordedStart(playbook.metadata.uid ?? "");
    const look = await this.lookAtProgress(input);
    const workloads = this.workloads?.of(input.pods);
    const placements = start ? undefined : await this.placementsBeforeRecord(input, workloads);
    let withRules: ReconcileInput = {
      ...input,
      rules: this.governor.rulesFor(playbook.metadata.namespace ?? ""),
      takenPodNames: this.takenPodNames(playbook),
      ...(workloads ? { workloads } : {}),
      ...(placements ? { placements } : {}),
      ...(start ? { unrecordedStart: start } : {}),
      ...(look ? { progress: look } : {}),
    };
    for (;;) {
      const decision = decide(withRules);
      try {
        await this.writer.apply(playbook, decision);
      } catch (error) {
        if (error instanceof PodNameTakenError && !withRules.takenPodNames?.includes(error.podName)) {
          // Someone else's pod holds the name: decide again knowing it (the alternate name, or
          // a Pending run that says which pods hold both). At most twice: each name once.
          this.log.info({ key: keyOf(playbook.metadata), err: error.message }, "Pod name taken");
          withRules = { ...withRules, takenPodNames: [...(withRules.takenPodNames ?? []), error.podName] };
          continue;
        }
        if (!(error instanceof PodRefusedError)) throw error;
        await this.writer.apply(playbook, decideRefusedPod(withRules, error.message));
        return {};
      }
      const taken = decision.progressTaken;
      if (taken) this.progress.took(playbook, taken.podUID, taken);
      const requeueAfterMs = earliest(decision.requeueAfterMs, this.nextProgressLookInMs(input));
      return requeueAfterMs === undefined ? {} : { requeueAfterMs };
    }
  }

  /**
   * Reads the runner log of the pod the run's status records when a look at its progress is due
   * (ProgressLooks); a read that fails leaves the status as it is until the next one.
   */
  private async lookAtProgress(input: ReconcileInput): Promise<ProgressLook | undefined> {
    try {
      return await this.progress.look(input.playbook, input.pods, input.now, {
        signal: this.writer.leadingSignal,
      });
    } catch (error) {
      const { namespace, name } = input.playbook.metadata;
      this.log.debug({ namespace, name, err: apiErrorMessage(error) }, "Could not read runner log");
      return undefined;
    }
  }

  /** How long until the run's next progress look, while its runner runs. */
  private nextProgressLookInMs(input: ReconcileInput): number | undefined {
    const due = this.progress.dueAt(input.playbook, input.pods);
    return due === undefined ? undefined : Math.max(0, due - this.clock.now().getTime());
  }

  /**
   * The names of the run's current and next attempt held by pods it does not control (a deleted
   * Playbook's of the same name, still terminating, or anyone's that carries the managed-by label).
   */
  private takenPodNames(playbook: StoredPlaybook): string[] {
    const namespace = playbook.metadata.namespace ?? "";
    const { name, uid = "" } = playbook.metadata;
    const informer = this.informerFor(this.pods, namespace);
    const attempts = playbook.status?.podAttempts ?? 0;
    const names = [Math.max(1, attempts), attempts + 1].flatMap((attempt) => [
      podNameFor(name, attempt),
      alternatePodName(name, attempt, uid),
    ]);
    return [...new Set(names)].filter((podName) => {
      const pod = informer?.get(keyOf({ namespace, name: podName }));
      return pod !== undefined && !isControlledBy(pod, uid);
    });
  }

  /** The pods the cache shows controlled by the Playbook of this UID (never by its name). */
  private ownedPods(namespace: string, uid: string | undefined): PodView[] {
    if (!uid) return [];
    const informer = this.informerFor(this.pods, namespace);
    return (informer?.byIndex(ownerIndex(namespace, uid)) ?? []).filter((pod) => isControlledBy(pod, uid));
  }

  /** The pods a pass on the Playbook decides on (pass-pods.ts): the cache's, and what it may lag behind. */
  private podsOf(playbook: StoredPlaybook): Promise<PodView[]> {
    const uid = playbook.metadata.uid;
    const namespace = playbook.metadata.namespace ?? "";
    return passPods(playbook, this.writer.unrecordedStart(uid ?? ""), {
      cached: this.ownedPods(namespace, uid),
      created: uid ? this.writer.createdPodsOf(uid).filter((pod) => isControlledBy(pod, uid)) : [],
      readLive: async (name) => {
        try {
          const live = parsePod(
            await this.clients.api.readNamespacedPod(
              { name, namespace },
              { signal: this.writer.leadingSignal },
            ),
          );
          return live && isControlledBy(live, uid) ? live : undefined;
        } catch (error) {
          if (isNotFound(error)) return undefined;
          throw error;
        }
      },
    });
  }
}

function describeProblem(
  resource: string,
  namespace: string,
  informer: { problem: string | undefined },
): string[] {
  const problem = informer.problem;
  if (problem === undefined) return [];
  return [`${resource}${namespace ? ` in ${namespace}` : ""}: ${problem}`];
}

function earliest(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  return b === undefined ? a : Math.min(a, b);
}

function isControlledBy(pod: PodView, uid: string | undefined): boolean {
  return pod.metadata.ownerReferences?.some((ref) => ref.controller && ref.uid === uid) ?? false;
}
