// Secret values print as `***` in everything a run shows of its tasks' output, with the built
// CLI in real processes: `playbook run` (the terminal's stdout and stderr, -o json) and `playbook
// pod-runner` (the pod's log and its report). The tasks read the value from a file, as from a
// mounted Secret, and print it in pieces with sleeps between the writes, so each piece reaches
// the runner in a read of its own.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { decodeReport } from "../../src/api/report.js";
import { MAX_LINE_BYTES } from "../../src/pod-runner/pod-log.js";
import { runPlaybook } from "../../src/pod-runner/run.js";
import { POD_PLAN_DEFAULTS, startCli, terminationLog, writePlaybook } from "../support/cli.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** 32 bytes, as a generated password. */
const VALUE = "Zq7-pW2x9LmN4vB8kR3tY6uH1sD5fG0j";
/** The second line of a two-line value (a key file). */
const SECOND_LINE = "second-line-of-the-key";

/** A secret volume's directory with the value in `password` and a two-line `key`. */
function secretDir(): string {
  const root = mkdtempSync(join(tmpdir(), "secret-mask-"));
  made.push(root);
  const dir = join(root, "db");
  mkdirSync(dir);
  writeFileSync(join(dir, "password"), `${VALUE}\n`);
  writeFileSync(join(dir, "key"), `first-line-of-the-key\n${SECOND_LINE}\n`);
  return dir;
}

/** Prints the value of $SECRET in pieces of `sizes` bytes, each its own write after a sleep. */
function inPieces(sizes: readonly number[]): string {
  let from = 1;
  const parts: string[] = [];
  for (const size of sizes) {
    parts.push(`printf '%s' "$(printf '%s' "$v" | cut -c${from}-${from + size - 1})"; sleep 0.2`);
    from += size;
  }
  parts.push(`printf '%s' "$(printf '%s' "$v" | cut -c${from}-)"`);
  return `v=$(cat "$SECRET/password"); ${parts.join("; ")}`;
}

const TASKS = [
  // Split across writes, beside the task's prefix, then after a progress redraw.
  { name: "pieces", run: `${inPieces([1, 7, 12])}; echo; printf ' 40%%\\r'; ${inPieces([16])}; echo ' 80%'` },
  // A multi-line value's lines, and the value as the last line on stderr of a failed task.
  { name: "fails", run: `cat "$SECRET/key"; { ${inPieces([20])}; echo; } >&2; exit 3` },
];

function manifest(secret: string): string {
  const tasks = TASKS.map((task) => ({ ...task, env: [{ name: "SECRET", value: secret }] }));
  return writePlaybook(join(secret, "..", "playbook.yaml"), "mask", tasks);
}

const shown = (text: string) => ({
  value: text.includes(VALUE) || text.includes(VALUE.slice(0, 16)) || text.includes(VALUE.slice(16)),
  secondLine: text.includes(SECOND_LINE),
});

describe("secret values in a run's output", () => {
  it("locally: the terminal shows *** for a value printed in pieces, beside a redraw, and in the failure", async () => {
    const secret = secretDir();
    const run = await startCli(["run", "-f", manifest(secret)], {
      env: { [MARKER_VAR]: currentMarker(), PLAYBOOK_MASK_DIRS: secret },
    });
    expect(run.code).toBe(1);
    expect(shown(run.stdout)).toEqual({ value: false, secondLine: false });
    expect(shown(run.stderr)).toEqual({ value: false, secondLine: false });
    const lines = run.stdout.split("\n");
    expect(lines).toContain("[pieces] ***");
    expect(lines).toContain("[pieces]  40%\r*** 80%");
    // The key's two lines (each a value) and the password, on stderr.
    expect(lines.filter((line) => line.startsWith("[fails] "))).toEqual(Array(3).fill("[fails] ***"));
    expect(run.stderr).toContain('task fails exited with code 3 (stderr: "***")');
  });

  it("locally: a mask directory that cannot be read runs nothing, exits 2 and names it", async () => {
    const secret = secretDir();
    const missing = join(secret, "..", "gone");
    const run = await startCli(["run", "-f", manifest(secret)], {
      env: { [MARKER_VAR]: currentMarker(), PLAYBOOK_MASK_DIRS: `${secret}:${missing}` },
    });
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain(
      `playbook: PLAYBOOK_MASK_DIRS: cannot read the directory "${missing}" (ENOENT)\n`,
    );
    expect(run.stderr).not.toContain("task pieces started");
  });

  it("locally with -o json: the status quotes the failure's last line masked", async () => {
    const secret = secretDir();
    const run = await startCli(["run", "-o", "json", "-f", manifest(secret)], {
      env: { [MARKER_VAR]: currentMarker(), PLAYBOOK_MASK_DIRS: secret },
    });
    expect(run.code).toBe(1);
    expect(shown(run.stdout)).toEqual({ value: false, secondLine: false });
    expect(shown(run.stderr)).toEqual({ value: false, secondLine: false });
    const status = JSON.parse(run.stdout).status;
    expect(status.tasks[1].message).toContain('stderr: "***"');
  });

  it("in a pod: the log and the report show *** for a value cut by the log's longest line and by records", async () => {
    const secret = secretDir();
    const log = terminationLog("secret-mask-pod-");
    // The value starts 10 bytes before where the log ends a long line and goes on behind its
    // prefix again; then 60 lines, so a progress record is written among them.
    const prefix = "[long] ";
    const filler = MAX_LINE_BYTES - prefix.length - 10;
    const plan = {
      name: "mask",
      runStartTime: new Date().toISOString(),
      defaults: POD_PLAN_DEFAULTS,
      spec: {
        ceiling: "2m",
        tasks: [
          {
            name: "long",
            run: `head -c ${filler} /dev/zero | tr '\\0' x; ${inPieces([10, 3])}; echo; for i in $(seq 1 60); do echo "line $i $v"; done`,
            env: [{ name: "SECRET", value: secret }],
          },
          ...TASKS.map((task) => ({ ...task, env: [{ name: "SECRET", value: secret }] })),
        ],
      },
    };
    const run = await startCli(["pod-runner", "--termination-log", log], {
      env: { [MARKER_VAR]: currentMarker(), PLAYBOOK_PLAN: JSON.stringify(plan), PLAYBOOK_MASK_DIRS: secret },
    });
    expect(run.code).toBe(1);
    const text = `${run.stdout}${run.stderr}${readFileSync(log, "utf8")}`;
    expect(shown(text)).toEqual({ value: false, secondLine: false });
    const lines = run.stdout.split("\n");
    expect(lines).toContain(`${prefix}${"x".repeat(filler)}***`);
    expect(lines).toContain("[long] line 60 ***");
    expect(lines.filter((line) => line.startsWith("playbook.dev/progress")).length).toBeGreaterThan(1);
    const report = decodeReport(readFileSync(log, "utf8"), 3, 0);
    expect(report.tasks[2]?.m).toBe('stderr: "***"');
  });
});

describe("the stall clock beside the mask", () => {
  it("counts the bytes the mask holds back as output: a value printed slowly is no stall", async () => {
    // Ten bytes of the value, 0.3 s apart: all held (they are its start) for longer than the 2 s
    // stall limit, while the task never goes 2 s without printing.
    const run = `v='${VALUE}'; for i in 1 2 3 4 5 6 7 8 9 10; do printf %s "$(echo "$v" | cut -c$i)"; sleep 0.3; done; echo "$v" | cut -c11-`;
    const spec = PlaybookSpecSchema.parse({ stall: "2s", tasks: [{ name: "slow", run }] });
    const written: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        written.push(Buffer.from(chunk));
        callback();
      },
    });
    const outcome = await runPlaybook({
      tasks: spec.tasks,
      limits: resolveLimits(spec, LOCAL_DEFAULTS),
      sink,
      maskValues: [VALUE],
      baseEnv: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker() },
    });
    expect(outcome.tasks[0]).toMatchObject({ phase: "Succeeded" });
    expect(Buffer.concat(written).toString()).toBe("[slow] ***\n");
  });
});
