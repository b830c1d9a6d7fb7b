// The CronPlaybook writer: applies a scheduling decision — cancel the replaced runs, create the new
// one (its deterministic name makes a repeated create AlreadyExists, never a second run), one
// status write, delete the runs past the history limits — then its events and metrics.
import type { Logger } from "pino";
import { CRON_KIND, CRON_PLURAL } from "../../api/cron-playbook.js";
import { ANNOTATION_CANCEL_REASON, API_VERSION, GROUP, PLURAL, VERSION } from "../../api/playbook.js";
import { apiErrorMessage, isConflict, isNotFound, statusCodeOf } from "../../runtime/api-errors.js";
import type { Clock } from "../../runtime/clock.js";
import type { EventRecorder, EventTarget } from "../../runtime/events.js";
import type { KubeClients } from "../../runtime/kube-config.js";
import { parseStoredPlaybook } from "../objects.js";
import type { StoredCronPlaybook } from "./cron-objects.js";
import type { CronDecision, RunToCreate } from "./decide-cron.js";

/**
 * What the CronPlaybook controller counts (src/controller/cron/cron-metrics.ts's CronMetrics has these
 * methods): every count is by namespace.
 */
export interface CronMetricsSink {
  runStarted(namespace: string, trigger: "schedule" | "manual"): void;
  runSkipped(namespace: string): void;
  runReplaced(namespace: string): void;
  runsMissed(namespace: string, count: number): void;
  scheduleDelay(namespace: string, seconds: number): void;
  setStale(namespace: string, count: number): void;
}

export const noCronMetrics: CronMetricsSink = {
  runStarted: () => {},
  runSkipped: () => {},
  runReplaced: () => {},
  runsMissed: () => {},
  scheduleDelay: () => {},
  setStale: () => {},
};

export interface CronWriterDeps {
  clients: KubeClients;
  log: Logger;
  clock: Clock;
  events: EventRecorder;
  metrics: CronMetricsSink;
  /** Aborts once this replica stopped leading: its writes in flight end at once. */
  signal: AbortSignal;
}

const API = `/apis/${GROUP}/${VERSION}`;

export class CronWriter {
  private readonly deps: CronWriterDeps;

  constructor(deps: CronWriterDeps) {
    this.deps = deps;
  }

  async apply(cron: StoredCronPlaybook, decision: CronDecision): Promise<void> {
    const target: EventTarget = {
      kind: CRON_KIND,
      namespace: cron.metadata.namespace ?? "",
      name: cron.metadata.name,
      uid: cron.metadata.uid,
      resourceVersion: cron.metadata.resourceVersion,
    };
    const { namespace } = target;
    for (const run of decision.cancel) await this.cancelRun(namespace, run.name, run.reason);
    const started: RunToCreate[] = [];
    for (const run of decision.create) {
      if (!(await this.createRun(cron, run, target))) continue;
      started.push(run);
      this.deps.events.post(target, run.started, this.deps.clock.now());
    }
    if (decision.status) await this.writeStatus(cron, decision);
    for (const name of decision.delete) await this.deleteRun(namespace, name);
    const now = this.deps.clock.now();
    for (const event of decision.events) this.deps.events.post(target, event, now);
    // Counted once the status that records them is written: a pass that conflicted counts nothing.
    const { metrics } = this.deps;
    for (const run of started) {
      metrics.runStarted(namespace, run.trigger);
      if (run.trigger === "schedule")
        metrics.scheduleDelay(namespace, Math.max(0, (now.getTime() - run.scheduledAt.getTime()) / 1000));
    }
    for (let i = 0; i < decision.counts.skipped; i++) metrics.runSkipped(namespace);
    for (let i = 0; i < decision.counts.replaced; i++) metrics.runReplaced(namespace);
    if (decision.counts.missed > 0) metrics.runsMissed(namespace, decision.counts.missed);
  }

  /** True when this call created the run; false when it existed (started before) or was refused. */
  private async createRun(cron: StoredCronPlaybook, run: RunToCreate, target: EventTarget): Promise<boolean> {
    const { namespace, name } = run.manifest.metadata;
    const { api } = this.deps.clients;
    try {
      await api.call({
        method: "POST",
        path: `${API}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}`,
        body: run.manifest,
        options: { signal: this.deps.signal },
      });
      this.deps.log.info(
        {
          namespace,
          name: cron.metadata.name,
          run: name,
          trigger: run.trigger,
          scheduledAt: run.scheduledAt,
        },
        "Created run",
      );
      return true;
    } catch (error) {
      if (isConflict(error)) return this.existingRun(cron, namespace, name, target);
      const code = statusCodeOf(error);
      // Refused for what it is (invalid, forbidden, over quota): shown on the CronPlaybook; the
      // time is not retried. The controller's own credentials or a server shedding load: retried.
      if (code === undefined || code === 401 || code === 429 || code >= 500) throw error;
      this.deps.events.post(
        target,
        {
          type: "Warning",
          reason: "FailedCreate",
          message: `Could not create run ${name}: ${apiErrorMessage(error)}`,
        },
        this.deps.clock.now(),
      );
      return false;
    }
  }

  /** The name was taken: this CronPlaybook's run (created before), or someone else's Playbook. */
  private async existingRun(
    cron: StoredCronPlaybook,
    namespace: string,
    name: string,
    target: EventTarget,
  ): Promise<boolean> {
    const raw = await this.deps.clients.api.call({
      method: "GET",
      path: `${API}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`,
      options: { signal: this.deps.signal },
    });
    const existing = parseStoredPlaybook(raw);
    const owner = existing?.metadata.ownerReferences?.find((ref) => ref.controller);
    if (owner?.uid === cron.metadata.uid) {
      this.deps.log.debug({ namespace, name: cron.metadata.name, run: name }, "Run already existed");
      return false;
    }
    const holder = owner ? `its controller is ${owner.kind} ${owner.name}` : "it has no controller owner";
    this.deps.events.post(
      target,
      {
        type: "Warning",
        reason: "RunNameTaken",
        message: `Could not create run ${name}: a Playbook of that name exists and ${holder}`,
      },
      this.deps.clock.now(),
    );
    return false;
  }

  /** spec.cancel, with the reason its Cancelled condition begins with. */
  private async cancelRun(namespace: string, name: string, reason: string): Promise<void> {
    try {
      await this.deps.clients.api.call({
        method: "PATCH",
        path: `${API}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`,
        body: { metadata: { annotations: { [ANNOTATION_CANCEL_REASON]: reason } }, spec: { cancel: true } },
        contentType: "application/merge-patch+json",
        options: { signal: this.deps.signal },
      });
      this.deps.log.info({ namespace, run: name, reason }, "Cancelled run");
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  private async deleteRun(namespace: string, name: string): Promise<void> {
    try {
      await this.deps.clients.api.call({
        method: "DELETE",
        path: `${API}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`,
        query: { propagationPolicy: "Background" },
        options: { signal: this.deps.signal },
      });
      this.deps.log.info({ namespace, run: name }, "Deleted run past the history limit");
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  private async writeStatus(cron: StoredCronPlaybook, decision: CronDecision): Promise<void> {
    const { namespace = "", name, resourceVersion } = cron.metadata;
    await this.deps.clients.api.call({
      method: "PUT",
      path: `${API}/namespaces/${encodeURIComponent(namespace)}/${CRON_PLURAL}/${encodeURIComponent(name)}/status`,
      body: {
        apiVersion: API_VERSION,
        kind: CRON_KIND,
        metadata: { name, namespace, resourceVersion },
        spec: cron.spec,
        status: decision.status,
      },
      options: { signal: this.deps.signal },
    });
    this.deps.log.debug({ namespace, name }, "Updated CronPlaybook status");
  }
}
