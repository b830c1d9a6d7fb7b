// Task output reaches the runner's output byte for byte, prefixed per line, with memory bounded.
import { describe, expect, it } from "vitest";
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
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Failed", exitCode: 4, detail: "fatal: disk full" });
  });
});
