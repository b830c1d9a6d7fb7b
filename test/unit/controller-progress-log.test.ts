// Reading a runner's log for progress: only the marked lines are kept (a task's long lines cost
// nothing), and a short tail that holds no record is followed by one longer read, never more.
import { describe, expect, it } from "vitest";
import { encodeProgressRecord, PROGRESS_MARKER } from "../../src/api/progress-record.js";
import {
  LONG_TAIL_LINES,
  PROGRESS_LINES,
  readProgressLines,
  SHORT_TAIL_LINES,
} from "../../src/controller/playbook/progress-looks.js";
import { type PodLogTail, PrefixedLines } from "../../src/runtime/pod-log.js";

const record = encodeProgressRecord({
  v: 1,
  start: "2026-01-01T00:00:00.000Z",
  seq: 3,
  tasks: [{ p: "Pending" }],
});

/** The lines PrefixedLines keeps of `text` arriving in chunks of `size` characters. */
function kept(text: string, size: number): string[] {
  const lines = new PrefixedLines(PROGRESS_LINES.prefix, PROGRESS_LINES.maxLineBytes);
  for (let i = 0; i < text.length; i += size) lines.push(text.slice(i, i + size));
  return lines.end();
}

describe("the lines kept of a runner's log", () => {
  const log = [
    "playbook: build started",
    `[task] ${PROGRESS_MARKER}{"forged":true}`,
    `[task] ${"x".repeat(100_000)}`,
    record,
    "playbook: build succeeded in 2s",
  ].join("\n");

  it.each([1, 7, 4096, 1 << 20])("are the marked ones only, in chunks of %i", (size) => {
    expect(kept(`${log}\n`, size)).toEqual([record]);
  });

  it("include a last line without its newline, and drop a marked line longer than a record may be", () => {
    expect(kept(`a\n${record}`, 5)).toEqual([record]);
    expect(kept(`${PROGRESS_MARKER}${"y".repeat(PROGRESS_LINES.maxLineBytes)}\n${record}\r\n`, 1000)).toEqual(
      [record],
    );
  });
});

describe("a look at the runner's log", () => {
  it("reads a short tail of the runner container, and a longer one only when it holds no record", async () => {
    const reads: PodLogTail[] = [];
    const answer = (lines: string[]) => async (tail: PodLogTail) => {
      reads.push(tail);
      return tail.tailLines === SHORT_TAIL_LINES ? lines : [record];
    };
    expect(await readProgressLines(answer([record]), { namespace: "ops", name: "nightly-1" })).toEqual([
      record,
    ]);
    expect(reads).toEqual([
      { namespace: "ops", pod: "nightly-1", container: "runner", tailLines: SHORT_TAIL_LINES },
    ]);
    reads.length = 0;
    expect(await readProgressLines(answer([]), { namespace: "ops", name: "nightly-1" })).toEqual([record]);
    expect(reads.map((r) => r.tailLines)).toEqual([SHORT_TAIL_LINES, LONG_TAIL_LINES]);
  });
});
