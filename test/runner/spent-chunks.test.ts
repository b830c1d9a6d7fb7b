// A pipe's chunks are freed as soon as the runner has copied them and its tail let go of them
// (spent-chunks.ts), with every byte still handed on and the tail's last line intact.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { type AttemptSpec, runAttempt } from "../../src/pod-runner/attempt.js";
import { LOCAL_LAUNCHER } from "../../src/pod-runner/launcher.js";
import { recordingLauncher, unfreedBytes } from "../support/chunks.js";

async function attempt(run: string, prefix: string, seen: Buffer[], recycleOutput = false) {
  const written: Buffer[] = [];
  const sink = new Writable({
    // Reads each chunk a turn later, as a pipe to a slow reader would: one freed before the
    // callback would come out empty.
    write(chunk: Buffer, _encoding, callback) {
      setImmediate(() => {
        written.push(Buffer.from(chunk));
        callback();
      });
    },
  });
  const dir = mkdtempSync(join(tmpdir(), "spent-"));
  const spec: AttemptSpec = {
    taskName: "flood",
    run,
    env: { PATH: process.env.PATH },
    attemptId: "spent.0.1",
    runCookie: "spent",
    cancelFileOf: (id) => join(dir, id),
    deadline: null,
    stallMs: 0,
    killGraceMs: 0,
    drainWindowMs: 2000,
    sink,
    recycleOutput,
    prefix,
    tailBytes: 4096,
    launcher: recordingLauncher(LOCAL_LAUNCHER, seen),
  };
  const result = await runAttempt(spec);
  // What the sink still has queued is written out before the output is read.
  await new Promise<void>((resolve) => sink.end(resolve));
  return { result, output: Buffer.concat(written).toString("latin1") };
}

// 8 MiB of numbered lines in many reads, then a last line the failure message must show.
const FLOOD = "seq 1 1000000; echo 'fatal: the last words'; exit 3";
const expected = (prefix: string) => {
  const lines: string[] = [];
  for (let i = 1; i <= 1_000_000; i++) lines.push(`${prefix}${i}\n`);
  return `${lines.join("")}${prefix}fatal: the last words\n`;
};

describe("the pipe's chunks", () => {
  it("are freed once copied and out of the tail, with every byte handed on", async () => {
    const seen: Buffer[] = [];
    const { result, output } = await attempt(FLOOD, "[flood] ", seen);
    expect(output).toBe(expected("[flood] "));
    expect(result.exitCode).toBe(3);
    expect(result.tail.lastLine()).toEqual({ stream: "stdout", line: "fatal: the last words" });
    // Every chunk but those the tail still holds (its 4 KiB, at most one pipe read beyond) is freed:
    // a freed chunk reads as empty.
    expect(seen.length).toBeGreaterThan(10);
    expect(unfreedBytes(seen)).toBeLessThan(4096 + 64 * 1024);
  });

  it("handed on as they are (no prefix) are not freed under a sink that may keep them", async () => {
    const seen: Buffer[] = [];
    const { output } = await attempt(FLOOD, "", seen);
    expect(output).toBe(expected(""));
    // Without recycleOutput the sink may hold these chunks themselves for good: none is freed.
    expect(seen.every((chunk) => chunk.buffer.byteLength === chunk.length)).toBe(true);
  });

  it("handed on as they are are freed once a sink that is done with them called back", async () => {
    const seen: Buffer[] = [];
    // A line with no end: every chunk but the first goes on with it and is handed on as it is.
    const { output } = await attempt("head -c 8388608 /dev/zero | tr '\\0' x", "[flood] ", seen, true);
    expect(output).toBe(`[flood] ${"x".repeat(8 * 1024 * 1024)}\n`);
    expect(seen.length).toBeGreaterThan(10);
    expect(unfreedBytes(seen)).toBeLessThan(4096 + 64 * 1024);
  });
});
