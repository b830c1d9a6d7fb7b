// Each limit fires for the reason it names, and the outcome is decided by who fired it.
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { checkNothingLeftBehind, runSpec } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();

describe("task limits", () => {
  it("settles a task that traps SIGTERM and exits 0 after its deadline as TimedOut", async () => {
    const run = await runSpec(
      {
        killGrace: "2s",
        tasks: [
          { name: "stubborn", timeout: "500ms", run: "trap 'echo caught; exit 0' TERM; sleep 30 & wait" },
        ],
      },
      { marker: currentMarker() },
    );
    const task = run.outcome.tasks[0];
    expect(task).toMatchObject({ phase: "TimedOut", limit: "TaskTimeout", ending: "Exited", exitCode: 0 });
    expect(run.outcome.reason).toBe("TaskTimeout");
    expect(run.output).toContain("[stubborn] caught");
  });

  it("ends a silent task on its stall limit and a chatty runaway on its timeout", async () => {
    const silent = await runSpec(
      {
        killGrace: "0s",
        tasks: [{ name: "silent", timeout: "20s", stall: "600ms", run: "echo start; sleep 30" }],
      },
      { marker: currentMarker() },
    );
    expect(silent.outcome.tasks[0]).toMatchObject({
      phase: "TimedOut",
      limit: "StallLimit",
      ending: "Killed",
    });
    expect(silent.outcome.reason).toBe("StallLimit");
    expect(silent.elapsedMs).toBeLessThan(10_000);

    const chatty = await runSpec(
      {
        killGrace: "0s",
        tasks: [
          {
            name: "chatty",
            timeout: "1500ms",
            stall: "600ms",
            run: "while :; do echo tick; sleep 0.05; done",
          },
        ],
      },
      { marker: currentMarker() },
    );
    expect(chatty.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", limit: "TaskTimeout" });
    expect(chatty.output.split("\n").filter((line) => line === "[chatty] tick").length).toBeGreaterThan(5);
  });

  it("stops the run at its ceiling and skips the remaining tasks", async () => {
    const run = await runSpec(
      {
        ceiling: "1s",
        killGrace: "0s",
        tasks: [
          { name: "quick", run: "true" },
          { name: "endless", run: "sleep 30" },
          { name: "later", run: "echo never" },
          { name: "last", run: "echo never" },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.reason).toBe("RunCeiling");
    expect(run.outcome.tasks.map((t) => t.phase)).toEqual(["Succeeded", "TimedOut", "Skipped", "Skipped"]);
    expect(run.outcome.tasks[1]?.limit).toBe("RunCeiling");
    expect(run.output).not.toContain("never");
  });

  it("counts the ceiling from the run's start, not from this runner's start", async () => {
    // As when the controller re-creates a lost pod: 19.5s of a 20s ceiling are already spent. The
    // run ends half a second in; counted from this runner's start it would take 20s, a margin no
    // load on the machine closes.
    const run = await runSpec(
      { ceiling: "20s", killGrace: "0s", tasks: [{ name: "endless", run: "sleep 60" }] },
      { marker: currentMarker(), runStart: new Date(Date.now() - 19_500) },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", limit: "RunCeiling" });
    expect(run.elapsedMs).toBeLessThan(15_000);
  });

  it("does not count the time a task is blocked on a slow reader of its output as a stall", async () => {
    // Like `playbook run | less`: the task prints all the time, the reader takes 700ms a chunk.
    const slowReader = new Writable({
      highWaterMark: 1024,
      write(_chunk, _encoding, callback) {
        setTimeout(callback, 700);
      },
    });
    const run = await runSpec(
      {
        stall: "400ms",
        killGrace: "0s",
        tasks: [{ name: "chatty", run: "head -c 300000 /dev/zero | tr '\\0' y" }],
      },
      { marker: currentMarker(), sink: slowReader, prefixOutput: false },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Succeeded" });
  });

  it("keeps limits longer than 24.8 days (the timer maximum) from firing at once", async () => {
    const run = await runSpec(
      { ceiling: "720h", stall: "1000h", tasks: [{ name: "short", run: "sleep 0.3; echo ok" }] },
      {
        marker: currentMarker(),
        defaults: { ceilingMs: 3_600_000, maxCeilingMs: 1000 * 3_600_000, stallMs: 0, killGraceMs: 0 },
      },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Succeeded" });
  });

  it("names the task timeout when it is earlier than the ceiling, and the ceiling otherwise", async () => {
    const run = await runSpec(
      { ceiling: "800ms", killGrace: "0s", tasks: [{ name: "t", timeout: "700ms", run: "sleep 30" }] },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]?.limit).toBe("TaskTimeout");
  });

  it("retries after a non-zero exit and never after a timeout", async () => {
    const dir = mkdtempSync(join(tmpdir(), "retries-"));
    const counter = join(dir, "count");
    const failing = await runSpec(
      {
        tasks: [
          { name: "flaky", retries: 2, run: `echo x >> ${counter}; echo "attempt failed" >&2; exit 1` },
        ],
      },
      { marker: currentMarker() },
    );
    expect(failing.outcome.tasks[0]).toMatchObject({
      phase: "Failed",
      attempts: 3,
      exitCode: 1,
      detail: 'stderr: "attempt failed"',
    });
    expect(readFileSync(counter, "utf8").trim().split("\n")).toHaveLength(3);
    expect(failing.outcome.reason).toBe("TaskFailed");

    const second = join(dir, "second");
    const recovers = await runSpec(
      {
        tasks: [
          {
            name: "recovers",
            retries: 3,
            run: `if [ -e ${second} ]; then exit 0; fi; touch ${second}; exit 1`,
          },
        ],
      },
      { marker: currentMarker() },
    );
    expect(recovers.outcome.tasks[0]).toMatchObject({ phase: "Succeeded", attempts: 2 });
    expect(recovers.outcome.reason).toBe("Succeeded");

    const timed = join(dir, "timed");
    const timedOut = await runSpec(
      {
        killGrace: "0s",
        tasks: [{ name: "slow", retries: 3, timeout: "300ms", run: `echo x >> ${timed}; sleep 30` }],
      },
      { marker: currentMarker() },
    );
    expect(timedOut.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", attempts: 1 });
    expect(readFileSync(timed, "utf8").trim().split("\n")).toHaveLength(1);
  });

  it("fails a task whose working directory does not exist, naming it", async () => {
    const run = await runSpec(
      { tasks: [{ name: "lost", workingDir: "/nonexistent/dir", run: "true" }] },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Failed" });
    expect(run.outcome.tasks[0]?.detail).toContain("/nonexistent/dir");
  });
});

describe("ending within the pod's grace", () => {
  it("keeps a cancelled run, leftovers included, within one killGrace", async () => {
    // Pod deletion gives the runner terminationGracePeriodSeconds (killGrace plus a margin): the
    // leftover of an earlier task shares the live task's grace, it gets no second one after it
    // (that would end 1.5s + 2s after the cancellation).
    const cancel = new AbortController();
    let cancelledAt = 0;
    const run = await runSpec(
      {
        killGrace: "2s",
        tasks: [
          { name: "service", run: "(trap '' TERM; exec sleep 60) & echo started" },
          // Short sleeps, not `wait`: a signal that lands just before dash blocks in `wait` can
          // leave its trap pending, and the marker lets the cancellation land that early.
          { name: "work", run: "trap 'sleep 1.5; exit 0' TERM; echo working; while :; do sleep 0.05; done" },
        ],
      },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        onOutput: (soFar) => {
          if (cancelledAt === 0 && soFar.includes("[work] working")) {
            cancelledAt = performance.now();
            cancel.abort();
          }
        },
      },
    );
    const tookMs = performance.now() - cancelledAt;
    expect(run.outcome.tasks.map((t) => t.phase)).toEqual(["Succeeded", "Cancelled"]);
    expect(run.outcome.tasks[1]?.ending).toBe("Exited");
    expect(tookMs).toBeGreaterThanOrEqual(1500);
    // One grace ends by 2s (the leftover gets what is left of it); a second one would end at 3.5s.
    // The margin between is for a loaded machine's spawn and kill path.
    expect(tookMs).toBeLessThan(3400);
  });
});

describe("SIGTERM at a stop", () => {
  it("reaches each process of the task once", async () => {
    // Many programs read a second SIGTERM as "stop now, skip the clean-up"; a group signalled by
    // id must not have its members signalled again one by one. Stopped once it says it is ready:
    // a deadline could pass while a loaded machine still starts Node, before its handler exists.
    const counter =
      "let n = 0; process.on('SIGTERM', () => { if (n++ === 0) setTimeout(() => { console.log('terms ' + n); process.exit(0); }, 300); }); setInterval(() => {}, 1000); console.log('ready')";
    const cancel = new AbortController();
    const run = await runSpec(
      {
        killGrace: "5s",
        tasks: [{ name: "count", run: `exec ${JSON.stringify(process.execPath)} -e "${counter}"` }],
      },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        onOutput: (soFar) => soFar.includes("[count] ready") && cancel.abort(),
      },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Cancelled", ending: "Exited" });
    expect(run.output).toContain("[count] terms 1\n");
  });
});

describe("the cancel file", () => {
  it("lets a task that honours it stop by itself within the grace (Exited)", async () => {
    const run = await runSpec(
      {
        killGrace: "10s",
        tasks: [
          {
            name: "polite",
            timeout: "500ms",
            run: `trap '' TERM; while [ ! -e "$PLAYBOOK_CANCEL_FILE" ]; do sleep 0.05; done; echo "saw $(cat "$PLAYBOOK_CANCEL_FILE")"`,
          },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", limit: "TaskTimeout", ending: "Exited" });
    expect(run.output).toMatch(/\[polite\] saw TaskTimeout/);
    expect(run.elapsedMs).toBeLessThan(5000);
  });

  it("kills a task that ignores both the file and SIGTERM when the grace ends (Killed)", async () => {
    const run = await runSpec(
      {
        killGrace: "700ms",
        tasks: [{ name: "deaf", timeout: "300ms", run: "trap '' TERM; while :; do sleep 0.05; done" }],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", ending: "Killed", signal: "SIGKILL" });
    expect(run.elapsedMs).toBeGreaterThanOrEqual(950);
  });

  it("still writes the cancel file after the task removed its directory (a /tmp cleanup)", async () => {
    // Stopped once the directory is gone: a deadline could pass before `rm` has run.
    const cancel = new AbortController();
    const run = await runSpec(
      {
        killGrace: "10s",
        tasks: [
          {
            name: "tidy",
            run: `rm -rf "$(dirname "$PLAYBOOK_CANCEL_FILE")"; trap '' TERM; echo removed; while [ ! -e "$PLAYBOOK_CANCEL_FILE" ]; do sleep 0.05; done; echo saw it`,
          },
        ],
      },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        onOutput: (soFar) => soFar.includes("[tidy] removed") && cancel.abort(),
      },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Cancelled", ending: "Exited" });
    expect(run.output).toContain("[tidy] saw it");
  });

  it("does not spin while the leader has exited and a member sits out the grace", async () => {
    const cpuBefore = process.cpuUsage();
    const run = await runSpec(
      {
        killGrace: "2s",
        tasks: [
          { name: "stub", timeout: "300ms", run: "trap 'exit 0' TERM; (trap '' TERM; sleep 60) & wait" },
        ],
      },
      { marker: currentMarker() },
    );
    const cpu = process.cpuUsage(cpuBefore);
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", ending: "Killed" });
    expect((cpu.user + cpu.system) / 1000).toBeLessThan(run.elapsedMs / 2);
  });

  it("does not write through a symlink planted at the cancel-file path", async () => {
    const dir = mkdtempSync(join(tmpdir(), "symlink-"));
    const target = join(dir, "precious");
    // Stopped once the link is there: a deadline could pass before `ln` has run.
    const cancel = new AbortController();
    const run = await runSpec(
      {
        killGrace: "300ms",
        tasks: [
          {
            name: "planter",
            run: `ln -s ${target} "$PLAYBOOK_CANCEL_FILE"; echo planted; sleep 30`,
          },
        ],
      },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        onOutput: (soFar) => soFar.includes("[planter] planted") && cancel.abort(),
      },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Cancelled" });
    expect(existsSync(target)).toBe(false);
    const stopping = run.events.find((e) => e.type === "task-stopping");
    expect(stopping?.type === "task-stopping" && stopping.stop.warning).toContain("not written");
  });

  it("cancels the live task when the run is cancelled, skipping the rest", async () => {
    const cancel = new AbortController();
    const run = await runSpec(
      {
        killGrace: "2s",
        tasks: [
          // Short sleeps, not `wait` (see above).
          {
            name: "working",
            run: `trap 'echo stopping; exit 3' TERM; echo ready; while :; do sleep 0.05; done`,
          },
          { name: "next", run: "echo never" },
        ],
      },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        onOutput: (soFar) => soFar.includes("[working] ready") && cancel.abort(),
      },
    );
    expect(run.outcome.reason).toBe("Cancelled");
    expect(run.outcome.phase).toBe("Cancelled");
    expect(run.outcome.tasks.map((t) => t.phase)).toEqual(["Cancelled", "Skipped"]);
    expect(run.outcome.tasks[0]?.ending).toBe("Exited");
    expect(run.output).toContain("[working] stopping");
  });
});

describe("the cancel file for what earlier tasks left running", () => {
  // A service started by the first task that stops only through its cancel file: SIGTERM alone
  // would leave it to be killed when the grace ends, without its last line.
  const service = {
    name: "service",
    run: `(trap '' TERM; while [ ! -e "$PLAYBOOK_CANCEL_FILE" ]; do sleep 0.05; done; echo "saw $(cat "$PLAYBOOK_CANCEL_FILE")") & echo up`,
  };
  const cases: [string, object, string, string][] = [
    [
      "the run is over",
      { name: "work", run: "echo working" },
      "",
      "[service] saw Succeeded: the run is over",
    ],
    [
      "a later task passes its limit",
      { name: "work", timeout: "300ms", run: "echo working; sleep 30" },
      "",
      "[service] saw TaskTimeout: work passed its limit",
    ],
    [
      "the run is cancelled while a later task runs",
      { name: "work", run: "echo working; sleep 30" },
      "[work] working",
      "[service] saw cancelled",
    ],
    [
      "the run is cancelled between tasks",
      { name: "work", run: "echo never" },
      "",
      "[service] saw cancelled",
    ],
  ];

  it.each(cases)("is written for a leftover when %s", async (title, work, cancelOn, expected) => {
    const cancel = new AbortController();
    const betweenTasks = title.includes("between tasks");
    const run = await runSpec(
      { killGrace: "20s", tasks: [service, work] },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        onOutput: (soFar) => cancelOn !== "" && soFar.includes(cancelOn) && cancel.abort(),
        onEvent: (event) => betweenTasks && event.type === "task-finished" && cancel.abort(),
      },
    );
    expect(run.output).toContain(expected);
    // It stopped through the file, well within the grace.
    expect(run.elapsedMs).toBeLessThan(10_000);
  });
});

describe("stops between starts", () => {
  it("names the task a cancellation between tasks stopped from starting", async () => {
    // The first task's leader exits at once while its background child holds the pipes; the
    // cancellation lands once the first task is settled, before the next starts.
    const cancel = new AbortController();
    const run = await runSpec(
      {
        killGrace: "0s",
        tasks: [
          { name: "first", run: "sleep 60 & echo up" },
          { name: "second", run: "echo never" },
          { name: "third", run: "echo never" },
        ],
      },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        onEvent: (event) => event.type === "task-finished" && event.index === 0 && cancel.abort(),
      },
    );
    expect(run.outcome.reason).toBe("Cancelled");
    expect(run.outcome.tasks.map((t) => t.phase)).toEqual(["Succeeded", "Cancelled", "Skipped"]);
    expect(run.output).not.toContain("never");
  });

  it("does not start a retry once the run is cancelled", async () => {
    // The cancellation lands after the attempt's shell has exited and been reaped (its child sees
    // it gone), before the retry: the child says so, then closes the pipes the runner waits on.
    // The long drain window keeps the runner waiting for that however slow the machine is.
    const cancel = new AbortController();
    const run = await runSpec(
      {
        killGrace: "0s",
        tasks: [
          {
            name: "flaky",
            retries: 3,
            run: "(while kill -0 $$ 2>/dev/null; do sleep 0.01; done; echo shell gone) & exit 1",
          },
        ],
      },
      {
        marker: currentMarker(),
        cancelSignal: cancel.signal,
        drainWindowMs: 30_000,
        onOutput: (soFar) => soFar.includes("[flaky] shell gone") && cancel.abort(),
      },
    );
    expect(run.outcome.reason).toBe("Cancelled");
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Cancelled", attempts: 1, exitCode: 1 });
  });

  it("does not start a retry once the ceiling has passed", async () => {
    const run = await runSpec(
      {
        ceiling: "1s",
        killGrace: "0s",
        // Fails just before the ceiling; draining the pipes its child holds takes the run past it.
        tasks: [{ name: "flaky", retries: 3, run: "sleep 0.85; sleep 60 & exit 1" }],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.reason).toBe("RunCeiling");
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", limit: "RunCeiling", attempts: 1 });
  });
});
