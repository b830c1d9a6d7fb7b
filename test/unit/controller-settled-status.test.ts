// A run the controller ends itself (no report: the kubelet's deadline, a lost runner) after live
// progress showed its tasks: the tasks that had not finished say the run was stopped, and no
// task is named as the one that ended the run, since records are progress, not the outcome.
import { describe, expect, it } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { settledStatus } from "../../src/controller/status.js";

const live: PlaybookStatus = {
  phase: "Running",
  startTime: "2026-12-03T10:00:00.000Z",
  podName: "nightly-1",
  currentTask: "2/3 held",
  tasks: [
    { name: "fetch", phase: "Succeeded", attempts: 1, exitCode: 0 },
    { name: "held", phase: "Running", attempts: 1, startTime: "2026-12-03T10:00:05.000Z" },
    { name: "ship", phase: "Pending", attempts: 0 },
  ],
};

describe("settledStatus after live progress", () => {
  const settled = settledStatus(
    { previous: live, generation: 1, now: new Date("2026-12-03T10:01:00.000Z"), limits: null },
    { reason: "PodDeadlineExceeded", message: "the pod's deadline passed" },
  );

  it("marks the tasks that had not finished as stopped and keeps the finished one", () => {
    expect(settled.tasks?.map((t) => [t.name, t.phase, t.message])).toEqual([
      ["fetch", "Succeeded", undefined],
      ["held", "Cancelled", "the run was stopped"],
      ["ship", "Cancelled", "the run was stopped"],
    ]);
  });

  it("names no ending task and clears the current one", () => {
    expect(settled.endingTask).toBeUndefined();
    expect(settled.currentTask).toBeUndefined();
    expect(settled.phase).toBe("Failed");
  });
});
