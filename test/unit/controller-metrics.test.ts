// The controller's /metrics text as Prometheus scrapes it, fed by real reconcile decisions.
import { describe, expect, it } from "vitest";
import type { TaskOutcome } from "../../src/api/report.js";
import { ControllerMetrics } from "../../src/controller/metrics.js";
import { decide, type FinishedRun } from "../../src/controller/playbook/reconcile.js";
import {
  at,
  exitCodeOf,
  playbook,
  pod,
  recordedStatus,
  report,
  SETTINGS,
  T0,
} from "./controller-fixtures.js";
import { labelNamesOf, sample } from "./metrics-text.js";

const task = (name: string, outcome: Partial<TaskOutcome>): TaskOutcome => ({
  name,
  phase: "Succeeded",
  attempts: 1,
  exitCode: 0,
  signal: null,
  ...outcome,
});

/** What the controller records when the runner reports this run, its pod started at T0. */
function finishedRun(outcome: Parameters<typeof report>[0], endSeconds: number, labels = {}): FinishedRun {
  const first = decide({ playbook: playbook(), pods: [], now: T0, settings: SETTINGS });
  const stored = playbook({}, recordedStatus(first));
  stored.metadata.labels = labels;
  const phase = outcome.reason === "Succeeded" ? "Succeeded" : "Failed";
  const ended = pod(1, {
    phase,
    terminated: {
      exitCode: exitCodeOf(outcome),
      message: report({ completionTime: at(endSeconds), ...outcome }),
    },
  });
  const decision = decide({ playbook: stored, pods: [ended], now: at(endSeconds + 1), settings: SETTINGS });
  if (!decision.finished) throw new Error("the run did not finish");
  return decision.finished;
}

/** build took 9m30s of its 10m timeout; the run 20m of its 30m ceiling. */
const nearMiss = () =>
  finishedRun(
    {
      phase: "Succeeded",
      reason: "Succeeded",
      tasks: [
        task("build", { startTime: T0, completionTime: at(570) }),
        task("test", { startTime: at(570), completionTime: at(1200) }),
      ],
    },
    1200,
  );

const timedOut = () =>
  finishedRun(
    {
      phase: "Failed",
      reason: "TaskTimeout",
      tasks: [
        task("build", {
          phase: "TimedOut",
          limit: "TaskTimeout",
          ending: "Killed",
          exitCode: null,
          signal: "SIGKILL",
          startTime: T0,
          completionTime: at(610),
        }),
        task("test", { phase: "Skipped", attempts: 0, exitCode: null }),
      ],
    },
    610,
  );

describe("playbook_task_limit_usage_ratio", () => {
  it("puts a task that used 95% of its timeout above the 0.9 bucket and below 0.95", async () => {
    const metrics = new ControllerMetrics({ defaults: false });
    metrics.recordFinished(nearMiss(), { namespace: "ops" });
    const text = await metrics.registry.metrics();
    const bucket = (le: string) =>
      sample(text, "playbook_task_limit_usage_ratio_bucket", { le, namespace: "ops", limit: "TaskTimeout" });
    expect(bucket("0.9")).toBe(0);
    expect(bucket("0.95")).toBe(1);
    expect(bucket("+Inf")).toBe(1);
    expect(
      sample(text, "playbook_task_limit_usage_ratio_count", { namespace: "ops", limit: "TaskTimeout" }),
    ).toBe(1);
    expect(
      sample(text, "playbook_task_limit_usage_ratio_sum", { namespace: "ops", limit: "TaskTimeout" }),
    ).toBe(0.95);
    // The run: 20m of 30m.
    const run = (le: string) =>
      sample(text, "playbook_task_limit_usage_ratio_bucket", { le, namespace: "ops", limit: "RunCeiling" });
    expect(run("0.5")).toBe(0);
    expect(run("0.75")).toBe(1);
  });

  it("leaves out a task whose timeout fired, which playbook_limit_fired_total counts", async () => {
    const metrics = new ControllerMetrics({ defaults: false });
    metrics.recordFinished(timedOut(), { namespace: "ops" });
    const text = await metrics.registry.metrics();
    expect(sample(text, "playbook_limit_fired_total", { namespace: "ops", limit: "TaskTimeout" })).toBe(1);
    expect(
      sample(text, "playbook_task_limit_usage_ratio_count", { namespace: "ops", limit: "TaskTimeout" }),
    ).toBeUndefined();
    expect(
      sample(text, "playbook_task_limit_usage_ratio_count", { namespace: "ops", limit: "RunCeiling" }),
    ).toBe(1);
  });

  it("says in its help that fired limits are left out", async () => {
    const text = await new ControllerMetrics({ defaults: false }).registry.metrics();
    const help = text.split("\n").find((line) => line.startsWith("# HELP playbook_task_limit_usage_ratio "));
    expect(help).toContain("a limit that fired is left out");
  });
});

describe("the per-Playbook label", () => {
  const perPlaybookMetrics = [
    "playbook_runs_total",
    "playbook_limit_fired_total",
    "playbook_run_duration_seconds",
    "playbook_task_limit_usage_ratio",
  ];

  it("does not exist unless configured", async () => {
    const metrics = new ControllerMetrics({ defaults: false });
    metrics.recordFinished(timedOut(), { namespace: "ops", playbook: "billing" });
    const text = await metrics.registry.metrics();
    for (const name of perPlaybookMetrics) expect(labelNamesOf(text, name), name).not.toContain("playbook");
    expect(sample(text, "playbook_runs_total", { namespace: "ops", reason: "TaskTimeout" })).toBe(1);
  });

  it("carries the Playbook's label value on the run, limit and usage metrics when configured", async () => {
    const metrics = new ControllerMetrics({ defaults: false, playbookLabel: true });
    metrics.recordFinished(timedOut(), { namespace: "ops", playbook: "billing" });
    metrics.recordFinished(nearMiss(), { namespace: "ops" });
    const text = await metrics.registry.metrics();
    for (const name of perPlaybookMetrics) expect(labelNamesOf(text, name), name).toContain("playbook");
    expect(
      sample(text, "playbook_runs_total", { namespace: "ops", reason: "TaskTimeout", playbook: "billing" }),
    ).toBe(1);
    expect(
      sample(text, "playbook_limit_fired_total", {
        namespace: "ops",
        limit: "TaskTimeout",
        playbook: "billing",
      }),
    ).toBe(1);
    expect(
      sample(text, "playbook_run_duration_seconds_count", {
        namespace: "ops",
        reason: "TaskTimeout",
        playbook: "billing",
      }),
    ).toBe(1);
    // A Playbook without the label: an empty value.
    expect(sample(text, "playbook_runs_total", { namespace: "ops", reason: "Succeeded", playbook: "" })).toBe(
      1,
    );
    expect(
      sample(text, "playbook_task_limit_usage_ratio_count", {
        namespace: "ops",
        limit: "TaskTimeout",
        playbook: "",
      }),
    ).toBe(1);
    // Task durations stay by namespace and phase only.
    expect(labelNamesOf(text, "playbook_task_duration_seconds")).not.toContain("playbook");
  });
});

describe("the per-task label", () => {
  it("does not exist unless configured", async () => {
    const metrics = new ControllerMetrics({ defaults: false, playbookLabel: true });
    metrics.recordStarted({ namespace: "ops", playbook: "billing", tasks: ["build"] });
    metrics.recordFinished(nearMiss(), { namespace: "ops", playbook: "billing" });
    const text = await metrics.registry.metrics();
    for (const name of ["playbook_task_duration_seconds", "playbook_task_limit_usage_ratio"])
      expect(labelNamesOf(text, name), name).not.toContain("task");
  });

  it("names each task on its durations (with the Playbook's label) and its usage ratio when configured", async () => {
    const metrics = new ControllerMetrics({ defaults: false, playbookLabel: true, taskLabel: true });
    const run = nearMiss();
    const labels = { namespace: "ops", playbook: "billing" };
    metrics.recordFinished(run, labels);
    const text = await metrics.registry.metrics();
    const name = run.tasks[0]?.name as string;
    expect(name).toBeTruthy();
    expect(
      sample(text, "playbook_task_duration_seconds_count", { ...labels, task: name, phase: "Succeeded" }),
    ).toBe(1);
    expect(
      sample(text, "playbook_task_limit_usage_ratio_count", { ...labels, task: name, limit: "TaskTimeout" }),
    ).toBe(1);
    // The run's own ratio names no task.
    expect(
      sample(text, "playbook_task_limit_usage_ratio_count", { ...labels, task: "", limit: "RunCeiling" }),
    ).toBe(1);
  });

  it("creates each task's and the run's successful duration series at 0 when the run starts", async () => {
    const metrics = new ControllerMetrics({ defaults: false, playbookLabel: true, taskLabel: true });
    const labels = { namespace: "ops", playbook: "billing" };
    metrics.recordStarted({ ...labels, tasks: ["build", "test"] });
    const text = await metrics.registry.metrics();
    for (const task of ["build", "test"])
      expect(
        sample(text, "playbook_task_duration_seconds_bucket", {
          ...labels,
          task,
          phase: "Succeeded",
          le: "+Inf",
        }),
        task,
      ).toBe(0);
    expect(
      sample(text, "playbook_run_duration_seconds_bucket", { ...labels, reason: "Succeeded", le: "+Inf" }),
    ).toBe(0);
  });

  it("keeps the earlier runs' counts when the next run of the same Playbook starts", async () => {
    const metrics = new ControllerMetrics({ defaults: false, playbookLabel: true, taskLabel: true });
    const labels = { namespace: "ops", playbook: "billing" };
    const run = nearMiss();
    const tasks = run.tasks.map((task) => task.name);
    metrics.recordStarted({ ...labels, tasks });
    metrics.recordFinished(run, labels);
    metrics.recordStarted({ ...labels, tasks });
    const text = await metrics.registry.metrics();
    expect(sample(text, "playbook_run_duration_seconds_count", { ...labels, reason: "Succeeded" })).toBe(1);
    expect(
      sample(text, "playbook_task_duration_seconds_count", {
        ...labels,
        task: tasks[0] as string,
        phase: "Succeeded",
      }),
    ).toBe(1);
  });
});

describe("a started run's counters", () => {
  it("exist at 0 for every reason and limit before the run ends, so its first timeout counts in increase()", async () => {
    const metrics = new ControllerMetrics({ defaults: false, playbookLabel: true });
    metrics.recordStarted({ namespace: "ops", playbook: "billing" });
    const started = await metrics.registry.metrics();
    const labels = { namespace: "ops", playbook: "billing" };
    expect(sample(started, "playbook_runs_total", { ...labels, reason: "TaskTimeout" })).toBe(0);
    expect(sample(started, "playbook_runs_total", { ...labels, reason: "Succeeded" })).toBe(0);
    expect(sample(started, "playbook_limit_fired_total", { ...labels, limit: "PodDeadlineExceeded" })).toBe(
      0,
    );
    metrics.recordFinished(timedOut(), labels);
    metrics.recordStarted(labels);
    const ended = await metrics.registry.metrics();
    expect(sample(ended, "playbook_runs_total", { ...labels, reason: "TaskTimeout" })).toBe(1);
    expect(sample(ended, "playbook_limit_fired_total", { ...labels, limit: "TaskTimeout" })).toBe(1);
  });
});

describe("playbook_ready", () => {
  it("follows what /readyz answers", async () => {
    let synced = false;
    const metrics = new ControllerMetrics({ defaults: false, ready: () => synced });
    expect(sample(await metrics.registry.metrics(), "playbook_ready", {})).toBe(0);
    synced = true;
    expect(sample(await metrics.registry.metrics(), "playbook_ready", {})).toBe(1);
  });
});

describe("playbook_task_cpu_seconds and playbook_task_peak_memory_bytes", () => {
  const measured = () =>
    finishedRun(
      {
        phase: "Succeeded",
        reason: "Succeeded",
        tasks: [
          task("build", {
            startTime: T0,
            completionTime: at(30),
            cpuSeconds: 2.5,
            peakMemoryBytes: 300 << 20,
          }),
          task("test", {
            startTime: at(30),
            completionTime: at(40),
            cpuSeconds: 0.2,
            peakMemoryBytes: 10 << 20,
          }),
        ],
      },
      40,
    );

  it("observe each finished task's figures from the runner's report once, by namespace", async () => {
    const metrics = new ControllerMetrics({ defaults: false });
    metrics.recordFinished(measured(), { namespace: "ops", playbook: "billing" });
    const text = await metrics.registry.metrics();
    expect(sample(text, "playbook_task_cpu_seconds_count", { namespace: "ops" })).toBe(2);
    expect(sample(text, "playbook_task_cpu_seconds_sum", { namespace: "ops" })).toBeCloseTo(2.7);
    expect(sample(text, "playbook_task_cpu_seconds_bucket", { le: "1", namespace: "ops" })).toBe(1);
    expect(sample(text, "playbook_task_cpu_seconds_bucket", { le: "5", namespace: "ops" })).toBe(2);
    expect(sample(text, "playbook_task_peak_memory_bytes_count", { namespace: "ops" })).toBe(2);
    expect(sample(text, "playbook_task_peak_memory_bytes_sum", { namespace: "ops" })).toBe(310 << 20);
    // 10 MiB under 16 MiB, 300 MiB under 1 GiB and above 256 MiB.
    expect(
      sample(text, "playbook_task_peak_memory_bytes_bucket", { le: String(16 << 20), namespace: "ops" }),
    ).toBe(1);
    expect(
      sample(text, "playbook_task_peak_memory_bytes_bucket", { le: String(256 << 20), namespace: "ops" }),
    ).toBe(1);
    expect(
      sample(text, "playbook_task_peak_memory_bytes_bucket", { le: String(1024 << 20), namespace: "ops" }),
    ).toBe(2);
    for (const name of ["playbook_task_cpu_seconds", "playbook_task_peak_memory_bytes"])
      expect(labelNamesOf(text, name), name).not.toContain("playbook");
  });

  it("carry the per-Playbook label when configured", async () => {
    const metrics = new ControllerMetrics({ defaults: false, playbookLabel: true });
    metrics.recordFinished(measured(), { namespace: "ops", playbook: "billing" });
    const text = await metrics.registry.metrics();
    expect(sample(text, "playbook_task_cpu_seconds_count", { namespace: "ops", playbook: "billing" })).toBe(
      2,
    );
    expect(
      sample(text, "playbook_task_peak_memory_bytes_count", { namespace: "ops", playbook: "billing" }),
    ).toBe(2);
  });

  it("observe nothing for tasks the runner did not measure", async () => {
    const metrics = new ControllerMetrics({ defaults: false });
    metrics.recordFinished(nearMiss(), { namespace: "ops" });
    const text = await metrics.registry.metrics();
    expect(sample(text, "playbook_task_cpu_seconds_count", { namespace: "ops" }) ?? 0).toBe(0);
    expect(sample(text, "playbook_task_peak_memory_bytes_count", { namespace: "ops" }) ?? 0).toBe(0);
  });
});
