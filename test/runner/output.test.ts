// Task output reaches the runner's output byte for byte, prefixed per line, with memory bounded.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { decodeReport, encodeReport } from "../../src/api/report.js";
import { expandReport } from "../../src/api/report-expand.js";
import { checkNothingLeftBehind, runSpec } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();

describe("task output", () => {
  it("passes output without newlines and with invalid UTF-8 through unchanged", async () => {
    const script = "printf 'abc\\377\\376def'; printf '\\000\\001'";
    const raw = await runSpec(
      { tasks: [{ name: "bytes", run: script }] },
      { marker: currentMarker(), prefixOutput: false },
    );
    expect(raw.outputBytes).toEqual(
      Buffer.from([0x61, 0x62, 0x63, 0xff, 0xfe, 0x64, 0x65, 0x66, 0x00, 0x01]),
    );

    const prefixed = await runSpec(
      { tasks: [{ name: "bytes", run: "printf 'one\\ntwo\\377'" }] },
      { marker: currentMarker() },
    );
    expect(prefixed.outputBytes).toEqual(
      Buffer.concat([Buffer.from("[bytes] one\n[bytes] two"), Buffer.from([0xff, 0x0a])]),
    );
  });

  it("streams stdout and stderr of every task, each line under its task's name", async () => {
    const run = await runSpec(
      {
        tasks: [
          { name: "first", run: "echo out; echo err >&2" },
          { name: "second", run: "echo two" },
        ],
      },
      { marker: currentMarker() },
    );
    const lines = run.output.trim().split("\n").sort();
    expect(lines).toEqual(["[first] err", "[first] out", "[second] two"]);
  });

  it("keeps only the last line of a failed task's output for its message", async () => {
    const run = await runSpec(
      { tasks: [{ name: "noisy", run: "seq 1 100000; echo 'fatal: disk full' >&2; exit 4" }] },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({
      phase: "Failed",
      exitCode: 4,
      detail: 'stderr: "fatal: disk full"',
    });
  });

  it.each([
    {
      name: "stderr's last line, not a banner printed last on stdout",
      run: "echo 'curl: (6) Could not resolve host' >&2; echo 'bash 5.2.15(1)-release'; exit 6",
      message: 'exited with code 6 (stderr: "curl: (6) Could not resolve host")',
    },
    {
      name: "stderr's last line, though 600 KB of stdout came after it",
      run: "echo 'error: lock held by pid 42' >&2; echo >&2; seq 1 100000; exit 1",
      message: 'exited with code 1 (stderr: "error: lock held by pid 42")',
    },
    {
      name: "stdout's last line when stderr holds none, saying so",
      run: "echo 'step 3 of 5 failed'; printf '\\n\\n' >&2; exit 2",
      message: 'exited with code 2 (stdout: "step 3 of 5 failed")',
    },
    { name: "no line when it printed none", run: "exit 3", message: "exited with code 3" },
  ])("a failed task's message quotes $name", async ({ run: script, message }) => {
    const spec = { tasks: [{ name: "t", run: script }] };
    const run = await runSpec(spec, { marker: currentMarker() });
    const report = decodeReport(encodeReport(run.outcome), 1, 0);
    const status = expandReport(report, resolveLimits(PlaybookSpecSchema.parse(spec), LOCAL_DEFAULTS));
    expect(status.tasks[0]).toMatchObject({ phase: "Failed", message });
    expect(status.message).toBe(`task t ${message}`);
  });

  it("hands on everything a finished task's background child queued before the run returns", async () => {
    // The task's shell exits at once; its child writes 110 KB, more than the pipe holds, to a
    // reader that takes 300ms a chunk, then ends. The shell's own line comes first: written while
    // the child writes, it could land inside one of the child's lines. The last task ends as soon as the child has
    // written everything: what is still queued in the pipe must be passed on before the run
    // returns (a runner that exits then would lose it), not dropped with the pipe.
    const dir = mkdtempSync(join(tmpdir(), "burst-"));
    const written = join(dir, "written");
    const reader = new SlowReader(300);
    const run = await runSpec(
      {
        tasks: [
          { name: "burst", run: `echo main; (seq 1 20000; echo burst-end; touch ${written}) &` },
          { name: "after", run: `while [ ! -e ${written} ]; do sleep 0.01; done` },
        ],
      },
      { marker: currentMarker(), sink: reader },
    );
    expect(run.outcome.reason).toBe("Succeeded");
    const lines = Buffer.concat(reader.handed).toString().split("\n");
    expect(lines.pop()).toBe("");
    expect(lines).toContain("[burst] main");
    const seqLines = Array.from({ length: 20000 }, (_, i) => `[burst] ${i + 1}`);
    expect(lines.filter((line) => line !== "[burst] main")).toEqual([...seqLines, "[burst] burst-end"]);
  });
});

/** A reader that takes `msPerChunk` for each chunk, and records each chunk as it is handed over. */
class SlowReader extends Writable {
  readonly handed: Buffer[] = [];

  constructor(msPerChunk: number) {
    super({ highWaterMark: 1, write: (_chunk, _encoding, callback) => setTimeout(callback, msPerChunk) });
  }

  override write(chunk: Buffer, ...rest: unknown[]): boolean {
    this.handed.push(chunk);
    return (super.write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
  }
}
