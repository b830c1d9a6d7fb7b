// A /proc read that never answers (the target is stuck in uninterruptible sleep on a hung mount,
// holding its memory map lock) must not freeze the runner: its deadline still fires on time and
// the task is still ended by its process group. The hung read is made real with a fake /proc
// whose one process has a named pipe for an environment: opening it blocks until someone opens
// the other end, as a read of a stuck process's environ blocks.
import { spawn, spawnSync } from "node:child_process";
import { closeSync, constants, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import { ProcessTable } from "../../src/pod-runner/process-table.js";
import { checkNothingLeftBehind, runSpec } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();

/** Above the largest pid_max Linux allows (2^22): never a real process that a signal could reach. */
const STUCK_PID = 4_194_305;

/** Opens the pipe's writing end and closes it at once, so a blocked reader gets an empty read. */
function answerPendingReads(fifo: string): void {
  for (let i = 0; i < 100; i++) {
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      return; // ENXIO: no reader left
    }
  }
}

describe("reads of /proc that hang", () => {
  it("do not hold up a task's deadline: the timeout fires on time and the task is ended", async () => {
    const root = mkdtempSync(join(tmpdir(), "fake-proc-"));
    mkdirSync(join(root, String(STUCK_PID)));
    // A process that started after every task (a start time far in the future), outside their
    // groups: the runner must read its environment to know whether it is one of the run's.
    const fields = [
      "D",
      "1",
      String(STUCK_PID),
      String(STUCK_PID),
      ...Array(15).fill("0"),
      "99999999999",
      "0",
    ];
    writeFileSync(join(root, String(STUCK_PID), "stat"), `${STUCK_PID} (stuck) ${fields.join(" ")}\n`);
    const fifo = join(root, String(STUCK_PID), "environ");
    expect(spawnSync("mkfifo", [fifo]).status).toBe(0);
    // Answers a blocked read every 5 s, so that code which reads on the main thread stalls for
    // that long each time instead of forever (and this test fails rather than hangs).
    const answerer = spawn("sh", ["-c", `while :; do sleep 5; : > '${fifo}'; done`], {
      detached: true,
      stdio: "ignore",
    });
    const table = new ProcessTable({ root, readBoundMs: 100 });
    const at: Record<string, number> = {};
    try {
      const run = await runSpec(
        { killGrace: "2s", tasks: [{ name: "slow", timeout: "1s", run: "echo started; sleep 60" }] },
        {
          marker: currentMarker(),
          processTable: table,
          onEvent: (event) => {
            at[event.type] ??= performance.now();
          },
        },
      );
      // The stop is told at the deadline and the bound of one read, not when the read answers.
      const stopAfter = (at["task-stopping"] as number) - (at["task-started"] as number);
      expect(stopAfter).toBeGreaterThanOrEqual(990);
      expect(stopAfter).toBeLessThan(1800);
      expect(run.elapsedMs).toBeLessThan(4000);
      // SIGTERM reached the group in its grace: nothing needed a SIGKILL.
      expect(run.outcome.tasks[0]).toMatchObject({
        phase: "TimedOut",
        limit: "TaskTimeout",
        ending: "Exited",
      });
      expect(run.output).toContain("[slow] started");
      // The read was made and is still waiting: the process is unknown, and was left alone.
      expect(table.unanswered()).toEqual([STUCK_PID]);
    } finally {
      if (answerer.pid !== undefined) process.kill(-answerer.pid, "SIGKILL");
      answerPendingReads(fifo);
      rmSync(root, { recursive: true, force: true });
    }
  });
});
