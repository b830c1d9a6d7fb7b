// `playbook advise --reports DIR` on real history: 30 real runs of examples/variable.yaml (a task
// whose length each run's RUN_SEED sets) written as `playbook run -o json` and `--report` write
// them, then the advice: figures checked against the files, a backtest that kills none of them,
// and the patch, applied with `kubectl patch --local`, accepted by `playbook validate` and run.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { parseDuration } from "../../src/api/duration.js";
import { startCli } from "../support/cli.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const ROOT = join(import.meta.dirname, "../..");
const EXAMPLE = join(ROOT, "examples/variable.yaml");
const RUNS = 30;
/** The last five write only the runner's report (--report), which names no task: -f does. */
const REPORTED = 5;

const currentMarker = checkNothingLeftBehind();
const dir = mkdtempSync(join(tmpdir(), "advise-"));
const runs = join(dir, "runs");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface TaskFigures {
  durations: number[];
  silences: number[];
}

/** Each task's durations and longest silences, and each run's span, read from the files as written. */
function figuresOfFiles(): { tasks: Map<string, TaskFigures>; runSpans: number[]; runSilences: number[] } {
  const tasks = new Map<string, TaskFigures>();
  const runSpans: number[] = [];
  const runSilences: number[] = [];
  const names = ["fetch", "work"];
  const add = (name: string, duration: number, silence: number) => {
    const figures = tasks.get(name) ?? { durations: [], silences: [] };
    figures.durations.push(duration);
    figures.silences.push(silence);
    tasks.set(name, figures);
  };
  for (let i = 1; i <= RUNS; i++) {
    if (i <= RUNS - REPORTED) {
      const status = JSON.parse(readFileSync(join(runs, `${i}.json`), "utf8")).status;
      const start = Date.parse(status.startTime);
      let end = start;
      let silence = 0;
      for (const task of status.tasks) {
        const taskEnd = Date.parse(task.completionTime);
        add(task.name, taskEnd - Date.parse(task.startTime), parseDuration(task.longestSilence));
        end = Math.max(end, taskEnd);
        silence = Math.max(silence, parseDuration(task.longestSilence));
      }
      runSpans.push(end - start);
      runSilences.push(silence);
    } else {
      const report = JSON.parse(readFileSync(join(runs, `${i}.report.json`), "utf8"));
      let end = 0;
      let silence = 0;
      for (const [index, task] of report.tasks.entries()) {
        add(names[index] as string, task.t[1] - task.t[0], task.ls);
        end = Math.max(end, task.t[1]);
        silence = Math.max(silence, task.ls);
      }
      runSpans.push(end);
      runSilences.push(silence);
    }
  }
  return { tasks, runSpans, runSilences };
}

/** The method's proposal by hand for fewer than 1000 runs and values under 1s: the largest x1.3, up to 100ms. */
const byHand = (values: number[]) => Math.ceil((Math.max(...values) * 1.3) / 100) * 100;

describe("playbook advise --reports, on 30 real runs", () => {
  beforeAll(async () => {
    mkdirSync(runs);
    for (let i = 1; i <= RUNS; i++) {
      const env = { RUN_SEED: String(i), [MARKER_VAR]: currentMarker() };
      const args =
        i <= RUNS - REPORTED
          ? ["run", "-f", EXAMPLE, "-o", "json"]
          : ["run", "-f", EXAMPLE, "--report", join(runs, `${i}.report.json`)];
      const result = await startCli(args, { env });
      expect(result.code, result.stderr).toBe(0);
      if (i <= RUNS - REPORTED) writeFileSync(join(runs, `${i}.json`), result.stdout);
    }
  }, 120_000);

  it("gives each task's figures from all 30 runs, both kinds of file, and proposes the largest x1.3, rounded up", async () => {
    const result = await startCli([
      "advise",
      "--reports",
      runs,
      "-f",
      EXAMPLE,
      "-o",
      "json",
      "--floor",
      "0s",
    ]);
    expect(result.code, result.stderr).toBe(0);
    const advice = JSON.parse(result.stdout);
    const files = figuresOfFiles();
    expect(advice.playbook).toBe("variable");
    expect(advice.runs).toBe(RUNS);
    for (const task of advice.tasks) {
      const seen = files.tasks.get(task.name) as TaskFigures;
      expect(task.timeout).toMatchObject({ n: RUNS, cut: 0, quantile: Math.max(...seen.durations) });
      expect(task.timeout.proposalMs, task.name).toBe(byHand(seen.durations));
      expect(task.stall.proposalMs, task.name).toBe(byHand(seen.silences));
      expect(task.timeout.current).toMatchObject({ value: "5m", source: "task" });
    }
    expect(advice.ceiling.proposalMs).toBe(byHand(files.runSpans));
    expect(advice.stall.proposalMs).toBe(byHand(files.runSilences));
    // The work task's length varies by RUN_SEED from 100 to 400 ms: its p50 lies between.
    const work = advice.tasks.find((t: { name: string }) => t.name === "work");
    expect(work.timeout.p50).toBeGreaterThan(100);
    expect(work.timeout.p50).toBeLessThan(Math.max(...(files.tasks.get("work") as TaskFigures).durations));
    // The backtest on the same runs: none killed, even with no floor.
    expect(advice.backtest).toMatchObject({ runs: RUNS, kills: [], savings: [], ranOn: [] });
  });

  it("prints a table with the sample, the figures, the current limits and the backtest on a terminal", async () => {
    const result = await startCli(["advise", "--reports", runs, "-f", EXAMPLE]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(
      /^Playbook variable: 30 runs \(30 succeeded, 0 ended at a limit, 0 other\) from /,
    );
    expect(result.stdout).toMatch(
      /^timeout work +30 +0 +\S+ +\S+ +\S+ +\S+ +5m \(task\) +1m +p99\.9=max x1\.3, floor$/m,
    );
    expect(result.stdout).toContain(
      "Backtest: none of the last 30 successful runs would have been killed by the proposal.",
    );
    expect(result.stdout).toMatch(
      /too loose: no attempt came within 10% of its 5m \(spec\.tasks\[1\]\.timeout\)/,
    );
  });

  it("explains the method with the figures it used", async () => {
    const result = await startCli(["advise", "--reports", runs, "-f", EXAMPLE, "--explain", "--floor", "0s"]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(
      "The false-kill rate 0.001 (--rate): the proposal starts at the weighted p99.9",
    );
    expect(result.stdout).toMatch(
      /^Task work's timeout: now 5m \(spec\.tasks\[1\]\.timeout\)\n {2}the weighted p99\.9 quantile of 30 successful attempts' durations is \d+ms \(the largest seen/m,
    );
  });

  it("gives a patch that kubectl applies, `playbook validate` accepts, and that runs", async () => {
    const result = await startCli([
      "advise",
      "--reports",
      runs,
      "-f",
      EXAMPLE,
      "-o",
      "patch",
      "--floor",
      "2s",
    ]);
    expect(result.code, result.stderr).toBe(0);
    const patchFile = join(dir, "limits.yaml");
    writeFileSync(patchFile, result.stdout);
    // The whole spec.tasks list, each with its timeout: a merge patch replaces a list whole.
    const patch = parse(result.stdout);
    expect(patch.spec).toMatchObject({ ceiling: "2s", stall: "2s" });
    expect(patch.spec.tasks.map((t: { name: string; timeout: string }) => [t.name, t.timeout])).toEqual([
      ["fetch", "2s"],
      ["work", "2s"],
    ]);
    const patched = execFileSync(
      "kubectl",
      ["patch", "--local", "-f", EXAMPLE, "--type=merge", "--patch-file", patchFile, "-o", "yaml"],
      { encoding: "utf8", env: { PATH: process.env.PATH, HOME: dir } },
    );
    const manifest = join(dir, "variable-patched.yaml");
    writeFileSync(manifest, patched);
    // Everything else of the manifest is kept: the tasks' run scripts, their order.
    const before = parse(readFileSync(EXAMPLE, "utf8"));
    const after = parse(patched);
    expect(after.spec.tasks.map((t: { run: string }) => t.run)).toEqual(
      before.spec.tasks.map((t: { run: string }) => t.run),
    );
    const validated = await startCli(["validate", "-f", manifest]);
    expect(validated.code, validated.stderr).toBe(0);
    expect(validated.stdout).toMatch(/ceiling\s+2s \(spec\)/);
    const run = await startCli(["run", "-f", manifest, "-o", "json"], {
      env: { RUN_SEED: "7", [MARKER_VAR]: currentMarker() },
    });
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout).status.limits.ceiling).toEqual({ value: "2s", source: "spec" });
  });
});

describe("playbook advise refuses bad input, naming it", () => {
  let reportOnly: string;
  beforeAll(() => {
    reportOnly = join(dir, "report-only");
    mkdirSync(reportOnly, { recursive: true });
    writeFileSync(
      join(reportOnly, "r.json"),
      '{"v":1,"phase":"Succeeded","reason":"Succeeded","start":"2026-11-29T10:00:00.000Z","end":"2026-11-29T10:00:01.000Z","tasks":[{"p":"Succeeded","t":[0,500],"ls":400},{"p":"Succeeded","t":[500,900]}]}',
    );
  });

  it.each([
    [
      ["--reports", "RUNS", "--rate", "2"],
      "playbook: --rate 2: must be a share between 0 and 1, e.g. 0.001 or 1/1000",
    ],
    [
      ["--reports", "RUNS", "--margin", "0.5"],
      "playbook: --margin 0.5: must be a number from 1 to 100, e.g. 1.3",
    ],
    [["--reports", "RUNS", "--half-life", "2d"], 'playbook: --half-life 2d: "2d" is not a duration'],
    [
      ["--reports", "RUNS", "--min-sample", "2.5"],
      "playbook: --min-sample 2.5: must be a whole number of at least 1",
    ],
    [["--reports", "RUNS", "--floor", "-1s"], 'playbook: --floor -1s: "-1s" must not be negative'],
    [["--reports", "RUNS", "-o", "xml"], "playbook: -o xml: must be table, json or patch"],
    [[], "playbook: give a source of runs: --reports DIR, cron NAME or -l SELECTOR"],
    [["--reports", "/nonexistent/runs"], "playbook: --reports /nonexistent/runs: no such directory"],
    [
      ["--reports", "REPORT_ONLY"],
      "r.json is a runner report (--report), which names no task: give the Playbook it ran with -f FILE",
    ],
  ])("advise %j", async (args, message) => {
    const result = await startCli([
      "advise",
      ...args.map((a) => (a === "RUNS" ? runs : a === "REPORT_ONLY" ? reportOnly : a)),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
    expect(result.stdout).toBe("");
  });

  it("names a file in the folder that is no run", async () => {
    const bad = join(dir, "bad");
    mkdirSync(bad, { recursive: true });
    writeFileSync(join(bad, "notes.yaml"), "kind: ConfigMap\nmetadata: {name: x}\n");
    const result = await startCli(["advise", "--reports", bad]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      `${join(bad, "notes.yaml")}: neither a Playbook (\`playbook run -o json\`), a list of them, nor a runner report (\`--report\`): kind "ConfigMap"`,
    );
  });

  it("names a report that does not fit the Playbook -f gives", async () => {
    const one = join(dir, "one-task.yaml");
    writeFileSync(
      one,
      "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: one}\nspec:\n  tasks: [{name: a, run: 'true'}]\n",
    );
    const result = await startCli(["advise", "--reports", reportOnly, "-f", one]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      `${join(reportOnly, "r.json")}: the report is invalid: it lists 2 tasks, the plan has 1`,
    );
  });
});
