// Every line of a task's output starts with its prefix, however its streams and the runner's own
// lines interleave (src/pod-runner/task-lines.ts): a partial stdout line that stderr's line, or one
// of the runner's, comes in behind is ended there, and its rest goes on behind the prefix again.
// The built CLI in real processes: `playbook run` (task output on stdout, on stderr with -o json,
// and both on one pipe with 2>&1) and `playbook pod-runner` (everything on stdout, pod-log.ts).
// The tasks (test/support/task-lines.ts) wait for the runner to read each piece: no timing.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { CLI } from "../support/cli.js";
import { PYTHON } from "../support/heavy-task.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";
import { DOWNLOADING, EXAMPLE_LINES, OPEN_UNTIL_TERM, taskLinesOf } from "../support/task-lines.js";

const currentMarker = checkNothingLeftBehind();
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `argv` (the CLI's) in a real process: with `merged`, its stderr goes to its stdout's pipe (2>&1). */
function start(
  args: string[],
  options: {
    env?: NodeJS.ProcessEnv;
    merged?: boolean;
    onData?: (all: string, child: ChildProcess) => boolean;
  },
): Promise<Run> {
  const argv = options.merged
    ? ["sh", "-c", 'exec "$0" "$@" 2>&1', process.execPath, CLI, ...args]
    : [process.execPath, CLI, ...args];
  const child = spawn(argv[0] as string, argv.slice(1), {
    env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker(), ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  // onData is asked until it says it is done (it sent its signal).
  let done = !options.onData;
  const seen = () => {
    if (!done) done = options.onData?.(options.merged ? stdout : stdout + stderr, child) ?? true;
  };
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
    seen();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
    seen();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

function manifest(tasks: object[]): string {
  const dir = mkdtempSync(join(tmpdir(), "task-lines-"));
  made.push(dir);
  const file = join(dir, "playbook.yaml");
  writeFileSync(
    file,
    stringify({
      apiVersion: "playbook.dev/v1alpha1",
      kind: "Playbook",
      metadata: { name: "lines" },
      spec: { killGrace: "5s", tasks },
    }),
  );
  return file;
}

/** `playbook pod-runner` on a plan of these tasks; the report is not read. */
function podRunner(tasks: object[], onData?: (all: string, child: ChildProcess) => boolean): Promise<Run> {
  const dir = mkdtempSync(join(tmpdir(), "task-lines-pod-"));
  made.push(dir);
  const plan = {
    name: "lines",
    runStartTime: new Date().toISOString(),
    defaults: { ceilingMs: 3_600_000, maxCeilingMs: 86_400_000, stallMs: 600_000, killGraceMs: 10_000 },
    spec: { ceiling: "2m", killGrace: "5s", tasks },
  };
  return start(["pod-runner", "--termination-log", join(dir, "termination-log")], {
    env: { PLAYBOOK_PLAN: JSON.stringify(plan) },
    ...(onData ? { onData } : {}),
  });
}

describe.skipIf(!PYTHON)("every line of a task carries its prefix", () => {
  it("locally: a partial stdout line that stderr interrupts is ended, and its rest goes on behind the prefix", async () => {
    const run = await start(["run", "-f", manifest([{ name: "p", run: DOWNLOADING }])], {});
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`${EXAMPLE_LINES.join("\n")}\n`);
  });

  it("locally with -o json: the task's lines and the runner's share stderr, each line whole", async () => {
    const run = await start(["run", "-f", manifest([{ name: "p", run: DOWNLOADING }]), "-o", "json"], {});
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).status.phase).toBe("Succeeded");
    expect(taskLinesOf(run.stderr)).toEqual(EXAMPLE_LINES);
  });

  it.each([
    ["-o json (one stream)", ["-o", "json"], false],
    ["2>&1 (one pipe, two streams)", [], true],
  ])(
    "locally with %s: the runner's line ends the task's open line, and the rest is prefixed again",
    async (_name, flags, merged) => {
      const run = await start(["run", "-f", manifest([{ name: "p", run: OPEN_UNTIL_TERM }]), ...flags], {
        merged,
        onData: (all, child) => {
          const open = all.includes("[p] Downloading... ");
          if (open) child.kill("SIGINT");
          return open;
        },
      });
      expect(run.code).toBe(130);
      const log = merged ? run.stdout : run.stderr;
      expect(log).toContain("playbook: received SIGINT; cancelling the run");
      expect(taskLinesOf(log)).toEqual(["[p] Downloading... ", "[p] done"]);
    },
  );

  it("in a pod: the same example, in the log with the runner's lines and records", async () => {
    const run = await podRunner([{ name: "p", run: DOWNLOADING }]);
    expect(run.code).toBe(0);
    expect(taskLinesOf(run.stdout)).toEqual(EXAMPLE_LINES);
  });

  it("in a pod: the runner's line on a SIGTERM ends the task's open line, and the rest is prefixed again", async () => {
    const run = await podRunner([{ name: "p", run: OPEN_UNTIL_TERM }], (all, child) => {
      const open = all.includes("[p] Downloading... ");
      if (open) child.kill("SIGTERM");
      return open;
    });
    expect(run.stdout).toContain("playbook: received SIGTERM; cancelling the run");
    expect(taskLinesOf(run.stdout)).toEqual(["[p] Downloading... ", "[p] done"]);
  });
});
