import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import type { PlaybookSpec } from "../../src/api/playbook.js";
import { decodeReport, encodeReport, REPORT_MAX_BYTES, type RunOutcome } from "../../src/api/report.js";
import { expandReport } from "../../src/api/report-expand.js";

function outcomeOf(count: number, detail: string): { outcome: RunOutcome; spec: PlaybookSpec } {
  const start = new Date("2026-11-29T10:00:00.000Z");
  const spec = {
    tasks: Array.from({ length: count }, (_, i) => ({
      name: `task-${i}`,
      run: "true",
      retries: 0,
      env: [],
      timeout: "10m",
    })),
    cancel: false,
    backoffLimit: 2,
  } as PlaybookSpec;
  const tasks = spec.tasks.map((task, i) => ({
    name: task.name,
    phase: i === count - 1 ? ("TimedOut" as const) : ("Succeeded" as const),
    attempts: 1,
    exitCode: i === count - 1 ? null : 0,
    signal: i === count - 1 ? "SIGKILL" : null,
    limit: i === count - 1 ? ("TaskTimeout" as const) : undefined,
    ending: i === count - 1 ? ("Killed" as const) : undefined,
    startTime: new Date(start.getTime() + i * 61_000),
    completionTime: new Date(start.getTime() + i * 61_000 + 60_000),
    longestSilenceMs: 1234.6,
    detail,
  }));
  const outcome: RunOutcome = {
    phase: "Failed",
    reason: "TaskTimeout",
    startTime: start,
    completionTime: new Date(start.getTime() + count * 61_000),
    tasks,
  };
  return { outcome, spec };
}

describe("the runner's report", () => {
  it("stays within 4096 bytes for 200 tasks with long messages, keeping every task's phase", () => {
    const { outcome, spec } = outcomeOf(200, "x".repeat(3000));
    const text = encodeReport(outcome);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(REPORT_MAX_BYTES);
    const report = decodeReport(text, 200);
    expect(report.tasks).toHaveLength(200);
    expect(report.tasks.filter((t) => t.p === "Succeeded")).toHaveLength(199);
    const status = expandReport(report, resolveLimits(spec, LOCAL_DEFAULTS));
    expect(status.tasks[199]).toMatchObject({
      name: "task-199",
      phase: "TimedOut",
      limit: "TaskTimeout",
      limitValue: "10m",
      limitSource: "task",
      ending: "Killed",
      // The longest silence goes with the times: kept for the task that decided the run only.
      longestSilence: "1.235s",
    });
    expect(status.tasks[0]?.longestSilence).toBeUndefined();
    expect(status.message).toContain("task task-199 exceeded its 10m timeout (spec.tasks[199].timeout)");
  });

  it("says, at the end of the run's message, what the final kill could not confirm ended, and keeps it through compaction", () => {
    const { outcome, spec } = outcomeOf(200, "x".repeat(3000));
    const last = outcome.tasks[199];
    if (last) {
      delete last.ending;
      last.detail = "its process group could not be killed: the agent of container task-1 was stopped";
    }
    outcome.left = "processes of the run may still be running: the agents' fence did not confirm their end";
    const text = encodeReport(outcome);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(REPORT_MAX_BYTES);
    const status = expandReport(decodeReport(text, 200), resolveLimits(spec, LOCAL_DEFAULTS));
    expect(status.tasks[199]?.ending).toBeUndefined();
    expect(status.left).toBe(outcome.left);
    expect(status.message).toMatch(
      /^task task-199 exceeded its 10m timeout \(spec.tasks\[199\].timeout\).*; processes of the run may still be running: the agents' fence did not confirm their end$/,
    );
  });

  it("keeps everything when it fits", () => {
    const { outcome, spec } = outcomeOf(3, "disk full");
    const report = decodeReport(encodeReport(outcome), 3);
    expect(report.c).toBeUndefined();
    const status = expandReport(report, resolveLimits(spec, LOCAL_DEFAULTS));
    expect(status.tasks[0]).toMatchObject({
      startTime: "2026-11-29T10:00:00.000Z",
      completionTime: "2026-11-29T10:01:00.000Z",
      longestSilence: "1.235s",
    });
    expect(report.tasks[0]?.ls).toBe(1235);
    expect(status.tasks[2]?.message).toBe(
      "exceeded its 10m timeout (spec.tasks[2].timeout); process group killed after 10s grace: disk full",
    );
  });

  it.each([
    ["text that is not JSON", "OOMKilled", "not JSON"],
    ["JSON of another shape", '{"v":1}', "does not match the report schema"],
    [
      "a report for another plan",
      '{"v":1,"phase":"Succeeded","reason":"Succeeded","start":"2026-11-29T10:00:00Z","end":"2026-11-29T10:00:01Z","tasks":[]}',
      "lists 0 tasks, the plan has 1",
    ],
  ])("refuses %s", (_name, text, message) => {
    expect(() => decodeReport(text, 1)).toThrow(message);
  });

  it("still reports 200 tasks that each needed a retry, keeping the deciding task's attempts", () => {
    const { outcome, spec } = outcomeOf(200, "");
    for (const task of outcome.tasks) task.attempts = 3;
    const text = encodeReport(outcome);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(REPORT_MAX_BYTES);
    const status = expandReport(decodeReport(text, 200), resolveLimits(spec, LOCAL_DEFAULTS));
    expect(status.tasks.filter((t) => t.phase === "Succeeded")).toHaveLength(199);
    expect(status.tasks[199]).toMatchObject({ phase: "TimedOut", attempts: 3 });
  });

  it("says a task that could not start could not start, not that it exited", () => {
    const { outcome, spec } = outcomeOf(1, "");
    outcome.reason = "TaskFailed";
    outcome.tasks[0] = {
      name: "task-0",
      phase: "Failed",
      attempts: 1,
      exitCode: null,
      signal: null,
      detail: "could not start: workingDir /nonexistent does not exist",
    };
    const status = expandReport(decodeReport(encodeReport(outcome), 1), resolveLimits(spec, LOCAL_DEFAULTS));
    expect(status.message).toBe("task task-0 could not start: workingDir /nonexistent does not exist");
  });
});

describe("a kill a second interrupt hurried", () => {
  const spec = {
    tasks: [{ name: "wait", run: "true", retries: 0, env: [] }],
    cancel: false,
    backoffLimit: 2,
  };
  const limits = resolveLimits(spec as PlaybookSpec, LOCAL_DEFAULTS);
  const start = new Date("2026-11-29T10:00:00.000Z");
  const cancelled = (graceCutAfterMs?: number): RunOutcome => ({
    phase: "Cancelled",
    reason: "Cancelled",
    startTime: start,
    completionTime: new Date(start.getTime() + 5000),
    tasks: [
      {
        name: "wait",
        phase: "Cancelled",
        attempts: 1,
        exitCode: null,
        signal: "SIGKILL",
        ending: "Killed",
        ...(graceCutAfterMs !== undefined ? { graceCutAfterMs } : {}),
        startTime: start,
        completionTime: new Date(start.getTime() + 5000),
      },
    ],
  });
  const messageOf = (outcome: RunOutcome) =>
    expandReport(decodeReport(encodeReport(outcome), 1), limits).tasks[0]?.message;

  it.each([
    [0, "killed at once: another interrupt cut its 10s grace short"],
    [2345, "killed after 2.3s: another interrupt cut its 10s grace short"],
  ])("after %i ms of the grace says so, not the whole grace", (ms, says) => {
    expect(messageOf(cancelled(ms))).toContain(says);
    expect(messageOf(cancelled(ms))).not.toContain("after 10s grace");
  });

  it("still says the whole grace when it was waited out", () => {
    expect(messageOf(cancelled())).toContain("process group killed after 10s grace");
  });
});
