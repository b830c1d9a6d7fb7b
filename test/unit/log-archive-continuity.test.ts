// The archive's check that the log it followed is the whole of what the runner wrote, read from
// the runner's numbered progress records in it (src/controller/log-archive/log-continuity.ts).
import { describe, expect, it } from "vitest";
import { encodeProgressRecord } from "../../src/api/progress-record.js";
import { continuityGap, LogContinuity } from "../../src/controller/log-archive/log-continuity.js";

const START = "2026-12-07T03:00:00.000Z";

/** The runner's record number `seq` of a two-task run, the first task running unless `done`. */
function record(seq: number, done = false): string {
  return encodeProgressRecord({
    v: 1,
    start: START,
    seq,
    tasks: done ? [{ p: "Succeeded" }, { p: "Succeeded" }] : [{ p: "Running", s: 5 }, { p: "Pending" }],
  });
}

/** A runner's log: task lines between its records `seqs`, the last one `done` unless told. */
function log(seqs: number[], options: { lastDone?: boolean } = {}): Buffer {
  const lines: string[] = [];
  seqs.forEach((seq, i) => {
    lines.push(record(seq, i === seqs.length - 1 && options.lastDone !== false));
    for (let n = 0; n < 50; n++) lines.push(`[build] line ${seq}.${n} ${"x".repeat(60)}`);
  });
  return Buffer.from(`${lines.join("\n")}\n`);
}

/** Fed in chunks of `size` bytes (the kubelet's writes and the HTTP reads cut anywhere). */
function read(bytes: Buffer, size: number) {
  const continuity = new LogContinuity();
  for (let at = 0; at < bytes.length; at += size) continuity.feed(bytes.subarray(at, at + size));
  return continuity.result;
}

describe("the runner's records in a followed log", () => {
  it("are read whole in any chunking, from one byte at a time to the whole log at once", () => {
    const bytes = log([0, 1, 2, 3, 4, 5]);
    for (const size of [1, 7, 23, 64, 4096, bytes.length])
      expect(read(bytes, size), `chunks of ${size}`).toEqual({ records: 6, missing: 0 });
  });

  it("show a stretch the kubelet's reader skipped: the records missing and where the first gap is", () => {
    const bytes = log([0, 1, 2, 6, 7, 9]);
    for (const size of [1, 13, 4096])
      expect(read(bytes, size)).toEqual({ records: 6, missing: 4, firstGap: { after: 2, next: 6 } });
    expect(continuityGap(read(bytes, 4096), false)).toBe(
      "the kubelet's log reader skipped part of the log (it fell behind the log's rotation): 4 of the runner's progress records are missing, the first between its records 2 and 6; what the task printed there is not in it",
    );
  });

  it("show a head that is missing: the first record read is not the run's first", () => {
    expect(read(log([3, 4]), 100)).toMatchObject({ missing: 3, firstGap: { after: -1, next: 3 } });
    expect(continuityGap(read(log([3, 4]), 100), false)).toContain("the first before its record 3");
  });

  it("show a tail that is missing when the runner ended with its report and a task still runs in the last record read", () => {
    const cut = read(log([0, 1, 2], { lastDone: false }), 512);
    expect(cut).toEqual({ records: 3, missing: 0, runningAtLast: 1 });
    expect(continuityGap(cut, true)).toBe(
      "the log ends while the plan's task 1 runs although the runner ended with its report: the kubelet's log reader stopped before the end of its rotated files, and the log's tail is not in it",
    );
    // A runner that did not end with its report (killed at the pod's deadline): the log is whole.
    expect(continuityGap(cut, false)).toBeUndefined();
    // None at all, although the runner reported.
    expect(continuityGap(read(Buffer.from("[build] only task output\n"), 5), true)).toContain(
      "none of the runner's progress records",
    );
  });

  it("say nothing of a whole log", () => {
    expect(continuityGap(read(log([0, 1, 2]), 300), true)).toBeUndefined();
  });

  it("are never a task's: a record printed by a task has its prefix, and a marked line that does not parse is none", () => {
    const forged = Buffer.from(
      [
        record(0),
        `[build] ${record(5, true)}`,
        "playbook.dev/progress {not json",
        `playbook.dev/progress ${"y".repeat(20_000)}`,
        record(1, true),
        "",
      ].join("\n"),
    );
    for (const size of [1, 9, 100_000]) expect(read(forged, size)).toEqual({ records: 2, missing: 0 });
  });
});
