// The controller's private prom-client registry, with the process defaults and the plumbing's own
// metrics: reconcile passes, the work queue, the informers' watches, events dropped, API
// throttling, leadership and readiness. The run, limit and policy metrics are added on it by
// src/controller/metrics.ts.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export interface RuntimeMetricsOptions {
  /** Off: process defaults are left out (tests that read exact text). */
  defaults?: boolean;
  /** What /readyz answers: the caches are synced and their watches answer. */
  ready?: () => boolean;
  /** Answers 429 (Too Many Requests) the API client was given so far. */
  apiThrottled?: () => number;
}

export class RuntimeMetrics {
  readonly registry = new Registry();
  readonly reconcileDuration: Histogram;
  readonly reconcileErrors: Counter;
  readonly workqueueDepth: Gauge;
  readonly watchReconnects: Counter<"resource" | "cause">;
  readonly watchRelists: Counter<"resource">;
  readonly eventsDropped: Counter;
  readonly apiThrottled: Counter;
  readonly isLeader: Gauge;
  readonly isReady: Gauge;

  constructor(options: RuntimeMetricsOptions = {}) {
    const registers = [this.registry];
    if (options.defaults !== false) collectDefaultMetrics({ register: this.registry });
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
    this.eventsDropped = new Counter({
      name: "playbook_events_dropped_total",
      help: "Events not written because too many were waiting for the API server",
      registers,
    });
    const apiThrottled = options.apiThrottled;
    this.apiThrottled = new Counter({
      name: "playbook_api_throttled_total",
      help: "Answers 429 (Too Many Requests: API Priority and Fairness shedding load) to the controller's API calls and watches, each sent again after its Retry-After up to 10 times",
      registers,
      collect() {
        if (!apiThrottled) return;
        this.reset();
        this.inc(apiThrottled());
      },
    });
    this.isLeader = new Gauge({
      name: "playbook_leader",
      help: "1 while this replica holds the leader Lease",
      registers,
    });
    const ready = options.ready;
    this.isReady = new Gauge({
      name: "playbook_ready",
      help: "1 while this replica is ready (what /readyz answers: its caches of Playbooks, pods and policies are synced and their watches answer), else 0",
      registers,
      collect() {
        if (ready) this.set(ready() ? 1 : 0);
      },
    });
  }
}
