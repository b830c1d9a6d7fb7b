// A run that live progress showed, ended each way a run ends: the runner's progress (its log) is
// never an outcome. Without a trusted report (RunnerLost, PodLost, PodDeadlineExceeded) no task
// shows what a progress record said (no Succeeded, no exit code, no times or figures), and the
// metrics count none of it; a trusted report replaces the progress, and its rows carry no marker.
import { describe, expect, it } from "vitest";
import type { PlaybookStatus, TaskStatus } from "../../src/api/playbook.js";
import { encodeProgressRecord, type ProgressTask } from "../../src/api/progress-record.js";
import type { Decision } from "../../src/controller/decision.js";
import { ControllerMetrics } from "../../src/controller/metrics.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import {
  at,
  exitCodeOf,
  playbook,
  pod,
  recordedStatus,
  report,
  SETTINGS,
  SPEC,
  T0,
} from "./controller-fixtures.js";
import { sample } from "./metrics-text.js";

// backoffLimit 0: a lost pod ends the run PodLost at once.
const PLAN = { ...SPEC, backoffLimit: 0 };
const ENDED_AT = 600;

const line = (seq: number, tasks: ProgressTask[]) =>
  encodeProgressRecord({ v: 1, start: T0.toISOString(), seq, tasks });

/** build Succeeded with exit 0 (8 s of its 10m timeout, 2.5 s CPU, 300 MiB), test running. */
const BUILD_SUCCEEDED = line(2, [
  { p: "Succeeded", t: [1000, 9000], cpu: 2500, mem: 307200 },
  { p: "Running", s: 9000 },
]);
/** build Failed with exit 2, test Skipped: what a run that failed would say. */
const BUILD_FAILED = line(3, [{ p: "Failed", x: 2, t: [1000, 9000] }, { p: "Skipped" }]);
/** build running, test not started. */
const BUILD_RUNNING = line(1, [{ p: "Running", s: 1000 }, { p: "Pending" }]);

/** The status the run shows after the controller took `record` from its runner's log. */
function shownAfter(record: string): PlaybookStatus {
  const first = decide({ playbook: playbook(PLAN), pods: [], now: T0, settings: SETTINGS });
  const running = decide({
    playbook: playbook(PLAN, recordedStatus(first)),
    pods: [pod(1, { spec: PLAN })],
    now: at(3),
    settings: SETTINGS,
  });
  const shown = decide({
    playbook: playbook(PLAN, running.status as PlaybookStatus),
    pods: [pod(1, { spec: PLAN })],
    now: at(20),
    settings: SETTINGS,
    progress: { podUID: "pod-uid-1", lines: [record] },
  });
  if (!shown.status?.tasks) throw new Error("the record was not taken");
  return shown.status;
}

/** The pass that sees the pod ended as `ended` says, ENDED_AT seconds into the run. */
function endedWith(shown: PlaybookStatus, ended: Parameters<typeof pod>[1]): Decision {
  return decide({
    playbook: playbook(PLAN, shown),
    pods: [pod(1, { spec: PLAN, ...ended })],
    now: at(ENDED_AT),
    settings: SETTINGS,
  });
}

const reasonOf = (decision: Decision) =>
  decision.status?.conditions?.find((c) => c.type === "Succeeded")?.reason;

async function metricsOf(decision: Decision): Promise<string> {
  if (!decision.finished) throw new Error("the run did not finish");
  const metrics = new ControllerMetrics({ defaults: false });
  metrics.recordFinished(decision.finished, { namespace: "ops" });
  return metrics.registry.metrics();
}

const taskDurations = (text: string) =>
  ["Succeeded", "Failed", "TimedOut", "Cancelled", "Skipped", "Running"].reduce(
    (sum, phase) =>
      sum + (sample(text, "playbook_task_duration_seconds_count", { namespace: "ops", phase }) ?? 0),
    0,
  );

const UNREPORTED_FIELDS = [
  "exitCode",
  "signal",
  "startTime",
  "completionTime",
  "cpuSeconds",
  "peakMemoryBytes",
  "limit",
  "ending",
] as const;

describe.each([
  {
    ending: "RunnerLost: the runner OOMKilled after the record",
    pod: { phase: "Failed", terminated: { exitCode: 137, reason: "OOMKilled" } },
    reason: "RunnerLost",
  },
  {
    ending: "PodLost: the pod evicted after the record, backoffLimit 0",
    pod: { phase: "Failed", reason: "Evicted", message: "The node was low on memory." },
    reason: "PodLost",
  },
  {
    ending: "PodDeadlineExceeded: the kubelet's deadline after the record, no report",
    pod: {
      phase: "Failed",
      reason: "DeadlineExceeded",
      message: "Pod was active on the node longer than the specified deadline",
      terminated: { exitCode: 137, reason: "Error" },
    },
    reason: "PodDeadlineExceeded",
  },
])("$ending", ({ pod: ended, reason }) => {
  const shown = shownAfter(BUILD_SUCCEEDED);
  const decision = endedWith(shown, ended);

  it("showed the record's rows marked verified false while the run went on", () => {
    expect(shown.tasks?.map((t) => [t.name, t.phase, t.exitCode, t.verified])).toEqual([
      ["build", "Succeeded", 0, false],
      ["test", "Running", undefined, false],
    ]);
  });

  it(`ends ${reason} with no task shown as the record said: Cancelled, marked, without its exit, times or figures`, () => {
    expect(reasonOf(decision)).toBe(reason);
    const tasks = decision.status?.tasks as TaskStatus[];
    expect(tasks).toEqual([
      {
        name: "build",
        phase: "Cancelled",
        attempts: 1,
        image: "runner:test",
        verified: false,
        message:
          "not reported: the run ended without the runner's report, and its progress, which showed this task ended, is not an outcome",
      },
      {
        name: "test",
        phase: "Cancelled",
        attempts: 1,
        image: "runner:test",
        verified: false,
        message:
          "not reported: the run ended without the runner's report, and its progress, which showed this task running, is not an outcome",
      },
    ]);
    // What `kubectl get pb -o yaml` prints: no task Succeeded, no exit code of one.
    for (const task of tasks) for (const field of UNREPORTED_FIELDS) expect(task).not.toHaveProperty(field);
    expect(JSON.stringify(tasks)).not.toContain("Succeeded");
    expect(decision.status?.endingTask).toBeUndefined();
    expect(decision.status?.currentTask).toBeUndefined();
  });

  it("counts no task duration, limit usage or figure from the record; the run's duration is the controller's", async () => {
    const text = await metricsOf(decision);
    expect(taskDurations(text)).toBe(0);
    expect(
      sample(text, "playbook_task_limit_usage_ratio_count", { namespace: "ops", limit: "TaskTimeout" }),
    ).toBeUndefined();
    expect(sample(text, "playbook_task_cpu_seconds_count", { namespace: "ops" }) ?? 0).toBe(0);
    expect(sample(text, "playbook_task_peak_memory_bytes_count", { namespace: "ops" }) ?? 0).toBe(0);
    // From the run's recorded start to the controller's end of it, not the record's times.
    expect(sample(text, "playbook_run_duration_seconds_sum", { namespace: "ops", reason })).toBe(ENDED_AT);
  });
});

describe("a trusted report after the record", () => {
  const shown = shownAfter(BUILD_SUCCEEDED);
  const outcome = {
    phase: "Failed" as const,
    reason: "TaskFailed" as const,
    completionTime: at(60),
    tasks: [
      {
        name: "build",
        phase: "Succeeded" as const,
        attempts: 1,
        exitCode: 0,
        signal: null,
        startTime: at(3),
        completionTime: at(33),
        cpuSeconds: 3,
      },
      {
        name: "test",
        phase: "Failed" as const,
        attempts: 1,
        exitCode: 1,
        signal: null,
        startTime: at(33),
        completionTime: at(60),
      },
    ],
  };
  const decision = endedWith(shown, {
    phase: "Failed",
    terminated: {
      exitCode: exitCodeOf(outcome),
      message: report(outcome),
      startedAt: at(1).toISOString(),
      finishedAt: at(61).toISOString(),
    },
  });

  it("wins: the report's rows, none of them marked", () => {
    expect(reasonOf(decision)).toBe("TaskFailed");
    expect(decision.status?.tasks?.map((t) => [t.name, t.phase, t.exitCode, t.completionTime])).toEqual([
      ["build", "Succeeded", 0, at(33).toISOString()],
      ["test", "Failed", 1, at(60).toISOString()],
    ]);
    for (const task of decision.status?.tasks ?? []) expect(task).not.toHaveProperty("verified");
    expect(decision.status?.endingTask).toBe("test");
  });

  it("counts the report's task durations, usage and figures", async () => {
    const text = await metricsOf(decision);
    expect(sample(text, "playbook_task_duration_seconds_sum", { namespace: "ops", phase: "Succeeded" })).toBe(
      30,
    );
    expect(sample(text, "playbook_task_duration_seconds_sum", { namespace: "ops", phase: "Failed" })).toBe(
      27,
    );
    expect(
      sample(text, "playbook_task_limit_usage_ratio_sum", { namespace: "ops", limit: "TaskTimeout" }),
    ).toBe(0.05);
    expect(sample(text, "playbook_task_cpu_seconds_sum", { namespace: "ops" })).toBe(3);
  });
});

describe("a run ended without a report after other records", () => {
  const oom = { phase: "Failed", terminated: { exitCode: 137, reason: "OOMKilled" } };

  it("names no ending task from a record that said a task failed", () => {
    const decision = endedWith(shownAfter(BUILD_FAILED), oom);
    expect(reasonOf(decision)).toBe("RunnerLost");
    expect(decision.status?.endingTask).toBeUndefined();
    expect(decision.status?.tasks?.map((t) => [t.phase, t.exitCode, t.verified])).toEqual([
      ["Cancelled", undefined, false],
      ["Cancelled", undefined, undefined],
    ]);
  });

  it("shows a task the record showed waiting as stopped, one it showed running as Cancelled, unverified", () => {
    const decision = endedWith(shownAfter(BUILD_RUNNING), oom);
    expect(decision.status?.tasks?.map((t) => [t.name, t.phase, t.message])).toEqual([
      [
        "build",
        "Cancelled",
        "not reported: the run ended without the runner's report, and its progress, which showed this task running, is not an outcome",
      ],
      ["test", "Cancelled", "the run was stopped"],
    ]);
    expect(decision.status?.tasks?.[0]).not.toHaveProperty("startTime");
  });
});
