// The whole tree ends with the task: grandchildren that hold the pipes, and processes that left
// the group, are killed; what a finished task left running is ended when the run ends.
import { describe, expect, it } from "vitest";
import { checkNothingLeftBehind, runSpec } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();

describe("process trees", () => {
  it("kills a grandchild that holds the output pipe and returns at the deadline", async () => {
    const run = await runSpec(
      {
        killGrace: "0s",
        tasks: [
          {
            name: "holder",
            timeout: "1s",
            run: "(trap '' TERM HUP; sleep 60; echo late) & echo started; sleep 60",
          },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", limit: "TaskTimeout", ending: "Killed" });
    expect(run.elapsedMs).toBeLessThan(3000);
    expect(run.output).toContain("[holder] started");
    expect(run.output).not.toContain("late");
  });

  it("finds and kills a process that escaped into its own session (setsid)", async () => {
    const run = await runSpec(
      {
        killGrace: "200ms",
        tasks: [
          {
            name: "escaper",
            timeout: "800ms",
            run: "setsid sh -c 'trap \"\" TERM; sleep 60' & setsid -f sleep 61; sleep 60",
          },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", ending: "Killed" });
    // afterEach proves neither setsid'd sleep survived.
  });

  it("does not wait for a background process a finished task left behind, and ends it with the run", async () => {
    const run = await runSpec(
      {
        killGrace: "1s",
        tasks: [
          { name: "service", run: "sleep 60 & echo service up" },
          { name: "uses-it", run: "echo using the service" },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks.map((t) => t.phase)).toEqual(["Succeeded", "Succeeded"]);
    expect(run.output).toContain("[uses-it] using the service");
    expect(run.elapsedMs).toBeLessThan(5000);
    expect(run.events.some((e) => e.type === "leftovers-killed")).toBe(true);
  });

  it("kills leftovers at once on a second Ctrl-C instead of waiting out their grace", async () => {
    const hurry = new AbortController();
    setTimeout(() => hurry.abort(), 1000);
    const run = await runSpec(
      {
        killGrace: "30s",
        tasks: [{ name: "service", run: "(trap '' TERM; while :; do sleep 0.1; done) & echo up" }],
      },
      { marker: currentMarker(), hurrySignal: hurry.signal },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Succeeded" });
    expect(run.elapsedMs).toBeLessThan(10_000);
  });
});
