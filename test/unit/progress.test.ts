import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { Progress } from "../../src/cli/progress.js";

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
