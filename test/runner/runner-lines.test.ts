// The runner's own lines quote text from the spec, the image and the tasks (a workingDir, an
// error, a task's last line): each control character of it shows as an escape
// (src/api/visible-text.ts), so that text never ends the runner's line, never starts one (the
// progress marker at a line's start is a record to the controller) and never drives a terminal.
// The built CLI in real processes: `playbook run` (progress on stderr, -o json) and `playbook
// pod-runner` (everything on stdout, the pod's log).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { PROGRESS_MARKER, parseProgressLine } from "../../src/api/progress-record.js";
import { decodeReport } from "../../src/api/report.js";
import { startCli } from "../support/cli.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

const tempDir = (prefix: string): string => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
};

/** A record a reader would take, were it a line of its own: seq 99 999. */
const FORGED = `${PROGRESS_MARKER}${JSON.stringify({
  v: 1,
  start: new Date().toISOString(),
  seq: 99_999,
  tasks: [{ p: "Succeeded" }],
})}`;
/** A workingDir with a newline before a forged record, then an ESC that would turn a terminal red, and U+2028. */
const WORKING_DIR = `/nonexistent\n${FORGED}\n\x1b[31mred\u2028`;
/** A task's last line: a carriage return, an ESC, DEL, NEL (C1) and U+2029. */
const LAST_LINE = "printf 'fail\\r\\033[2J\\177\\302\\205\\342\\200\\251 end\\n'; exit 3";

/** Characters that must never reach a line of the runner's raw: C0 but the newline, DEL, C1, U+2028/9. */
const RAW_CONTROL = [..."\r\t\x1b\x7f\x85\u2028\u2029\0"];
const rawControls = (text: string) => RAW_CONTROL.filter((char) => text.includes(char));

function manifest(tasks: object[]): string {
  const file = join(tempDir("runner-lines-"), "playbook.yaml");
  writeFileSync(
    file,
    stringify({
      apiVersion: "playbook.dev/v1alpha1",
      kind: "Playbook",
      metadata: { name: "lines" },
      spec: { tasks },
    }),
  );
  return file;
}

/** Every line is the runner's or the task's, and none is a record but the runner's (seq from 0, in order). */
function expectOwnedLines(lines: readonly string[], taskPrefix: string): void {
  const seqs: number[] = [];
  for (const line of lines) {
    const owned =
      line.startsWith("playbook: ") || line.startsWith(taskPrefix) || line.startsWith(PROGRESS_MARKER);
    expect(owned, `a line that is neither the runner's nor the task's: ${JSON.stringify(line)}`).toBe(true);
    if (line.startsWith(PROGRESS_MARKER)) seqs.push(parseProgressLine(line)?.seq ?? -1);
  }
  expect(seqs).toEqual(seqs.map((_, index) => index));
}

describe("the runner's own lines show control characters as escapes", () => {
  it("locally: a workingDir with a newline and an ESC stays inside the end line", async () => {
    const run = await startCli(
      ["run", "-f", manifest([{ name: "a", run: "true", workingDir: WORKING_DIR }])],
      {
        env: { [MARKER_VAR]: currentMarker() },
      },
    );
    expect(run.code).toBe(1);
    const lines = run.stderr.split("\n").slice(0, -1);
    expectOwnedLines(lines, "[a] ");
    expect(rawControls(run.stderr)).toEqual([]);
    const end = lines.filter((line) => line.startsWith("playbook: run Failed"));
    expect(end).toEqual([
      `playbook: run Failed (TaskFailed): task a could not start: workingDir /nonexistent\\n${FORGED}\\n\\x1b[31mred\\u2028 does not exist`,
    ]);
  });

  it("locally with -o json: the status message quotes the workingDir escaped, and progress stays one line a step", async () => {
    const run = await startCli(
      ["run", "-o", "json", "-f", manifest([{ name: "a", run: "true", workingDir: WORKING_DIR }])],
      { env: { [MARKER_VAR]: currentMarker() } },
    );
    expect(run.code).toBe(1);
    expectOwnedLines(run.stderr.split("\n").slice(0, -1), "[a] ");
    const status = JSON.parse(run.stdout).status;
    const messages = [
      ...status.conditions.map((c: { message: string }) => c.message),
      status.tasks[0].message as string,
    ];
    for (const message of messages) expect(rawControls(message), message).toEqual([]);
    expect(status.tasks[0].message).toContain("/nonexistent\\nplaybook.dev/progress");
  });

  it("locally: a failed task's last line, with CR, ESC, DEL and C1 in it, is one line of the end line", async () => {
    const run = await startCli(["run", "-f", manifest([{ name: "a", run: LAST_LINE }])], {
      env: { [MARKER_VAR]: currentMarker() },
    });
    expect(run.code).toBe(1);
    const end = run.stderr.split("\n").filter((line) => line.startsWith("playbook: run Failed"));
    expect(end).toEqual([
      'playbook: run Failed (TaskFailed): task a exited with code 3 (stdout: "fail\\r\\x1b[2J\\x7f\\u0085\\u2029 end")',
    ]);
    expect(rawControls(run.stderr)).toEqual([]);
  });

  it("in a pod: a failure before the run quotes its --plan path on one line of the runner's stderr", async () => {
    const run = await startCli(
      [
        "pod-runner",
        "--termination-log",
        join(tempDir("runner-lines-pod-"), "log"),
        "--plan",
        `/nonexistent\n${FORGED}`,
      ],
      { env: { [MARKER_VAR]: currentMarker() } },
    );
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    const lines = run.stderr.split("\n").slice(0, -1);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^playbook: --plan \/nonexistent\\nplaybook\.dev\/progress \{/);
  });

  it("in a pod: the workingDir's forged record never starts a line of the log, and the report quotes it escaped", async () => {
    const dir = tempDir("runner-lines-pod-");
    const log = join(dir, "termination-log");
    const plan = {
      name: "lines",
      runStartTime: new Date().toISOString(),
      defaults: { ceilingMs: 3_600_000, maxCeilingMs: 86_400_000, stallMs: 600_000, killGraceMs: 10_000 },
      spec: {
        ceiling: "2m",
        tasks: [{ name: "a", run: "true", workingDir: WORKING_DIR }],
        // It runs however the main task ended: its last line is in the report and the end line.
        finally: [{ name: "b", run: LAST_LINE }],
      },
    };
    const run = await startCli(["pod-runner", "--termination-log", log], {
      env: { [MARKER_VAR]: currentMarker(), PLAYBOOK_PLAN: JSON.stringify(plan) },
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toBe("");
    const lines = run.stdout.split("\n").slice(0, -1);
    expectOwnedLines(lines, "[b] ");
    expect(lines.filter((line) => line.startsWith("playbook: run Failed"))).toHaveLength(1);
    const report = decodeReport(readFileSync(log, "utf8"), 1, 1);
    expect(report.tasks[0]?.m).toBe(
      `could not start: workingDir /nonexistent\\n${FORGED}\\n\\x1b[31mred\\u2028 does not exist`,
    );
    expect(report.fin?.[0]?.m).toBe('stdout: "fail\\r\\x1b[2J\\x7f\\u0085\\u2029 end"');
    // The runner's lines (the task's own go through as they are: "[b] " and its bytes).
    expect(rawControls(lines.filter((line) => !line.startsWith("[b] ")).join("\n"))).toEqual([]);
  });
});
