// A worker of the Playbook queue: takes one key at a time, runs the reconciler's pass on it and
// turns the pass's result or error into the key's next turn (forget, requeue after, back off).
import type { Logger } from "pino";
import { apiErrorMessage, isConflict } from "../../runtime/api-errors.js";
import type { WorkQueue } from "../../runtime/work-queue.js";
import type { ControllerMetrics } from "../metrics.js";
import { PodCreateFailedError, TerminalReconcileError } from "../reconcile-errors.js";
import type { PlaybookReconciler } from "./playbook-reconciler.js";

export interface PlaybookWorkerDeps {
  queue: WorkQueue;
  reconciler: Pick<PlaybookReconciler, "reconcile">;
  metrics: Pick<ControllerMetrics, "reconcileDuration" | "reconcileErrors">;
  log: Logger;
}

/** Works the queue until it shuts down. */
export async function workPlaybookQueue(deps: PlaybookWorkerDeps): Promise<void> {
  const { queue, reconciler, metrics, log } = deps;
  for (;;) {
    const key = await queue.get();
    if (key === undefined) return;
    const end = metrics.reconcileDuration.startTimer();
    try {
      const pass = await reconciler.reconcile(key);
      // A pass that only waited for the cache decided nothing: the key keeps its backoff.
      if (!pass.waited) queue.forget(key);
      if (pass.requeueAfterMs !== undefined) queue.addAfter(key, pass.requeueAfterMs);
    } catch (error) {
      metrics.reconcileErrors.inc();
      if (error instanceof PodCreateFailedError) {
        const delay = queue.addRateLimited(key);
        // Back off, but look again when the ceiling passes: the run ends then.
        if (error.retryWithinMs !== undefined) queue.addAfter(key, error.retryWithinMs);
        log.warn({ key, err: error.message, retryInMs: Math.round(delay) }, "Failed to create Pod");
      } else if (error instanceof TerminalReconcileError) {
        log.error({ key, err: error.message }, "Reconcile failed, not retrying");
        queue.forget(key);
      } else {
        const delay = queue.addRateLimited(key);
        const level = isConflict(error) ? "debug" : "warn";
        log[level]({ key, err: apiErrorMessage(error), retryInMs: Math.round(delay) }, "Reconcile failed");
      }
    } finally {
      end();
      queue.done(key);
    }
  }
}
