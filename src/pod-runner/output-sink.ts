// Where a run's task output goes on this machine: counted, its lines kept apart from the
// progress lines that share its terminal, and safe from a reader that went away.
import { fstatSync } from "node:fs";
import { Writable } from "node:stream";
import { writeThenRelease } from "./output.js";
import type { TaskLines } from "./task-lines.js";

/**
 * A sink that counts what passes and survives a closed reader (EPIPE) without losing the run.
 * `lines` keeps each stream's partial line apart from the others' (task-lines.ts).
 */
export function countingSink(
  target: NodeJS.WritableStream,
  lines: TaskLines,
  around: { before: () => void; after: (chunk: Buffer) => void },
): { sink: Writable; bytes: () => number } {
  let bytes = 0;
  let broken = false;
  target.on("error", () => {
    broken = true;
  });
  const sink = new Writable({
    highWaterMark: 1 << 16,
    write(chunk: Buffer, _encoding, callback) {
      bytes += chunk.length;
      if (broken) return callback();
      around.before();
      const pieces = lines.task(chunk);
      writeThenRelease(target, pieces, callback);
      // The chunk is the last piece written; none (a line's "\n" that was ended already) changes nothing.
      if (pieces.length > 0) around.after(chunk);
    },
  });
  return { sink, bytes: () => bytes };
}

/**
 * Whether two streams end in the same place: the same stream (`-o json` puts task output on
 * stderr), or the same terminal, pipe or file (`2>&1`). There the runner's lines and the tasks'
 * share lines, and a task's open line is ended before one of the runner's.
 */
export function sameTarget(a: NodeJS.WritableStream, b: NodeJS.WritableStream): boolean {
  if (a === b) return true;
  const fdA = (a as { fd?: unknown }).fd;
  const fdB = (b as { fd?: unknown }).fd;
  if (typeof fdA !== "number" || typeof fdB !== "number") return false;
  try {
    const [statA, statB] = [fstatSync(fdA), fstatSync(fdB)];
    return statA.dev === statB.dev && statA.ino === statB.ino && statA.rdev === statB.rdev;
  } catch {
    return false;
  }
}
