// The metrics of scheduled runs (CronPlaybook, issue 22), on the controller's registry. The
// CronPlaybook reconciler calls these methods; labels stop at the namespace, so a namespace with
// many CronPlaybooks costs a handful of series.
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** How a run was asked for: its schedule, or `playbook cron trigger` ("run now"). */
export type CronTrigger = "schedule" | "manual";

export const CRON_TRIGGERS: readonly CronTrigger[] = ["schedule", "manual"];

// From the scheduled time to the run's Playbook created: a healthy controller stays in the first
// buckets; minutes mean a backlog, and past startingDeadlineSeconds the run is missed instead.
const DELAY_BUCKETS = [0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600];

export class CronMetrics {
  readonly runsStarted: Counter<"namespace" | "trigger">;
  readonly runsSkipped: Counter<"namespace">;
  readonly runsReplaced: Counter<"namespace">;
  readonly runsMissedTotal: Counter<"namespace">;
  readonly delay: Histogram<"namespace">;
  readonly stale: Gauge<"namespace">;
  private readonly seeded = new Set<string>();

  constructor(registry: Registry) {
    const registers = [registry];
    this.runsStarted = new Counter({
      name: "playbook_cron_runs_started_total",
      help: "Runs a CronPlaybook created, by trigger: schedule, or manual (playbook cron trigger)",
      labelNames: ["namespace", "trigger"],
      registers,
    });
    this.runsSkipped = new Counter({
      name: "playbook_cron_runs_skipped_total",
      help: "Scheduled or manual runs not started because concurrencyPolicy Forbid found a run still active",
      labelNames: ["namespace"],
      registers,
    });
    this.runsReplaced = new Counter({
      name: "playbook_cron_runs_replaced_total",
      help: "Active runs cancelled by concurrencyPolicy Replace to start a newer one",
      labelNames: ["namespace"],
      registers,
    });
    this.runsMissedTotal = new Counter({
      name: "playbook_cron_runs_missed_total",
      help: "Scheduled times not run: later than startingDeadlineSeconds, or beyond the one run started after downtime (status.missedRuns)",
      labelNames: ["namespace"],
      registers,
    });
    this.delay = new Histogram({
      name: "playbook_cron_schedule_delay_seconds",
      help: "From a run's scheduled time to its Playbook created (scheduled runs only)",
      labelNames: ["namespace"],
      buckets: DELAY_BUCKETS,
      registers,
    });
    this.stale = new Gauge({
      name: "playbook_cron_stale",
      help: "CronPlaybooks whose condition Stale is True: their last success (or, before any, their creation) is older than spec.staleAfter",
      labelNames: ["namespace"],
      registers,
    });
  }

  runStarted(namespace: string, trigger: CronTrigger): void {
    this.seed(namespace);
    this.runsStarted.inc({ namespace, trigger });
  }

  runSkipped(namespace: string): void {
    this.seed(namespace);
    this.runsSkipped.inc({ namespace });
  }

  runReplaced(namespace: string): void {
    this.seed(namespace);
    this.runsReplaced.inc({ namespace });
  }

  runsMissed(namespace: string, count: number): void {
    this.seed(namespace);
    if (count > 0) this.runsMissedTotal.inc({ namespace }, count);
  }

  /** Seconds from the scheduled time to the Playbook created; a clock skew's negative reads as 0. */
  scheduleDelay(namespace: string, seconds: number): void {
    this.seed(namespace);
    this.delay.observe({ namespace }, Math.max(0, seconds));
  }

  setStale(namespace: string, count: number): void {
    this.seed(namespace);
    this.stale.set({ namespace }, count);
  }

  /**
   * Creates a namespace's counter series at 0 the first time it is seen (every method does it; the
   * reconciler may call it on each pass of a CronPlaybook, before anything is counted): a series
   * that first appears at 1 is invisible to increase() and rate(), so a first skip would not alert.
   */
  seed(namespace: string): void {
    if (this.seeded.has(namespace)) return;
    this.seeded.add(namespace);
    for (const trigger of CRON_TRIGGERS) this.runsStarted.inc({ namespace, trigger }, 0);
    this.runsSkipped.inc({ namespace }, 0);
    this.runsReplaced.inc({ namespace }, 0);
    this.runsMissedTotal.inc({ namespace }, 0);
  }
}
