import { PassThrough } from "node:stream";
import { afterEach, describe, expect, it, vi } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { Progress } from "../../src/cli/progress.js";
import type { RunEvent } from "../../src/pod-runner/run.js";

function render(tty: boolean, outputBetween: boolean): string {
  const spec = PlaybookSpecSchema.parse({
    ceiling: "30m",
    tasks: [{ name: "build", run: "make", timeout: "10m" }],
  });
  const limits = resolveLimits(spec, LOCAL_DEFAULTS);
  const out = new PassThrough();
  let text = "";
  out.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  let bytes = 0;
  const progress = new Progress({ out, tty, limits, outputBytes: () => bytes });
  progress.event({
    type: "task-started",
    index: 0,
    name: "build",
    attempt: 1,
    limits: limits.tasks[0] as never,
  });
  if (outputBetween) bytes += 10;
  progress.event({
    type: "task-finished",
    index: 0,
    outcome: { name: "build", phase: "Succeeded", attempts: 1, exitCode: 0, signal: null },
  });
  return text;
}

describe("progress lines", () => {
  it("shows each effective limit with its source", () => {
    expect(render(false, false)).toContain(
      "playbook: task build started (timeout 10m (task), stall 10m (default), ceiling 30m (spec))",
    );
  });

  it("rewrites a task's live line in place on a terminal when no output came in between", () => {
    expect(render(true, false)).toContain("\x1b[1A\r\x1b[K");
    expect(render(true, true)).not.toContain("\x1b[1A");
  });

  it("writes plain lines without escape codes when not on a terminal", () => {
    expect(render(false, false)).not.toContain("\x1b[");
  });
});

describe("what the runner's log says a stop and the sweep did", () => {
  const spec = PlaybookSpecSchema.parse({ killGrace: "5s", tasks: [{ name: "build", run: "make" }] });
  const limits = resolveLimits(spec, LOCAL_DEFAULTS);
  const lines = (events: RunEvent[]): string => {
    const out = new PassThrough();
    let text = "";
    out.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    const progress = new Progress({ out, tty: false, limits, outputBytes: () => 0 });
    for (const event of events) progress.event(event);
    return text;
  };

  it("says a SIGTERM was not delivered, and why, and a cancel file that was not written", () => {
    const text = lines([
      {
        type: "task-stopping",
        index: 0,
        name: "build",
        stop: {
          kind: "limit",
          limit: "TaskTimeout",
          cancelFileWritten: false,
          warning: "cancel file /run/x: EACCES",
          term: {
            delivered: false,
            detail:
              "SIGTERM not delivered: the agent of container task-1 is stopped (SIGSTOP, sent by a task) and carries out no signal",
          },
        },
      },
    ]);
    expect(text).toBe(
      "playbook: task build passed its TaskTimeout limit: cancel file not written, SIGTERM not delivered: the agent of container task-1 is stopped (SIGSTOP, sent by a task) and carries out no signal, SIGKILL in 5s\n" +
        "playbook: warning: cancel file /run/x: EACCES\n",
    );
    expect(text).not.toContain("SIGTERM sent");
  });

  it("says the sweep found processes it could not end, and its warnings", () => {
    expect(
      lines([
        {
          type: "leftovers-swept",
          found: 3,
          ended: 1,
          warnings: ["some of the run's processes could not be ended"],
        },
      ]),
    ).toBe(
      "playbook: found 3 process(es) that tasks left running and ended 1: 2 still ran after the kill\n" +
        "playbook: warning: some of the run's processes could not be ended\n",
    );
    expect(lines([{ type: "leftovers-swept", found: 2, ended: 2, warnings: [] }])).toBe(
      "playbook: ended 2 process(es) that tasks left running\n",
    );
  });

  it("says how many bytes of a task's output were dropped, and when", () => {
    expect(lines([{ type: "output-dropped", index: 0, name: "build", bytes: 123456, when: "stop" }])).toBe(
      "playbook: task build: dropped 123456 bytes of its output that came after its stop faster than the runner's stdout took it\n",
    );
  });
});

describe("the live clock under a task's open line on a terminal", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A task that draws a bar with no newline, then nothing for `quietMs`: what the terminal got after the bar. */
  function afterBar(quietMs: number): string {
    vi.useFakeTimers({ now: Date.parse("2026-12-01T00:00:00Z") });
    const spec = PlaybookSpecSchema.parse({ tasks: [{ name: "fetch", run: "x", timeout: "10m" }] });
    const limits = resolveLimits(spec, LOCAL_DEFAULTS);
    const out = new PassThrough();
    let text = "";
    out.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    const progress = new Progress({ out, tty: true, limits, outputBytes: () => 0, outputOnTerminal: true });
    progress.event({
      type: "task-started",
      index: 0,
      name: "fetch",
      attempt: 1,
      limits: limits.tasks[0] as never,
    });
    progress.beforeOutput();
    text = "";
    progress.afterOutput(Buffer.from("[fetch] \r[fetch] downloading 50%"));
    vi.advanceTimersByTime(quietMs);
    progress.stop();
    return text;
  }

  it("goes on: redrawn on the line below each second, the cursor back at the bar's end", () => {
    const text = afterBar(2_600);
    // Down and up (room at the screen's foot), save, down, the clock, restore.
    const draws = text.split("\x1bD\x1bM\x1b7\x1bD\r\x1b[K");
    expect(draws.length - 1).toBeGreaterThanOrEqual(5);
    expect(text).toContain("fetch: 0s of 10m timeout");
    expect(text).toContain("fetch: 2s of 10m timeout");
    for (const draw of draws.slice(1)) expect(draw).toContain("left\x1b[0m\x1b8");
  });

  it("is cleared from under the line when the task's output or a line of the runner's comes", () => {
    // stop(): the line below is cleared and the cursor put back, nothing written over the bar.
    expect(afterBar(600).endsWith("\x1b7\x1bD\r\x1b[K\x1b8")).toBe(true);
  });
});
