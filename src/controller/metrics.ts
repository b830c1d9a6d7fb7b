// DESIGN.md's metrics on a private prom-client registry, plus the informers' own health.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { FinishedRun } from "./reconcile.js";

const RUN_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400];
const TASK_BUCKETS = [0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600, 21600];

export class ControllerMetrics {
  readonly registry = new Registry();
  readonly runsTotal: Counter<"namespace" | "reason">;
  readonly limitFiredTotal: Counter<"namespace" | "limit">;
  readonly runDuration: Histogram<"namespace" | "reason">;
  readonly taskDuration: Histogram<"namespace" | "phase">;
  readonly activeRuns: Gauge<"namespace">;
  readonly reconcileDuration: Histogram;
  readonly reconcileErrors: Counter;
  readonly workqueueDepth: Gauge;
  readonly watchReconnects: Counter<"resource" | "cause">;
  readonly watchRelists: Counter<"resource">;
  readonly statusWrites: Counter;
  readonly isLeader: Gauge;

  constructor(options: { defaults?: boolean; activeRuns?: () => Map<string, number> } = {}) {
    const registers = [this.registry];
    if (options.defaults !== false) collectDefaultMetrics({ register: this.registry });
    this.runsTotal = new Counter({
      name: "playbook_runs_total",
      help: "Runs finished, by the reason of their Succeeded condition",
      labelNames: ["namespace", "reason"],
      registers,
    });
    this.limitFiredTotal = new Counter({
      name: "playbook_limit_fired_total",
      help: "Runs ended by a limit, by limit",
      labelNames: ["namespace", "limit"],
      registers,
    });
    this.runDuration = new Histogram({
      name: "playbook_run_duration_seconds",
      help: "Wall-clock duration of finished runs, from the first pod's creation",
      labelNames: ["namespace", "reason"],
      buckets: RUN_BUCKETS,
      registers,
    });
    this.taskDuration = new Histogram({
      name: "playbook_task_duration_seconds",
      help: "Duration of tasks of finished runs, by task phase",
      labelNames: ["namespace", "phase"],
      buckets: TASK_BUCKETS,
      registers,
    });
    const activeRuns = options.activeRuns;
    this.activeRuns = new Gauge({
      name: "playbook_active_runs",
      help: "Runs started and not finished",
      labelNames: ["namespace"],
      registers,
      collect() {
        if (!activeRuns) return;
        this.reset();
        for (const [namespace, count] of activeRuns()) this.set({ namespace }, count);
      },
    });
    this.reconcileDuration = new Histogram({
      name: "playbook_reconcile_duration_seconds",
      help: "Time one reconcile pass took",
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    this.reconcileErrors = new Counter({
      name: "playbook_reconcile_errors_total",
      help: "Reconcile passes that failed and were retried",
      registers,
    });
    this.workqueueDepth = new Gauge({
      name: "playbook_workqueue_depth",
      help: "Keys waiting in the work queue",
      registers,
    });
    this.watchReconnects = new Counter({
      name: "playbook_watch_reconnects_total",
      help: "Watches restarted from their last resourceVersion, by cause: timeout (the server ended it as asked), error, silent (the watchdog)",
      labelNames: ["resource", "cause"],
      registers,
    });
    this.watchRelists = new Counter({
      name: "playbook_watch_relists_total",
      help: "Full lists of a resource (start, 410 Gone)",
      labelNames: ["resource"],
      registers,
    });
    this.statusWrites = new Counter({
      name: "playbook_status_writes_total",
      help: "Writes of Playbook status",
      registers,
    });
    this.isLeader = new Gauge({
      name: "playbook_leader",
      help: "1 while this replica holds the leader Lease",
      registers,
    });
  }

  /** Counts a run once, when its terminal status was written. */
  recordFinished(namespace: string, run: FinishedRun): void {
    this.runsTotal.inc({ namespace, reason: run.reason });
    if (run.limit) this.limitFiredTotal.inc({ namespace, limit: run.limit });
    this.runDuration.observe({ namespace, reason: run.reason }, run.durationSeconds);
    for (const task of run.tasks)
      this.taskDuration.observe({ namespace, phase: task.phase }, task.durationSeconds);
  }
}
