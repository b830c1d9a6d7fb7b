// The CronPlaybook controller: its own informer and work queue beside the Playbook controller's,
// which hands it the runs (Playbooks labelled playbook.dev/cron-playbook, from the Playbook
// informers it already keeps) and the namespace's rules. A pass decides with decideCron on a
// clock of its own (tests move it; docs/development.md) and applies the decision with the
// CronWriter; it comes back at the next scheduled time.
import type { Logger } from "pino";
import { CRON_PLURAL, CRON_STALE, LABEL_CRON_PLAYBOOK } from "../../api/cron-playbook.js";
import { GROUP, PLURAL, VERSION } from "../../api/playbook.js";
import type { NamespaceRules } from "../../api/policy.js";
import { apiErrorMessage, isConflict } from "../../runtime/api-errors.js";
import type { Clock } from "../../runtime/clock.js";
import type { EventRecorder } from "../../runtime/events.js";
import { Informer } from "../../runtime/informer.js";
import type { KubeClients } from "../../runtime/kube-config.js";
import { WorkQueue } from "../../runtime/work-queue.js";
import type { ReconcileSettings } from "../decision.js";
import {
  keyOf,
  parseStoredPlaybook,
  type StoredPlaybook,
  splitKey,
  withoutUnreadFields,
} from "../objects.js";
import { cronKeyOfRun, isRunOf, parseStoredCronPlaybook, type StoredCronPlaybook } from "./cron-objects.js";
import { type CronMetricsSink, CronWriter, noCronMetrics } from "./cron-writer.js";
import { type CronDecision, decideCron } from "./decide-cron.js";

export interface CronControllerDeps {
  /** The namespaces watched; "" for all. */
  namespaces: string[];
  clients: KubeClients;
  log: Logger;
  /** The clock scheduled times are compared with. */
  clock: Clock;
  events: EventRecorder;
  metrics?: CronMetricsSink;
  settings: ReconcileSettings;
  watchTimeoutMs: number;
  resyncMs: number;
  /** The Playbooks of a namespace, from the Playbook controller's cache. */
  playbooksIn: (namespace: string) => StoredPlaybook[];
  rulesFor: (namespace: string) => NamespaceRules | undefined;
  onProblemChange: () => void;
  onReconnect: (cause: "timeout" | "error" | "silent") => void;
  onRelist: () => void;
}

const LIST_PAGE = 500;
/** The longest a pass waits for the next scheduled time; a resync looks again meanwhile anyway. */
const MAX_WAIT_MS = 24 * 3_600_000;
/** When to look again at a CronPlaybook whose cache has not shown this controller's last write, should its watch event be lost. */
const BEHIND_RETRY_MS = 5_000;

export class CronController {
  readonly informers = new Map<string, Informer<StoredCronPlaybook>>();
  readonly queue = new WorkQueue();
  private readonly deps: CronControllerDeps;
  private readonly metrics: CronMetricsSink;
  private writer: CronWriter | undefined;
  private workers: Promise<void>[] = [];
  /**
   * The resourceVersion each CronPlaybook had when this controller last wrote its status, until
   * the cache shows a newer one: a pass on the older copy would decide on facts it already acted
   * on, and its write would conflict.
   */
  private readonly wroteFrom = new Map<string, string>();
  /**
   * The CronPlaybooks decided on since this controller took the Lease. The first pass of each
   * lists its runs from the API server: the Playbook cache of a replica that has just taken over
   * may lag (a stalled watch), and a run it does not show would let Forbid start a second one.
   */
  private readonly listedSinceLease = new Set<string>();

  constructor(deps: CronControllerDeps) {
    this.deps = deps;
    this.metrics = deps.metrics ?? noCronMetrics;
    for (const namespace of deps.namespaces) this.informers.set(namespace, this.informer(namespace));
  }

  /** A run changed or went: its CronPlaybook looks again (its active list, its history). */
  runChanged(playbook: StoredPlaybook): void {
    const key = cronKeyOfRun(playbook);
    if (key) this.queue.add(key);
  }

  /** The namespace's policy changed: its CronPlaybooks check their templates again. */
  policyChanged(namespace: string): void {
    for (const cron of this.cronsIn(namespace)) this.queue.add(keyOf(cron.metadata));
  }

  /** Queues every cached CronPlaybook again, as the periodic resync does. */
  resync(): void {
    for (const informer of this.informers.values()) informer.resync();
  }

  /** Starts reconciling, writing while `signal` (this replica leads) is not aborted. */
  startWorkers(count: number, signal: AbortSignal): void {
    this.listedSinceLease.clear();
    this.writer = new CronWriter({
      clients: this.deps.clients,
      log: this.deps.log,
      clock: this.deps.clock,
      events: this.deps.events,
      metrics: this.metrics,
      signal,
    });
    for (const informer of this.informers.values())
      for (const cron of informer.list()) this.queue.add(keyOf(cron.metadata));
    for (let i = 0; i < count; i++) this.workers.push(this.work());
  }

  /** Takes no more work and waits for the passes in flight. */
  async drain(): Promise<void> {
    await this.queue.shutDown();
    await Promise.all(this.workers);
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        const requeueAfterMs = await this.reconcileKey(key);
        this.queue.forget(key);
        if (requeueAfterMs !== undefined) this.queue.addAfter(key, Math.min(requeueAfterMs, MAX_WAIT_MS));
      } catch (error) {
        const delay = this.queue.addRateLimited(key);
        this.deps.log[isConflict(error) ? "debug" : "warn"](
          { key, err: apiErrorMessage(error), retryInMs: Math.round(delay) },
          "CronPlaybook reconcile failed",
        );
      } finally {
        this.queue.done(key);
      }
    }
  }

  private async reconcileKey(key: string): Promise<number | undefined> {
    const { namespace } = splitKey(key);
    const cron = this.informerFor(namespace)?.get(key);
    if (!cron || cron.metadata.deletionTimestamp || !this.writer) {
      this.wroteFrom.delete(key);
      return undefined;
    }
    const version = cron.metadata.resourceVersion;
    // The watch event of this controller's own write queues the key again when it arrives.
    if (version !== undefined && this.wroteFrom.get(key) === version) return BEHIND_RETRY_MS;
    this.wroteFrom.delete(key);
    const live = !this.listedSinceLease.has(key);
    const runs = (live ? await this.listRuns(cron) : this.deps.playbooksIn(namespace)).filter((playbook) =>
      isRunOf(playbook, cron),
    );
    const rules = this.deps.rulesFor(namespace);
    const decision = decideCron({
      cron,
      runs,
      now: this.deps.clock.now(),
      settings: this.deps.settings,
      ...(rules ? { rules } : {}),
    });
    await this.writer.apply(cron, decision);
    if (live) this.listedSinceLease.add(key);
    if (decision.status && version !== undefined) this.wroteFrom.set(key, version);
    this.countStale(namespace, key, decision);
    return decision.requeueAfterMs;
  }

  /** The CronPlaybook's runs as the API server lists them now (by their label), not the cache. */
  private async listRuns(cron: StoredCronPlaybook): Promise<StoredPlaybook[]> {
    const { api } = this.deps.clients;
    const path = `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(cron.metadata.namespace ?? "")}/${PLURAL}`;
    const runs: StoredPlaybook[] = [];
    let cont: string | undefined;
    do {
      const page = await api.listPage(path, {
        limit: LIST_PAGE,
        continue: cont,
        labelSelector: `${LABEL_CRON_PLAYBOOK}=${cron.metadata.name}`,
      });
      for (const item of page.items) {
        const run = parseStoredPlaybook(item);
        if (run) runs.push(run);
      }
      cont = page.continue;
    } while (cont);
    return runs;
  }

  /** The namespace's CronPlaybooks whose Stale condition is True, this pass's status counted. */
  private countStale(namespace: string, key: string, decision: CronDecision): void {
    let count = 0;
    for (const cron of this.cronsIn(namespace)) {
      const status = keyOf(cron.metadata) === key && decision.status ? decision.status : cron.status;
      if (status?.conditions?.some((c) => c.type === CRON_STALE && c.status === "True")) count++;
    }
    this.metrics.setStale(namespace, count);
  }

  /** Why a cache is not current, per namespace, for /readyz. */
  problems(): string[] {
    const problems: string[] = [];
    for (const [namespace, informer] of this.informers) {
      if (informer.problem !== undefined)
        problems.push(`${CRON_PLURAL}${namespace ? ` in ${namespace}` : ""}: ${informer.problem}`);
    }
    return problems;
  }

  private informerFor(namespace: string): Informer<StoredCronPlaybook> | undefined {
    return this.informers.get(namespace) ?? this.informers.get("");
  }

  private cronsIn(namespace: string): StoredCronPlaybook[] {
    return (this.informerFor(namespace)?.list() ?? []).filter(
      (c) => (c.metadata.namespace ?? "") === namespace,
    );
  }

  private informer(namespace: string): Informer<StoredCronPlaybook> {
    const { api } = this.deps.clients;
    const path = namespace
      ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${CRON_PLURAL}`
      : `/apis/${GROUP}/${VERSION}/${CRON_PLURAL}`;
    const informer = new Informer<StoredCronPlaybook>({
      resource: CRON_PLURAL,
      api,
      watchPath: path,
      list: (cont) => api.listPage(path, { limit: LIST_PAGE, continue: cont }),
      parse: parseStoredCronPlaybook,
      transform: withoutUnreadFields,
      keyOf: (cron) => keyOf(cron.metadata),
      resourceVersionOf: (cron) => cron.metadata.resourceVersion,
      watchTimeoutMs: this.deps.watchTimeoutMs,
      resyncMs: this.deps.resyncMs,
      log: this.deps.log,
      onReconnect: this.deps.onReconnect,
      onRelist: this.deps.onRelist,
      onProblemChange: this.deps.onProblemChange,
    });
    informer.addHandlers({
      onUpsert: (cron) => this.queue.add(keyOf(cron.metadata)),
      onDelete: (cron) => {
        this.queue.add(keyOf(cron.metadata));
        this.metrics.setStale(
          cron.metadata.namespace ?? "",
          this.cronsIn(cron.metadata.namespace ?? "").filter((c) =>
            c.status?.conditions?.some((x) => x.type === CRON_STALE && x.status === "True"),
          ).length,
        );
      },
    });
    return informer;
  }
}
