// What a task cost, as `playbook run -o json` says it (the built CLI in a real process), against
// what the task's own process measured of itself just before its exit: CPU seconds (user +
// system) and peak memory. Locally the runner measures a host task itself (src/pod-runner/task-usage.ts).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startCli } from "../support/cli.js";
import { cpuAgrees, heavyTask, PYTHON, selfMeasured, within10Percent } from "../support/heavy-task.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();
const dir = mkdtempSync(join(tmpdir(), "usage-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(PYTHON === null)("a task's CPU and peak memory, locally", () => {
  it("`playbook run -o json` gives a task's CPU seconds and peak memory agreeing with what the task measured of itself", async () => {
    const run = heavyTask(dir);
    const manifest = join(dir, "heavy.yaml");
    writeFileSync(
      manifest,
      stringify({
        apiVersion: "playbook.dev/v1alpha1",
        kind: "Playbook",
        metadata: { name: "heavy" },
        spec: { tasks: [{ name: "heavy", run }] },
      }),
    );
    const result = await startCli(["run", "-f", manifest, "-o", "json"], {
      env: { [MARKER_VAR]: currentMarker() },
    });
    expect(result.code, result.stderr).toBe(0);
    const task = JSON.parse(result.stdout).status.tasks[0];
    // With -o json the task's output goes to stderr.
    const own = selfMeasured(result.stderr);
    expect(own.maxRssKiB).toBeGreaterThan(200 * 1024);
    expect(own.cpuSeconds).toBeGreaterThanOrEqual(1);
    expect(
      cpuAgrees(task.cpuSeconds, own.cpuSeconds),
      `cpuSeconds ${task.cpuSeconds}, the task's own ${own.cpuSeconds}`,
    ).toBe(true);
    expect(
      within10Percent(task.peakMemoryBytes / 1024, own.maxRssKiB),
      `peakMemoryBytes ${task.peakMemoryBytes}, the task's own ${own.maxRssKiB} KiB`,
    ).toBe(true);
    // The finished task's line says it too.
    expect(result.stderr).toMatch(
      /^playbook: task heavy Succeeded in \S+ \(cpu \d+\.\d\ds, peak \d+ MiB\)$/m,
    );
  });
});
