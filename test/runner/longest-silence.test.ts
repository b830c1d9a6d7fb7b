// Each task's longest silence (the longest time between two pieces of its output, from its start
// to its end), as `playbook run -o json` and `--report` give it: what `playbook advise` proposes
// a stall limit from. The built CLI in a real process, real shells and real sleeps.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { parseDuration } from "../../src/api/duration.js";
import { startCli } from "../support/cli.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();
const dir = mkdtempSync(join(tmpdir(), "silence-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Row {
  name: string;
  phase: string;
  limit?: string;
  longestSilence?: string;
}

describe("a task's longest silence, locally", () => {
  let tasks: Row[] = [];
  let reported: { ls?: number }[] = [];
  let code: number | null = null;
  let stderr = "";

  beforeAll(async () => {
    const manifest = join(dir, "silence.yaml");
    const reportFile = join(dir, "report.json");
    writeFileSync(
      manifest,
      stringify({
        apiVersion: "playbook.dev/v1alpha1",
        kind: "Playbook",
        metadata: { name: "silence" },
        spec: {
          tasks: [
            // Chatty for a while, then 0.8s of nothing in the middle, then chatty again.
            {
              name: "pause",
              run: "for i in 1 2 3 4 5; do echo $i; sleep 0.02; done; sleep 0.8; for i in 1 2 3; do echo $i; sleep 0.02; done",
            },
            // Nothing at all: the silence is the whole task.
            { name: "quiet", run: "sleep 0.5" },
            // Prints every 20ms: its silences are short.
            { name: "chatty", run: "for i in $(seq 25); do echo $i; sleep 0.02; done" },
            // Silent until its stall limit fires, and deaf to SIGTERM: it takes the SIGKILL a
            // second later. The silence reaches the limit and stops at the stop.
            { name: "stuck", run: "trap '' TERM; echo start; sleep 30", stall: "300ms" },
          ],
          killGrace: "1s",
        },
      }),
    );
    const result = await startCli(["run", "-f", manifest, "-o", "json", "--report", reportFile], {
      env: { [MARKER_VAR]: currentMarker() },
    });
    code = result.code;
    stderr = result.stderr;
    tasks = JSON.parse(result.stdout).status.tasks;
    reported = JSON.parse(readFileSync(reportFile, "utf8")).tasks;
  }, 30_000);

  const silenceOf = (name: string) => {
    const row = tasks.find((task) => task.name === name);
    expect(row?.longestSilence, `${name}: ${JSON.stringify(row)}`).toBeDefined();
    return parseDuration(row?.longestSilence as string);
  };

  it("ends on the stuck task's stall limit", () => {
    expect(code, stderr).toBe(124);
    expect(tasks.map((task) => [task.name, task.phase, task.limit])).toEqual([
      ["pause", "Succeeded", undefined],
      ["quiet", "Succeeded", undefined],
      ["chatty", "Succeeded", undefined],
      ["stuck", "TimedOut", "StallLimit"],
    ]);
  });

  it("gives the pause in the middle of a task's output, not its chatty parts", () => {
    // The sleep is 800ms; the runner reads the lines on either side of it, so allow a little
    // for the first being read late, and much for a loaded machine on the other side.
    const pause = silenceOf("pause");
    expect(pause).toBeGreaterThanOrEqual(700);
    expect(pause).toBeLessThan(5000);
  });

  it("gives a task that printed nothing its whole length", () => {
    expect(silenceOf("quiet")).toBeGreaterThanOrEqual(450);
  });

  it("gives a chatty task a silence shorter than the paused one's", () => {
    expect(silenceOf("chatty")).toBeLessThan(silenceOf("pause"));
  });

  it("gives a task its stall limit stopped a silence of at least that limit, counted to the stop, not the grace", () => {
    const stuck = silenceOf("stuck");
    expect(stuck).toBeGreaterThanOrEqual(299);
    // The 1s kill grace it sat out is not silence.
    expect(stuck).toBeLessThan(1000);
  });

  it("writes the same figure in ms to the report (`ls`)", () => {
    expect(reported.map((task) => task.ls)).toEqual(
      tasks.map((task) => parseDuration(task.longestSilence ?? "")),
    );
  });
});
