// A retry waits retryDelay × retryBackoff^(n-1) (at most retryMaxDelay, jittered) after the failed
// attempt; the run's ceiling and a cancel cut the wait, the task's timeout does not count it.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import type { RunEvent } from "../../src/pod-runner/run.js";
import { checkNothingLeftBehind, runSpec } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();

/** A script that fails its first `failures` attempts, counting them in a file of `dir`. */
function failsFirst(dir: string, failures: number): string {
  const count = join(dir, "count");
  return `echo x >> ${count}; [ "$(wc -l < ${count})" -gt ${failures} ]`;
}

describe("waits between a task's attempts", () => {
  it("spaces the attempts by retryDelay, then by retryDelay × retryBackoff", async () => {
    const dir = mkdtempSync(join(tmpdir(), "retry-waits-"));
    const startedAt: number[] = [];
    const run = await runSpec(
      {
        tasks: [{ name: "flaky", retries: 3, retryDelay: "200ms", retryBackoff: 2, run: failsFirst(dir, 2) }],
      },
      {
        marker: currentMarker(),
        // the top of the jitter's range: each wait is its whole cap
        random: () => 1,
        onEvent: (event) => {
          if (event.type === "task-started") startedAt.push(performance.now());
        },
      },
    );
    expect(run.outcome.reason).toBe("Succeeded");
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Succeeded", attempts: 3 });
    expect(readFileSync(join(dir, "count"), "utf8").trim().split("\n")).toHaveLength(3);
    // The report's first and last attempt starts lie at least both waits apart.
    const { startTime, lastAttemptStartTime } = run.outcome.tasks[0] ?? {};
    expect((lastAttemptStartTime?.getTime() ?? 0) - (startTime?.getTime() ?? 0)).toBeGreaterThanOrEqual(600);
    const retrying = run.events.filter((e) => e.type === "task-retrying");
    expect(retrying.map((e) => [e.attempt, e.attempts, e.delayMs])).toEqual([
      [2, 4, 200],
      [3, 4, 400],
    ]);
    // Lower bounds only: each attempt starts at least its wait after the one before started.
    expect(startedAt).toHaveLength(3);
    expect((startedAt[1] as number) - (startedAt[0] as number)).toBeGreaterThanOrEqual(200);
    expect((startedAt[2] as number) - (startedAt[1] as number)).toBeGreaterThanOrEqual(400);
  });

  it("ends the run RunCeiling, naming the wait, when the wait would outlast the ceiling", async () => {
    const dir = mkdtempSync(join(tmpdir(), "retry-ceiling-"));
    const run = await runSpec(
      {
        ceiling: "5s",
        tasks: [{ name: "fetch", retries: 2, retryDelay: "30s", run: failsFirst(dir, 5) }],
      },
      { marker: currentMarker(), random: () => 1 },
    );
    expect(run.outcome.reason).toBe("RunCeiling");
    const task = run.outcome.tasks[0];
    expect(task).toMatchObject({ phase: "TimedOut", limit: "RunCeiling", attempts: 1, exitCode: 1 });
    expect(task?.detail).toMatch(
      /^its wait of 30s to retry \(attempt 2\/3\) would have outlasted it \(\S+ was left\)$/,
    );
    expect(run.events.some((e) => e.type === "task-retrying")).toBe(false);
    expect(readFileSync(join(dir, "count"), "utf8").trim().split("\n")).toHaveLength(1);
  });

  it("ends the wait at once on a cancel", async () => {
    const dir = mkdtempSync(join(tmpdir(), "retry-cancel-"));
    const cancel = new AbortController();
    const run = await runSpec(
      {
        retryMaxDelay: "1h",
        tasks: [{ name: "fetch", retries: 2, retryDelay: "10m", run: failsFirst(dir, 5) }],
      },
      {
        marker: currentMarker(),
        random: () => 1,
        cancelSignal: cancel.signal,
        onEvent: (event: RunEvent) => {
          // Once the wait has begun: a cancel that came before it would keep it from starting.
          if (event.type === "task-retrying") setTimeout(() => cancel.abort(), 100);
        },
      },
    );
    expect(run.outcome.reason).toBe("Cancelled");
    const task = run.outcome.tasks[0];
    expect(task).toMatchObject({ phase: "Cancelled", attempts: 1 });
    expect(task?.detail).toBe("it was waiting 10m to retry (attempt 2/3)");
    expect(readFileSync(join(dir, "count"), "utf8").trim().split("\n")).toHaveLength(1);
  });

  it("does not count the wait against the task's timeout, which bounds each attempt", async () => {
    const dir = mkdtempSync(join(tmpdir(), "retry-timeout-"));
    const run = await runSpec(
      {
        tasks: [
          {
            name: "flaky",
            retries: 2,
            timeout: "2s",
            retryDelay: "1500ms",
            retryBackoff: 1,
            run: failsFirst(dir, 2),
          },
        ],
      },
      { marker: currentMarker(), random: () => 1 },
    );
    // Two waits of 1.5s: 3s in all, longer than the 2s timeout, and no attempt passed it.
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Succeeded", attempts: 3 });
    expect(run.outcome.reason).toBe("Succeeded");
  });
});
