// The pod's log cuts a task's long line at MAX_LINE_BYTES (src/pod-runner/pod-log.ts): the bound
// the 16 KiB split defence rests on (docs/design.md, "Live progress: the runner's log"). It must
// hold whatever the bytes (invalid UTF-8, only continuation bytes) and however they come (a byte
// at a time, pieces that split characters), with no byte lost or added, and valid UTF-8 is never
// cut inside a character. A LinePrefixer and a PodLog in process, fed in pieces.
import { Writable } from "node:stream";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { PROGRESS_MARKER } from "../../src/api/progress-record.js";
import { LinePrefixer } from "../../src/pod-runner/output.js";
import { MAX_LINE_BYTES, PodLog } from "../../src/pod-runner/pod-log.js";

const PREFIX = Buffer.from("[t] ");
const MARKER = Buffer.from(PROGRESS_MARKER);

/** The log a task that writes `task` in pieces of `sizes` (cycled) makes: every byte as it came out. */
async function logOf(task: Buffer, sizes: readonly number[]): Promise<Buffer> {
  const written: Buffer[] = [];
  const target = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      written.push(Buffer.from(chunk));
      callback();
    },
  });
  let seq = 0;
  // The clock stands still: records come by lines only, the same for every run of a case.
  const log = new PodLog({
    target,
    tasks: [],
    record: () => `${PROGRESS_MARKER}{"seq":${seq++}}`,
    now: () => 0,
  });
  const prefixer = new LinePrefixer(PREFIX.toString());
  for (let at = 0, i = 0; at < task.length; i++) {
    const size = sizes[i % sizes.length] ?? 1;
    log.sink.write(prefixer.push(task.subarray(at, at + size)));
    at += size;
  }
  await log.flushed();
  log.close();
  return Buffer.concat(written);
}

function linesOf(log: Buffer): Buffer[] {
  const lines: Buffer[] = [];
  let from = 0;
  for (let at = log.indexOf(0x0a); at !== -1; from = at + 1, at = log.indexOf(0x0a, from))
    lines.push(log.subarray(from, at));
  // The last line, when the log ends inside one.
  if (from < log.length) lines.push(log.subarray(from));
  return lines;
}

const startsWith = (line: Buffer, head: Buffer) => line.subarray(0, head.length).equals(head);

/**
 * Every line fits the bound and is the task's (behind its prefix) or a record; the task's pieces,
 * read back in order, give its bytes: a piece the task's newline follows ended its line, any other
 * was cut (a cut never leaves an empty piece behind it). Returns the task's pieces.
 */
function expectBoundAndBytes(log: Buffer, task: Buffer): Buffer[] {
  const pieces: Buffer[] = [];
  let at = 0;
  for (const line of linesOf(log)) {
    expect(line.length, "a line of the log longer than the bound").toBeLessThanOrEqual(MAX_LINE_BYTES);
    if (startsWith(line, MARKER)) continue;
    expect(startsWith(line, PREFIX), "a line that is neither the task's nor a record").toBe(true);
    const piece = line.subarray(PREFIX.length);
    expect(task.subarray(at, at + piece.length).equals(piece), `the task's bytes at ${at}`).toBe(true);
    at += piece.length;
    if (task[at] === 0x0a) at += 1;
    pieces.push(piece);
  }
  expect(at).toBe(task.length);
  return pieces;
}

/** Pieces a pipe could give: a byte or a few at a time, a pipe's worth, or more than a line holds. */
const pieceSizes = fc.array(
  fc.oneof(
    fc.integer({ min: 1, max: 4 }),
    fc.integer({ min: 1, max: 200 }),
    fc.integer({ min: 1, max: 20_000 }),
  ),
  { minLength: 1, maxLength: 12 },
);

/** Bytes biased toward UTF-8's continuation bytes (0x80-0xBF) and leads (2, 3 and 4 bytes), in long runs. */
const taskBytes = fc
  .array(
    fc.oneof(
      {
        weight: 4,
        arbitrary: fc.tuple(fc.integer({ min: 0x80, max: 0xbf }), fc.integer({ min: 1, max: 12_000 })),
      },
      {
        weight: 2,
        arbitrary: fc.tuple(fc.constantFrom(0xc3, 0xe2, 0xf0, 0xf8, 0xff), fc.integer({ min: 1, max: 5 })),
      },
      { weight: 2, arbitrary: fc.tuple(fc.integer({ min: 0, max: 0xff }), fc.integer({ min: 1, max: 3 })) },
      { weight: 1, arbitrary: fc.tuple(fc.constant(0x0a), fc.integer({ min: 1, max: 2 })) },
      { weight: 1, arbitrary: fc.tuple(fc.constant(0x78), fc.integer({ min: 1, max: 9_000 })) },
    ),
    { maxLength: 40 },
  )
  .map((runs) => Buffer.concat(runs.map(([byte, count]) => Buffer.alloc(count, byte))));

/** Valid UTF-8 with long lines of 1- to 4-byte characters. */
const utf8Text = fc
  .array(fc.tuple(fc.constantFrom("x", "é", "€", "😀", "\n"), fc.integer({ min: 1, max: 6_000 })), {
    maxLength: 20,
  })
  .map((runs) => Buffer.from(runs.map(([char, count]) => char.repeat(char === "\n" ? 1 : count)).join("")));

describe("pod log: the 8 KiB cut of a task's line", () => {
  it("no line is longer than the bound, whatever the bytes and however they come, and no byte is lost", async () => {
    await fc.assert(
      fc.asyncProperty(taskBytes, pieceSizes, async (task, sizes) => {
        expectBoundAndBytes(await logOf(task, sizes), task);
      }),
      {
        numRuns: 150,
        examples: [
          // Only continuation bytes, two at a time: each piece once went past the limit uncut.
          [Buffer.alloc(30_000, 0x80), [2]],
          [Buffer.alloc(30_000, 0xbf), [1]],
          [Buffer.alloc(30_000, 0x80), [3]],
          [Buffer.concat([Buffer.alloc(8187, 0x80), Buffer.alloc(4000, 0x80)]), [8187, 1, 2, 3]],
        ],
      },
    );
  });

  it("cuts valid UTF-8 between characters, never inside one, however the pieces split them", async () => {
    const decoder = new TextDecoder("utf-8", { fatal: true });
    await fc.assert(
      fc.asyncProperty(utf8Text, pieceSizes, async (task, sizes) => {
        const pieces = expectBoundAndBytes(await logOf(task, sizes), task);
        for (const piece of pieces) expect(() => decoder.decode(piece)).not.toThrow();
      }),
      { numRuns: 100, examples: [[Buffer.from("😀".repeat(5000)), [1]]] },
    );
  });

  it("cuts a line of single-byte characters at the bound exactly", async () => {
    const log = await logOf(Buffer.alloc(20_000, 0x78), [3]);
    const lengths = linesOf(log).map((line) => line.length);
    expect(lengths).toEqual([MAX_LINE_BYTES, MAX_LINE_BYTES, 20_000 - 2 * (MAX_LINE_BYTES - 4) + 4]);
  });
});
