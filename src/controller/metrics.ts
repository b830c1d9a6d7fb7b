// docs/design.md's metrics of runs, limits and policies, on the registry that src/runtime's
// metrics-registry.ts keeps with the plumbing's own (work queue, watches, leader, readiness).
import { Counter, Gauge, Histogram } from "prom-client";
import { LOG_ARCHIVE_FAILURES } from "../api/log-archive.js";
import { POLICY_FIELDS } from "../api/policy.js";
import { LIMIT_REASONS, TERMINAL_REASONS } from "../api/reasons.js";
import { RuntimeMetrics, type RuntimeMetricsOptions } from "../runtime/metrics-registry.js";
import { CronMetrics } from "./cron/cron-metrics.js";
import type { FinishedRun } from "./pods/finished-run.js";
import { DISTRUST_WHYS } from "./pods/report-trust.js";

const RUN_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400];
const TASK_BUCKETS = [0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600, 21600];
// Fine near 1, where a limit is about to be too tight.
const USAGE_BUCKETS = [0.1, 0.25, 0.5, 0.75, 0.8, 0.9, 0.95, 0.99, 1];
// A task's CPU seconds: from a shell's few milliseconds to hours of a build.
const CPU_BUCKETS = [0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400];
// Peak resident memory, 1 MiB to 64 GiB in steps of 4: enough to set a request or a limit by.
const MEMORY_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536].map((mib) => mib * 1024 * 1024);
// Time in Kueue's queue: from an admission at once to a night's wait.
const QUEUE_WAIT_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400];

/** The optional per-Playbook label, present on the run, limit, usage and task metrics only when configured. */
type PlaybookLabel = "playbook";
/** The optional per-task label, on the task duration and usage metrics only when configured. */
type TaskLabel = "task";

export interface MetricsOptions extends RuntimeMetricsOptions {
  activeRuns?: () => Map<string, number>;
  /** Runs waiting for a slot of their namespace's running-Playbooks cap, by namespace. */
  queuedRuns?: () => Map<string, number>;
  /** Each run whose pod Kueue holds and that has a queueTimeout: its queue and the share of that budget used so far. */
  queuedBudgets?: () => { namespace: string; queue: string; ratio: number }[];
  /** Add a `playbook` label to the run, limit, usage and task metrics (--metrics-playbook-label). */
  playbookLabel?: boolean;
  /**
   * Add a `task` label, the task's name, to the task duration and usage metrics, and the `playbook`
   * label (when on) to the task durations (--metrics-task-label).
   */
  taskLabel?: boolean;
}

/** Which run is being counted: its namespace, and its Playbook's label value when that label is on. */
export interface RunLabels {
  namespace: string;
  playbook?: string;
  /** The run's task names (main and finally), known when it starts: their series are created at 0 then. */
  tasks?: readonly string[];
}

export class ControllerMetrics extends RuntimeMetrics {
  readonly runsTotal: Counter<"namespace" | "reason" | PlaybookLabel>;
  readonly limitFiredTotal: Counter<"namespace" | "limit" | PlaybookLabel>;
  readonly runDuration: Histogram<"namespace" | "reason" | PlaybookLabel>;
  readonly limitUsage: Histogram<"namespace" | "limit" | PlaybookLabel | TaskLabel>;
  readonly taskDuration: Histogram<"namespace" | "phase" | PlaybookLabel | TaskLabel>;
  readonly taskCpu: Histogram<"namespace" | PlaybookLabel>;
  readonly taskPeakMemory: Histogram<"namespace" | PlaybookLabel>;
  readonly activeRuns: Gauge<"namespace">;
  readonly queuedRuns: Gauge<"namespace">;
  /** 1 for the way the agent reaches task containers in the pods created now, 0 for the other. */
  readonly agentDelivery: Gauge<"delivery">;
  readonly userNamespaces: Gauge;
  readonly policyRefusals: Counter<"namespace" | "field">;
  readonly untrustedReports: Counter<"namespace" | "why">;
  readonly policyStatusWrites: Counter;
  readonly statusWrites: Counter;
  /** Each time Kueue stopped a run's pod (kueue/kueue-preemption.ts), by its Workload's Evicted reason. */
  readonly runsPreempted: Counter<"namespace" | "reason">;
  /** How long a run's pod waited for Kueue's admission, observed at the admission. */
  readonly queueWait: Histogram<"namespace" | "queue">;
  /** Runs whose pod Kueue holds, over their queueTimeout: the share of the budget used, per run. */
  readonly queueBudgetUsed: Gauge<"namespace" | "queue">;
  /** Log archive failures (docs/log-archive.md), by reason: the attempt's LogArchived reason, or delete. */
  readonly logArchiveFailures: Counter<"reason">;
  /** The CronPlaybook reconciler's series, on the same registry. */
  readonly cron: CronMetrics;
  private readonly playbookLabel: boolean;
  private readonly taskLabel: boolean;
  /** The histogram series created at 0 so far (as many as the series themselves). */
  private readonly zeroed = new Set<string>();

  constructor(options: MetricsOptions = {}) {
    super(options);
    const registers = [this.registry];
    this.playbookLabel = options.playbookLabel === true;
    // prom-client fixes label names at construction: without the option the label does not exist.
    const perPlaybook: PlaybookLabel[] = this.playbookLabel ? ["playbook"] : [];
    this.taskLabel = options.taskLabel === true;
    const perTask: TaskLabel[] = this.taskLabel ? ["task"] : [];
    this.cron = new CronMetrics(this.registry);
    this.runsTotal = new Counter({
      name: "playbook_runs_total",
      help: "Runs finished, by the reason of their Succeeded condition",
      labelNames: ["namespace", "reason", ...perPlaybook],
      registers,
    });
    this.limitFiredTotal = new Counter({
      name: "playbook_limit_fired_total",
      help: "Runs ended by a limit, by limit",
      labelNames: ["namespace", "limit", ...perPlaybook],
      registers,
    });
    this.runDuration = new Histogram({
      name: "playbook_run_duration_seconds",
      help: "Wall-clock duration of finished runs, from the first pod's creation",
      labelNames: ["namespace", "reason", ...perPlaybook],
      buckets: RUN_BUCKETS,
      registers,
    });
    this.limitUsage = new Histogram({
      name: "playbook_task_limit_usage_ratio",
      help:
        "Duration over the effective limit of finished runs and tasks, for near misses: limit=TaskTimeout per task that " +
        "ended Succeeded or Failed and had a timeout (a retried task: its span over attempts x timeout), " +
        "limit=RunCeiling per run; a limit that fired is left out (its ratio is 1; see playbook_limit_fired_total)",
      labelNames: ["namespace", "limit", ...perPlaybook, ...perTask],
      buckets: USAGE_BUCKETS,
      registers,
    });
    this.taskDuration = new Histogram({
      name: "playbook_task_duration_seconds",
      help: "Duration of tasks of finished runs, by task phase, as the runner's trusted report gives them (never a progress record)",
      // Per task, and then per Playbook too: a task's name alone would mix the Playbooks' tasks.
      labelNames: ["namespace", "phase", ...(this.taskLabel ? [...perPlaybook, ...perTask] : [])],
      buckets: TASK_BUCKETS,
      registers,
    });
    this.taskCpu = new Histogram({
      name: "playbook_task_cpu_seconds",
      help: "CPU seconds (user + system) of the last attempt of each finished task, as the runner's report measured them",
      labelNames: ["namespace", ...perPlaybook],
      buckets: CPU_BUCKETS,
      registers,
    });
    this.taskPeakMemory = new Histogram({
      name: "playbook_task_peak_memory_bytes",
      help: "Peak resident memory (its largest process) of the last attempt of each finished task, as the runner's report measured it",
      labelNames: ["namespace", ...perPlaybook],
      buckets: MEMORY_BUCKETS,
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
    const queuedRuns = options.queuedRuns;
    this.queuedRuns = new Gauge({
      name: "playbook_queued_runs",
      help: "Runs waiting Pending for a slot of their namespace's running-Playbooks cap (PlaybookPolicy spec.maximums.runningPlaybooks)",
      labelNames: ["namespace"],
      registers,
      collect() {
        if (!queuedRuns) return;
        this.reset();
        for (const [namespace, count] of queuedRuns()) this.set({ namespace }, count);
      },
    });
    this.agentDelivery = new Gauge({
      name: "playbook_agent_delivery",
      help:
        "How the agent reaches the task containers of the pods created now: 1 for image-volume (the runner image " +
        "mounted as an image volume) or post-start (placed by the runner container's postStart hook), 0 for the other",
      labelNames: ["delivery"],
      registers,
    });
    this.userNamespaces = new Gauge({
      name: "playbook_user_namespaces",
      help:
        "Whether the pods created now get their own user namespace (hostUsers: false): 1 for on, 0 for off " +
        "(--user-namespaces, under auto what the API server and every node's runtime support)",
      registers,
    });
    this.policyRefusals = new Counter({
      name: "playbook_policy_refusals_total",
      help: "Runs refused (InvalidSpec, no pod) by their namespace's PlaybookPolicy or the controller's allowances, by refused field",
      labelNames: ["namespace", "field"],
      registers,
    });
    this.untrustedReports = new Counter({
      name: "playbook_untrusted_reports_total",
      help:
        "Finished runs whose runner's termination message was not trusted as its report, by why: killed (the runner " +
        "container was killed by a signal or OOMKilled), exit-code (an exit code the report's reason does not explain), " +
        "never-started (a task it says ran is in a container that never started), times (times outside the runner " +
        "container's life); the run ends RunnerLost (PodDeadlineExceeded or Cancelled where those decide)",
      labelNames: ["namespace", "why"],
      registers,
    });
    this.policyStatusWrites = new Counter({
      name: "playbook_policy_status_writes_total",
      help: "Writes of PlaybookPolicy status",
      registers,
    });
    this.statusWrites = new Counter({
      name: "playbook_status_writes_total",
      help: "Writes of Playbook status",
      registers,
    });
    this.runsPreempted = new Counter({
      name: "playbook_runs_preempted_total",
      help:
        "Times Kueue stopped a run's pod (its TerminationTarget condition), by the Workload's Evicted reason " +
        "(Preempted, PodsReadyTimeout, ClusterQueueStopped...): a run re-created under onPreemption Requeue counts each time",
      labelNames: ["namespace", "reason"],
      registers,
    });
    this.queueWait = new Histogram({
      name: "playbook_queue_wait_seconds",
      help: "Time a run's pod waited for Kueue's admission, from its creation, observed at the admission, by LocalQueue",
      labelNames: ["namespace", "queue"],
      buckets: QUEUE_WAIT_BUCKETS,
      registers,
    });
    const queuedBudgets = options.queuedBudgets;
    this.logArchiveFailures = new Counter({
      name: "playbook_log_archive_failures_total",
      help:
        "Attempts whose log archive is not whole (store_unreachable, cap_reached, node_lost, incomplete), and runs " +
        "whose archived objects could not be deleted within the bound (delete)",
      labelNames: ["reason"],
      registers,
    });
    for (const reason of LOG_ARCHIVE_FAILURES) this.logArchiveFailures.inc({ reason }, 0);
    this.queueBudgetUsed = new Gauge({
      name: "playbook_queue_budget_used_ratio",
      help:
        "For the run whose pod Kueue has held longest relative to its queueTimeout, in each namespace and LocalQueue: " +
        "time queued so far over queueTimeout (1 = it ends QueueTimeout); runs without a queueTimeout are left out",
      labelNames: ["namespace", "queue"],
      registers,
      collect() {
        if (!queuedBudgets) return;
        this.reset();
        const most = new Map<string, { namespace: string; queue: string; ratio: number }>();
        for (const run of queuedBudgets()) {
          const key = `${run.namespace}/${run.queue}`;
          if ((most.get(key)?.ratio ?? -1) < run.ratio) most.set(key, run);
        }
        for (const { namespace, queue, ratio } of most.values()) this.set({ namespace, queue }, ratio);
      },
    });
  }

  private perRun(labels: RunLabels): { namespace: string; playbook?: string } {
    const { namespace } = labels;
    return this.playbookLabel ? { namespace, playbook: labels.playbook ?? "" } : { namespace };
  }

  /** A task's series labels: the run's, and its name when the task label is on ("" for the run's own ratio). */
  private perTask(per: { namespace: string; playbook?: string }, task: string | undefined) {
    return this.taskLabel ? { ...per, task: task ?? "" } : per;
  }

  /** A task duration's series labels: by namespace only, unless the task label is on. */
  private perTaskDuration(per: { namespace: string; playbook?: string }, task: string | undefined) {
    return this.taskLabel ? this.perTask(per, task) : { namespace: per.namespace };
  }

  /**
   * Creates a started run's counter series at 0, one per reason and limit: a counter series that
   * first appears with value 1 is invisible to increase() and rate(), which would miss the first
   * timeout of every namespace. Its successful durations' histogram series too.
   */
  recordStarted(labels: RunLabels): void {
    const per = this.perRun(labels);
    for (const reason of TERMINAL_REASONS) this.runsTotal.inc({ ...per, reason }, 0);
    for (const limit of LIMIT_REASONS) this.limitFiredTotal.inc({ ...per, limit }, 0);
    for (const field of POLICY_FIELDS) this.policyRefusals.inc({ namespace: labels.namespace, field }, 0);
    for (const why of DISTRUST_WHYS) this.untrustedReports.inc({ namespace: labels.namespace, why }, 0);
    this.runsPreempted.inc({ namespace: labels.namespace, reason: "Preempted" }, 0);
    // A histogram series that first appears holding its first observation hides it from
    // increase(), as a counter's does: the series `playbook advise --prometheus` reads, the ones a
    // successful run fills, start at 0 (the run's, and each task's when the task label is on).
    this.zeroOnce(this.runDuration, "run", { ...per, reason: "Succeeded" });
    const tasks = this.taskLabel ? (labels.tasks ?? []) : [undefined];
    for (const task of tasks)
      this.zeroOnce(this.taskDuration, "task", { ...this.perTaskDuration(per, task), phase: "Succeeded" });
  }

  /** Creates a histogram series at 0 unless it exists: prom-client's zero() would reset its counts. */
  private zeroOnce<T extends string>(
    histogram: Histogram<T>,
    which: string,
    labels: Partial<Record<T, string>>,
  ): void {
    const key = `${which}${JSON.stringify(Object.entries(labels).sort())}`;
    if (this.zeroed.has(key)) return;
    this.zeroed.add(key);
    histogram.zero(labels);
  }

  /** Kueue stopped a run's pod: counted once, with the status write that decided what follows. */
  recordPreempted(namespace: string, reason: string): void {
    this.runsPreempted.inc({ namespace, reason });
  }

  /** Kueue admitted a run's pod after `waitSeconds` in `queue`. */
  recordAdmitted(namespace: string, queue: string, waitSeconds: number): void {
    this.queueWait.observe({ namespace, queue }, waitSeconds);
  }

  /** Counts a run once, when its terminal status was written. */
  recordFinished(run: FinishedRun, labels: RunLabels): void {
    const { namespace } = labels;
    const per = this.perRun(labels);
    this.runsTotal.inc({ ...per, reason: run.reason });
    if (run.limit) this.limitFiredTotal.inc({ ...per, limit: run.limit });
    this.runDuration.observe({ ...per, reason: run.reason }, run.durationSeconds);
    for (const task of run.tasks)
      this.taskDuration.observe(
        { ...this.perTaskDuration(per, task.name), phase: task.phase },
        task.durationSeconds,
      );
    for (const usage of run.usage)
      this.limitUsage.observe({ ...this.perTask(per, usage.task), limit: usage.limit }, usage.ratio);
    for (const task of run.taskResources) {
      if (task.cpuSeconds !== undefined) this.taskCpu.observe(per, task.cpuSeconds);
      if (task.peakMemoryBytes !== undefined) this.taskPeakMemory.observe(per, task.peakMemoryBytes);
    }
    for (const field of run.policyRefusals ?? []) this.policyRefusals.inc({ namespace, field });
    if (run.distrust) this.untrustedReports.inc({ namespace, why: run.distrust });
  }
}
