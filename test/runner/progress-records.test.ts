// The pod runner's progress records in its log (src/pod-runner/pod-log.ts): the built CLI's
// `playbook pod-runner` in a real process, its stdout read as the kubelet reads the container's
// log. Everything is on stdout, in order; the records come at the run's begin, at each task's
// start and end, and while a task prints, after each 50 task lines and 1 s after the newest
// record; and no line that starts with the marker is a task's.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { PROGRESS_MARKER, type ProgressRecord, parseProgressLine } from "../../src/api/progress-record.js";
import { decodeReport, type RunnerReport } from "../../src/api/report.js";
import { CLI } from "../support/cli.js";
import { PYTHON } from "../support/heavy-task.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

/** The newest record among a log's lines (highest seq; the later line on a tie), or null. */
function latestProgressRecord(lines: readonly string[], taskCount?: number): ProgressRecord | null {
  let latest: ProgressRecord | null = null;
  for (const line of lines) {
    const record = parseProgressLine(line, taskCount);
    if (record && (!latest || record.seq >= latest.seq)) latest = record;
  }
  return latest;
}

const currentMarker = checkNothingLeftBehind();
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

interface PodLog {
  code: number | null;
  stdout: string;
  stderr: string;
  lines: string[];
  report: RunnerReport;
}

async function podRunner(tasks: { name: string; run: string; [field: string]: unknown }[]): Promise<PodLog> {
  const dir = mkdtempSync(join(tmpdir(), "records-"));
  made.push(dir);
  const log = join(dir, "termination-log");
  const plan = {
    name: "records",
    runStartTime: new Date().toISOString(),
    defaults: { ceilingMs: 3_600_000, maxCeilingMs: 86_400_000, stallMs: 600_000, killGraceMs: 10_000 },
    spec: { ceiling: "2m", tasks },
  };
  const child = spawn(process.execPath, [CLI, "pod-runner", "--termination-log", log], {
    env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker(), PLAYBOOK_PLAN: JSON.stringify(plan) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const out: Buffer[] = [];
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => out.push(chunk));
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  const stdout = Buffer.concat(out).toString("latin1");
  const report = decodeReport(readFileSync(log, "utf8"), tasks.length);
  return { code, stdout, stderr, lines: stdout.split("\n").slice(0, -1), report };
}

/** Every line that starts with the marker, parsed: each must be a whole, valid record of the plan. */
function recordsOf(run: PodLog, taskCount: number): ProgressRecord[] {
  return run.lines
    .filter((line) => line.startsWith(PROGRESS_MARKER))
    .map((line) => {
      const record = parseProgressLine(line, taskCount);
      expect(record, `a marker line that is no record of the runner's: ${line.slice(0, 200)}`).not.toBeNull();
      return record as ProgressRecord;
    });
}

/** The runner wrote them: one seq after the other from 0, none missing, none repeated. */
function expectSeqIntact(records: ProgressRecord[]): void {
  expect(records.map((record) => record.seq)).toEqual(records.map((_, index) => index));
}

describe("pod runner progress records", () => {
  it("records a 3-task run as it goes: all Pending at the begin, each task Running at its start and finished at its end", async () => {
    const run = await podRunner([
      { name: "one", run: "echo one" },
      { name: "two", run: "echo two; sleep 0.2" },
      { name: "three", run: "echo three; exit 3" },
    ]);
    expect(run.code).toBe(1);
    // One stream: the runner's progress lines are on stdout, before and after the task's lines.
    expect(run.stderr).toBe("");
    expect(run.lines[0]).toMatch(/^playbook: running records: 3 tasks/);
    expect(run.lines).toContain("[two] two");
    const records = recordsOf(run, 3);
    expectSeqIntact(records);
    const phases = records.map((record) => record.tasks.map((task) => task.p).join(" "));
    // Begin, then per task its start and its end, in order; nothing else changes a task.
    expect([...new Set(phases)]).toEqual([
      "Pending Pending Pending",
      "Running Pending Pending",
      "Succeeded Pending Pending",
      "Succeeded Running Pending",
      "Succeeded Succeeded Pending",
      "Succeeded Succeeded Running",
      "Succeeded Succeeded Failed",
    ]);
    expect(records[0]?.start).toBe(run.report.start);
    // A start record is written right behind the task's start line, an end record behind its end line.
    const at = (text: string) => run.lines.findIndex((line) => line.startsWith(text));
    const next = (from: number) =>
      parseProgressLine(run.lines.slice(from).find((line) => line.startsWith(PROGRESS_MARKER)) ?? "", 3);
    expect(next(at("playbook: task two started"))?.tasks[1]).toMatchObject({ p: "Running" });
    expect(next(at("playbook: task two started"))?.tasks[1]?.s).toEqual(expect.any(Number));
    // The last record shows the finished tasks as the report does (times, exit, CPU, memory).
    const last = records.at(-1)?.tasks;
    expect(last?.[2]).toMatchObject({ p: "Failed", x: 3 });
    for (const [index, task] of (last ?? []).entries()) {
      expect(task).toEqual(run.report.tasks[index]);
      // Locally the CPU is always measured; the peak is a sample a short task may end before.
      expect(task.cpu).toEqual(expect.any(Number));
    }
  });

  it("records a task waiting to retry as Running, saying when its next attempt starts, right behind the retry line", async () => {
    const dir = mkdtempSync(join(tmpdir(), "records-retry-"));
    made.push(dir);
    const count = join(dir, "count");
    const run = await podRunner([
      {
        name: "fetch",
        retries: 2,
        retryDelay: "300ms",
        retryMaxDelay: "300ms",
        run: `echo x >> ${count}; [ "$(wc -l < ${count})" -gt 1 ]`,
      },
    ]);
    expect(run.code).toBe(0);
    const records = recordsOf(run, 1);
    expectSeqIntact(records);
    const retrying = run.lines.findIndex((line) =>
      /^playbook: task fetch exited with code 1; retrying in \S+ \(attempt 2\/3\)$/.test(line),
    );
    expect(retrying).toBeGreaterThan(0);
    const wait = /retrying in (\S+) /.exec(run.lines[retrying] ?? "")?.[1];
    const next = parseProgressLine(
      run.lines.slice(retrying).find((line) => line.startsWith(PROGRESS_MARKER)) ?? "",
      1,
    );
    expect(next?.tasks[0]).toMatchObject({ p: "Running", m: `retrying in ${wait} (attempt 2/3)` });
    // The report: two attempts, the last one's start after the first's by at least the wait's half.
    const task = run.report.tasks[0];
    expect(task).toMatchObject({ p: "Succeeded", a: 2 });
    expect((task?.la ?? 0) - (task?.t?.[0] ?? 0)).toBeGreaterThanOrEqual(150);
  });

  it("after a task's 100 000 lines, no more than 50 task lines and never 1 s of output go without a record after them", async () => {
    const run = await podRunner([
      { name: "flood", run: "seq 1 100000" },
      { name: "slow", run: "echo a; sleep 1.5; echo b; sleep 1.5; echo c" },
    ]);
    expect(run.code).toBe(0);
    const flood = run.lines.filter((line) => line.startsWith("[flood] "));
    // Every line, whole and in order.
    expect(flood.length).toBe(100_000);
    expect(flood.at(-1)).toBe("[flood] 100000");
    expect(flood.every((line, index) => line === `[flood] ${index + 1}`)).toBe(true);
    const records = recordsOf(run, 2);
    expectSeqIntact(records);
    // The promise, exactly: between two records (and after the last), at most 50 task lines.
    let since = 0;
    let most = 0;
    for (const line of run.lines) {
      if (line.startsWith(PROGRESS_MARKER)) since = 0;
      else if (line.startsWith("[")) most = Math.max(most, ++since);
    }
    expect(most).toBe(50);
    expect(records.length).toBeGreaterThanOrEqual(100_000 / 50);
    // And by the clock: a line followed by 1.5 s of silence has a record behind it before the next.
    const slow = run.lines.slice(run.lines.indexOf("[slow] a"));
    const between = (from: string, to: string) =>
      slow.slice(slow.indexOf(from), slow.indexOf(to)).filter((line) => line.startsWith(PROGRESS_MARKER));
    expect(between("[slow] a", "[slow] b")).toHaveLength(1);
    expect(between("[slow] b", "[slow] c")).toHaveLength(1);
  });

  it("a task cannot write a record: its line of 20 KiB without a newline, ended by a record, does not let its forged record start a line", async () => {
    // The forged record is a valid one: were it a line of its own, a reader would take it (seq 99999).
    const forged = `${PROGRESS_MARKER}${JSON.stringify({
      v: 1,
      start: new Date().toISOString(),
      seq: 99_999,
      tasks: [{ p: "Succeeded" }, { p: "Succeeded" }],
    })}`;
    const run = await podRunner([
      {
        name: "attack",
        // 20 KiB, no newline (containerd cuts lines at 16 KiB); then it waits for the runner's
        // record by the clock (1 s after the start's) and prints the forged record, on stdout and stderr.
        run: `head -c 20480 /dev/zero | tr '\\0' x; sleep 1.5; printf '%s\\n' '${forged}'; printf '%s\\n' '${forged}' >&2`,
      },
      { name: "after", run: "true" },
    ]);
    expect(run.code).toBe(0);
    const records = recordsOf(run, 2);
    expectSeqIntact(records);
    expect(records.some((record) => record.seq === 99_999)).toBe(false);
    // Its phases are the real ones: the attack was Running until its end record.
    expect(records.map((record) => record.tasks[0]?.p)).toContain("Running");
    // The 20 KiB line is in pieces of at most 8 KiB, each behind the prefix; the record by the
    // clock came while its last piece was open: that line was ended for it, and the forged text is
    // the task's, behind its prefix, on each stream.
    const long = run.lines.findIndex((line) => line.startsWith("[attack] xxxx"));
    const pieces = run.lines.slice(long, long + 3);
    expect(pieces.map((line) => line.length)).toEqual([8192, 8192, 20480 - 2 * (8192 - 9) + 9]);
    expect(pieces.map((line) => line.slice("[attack] ".length)).join("")).toBe("x".repeat(20480));
    expect(run.lines[long + 3]).toMatch(new RegExp(`^${PROGRESS_MARKER}`));
    expect(run.lines.filter((line) => line === `[attack] ${forged}`)).toHaveLength(2);
    // Every line is the runner's or a task's.
    for (const line of run.lines) {
      expect(line.startsWith("playbook: ") || line.startsWith(PROGRESS_MARKER) || line.startsWith("[")).toBe(
        true,
      );
    }
  });

  it("a task cannot start an entry of the runtime's log: 16 380 bytes, then a forged record on the same line, then 195 short lines", async () => {
    // The attack of issue 41: with the prefix "[a] " (4 bytes) the marker is the 16 385th byte of
    // the line, where containerd cuts it (max_container_log_line_size, 16 KiB); the 195 short lines
    // put that entry inside the controller's 200-line tail, which counts entries, not lines.
    const forged = `${PROGRESS_MARKER}${JSON.stringify({
      v: 1,
      start: new Date().toISOString(),
      seq: 2 ** 53 - 1,
      tasks: [
        { p: "Succeeded", t: [0, 1] },
        { p: "Succeeded", t: [1, 2] },
      ],
    })}`;
    const run = await podRunner([
      {
        name: "a",
        run: `head -c 16380 /dev/zero | tr '\\0' x; printf '%s\\n' '${forged}'; seq 1 195`,
      },
      { name: "b", run: "true" },
    ]);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe("");
    const runners = (line: string) => line.startsWith("playbook: ") || line.startsWith(PROGRESS_MARKER);
    const tasks = (line: string) => line.startsWith("[a] ") || line.startsWith("[b] ");
    // Every line of the runner's stdout starts with a task's prefix or is the runner's own.
    for (const line of run.lines) {
      expect(
        tasks(line) || runners(line),
        `a line that is neither a task's nor the runner's: ${line.slice(0, 80)}`,
      ).toBe(true);
    }
    // Every entry the runtime makes of it (containerd: a line cut at each 16 KiB) too: no line is
    // that long, so each entry is a whole line, and an entry with the marker is a runner's record.
    const records = recordsOf(run, 2);
    expectSeqIntact(records);
    const recordLines = new Set(run.lines.filter((line) => line.startsWith(PROGRESS_MARKER)));
    const entries = run.lines.flatMap((line) => {
      const cut: string[] = [];
      for (let at = 0; at === 0 || at < line.length; at += 16 * 1024)
        cut.push(line.slice(at, at + 16 * 1024));
      return cut;
    });
    // The controller's 200-line tail (the kubelet counts entries) as a look right after the task's
    // last line would read it: its newest record is the runner's.
    const tail = entries.slice(0, entries.indexOf("[a] 195") + 1).slice(-200);
    const newest = latestProgressRecord(tail, 2);
    expect(newest?.seq, "the newest record in the 200-entry tail").toBeLessThan(records.length);
    for (const entry of entries) {
      const whose = tasks(entry) || entry.startsWith("playbook: ") || recordLines.has(entry);
      expect(whose, `an entry that is neither a task's nor the runner's: ${entry.slice(0, 80)}`).toBe(true);
    }
    expect(entries.length).toBe(run.lines.length);
    // The task's line is all there, in pieces behind its prefix; its forged record is its text.
    const first = run.lines.findIndex((line) => line.startsWith("[a] xxxx"));
    const last = run.lines.findIndex((line) => line.startsWith("[a] 1"));
    const pieces = run.lines.slice(first, last).filter(tasks);
    expect(pieces.every((line) => line.length <= 8 * 1024)).toBe(true);
    expect(pieces.map((line) => line.slice(4)).join("")).toBe(`${"x".repeat(16380)}${forged}`);
    expect(records.some((record) => record.seq === 2 ** 53 - 1)).toBe(false);
  });

  it("cuts a long line between UTF-8 characters, never inside one, and loses no byte", async () => {
    // 3-byte and 4-byte characters, 30 000 bytes of each, no newline: the 8 KiB mark falls inside
    // a character for each (each on a line of its own); then a byte that is no UTF-8 at all, 20 000 times (cut anyway).
    const run = await podRunner([
      {
        name: "utf8",
        run: `for i in $(seq 1 10000); do printf '€'; done; echo; for i in $(seq 1 7500); do printf '😀'; done; echo; head -c 20000 /dev/zero | tr '\\0' '\\200'; echo`,
      },
    ]);
    expect(run.code).toBe(0);
    const raw = Buffer.from(run.stdout, "latin1");
    const lines: Buffer[] = [];
    for (let from = 0, at = raw.indexOf(0x0a); at !== -1; from = at + 1, at = raw.indexOf(0x0a, from))
      lines.push(raw.subarray(from, at));
    const prefix = Buffer.from("[utf8] ");
    const pieces = lines.filter((line) => line.subarray(0, prefix.length).equals(prefix));
    for (const line of pieces) expect(line.length).toBeLessThanOrEqual(8 * 1024);
    const text = pieces.map((line) => line.subarray(prefix.length));
    const decoder = new TextDecoder("utf-8", { fatal: true });
    const [euros, smileys] = [text.filter((t) => t[0] === 0xe2), text.filter((t) => t[0] === 0xf0)];
    expect(euros.length).toBeGreaterThan(1);
    expect(smileys.length).toBeGreaterThan(1);
    // Each piece is valid UTF-8 on its own: no character was cut.
    for (const piece of [...euros, ...smileys]) expect(() => decoder.decode(piece)).not.toThrow();
    expect(euros.map((t) => decoder.decode(t)).join("") === "€".repeat(10000)).toBe(true);
    expect(smileys.map((t) => decoder.decode(t)).join("") === "😀".repeat(7500)).toBe(true);
    const invalid = text.filter((t) => t[0] === 0x80);
    expect(Buffer.concat(invalid).equals(Buffer.alloc(20000, 0x80))).toBe(true);
    expect(invalid.every((t) => t.length + prefix.length <= 8 * 1024)).toBe(true);
  });

  it.skipIf(!PYTHON)(
    "keeps a line of only continuation bytes, written two at a time, within 8 KiB: no byte is a character to wait for",
    async () => {
      // The line is one byte short of 8 KiB behind its prefix, then 1500 writes of two bytes, each
      // read by the runner (its pipe empty, FIONREAD) before the next: each reaches the runner as a
      // chunk of its own, whatever the machine's load.
      const script = [
        "import fcntl, os, struct, termios, time",
        "def drained():",
        '    while struct.unpack("i", fcntl.ioctl(1, termios.FIONREAD, bytes(4)))[0]: time.sleep(0.001)',
        'os.write(1, b"\\x80" * 8184); drained()',
        "for _ in range(1500):",
        '    os.write(1, b"\\x80\\x80"); drained()',
        'os.write(1, b"\\n")',
      ].join("\n");
      const run = await podRunner([{ name: "cont", run: `${PYTHON} -c '${script}'` }]);
      expect(run.code).toBe(0);
      const raw = Buffer.from(run.stdout, "latin1");
      const prefix = Buffer.from("[cont] ");
      const pieces: Buffer[] = [];
      for (let from = 0, at = raw.indexOf(0x0a); at !== -1; from = at + 1, at = raw.indexOf(0x0a, from)) {
        const line = raw.subarray(from, at);
        expect(line.length, "a line of the log longer than 8 KiB").toBeLessThanOrEqual(8 * 1024);
        if (line.subarray(0, prefix.length).equals(prefix)) pieces.push(line.subarray(prefix.length));
      }
      expect(Buffer.concat(pieces).equals(Buffer.alloc(8184 + 3000, 0x80))).toBe(true);
      expect(pieces.length).toBeGreaterThan(1);
    },
  );
});
