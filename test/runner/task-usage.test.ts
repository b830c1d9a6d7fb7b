// What a task cost, as `playbook run -o json` says it (the built CLI in a real process), against
// what /usr/bin/time says for the same command: CPU seconds (user + system) and peak memory, each
// within 10%. Locally the runner measures a host task itself (src/pod-runner/task-usage.ts).
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { startCli } from "../support/cli.js";
import { heavyTask, PYTHON, TIME, timeOf, within10Percent } from "../support/heavy-task.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();
const dir = mkdtempSync(join(tmpdir(), "usage-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(PYTHON === null || !existsSync(TIME))("a task's CPU and peak memory, locally", () => {
  it("`playbook run -o json` gives a task's CPU seconds and peak memory within 10% of /usr/bin/time's", async () => {
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
    const reference = timeOf(run);
    expect(reference.maxRssKiB).toBeGreaterThan(200 * 1024);
    expect(reference.cpuSeconds).toBeGreaterThan(1);
    expect(
      within10Percent(task.cpuSeconds, reference.cpuSeconds),
      `cpuSeconds ${task.cpuSeconds}, /usr/bin/time ${reference.cpuSeconds}`,
    ).toBe(true);
    expect(
      within10Percent(task.peakMemoryBytes / 1024, reference.maxRssKiB),
      `peakMemoryBytes ${task.peakMemoryBytes}, /usr/bin/time ${reference.maxRssKiB} KiB`,
    ).toBe(true);
    // The finished task's line says it too.
    expect(result.stderr).toMatch(
      /^playbook: task heavy Succeeded in \S+ \(cpu \d+\.\d\ds, peak \d+ MiB\)$/m,
    );
  });
});
