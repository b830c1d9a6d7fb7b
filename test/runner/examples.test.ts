// The examples in examples/ are what a new user runs first: each must still end the way its
// comment says.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { MARKER_VAR, newMarker, processesWithEnv } from "../support/runner.js";

const ROOT = join(import.meta.dirname, "../..");

function runExample(
  file: string,
  marker: string,
): Promise<{ code: number | null; status: Record<string, unknown> }> {
  const child = spawn(
    process.execPath,
    [join(ROOT, "dist/src/cli/main.js"), "run", "-f", join(ROOT, file), "-o", "json"],
    { env: { ...process.env, [MARKER_VAR]: marker }, stdio: ["ignore", "pipe", "ignore"] },
  );
  let stdout = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  return new Promise((resolve) =>
    child.on("close", (code) => resolve({ code, status: JSON.parse(stdout).status })),
  );
}

describe("examples", () => {
  it.concurrent.each([
    ["examples/hello.yaml", 0, "Succeeded", ["Succeeded", "Succeeded", "Succeeded"]],
    ["examples/retries.yaml", 0, "Succeeded", ["Succeeded"]],
    ["examples/task-timeout.yaml", 1, "TaskTimeout", ["Succeeded", "TimedOut", "Skipped"]],
    ["examples/stall.yaml", 1, "StallLimit", ["Succeeded", "TimedOut"]],
    ["examples/ceiling.yaml", 1, "RunCeiling", ["Succeeded", "TimedOut", "Skipped"]],
    ["examples/cooperative-stop.yaml", 1, "TaskTimeout", ["TimedOut"]],
  ])("%s ends with exit %i and reason %s", async (file, code, reason, phases) => {
    const marker = newMarker();
    const result = await runExample(file, marker);
    expect(processesWithEnv(MARKER_VAR, marker), "processes of this example still alive").toEqual([]);
    expect(result.code).toBe(code);
    const status = result.status as {
      conditions: { reason: string }[];
      tasks: { phase: string; ending?: string }[];
    };
    expect(status.conditions[0]?.reason).toBe(reason);
    expect(status.tasks.map((t) => t.phase)).toEqual(phases);
    if (file.includes("cooperative")) expect(status.tasks[0]?.ending).toBe("Exited");
  });
});
