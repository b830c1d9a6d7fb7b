// advise reads a retried task by its last attempt: the attempts and waits before it are no part of
// the duration its timeout has to allow.
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { expandReport } from "../../src/api/report-expand.js";
import { runFromStatus } from "../../src/cli/advise/history.js";

const start = Date.parse("2026-01-01T00:00:00Z");
const at = (s: number) => new Date(start + s * 1000).toISOString();

function statusOf(task: Record<string, unknown>): PlaybookStatus {
  return {
    startTime: at(0),
    completionTime: at(61),
    conditions: [
      {
        type: "Succeeded",
        status: "True",
        reason: "Succeeded",
        message: "",
        lastTransitionTime: at(61),
      },
    ],
    tasks: [{ name: "fetch", phase: "Succeeded", exitCode: 0, signal: null, ...task }],
  } as PlaybookStatus;
}

describe("advise on a retried task", () => {
  it("takes its last attempt's duration and start, not its first attempt's start to its end", () => {
    // Three attempts: two failed ones and waits of 20s and 25s, then 10s of work.
    const run = runFromStatus(
      "r1",
      statusOf({ attempts: 3, startTime: at(0), lastAttemptStartTime: at(50), completionTime: at(60) }),
      "r1",
    );
    expect(run?.tasks[0]).toMatchObject({ outcome: "succeeded", durationMs: 10_000, startMs: 50_000 });
  });

  it("counts no duration for a retried task whose status does not say when its last attempt started", () => {
    const run = runFromStatus(
      "r2",
      statusOf({ attempts: 3, startTime: at(0), completionTime: at(60) }),
      "r2",
    );
    expect(run?.tasks[0]?.durationMs).toBeUndefined();
  });

  it("keeps a task of one attempt as it was", () => {
    const run = runFromStatus(
      "r3",
      statusOf({ attempts: 1, startTime: at(0), completionTime: at(60) }),
      "r3",
    );
    expect(run?.tasks[0]).toMatchObject({ durationMs: 60_000, startMs: 0 });
  });

  it("gets the last attempt's start from the runner's report", () => {
    const limits = resolveLimits(
      PlaybookSpecSchema.parse({ tasks: [{ name: "fetch", run: "true", retries: 2 }] }),
      LOCAL_DEFAULTS,
    );
    const status = expandReport(
      {
        v: 1,
        phase: "Succeeded",
        reason: "Succeeded",
        start: at(0),
        end: at(61),
        tasks: [{ p: "Succeeded", a: 3, t: [0, 60_000], la: 50_000 }],
      },
      limits,
    ).tasks[0];
    expect(status).toMatchObject({ startTime: at(0), lastAttemptStartTime: at(50), completionTime: at(60) });
  });
});
