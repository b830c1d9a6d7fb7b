// A running run's status.tasks and status.currentTask from the runner's progress records, as the
// reconcile decision takes them: what the recorded pod's newest record says, never the outcome,
// and nothing from a record that is not the recorded pod's, names another task count or goes back.
import { describe, expect, it } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { encodeProgressRecord, type ProgressTask } from "../../src/api/progress-record.js";
import type { ProgressLook } from "../../src/controller/playbook/live-progress.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { at, playbook, pod, recordedStatus, report, SETTINGS, T0 } from "./controller-fixtures.js";

/** The run's start, which the pod runner was handed and counts its offsets from. */
const RUNNER_START = T0;

/** A record line as the pod runner prints it, its offsets after RUNNER_START. */
const line = (seq: number, tasks: ProgressTask[]) =>
  encodeProgressRecord({ v: 1, start: RUNNER_START.toISOString(), seq, tasks });

const look = (lines: string[], extra: Partial<ProgressLook> = {}): ProgressLook => ({
  podUID: "pod-uid-1",
  lines,
  ...extra,
});

/** The status of the run once its pod runs (what the controller wrote when it saw it Running). */
function runningStatus(): PlaybookStatus {
  const first = decide({ playbook: playbook(), pods: [], now: T0, settings: SETTINGS });
  const running = decide({
    playbook: playbook({}, recordedStatus(first)),
    pods: [pod(1)],
    now: at(3),
    settings: SETTINGS,
  });
  if (!running.status) throw new Error("no Running status");
  return running.status;
}

/** The pass that looked at the runner's log at `seconds`, on a run whose status is `status`. */
function passWith(status: PlaybookStatus, progress: ProgressLook, seconds = 20) {
  return decide({
    playbook: playbook({}, status),
    pods: [pod(1)],
    now: at(seconds),
    settings: SETTINGS,
    progress,
  });
}

const BUILD_RUNNING = line(1, [{ p: "Running", s: 3000 }, { p: "Pending" }]);
const TEST_RUNNING = line(2, [
  { p: "Succeeded", t: [3000, 11000], cpu: 2500, mem: 307200 },
  { p: "Running", s: 11000 },
]);

describe("live progress in a running run's status", () => {
  it("shows the running task as index/count name and each task's phase and start", () => {
    const decision = passWith(runningStatus(), look([BUILD_RUNNING]));
    expect(decision.status?.currentTask).toBe("1/2 build");
    expect(decision.status?.tasks).toEqual([
      {
        name: "build",
        phase: "Running",
        attempts: 1,
        image: "runner:test",
        startTime: at(3).toISOString(),
        verified: false,
      },
      { name: "test", phase: "Pending", attempts: 0, image: "runner:test", verified: false },
    ]);
    expect(decision.progressTaken).toEqual({ podUID: "pod-uid-1", seq: 1, writtenAfter: at(3).getTime() });
  });

  it("shows a task waiting to retry as Running, its message saying when the next attempt starts", () => {
    const waiting = line(2, [{ p: "Running", s: 3000, m: "retrying in 4s (attempt 2/3)" }, { p: "Pending" }]);
    const decision = passWith(runningStatus(), look([BUILD_RUNNING, waiting]));
    expect(decision.status?.currentTask).toBe("1/2 build");
    expect(decision.status?.tasks?.[0]).toEqual({
      name: "build",
      phase: "Running",
      attempts: 1,
      image: "runner:test",
      startTime: at(3).toISOString(),
      message: "retrying in 4s (attempt 2/3)",
      verified: false,
    });
  });

  it("fills in a finished task as the report would: exit code, times, CPU seconds and peak memory", () => {
    const decision = passWith(runningStatus(), look([BUILD_RUNNING, TEST_RUNNING]));
    expect(decision.status?.currentTask).toBe("2/2 test");
    expect(decision.status?.tasks?.[0]).toEqual({
      name: "build",
      phase: "Succeeded",
      attempts: 1,
      image: "runner:test",
      exitCode: 0,
      signal: null,
      startTime: at(3).toISOString(),
      completionTime: at(11).toISOString(),
      cpuSeconds: 2.5,
      peakMemoryBytes: 307200 * 1024,
      verified: false,
    });
    expect(decision.status?.tasks?.[1]).toMatchObject({ phase: "Running", startTime: at(11).toISOString() });
  });

  it("gives a finished task's limit, its value and source, and how its group ended", () => {
    const timedOut = line(3, [
      { p: "TimedOut", l: "TaskTimeout", e: "Killed", t: [0, 600000] },
      { p: "Pending" },
    ]);
    const task = passWith(runningStatus(), look([timedOut]), 700).status?.tasks?.[0];
    expect(task).toMatchObject({
      phase: "TimedOut",
      limit: "TaskTimeout",
      limitValue: "10m",
      limitSource: "task",
      ending: "Killed",
    });
  });

  it("never takes the run's phase, conditions or outcome from a record", () => {
    const before = runningStatus();
    const failed = line(4, [{ p: "Failed", x: 2, t: [0, 100] }, { p: "Skipped" }]);
    const decision = passWith(before, look([failed]));
    expect(decision.finished).toBeUndefined();
    expect(decision.status?.phase).toBe("Running");
    expect(decision.status?.conditions).toEqual(before.conditions);
    expect(decision.status?.endingTask).toBeUndefined();
    expect(decision.status?.currentTask).toBeUndefined();
    expect(decision.status?.tasks?.[0]).toMatchObject({ phase: "Failed", exitCode: 2 });
  });

  it("writes nothing when the newest record says what status says already", () => {
    const shown = passWith(runningStatus(), look([BUILD_RUNNING])).status;
    if (!shown) throw new Error("no status");
    expect(passWith(shown, look([BUILD_RUNNING]), 30).status).toBeNull();
  });

  it("takes the highest seq of the tail, whatever the order of its lines", () => {
    const decision = passWith(runningStatus(), look([TEST_RUNNING, BUILD_RUNNING]));
    expect(decision.status?.currentTask).toBe("2/2 test");
  });

  it("takes the runner's newest record, not a forged one beside it that claims what cannot be (issue 41)", () => {
    // The tail the attack of issue 41 left: a record with seq 2^53-1 at an entry's start, every task
    // Succeeded with dates of the task's choosing. The runner's own record beside it is taken.
    const forged = line(2 ** 53 - 1, [
      { p: "Succeeded", t: [0, 1000] },
      { p: "Succeeded", t: [1000, 2000] },
    ]);
    const decision = passWith(runningStatus(), look([BUILD_RUNNING, forged]));
    expect(decision.status?.currentTask).toBe("1/2 build");
    expect(decision.status?.tasks?.map((task) => task.phase)).toEqual(["Running", "Pending"]);
    expect(decision.progressTaken?.seq).toBe(1);
    // Alone, it is no record: the status keeps what it said.
    expect(passWith(runningStatus(), look([forged])).status).toBeNull();
    // Nor is one that dates its tasks in the future, or counts from another start.
    const future = line(2, [
      { p: "Succeeded", t: [3000, 3_600_000] },
      { p: "Running", s: 3_600_000 },
    ]);
    expect(passWith(runningStatus(), look([future])).status).toBeNull();
    const otherStart = encodeProgressRecord({
      v: 1,
      start: at(-3600).toISOString(),
      seq: 2,
      tasks: [
        { p: "Succeeded", t: [3_603_000, 3_611_000] },
        { p: "Running", s: 3_611_000 },
      ],
    });
    expect(passWith(runningStatus(), look([otherStart])).status).toBeNull();
  });

  it.each([
    ["a record of a pod that is not the recorded one", look([BUILD_RUNNING], { podUID: "pod-uid-9" })],
    ["a record of another number of tasks than the plan", look([line(1, [{ p: "Running", s: 0 }])])],
    [
      "a record older than one taken before",
      look([BUILD_RUNNING], { last: { seq: 2, writtenAfter: at(11).getTime() } }),
    ],
    [
      "a record where a task ran after one that has not",
      look([line(1, [{ p: "Pending" }, { p: "Running", s: 0 }])]),
    ],
    ["a line that is not a record", look(["playbook.dev/progress {not json"])],
  ])("ignores %s", (_what, progress) => {
    const before = runningStatus();
    const decision = passWith(before, progress);
    expect(decision.status).toBeNull();
    expect(decision.progressTaken).toBeUndefined();
  });

  it("ignores a record that takes a task back from what status shows", () => {
    const shown = passWith(runningStatus(), look([TEST_RUNNING])).status;
    if (!shown) throw new Error("no status");
    // A later seq that says build is running again: not what the runner writes.
    const back = line(5, [{ p: "Running", s: 3000 }, { p: "Pending" }]);
    expect(passWith(shown, look([back]), 30).status).toBeNull();
    const otherEnd = line(6, [
      { p: "Failed", x: 1, t: [3000, 11000] },
      { p: "Running", s: 11000 },
    ]);
    expect(passWith(shown, look([otherEnd]), 30).status).toBeNull();
  });

  it("clears the current task when the report ends the run, its tasks the report's", () => {
    const shown = passWith(runningStatus(), look([TEST_RUNNING])).status;
    if (!shown) throw new Error("no status");
    const ended = pod(1, {
      phase: "Succeeded",
      terminated: {
        exitCode: 0,
        message: report({
          phase: "Succeeded",
          reason: "Succeeded",
          tasks: [
            { name: "build", phase: "Succeeded", attempts: 1, exitCode: 0, signal: null, cpuSeconds: 3 },
            { name: "test", phase: "Succeeded", attempts: 1, exitCode: 0, signal: null },
          ],
        }),
      },
    });
    const decision = decide({
      playbook: playbook({}, shown),
      pods: [ended],
      now: at(70),
      settings: SETTINGS,
    });
    expect(decision.status?.phase).toBe("Succeeded");
    expect(decision.status?.currentTask).toBeUndefined();
    expect(decision.status?.tasks?.map((t) => [t.phase, t.cpuSeconds])).toEqual([
      ["Succeeded", 3],
      ["Succeeded", undefined],
    ]);
  });

  it("shows no task as a record said when the run ends without a report: started ones Cancelled, unverified", () => {
    const shown = passWith(runningStatus(), look([TEST_RUNNING])).status;
    if (!shown) throw new Error("no status");
    const crashed = pod(1, { phase: "Failed", terminated: { exitCode: 137, reason: "OOMKilled" } });
    const decision = decide({
      playbook: playbook({}, shown),
      pods: [crashed],
      now: at(600),
      settings: SETTINGS,
    });
    expect(decision.status?.conditions?.find((c) => c.type === "Succeeded")?.reason).toBe("RunnerLost");
    expect(decision.status?.currentTask).toBeUndefined();
    expect(decision.status?.tasks?.map((t) => [t.phase, t.verified])).toEqual([
      ["Cancelled", false],
      ["Cancelled", false],
    ]);
    // Figures from a record are not the report's: the histograms count none.
    expect(decision.finished?.taskResources).toEqual([]);
  });

  it("starts a re-created pod's progress afresh: the lost pod's tasks are not its", () => {
    const shown = passWith(runningStatus(), look([TEST_RUNNING])).status;
    if (!shown) throw new Error("no status");
    const evicted = pod(1, { phase: "Failed", reason: "Evicted", message: "The node was low on memory." });
    const decision = decide({
      playbook: playbook({}, shown),
      pods: [evicted],
      now: at(40),
      settings: SETTINGS,
    });
    expect(decision.actions.map((a) => a.type)).toContain("createPod");
    expect(decision.status?.tasks).toBeUndefined();
    expect(decision.status?.currentTask).toBeUndefined();
  });
});
