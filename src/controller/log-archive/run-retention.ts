// Carries out retention's step (decide-retention.ts) in a Playbook's pass: the finalizer put on
// or taken off through the writer, the run's folder deleted from the store, and the Warning and
// metric when the store stayed down past the bound. Runs before any run decision: a Playbook
// whose objects are being deleted gets no pod and no status write meanwhile.

import type { Logger } from "pino";
import { LOG_ARCHIVE_FINALIZER } from "../../api/log-archive.js";
import type { Clock } from "../../runtime/clock.js";
import type { EventRecorder } from "../../runtime/events.js";
import type { ControllerMetrics } from "../metrics.js";
import type { StoredPlaybook } from "../objects.js";
import type { ArchiveStore } from "./archive-store.js";
import { afterDeleteFailed, decideRetention, type RetentionSettings } from "./decide-retention.js";

export interface RunRetentionDeps {
  /** The archive's store; undefined while the archive is off. */
  store: Pick<ArchiveStore, "deletePrefix"> | undefined;
  settings: RetentionSettings;
  writer: {
    patchPlaybookFinalizer(playbook: StoredPlaybook, finalizer: string, present: boolean): Promise<void>;
    readonly events: Pick<EventRecorder, "post">;
  };
  metrics: Pick<ControllerMetrics, "logArchiveFailures">;
  clock: Clock;
  log: Logger;
}

/** What retention left of the pass: done (with when to look again), or go on with the run's decision. */
export type RetentionOutcome = { done: true; requeueAfterMs?: number } | { done: false };

export class RunRetention {
  private readonly deps: RunRetentionDeps;

  constructor(deps: RunRetentionDeps) {
    this.deps = deps;
  }

  async pass(playbook: StoredPlaybook): Promise<RetentionOutcome> {
    const step = decideRetention(playbook, this.deps.settings);
    const { writer } = this.deps;
    switch (step.type) {
      case "none":
        return { done: false };
      case "addFinalizer":
        await writer.patchPlaybookFinalizer(playbook, LOG_ARCHIVE_FINALIZER, true);
        return { done: true };
      case "release":
        this.warn(
          playbook,
          "LogArchiveLeft",
          `the log archive is off: this run's archived objects, if any, were left under ${step.leftPrefix}`,
        );
        await writer.patchPlaybookFinalizer(playbook, LOG_ARCHIVE_FINALIZER, false);
        return { done: true };
      case "deleteObjects":
        return this.deleteObjects(playbook, step.prefix);
    }
  }

  private async deleteObjects(playbook: StoredPlaybook, prefix: string): Promise<RetentionOutcome> {
    const { namespace, name } = playbook.metadata;
    const started = Date.now();
    let failure: string;
    try {
      const deleted = (await this.deps.store?.deletePrefix(prefix)) ?? 0;
      this.deps.log.info(
        { namespace, name, prefix, deleted, ms: Date.now() - started },
        "Deleted archived log",
      );
      await this.deps.writer.patchPlaybookFinalizer(playbook, LOG_ARCHIVE_FINALIZER, false);
      return { done: true };
    } catch (error) {
      failure = error instanceof Error ? error.message : String(error);
    }
    const next = afterDeleteFailed(
      playbook.metadata.deletionTimestamp ?? "",
      this.deps.clock.now(),
      this.deps.settings.deleteTimeoutMs,
    );
    if (next.type === "retry") {
      this.deps.log.info(
        { namespace, name, prefix, err: failure, retryInMs: next.afterMs },
        "Could not delete archived log",
      );
      return { done: true, requeueAfterMs: next.afterMs };
    }
    this.deps.metrics.logArchiveFailures.inc({ reason: "delete" });
    this.warn(
      playbook,
      "LogArchiveDeleteFailed",
      `gave up deleting the archived log after ${Math.round(next.waitedMs / 1000)}s: objects under ${prefix} were left in the store; last error: ${failure}`,
    );
    await this.deps.writer.patchPlaybookFinalizer(playbook, LOG_ARCHIVE_FINALIZER, false);
    return { done: true };
  }

  private warn(playbook: StoredPlaybook, reason: string, message: string): void {
    const { namespace = "", name, uid, resourceVersion } = playbook.metadata;
    this.deps.log.warn({ namespace, name, reason }, message);
    this.deps.writer.events.post(
      { namespace, name, uid, resourceVersion },
      { type: "Warning", reason, message },
      this.deps.clock.now(),
    );
  }
}

/** Retention as the controller's settings make it: the controller's store, the bound from --log-archive-delete-timeout. */
export function runRetentionFor(
  config: {
    logArchiveBucket?: string | undefined;
    logArchivePrefix: string;
    logArchiveDeleteTimeout: number;
  },
  store: RunRetentionDeps["store"],
  deps: Omit<RunRetentionDeps, "store" | "settings">,
): RunRetention {
  return new RunRetention({
    ...deps,
    store,
    settings: {
      archiveOn: config.logArchiveBucket !== undefined,
      prefix: config.logArchivePrefix,
      deleteTimeoutMs: config.logArchiveDeleteTimeout,
    },
  });
}
