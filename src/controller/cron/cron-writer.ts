// The CronPlaybook writer: applies a scheduling decision — cancel the replaced runs, create the new
// one (its deterministic name makes a repeated create AlreadyExists, never a second run), one
// status write, delete the runs past the history limits — then its events and metrics.
import type { Logger } from "pino";
import {
  CRON_KIND,
  CRON_PLURAL,
  type CronPlaybookStatus,
  type LastTrigger,
} from "../../api/cron-playbook.js";
import { ANNOTATION_CANCEL_REASON, API_VERSION, GROUP, PLURAL, VERSION } from "../../api/playbook.js";
import { apiErrorMessage, isConflict, isNotFound, statusCodeOf } from "../../runtime/api-errors.js";
import type { Clock } from "../../runtime/clock.js";
import type { EventRecorder, EventTarget } from "../../runtime/events.js";
import type { KubeClients } from "../../runtime/kube-config.js";
import { parseStoredPlaybook } from "../objects.js";
import type { StoredCronPlaybook } from "./cron-objects.js";
import type { CronDecision, RunToCancel, RunToCreate } from "./decide-cron.js";

/** A trigger's answer when the API server refused its run: no run, and why. */
function answerRefused(status: CronPlaybookStatus, id: string, skipped: string): CronPlaybookStatus {
  const answer = (trigger: LastTrigger): LastTrigger =>
    trigger.id === id ? { id, skipped, handledAt: trigger.handledAt } : trigger;
  return {
    ...status,
    ...(status.lastTrigger ? { lastTrigger: answer(status.lastTrigger) } : {}),
    ...(status.triggers ? { triggers: status.triggers.map(answer) } : {}),
  };
}

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
    let status = decision.status;
    const refused = (run: RunToCreate, why: string) => {
      if (run.triggerId !== undefined && status) status = answerRefused(status, run.triggerId, why);
    };
    // Replace cancels only runs whose replacement the API server accepts (a dry run of the
    // create): a quota, a policy or RBAC that refuses it leaves the old run running.
    const cancels = decision.cancel.length > 0 ? await this.checkReplacements(cron, decision, target) : [];
    let replaced = 0;
    for (const run of cancels) {
      if (!(await this.cancelRun(namespace, run.name, run.reason))) continue;
      replaced++;
      this.deps.events.post(target, run.event, this.deps.clock.now());
    }
    const started: RunToCreate[] = [];
    for (const run of decision.create) {
      const kept = decision.cancel.filter(
        (c) => c.replacedBy === run.manifest.metadata.name && !cancels.includes(c),
      );
      if (kept.length > 0) {
        refused(
          run,
          `the API server refused run ${run.manifest.metadata.name}: ${this.refusals.get(run) ?? "see the events"}; run ${kept.map((c) => c.name).join(", ")} kept`,
        );
        continue;
      }
      const created = await this.createRun(cron, run, target);
      if (created !== true) {
        if (created !== false)
          refused(run, `the API server refused run ${run.manifest.metadata.name}: ${created.refused}`);
        continue;
      }
      started.push(run);
      this.deps.events.post(target, run.started, this.deps.clock.now());
    }
    if (status) await this.writeStatus(cron, status);
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
    for (let i = 0; i < replaced; i++) metrics.runReplaced(namespace);
    if (decision.counts.missed > 0) metrics.runsMissed(namespace, decision.counts.missed);
  }

  /**
   * Replace's runs to cancel: those whose replacement a dry run of its create is accepted for (or
   * that exists already as this CronPlaybook's run). A refused one keeps the runs it would
   * replace, said in a FailedCreate Warning naming them and the API server's reason.
   */
  private async checkReplacements(
    cron: StoredCronPlaybook,
    decision: CronDecision,
    target: EventTarget,
  ): Promise<RunToCancel[]> {
    const accepted: RunToCancel[] = [];
    for (const run of decision.create) {
      const name = run.manifest.metadata.name;
      const replaced = decision.cancel.filter((c) => c.replacedBy === name);
      if (replaced.length === 0) continue;
      const answer = await this.dryRunCreate(cron, run);
      if (answer === "accepted") {
        accepted.push(...replaced);
        continue;
      }
      this.refusals.set(run, answer.refused);
      this.deps.events.post(
        target,
        {
          type: "Warning",
          reason: "FailedCreate",
          message: `Kept run ${replaced.map((c) => c.name).join(", ")}: concurrencyPolicy Replace, but its replacement ${name} was refused: ${answer.refused}`,
        },
        this.deps.clock.now(),
      );
      this.deps.log.info(
        { namespace: target.namespace, name: cron.metadata.name, run: name, reason: answer.refused },
        "Kept the runs a refused run would replace",
      );
    }
    return accepted;
  }

  /** What the refused replacements were refused for, by run. */
  private readonly refusals = new WeakMap<RunToCreate, string>();

  /** The create as a server-side dry run: admission, quota and RBAC answer, nothing is stored. */
  private async dryRunCreate(
    cron: StoredCronPlaybook,
    run: RunToCreate,
  ): Promise<"accepted" | { refused: string }> {
    const { namespace, name } = run.manifest.metadata;
    try {
      await this.deps.clients.api.call({
        method: "POST",
        path: `${API}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}`,
        query: { dryRun: "All" },
        body: run.manifest,
        options: { signal: this.deps.signal },
      });
      return "accepted";
    } catch (error) {
      if (isConflict(error)) {
        const existing = await this.ownerOf(namespace, name, cron);
        return existing.ours
          ? "accepted"
          : { refused: `a Playbook of that name exists and ${existing.holder}` };
      }
      const code = statusCodeOf(error);
      if (code === undefined || code === 401 || code === 429 || code >= 500) throw error;
      return { refused: apiErrorMessage(error) };
    }
  }

  /**
   * True when this call created the run; false when it existed (started before, or someone
   * else's Playbook holds the name); what refused it otherwise.
   */
  private async createRun(
    cron: StoredCronPlaybook,
    run: RunToCreate,
    target: EventTarget,
  ): Promise<boolean | { refused: string }> {
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
      const refused = apiErrorMessage(error);
      this.deps.events.post(
        target,
        { type: "Warning", reason: "FailedCreate", message: `Could not create run ${name}: ${refused}` },
        this.deps.clock.now(),
      );
      return { refused };
    }
  }

  /** The name was taken: this CronPlaybook's run (created before), or someone else's Playbook. */
  private async existingRun(
    cron: StoredCronPlaybook,
    namespace: string,
    name: string,
    target: EventTarget,
  ): Promise<boolean> {
    const { ours, holder } = await this.ownerOf(namespace, name, cron);
    if (ours) {
      this.deps.log.debug({ namespace, name: cron.metadata.name, run: name }, "Run already existed");
      return false;
    }
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

  /** Whose Playbook holds a run's name: this CronPlaybook's (its UID), or what else controls it. */
  private async ownerOf(
    namespace: string,
    name: string,
    cron: StoredCronPlaybook,
  ): Promise<{ ours: boolean; holder: string }> {
    const raw = await this.deps.clients.api.call({
      method: "GET",
      path: `${API}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`,
      options: { signal: this.deps.signal },
    });
    const owner = parseStoredPlaybook(raw)?.metadata.ownerReferences?.find((ref) => ref.controller);
    if (owner?.uid === cron.metadata.uid) return { ours: true, holder: "" };
    return {
      ours: false,
      holder: owner ? `its controller is ${owner.kind} ${owner.name}` : "it has no controller owner",
    };
  }

  /** spec.cancel, with the reason its Cancelled condition begins with; false when it is gone. */
  private async cancelRun(namespace: string, name: string, reason: string): Promise<boolean> {
    try {
      await this.deps.clients.api.call({
        method: "PATCH",
        path: `${API}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`,
        body: { metadata: { annotations: { [ANNOTATION_CANCEL_REASON]: reason } }, spec: { cancel: true } },
        contentType: "application/merge-patch+json",
        options: { signal: this.deps.signal },
      });
      this.deps.log.info({ namespace, run: name, reason }, "Cancelled run");
      return true;
    } catch (error) {
      if (!isNotFound(error)) throw error;
      return false;
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

  private async writeStatus(cron: StoredCronPlaybook, status: CronPlaybookStatus): Promise<void> {
    const { namespace = "", name, resourceVersion } = cron.metadata;
    await this.deps.clients.api.call({
      method: "PUT",
      path: `${API}/namespaces/${encodeURIComponent(namespace)}/${CRON_PLURAL}/${encodeURIComponent(name)}/status`,
      body: {
        apiVersion: API_VERSION,
        kind: CRON_KIND,
        metadata: { name, namespace, resourceVersion },
        spec: cron.spec,
        status,
      },
      options: { signal: this.deps.signal },
    });
    this.deps.log.debug({ namespace, name }, "Updated CronPlaybook status");
  }
}
