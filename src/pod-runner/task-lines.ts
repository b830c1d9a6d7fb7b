// Whose line is open where several writers share one target: each task stream (through its own
// LinePrefixer) and the runner's own lines. A stream's partial line is not joined by anyone else's
// bytes: the open line is ended with "\n" first, and the stream's next bytes, which its prefixer
// took for the rest of that line, get their prefix again. So every line starts with its task's
// prefix or is the runner's. Nothing is held back until its newline (a progress bar still shows as
// it comes), and the work is per chunk, never per byte.
import { type ChunkLines, type LinePrefixer, linesOf } from "./output.js";

/** How a task chunk goes to the target, given whose line is open there. */
export type TaskChunkPlace =
  /** it starts at a line start, or goes on with its own open line: as it is */
  | "as-is"
  /** it starts a line while another's is open: "\n" first */
  | "after-newline"
  /** it goes on with a line that was ended: whatever is open is ended, then its prefix again */
  | "prefix-again"
  /** the prefixer's closing "\n" (or the task's) for a line that was ended already: nothing */
  | "skip";

const NEWLINE = Buffer.from("\n");

/** `open`: the owner of the line open at the target (null: it is at a line start). */
export function placeTaskChunk(open: unknown, lines: ChunkLines, chunk: Uint8Array): TaskChunkPlace {
  if (!lines.continues) return open === null ? "as-is" : "after-newline";
  if (open === lines.from) return "as-is";
  if (!lines.leavesOpen && chunk.length === 1 && chunk[0] === 0x0a) return "skip";
  return "prefix-again";
}

/** Bytes no prefixer wrote (a run without prefixes): their line is nobody's to go on with. */
const UNTOLD = Symbol("untold");

/**
 * A chunk for a terminal: a carriage return that is no line end (a progress bar's redraw) sends
 * the cursor back over the prefix, so the prefix goes again after it. Pieces of the chunk, no
 * copy; a chunk without "\r" is one native search and passes as it is.
 */
export function prefixAfterReturns(chunk: Buffer, prefix: Buffer): Buffer[] {
  let at = chunk.indexOf(0x0d);
  if (at === -1) return [chunk];
  const pieces: Buffer[] = [];
  let from = 0;
  for (; at !== -1; at = chunk.indexOf(0x0d, at + 1)) {
    if (chunk[at + 1] === 0x0a) continue;
    pieces.push(chunk.subarray(from, at + 1), prefix);
    from = at + 1;
  }
  if (from < chunk.length) pieces.push(chunk.subarray(from));
  return pieces;
}

/**
 * The open line at one target, kept as the bytes are written to it (in the target's order): the
 * caller asks before each write what to put in front of it.
 */
export class TaskLines {
  private open: LinePrefixer | typeof UNTOLD | null = null;
  /** the target is a terminal: a task's "\r" redraw carries its prefix again */
  private readonly terminal: boolean;

  constructor(terminal = false) {
    this.terminal = terminal;
  }

  /** The pieces that put a task's chunk (from a LinePrefixer) at the target; none: nothing to write. */
  task(chunk: Buffer): Buffer[] {
    if (chunk.length === 0) return [];
    const lines = linesOf(chunk);
    if (!lines) {
      this.open = chunk[chunk.length - 1] === 0x0a ? null : UNTOLD;
      return [chunk];
    }
    const place = placeTaskChunk(this.open, lines, chunk);
    if (place === "skip") return [];
    const endOpen = this.open !== null;
    this.open = lines.leavesOpen ? lines.from : null;
    const pieces =
      place === "as-is"
        ? [chunk]
        : place === "after-newline"
          ? [NEWLINE, chunk]
          : endOpen
            ? [NEWLINE, lines.from.prefix, chunk]
            : [lines.from.prefix, chunk];
    if (!this.terminal) return pieces;
    // On a terminal only: the chunk, the last piece, with its prefix again after each redraw.
    return [...pieces.slice(0, -1), ...prefixAfterReturns(chunk, lines.from.prefix)];
  }

  /** Before the runner's own whole line(s): "\n" to end an open task line first, or null. */
  ownLine(): Buffer | null {
    if (this.open === null) return null;
    this.open = null;
    return NEWLINE;
  }
}
