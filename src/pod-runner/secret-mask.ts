// Secret values printed as `***` in a task's output. The mask works on each stream's raw bytes,
// before the line prefixes, the tail, the pod's log cuts and the terminal's redraws see them, so a
// value is masked however its bytes were split (writes, pipe chunks, agent frames) and whatever
// is later put around it. Only the bytes that could still become a value are held back (the end
// of a chunk that is the start of one, at most the longest value's length less one), and only
// until the next chunk or the stream's end says what they are. The values live only in this
// module's memory: nothing here logs or reports them.
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** What a masked value prints as. */
export const MASK_TEXT = "***";
/** Shorter values are not masked: `***` for every `a` or `ok` would hide the output, not a secret. */
export const MIN_MASKED_LENGTH = 4;
/** The largest file a mask directory's value is read from; a larger one is no secret value. */
export const MAX_MASK_FILE_BYTES = 4096;
/** The pod's directories (colon-separated) whose files hold the values to mask. */
export const MASK_DIRS_ENV_VAR = "PLAYBOOK_MASK_DIRS";
// A secret volume holds its files one directory down (`..2026_…/key`, behind `key` symlinks).
const MAX_DEPTH = 4;
const MAX_FILES = 1024;

const MASK = Buffer.from(MASK_TEXT);
const EMPTY = Buffer.alloc(0);

/** One stream's mask: what it gives out is the stream's bytes with each value as `***`. */
export interface StreamMask {
  /** The chunk masked: the chunk itself when nothing in it is (or may become) a value. */
  push(chunk: Buffer): Buffer;
  /** What was held back at the stream's end, masked (empty when nothing was). */
  end(): Buffer;
}

export interface SecretMask {
  /** false: no value to mask, and `stream` passes bytes as they are */
  readonly active: boolean;
  /** A mask for one stream (each of a task's stdout and stderr has its own). */
  stream(): StreamMask;
  /** A whole text masked at once. */
  text(text: string): string;
}

/**
 * The values a secret's text masks: each of its lines (a multi-line value is masked line by line,
 * so a line-oriented output shows none of it), without a line's "\r", of at least
 * MIN_MASKED_LENGTH characters and not only whitespace.
 */
export function maskedLinesOf(value: string): string[] {
  return value
    .split("\n")
    .map((line) => line.replace(/\r$/, ""))
    .filter((line) => line.length >= MIN_MASKED_LENGTH && line.trim() !== "");
}

const PASS_THROUGH: StreamMask = { push: (chunk) => chunk, end: () => EMPTY };

export function createSecretMask(values: readonly string[]): SecretMask {
  const unique = [...new Set(values.flatMap(maskedLinesOf))];
  // Longest first. Where values overlap ("pass" in "password1") the union of their places is
  // masked, so no part of the longer one shows beside the shorter one's `***`.
  const buffers = unique.map((value) => Buffer.from(value)).sort((a, b) => b.length - a.length);
  const active = buffers.length > 0;
  return {
    active,
    stream: () => (active ? new ValueMask(buffers) : PASS_THROUGH),
    text: (text) => {
      if (!active) return text;
      const mask = new ValueMask(buffers);
      return Buffer.concat([mask.push(Buffer.from(text)), mask.end()]).toString();
    },
  };
}

/** Whether `data[from..]` is the start of `value` (and shorter than it). */
function startsValue(data: Buffer, from: number, value: Buffer): boolean {
  const length = data.length - from;
  if (length >= value.length) return false;
  for (let i = 0; i < length; i++) if (data[from + i] !== value[i]) return false;
  return true;
}

class ValueMask implements StreamMask {
  private readonly values: readonly Buffer[];
  /** bytes held back: the end of the last chunk that may be a value's start */
  private held: Buffer = EMPTY;
  /** how many bytes at the start of `held` a value given out already covers */
  private heldCovered = 0;
  /** the last byte given out was masked: a value that goes on from it adds no second `***` */
  private inMask = false;

  constructor(values: readonly Buffer[]) {
    this.values = values;
  }

  push(chunk: Buffer): Buffer {
    if (chunk.length === 0) return chunk;
    const data = this.held.length > 0 ? Buffer.concat([this.held, chunk]) : chunk;
    return this.give(data, this.heldStart(data));
  }

  end(): Buffer {
    if (this.held.length === 0) return EMPTY;
    const data = this.held;
    return this.give(data, data.length);
  }

  /** Where the bytes that may still become a value start (data.length: none may). */
  private heldStart(data: Buffer): number {
    const length = data.length;
    let start = length;
    for (const value of this.values) {
      const first = value[0] as number;
      for (let at = Math.max(0, length - value.length + 1); at < start; at++) {
        if (data[at] === first && startsValue(data, at, value)) {
          start = at;
          break;
        }
      }
    }
    return start;
  }

  /** Every place a value covers in `data`, merged where they overlap or touch, in order. */
  private covered(data: Buffer): number[] {
    let places: number[] = [];
    if (this.heldCovered > 0) places.push(0, this.heldCovered);
    let found = 0;
    for (const value of this.values) {
      // One value's places come in order: overlapping ones ("aaaa" in a run of "a") are merged
      // as they come, so a long run costs one place, not one per byte.
      let start = -1;
      let end = -1;
      for (let at = data.indexOf(value); at !== -1; at = data.indexOf(value, at + 1)) {
        if (start !== -1 && at <= end) {
          end = at + value.length;
          continue;
        }
        if (start !== -1) places.push(start, end);
        start = at;
        end = at + value.length;
      }
      if (start === -1) continue;
      places.push(start, end);
      found += 1;
    }
    if (places.length <= 2) return places;
    // Places of several values: in order of their starts (the held place starts at 0, first).
    if (found > 1) {
      const pairs: [number, number][] = [];
      for (let i = 0; i < places.length; i += 2) pairs.push([places[i] as number, places[i + 1] as number]);
      pairs.sort((a, b) => a[0] - b[0]);
      places = pairs.flat();
    }
    const merged: number[] = [];
    for (let i = 0; i < places.length; i += 2) {
      const start = places[i] as number;
      const end = places[i + 1] as number;
      const last = merged.length - 1;
      if (last > 0 && start <= (merged[last] as number)) merged[last] = Math.max(merged[last] as number, end);
      else merged.push(start, end);
    }
    return merged;
  }

  /** Gives out `data[0..upTo)` masked and holds the rest. */
  private give(data: Buffer, upTo: number): Buffer {
    const places = this.covered(data);
    if (places.length === 0 && upTo === data.length) {
      this.held = EMPTY;
      this.heldCovered = 0;
      this.inMask = false;
      return data;
    }
    const pieces: Buffer[] = [];
    let from = 0;
    let inMask = this.inMask;
    let heldCovered = 0;
    for (let i = 0; i < places.length && (places[i] as number) < upTo; i += 2) {
      const start = places[i] as number;
      const end = places[i + 1] as number;
      if (start > from) {
        pieces.push(data.subarray(from, start));
        inMask = false;
      }
      if (!inMask) pieces.push(MASK);
      inMask = true;
      from = end;
      if (end > upTo) heldCovered = end - upTo;
    }
    if (from < upTo) {
      pieces.push(data.subarray(from, upTo));
      inMask = false;
    }
    this.inMask = inMask;
    this.heldCovered = heldCovered;
    // A copy: the chunk it was cut from may be freed or reused once given out.
    this.held = upTo < data.length ? Buffer.from(data.subarray(upTo)) : EMPTY;
    // Never the shared MASK itself: what is given out is the caller's to free, and is told apart
    // by identity downstream (output.ts's linesOf).
    const only = pieces.length === 1 ? (pieces[0] as Buffer) : null;
    return only !== null && only !== MASK ? only : Buffer.concat(pieces);
  }
}

/** A mask directory that cannot be read: the run does not start (the CLI exits 2, naming it). */
export class MaskDirError extends Error {
  override name = "MaskDirError";
}

/** What a failed read says: its code (ENOENT, EACCES), else its message. */
function why(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : String((error as Error).message ?? error);
}

/**
 * The values in the files under `dirs`: each regular file of at most MAX_MASK_FILE_BYTES (symbolic
 * links are not followed; a secret volume's files are found where they are). A directory that
 * cannot be read is an error: output the runner cannot mask must not be printed unmasked.
 */
export function readMaskDirs(dirs: readonly string[]): string[] {
  const values: string[] = [];
  let files = 0;
  const walk = (dir: string, depth: number) => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch (error) {
      throw new MaskDirError(
        `${MASK_DIRS_ENV_VAR}: cannot read the directory ${JSON.stringify(dir)} (${why(error)})`,
      );
    }
    for (const name of names.sort()) {
      const path = join(dir, name);
      const stat = lstatSync(path, { throwIfNoEntry: false });
      if (stat?.isDirectory() && depth < MAX_DEPTH) walk(path, depth + 1);
      if (!stat?.isFile() || stat.size > MAX_MASK_FILE_BYTES) continue;
      if (++files > MAX_FILES) {
        throw new MaskDirError(
          `${MASK_DIRS_ENV_VAR}: more than ${MAX_FILES} files under ${JSON.stringify(dir)}`,
        );
      }
      values.push(readFileSync(path, "utf8"));
    }
  };
  for (const dir of dirs) walk(dir, 0);
  return values;
}

/** The directories `PLAYBOOK_MASK_DIRS` names (colon-separated, empty entries ignored). */
export function maskDirsOf(env: NodeJS.ProcessEnv): string[] {
  return (env[MASK_DIRS_ENV_VAR] ?? "").split(":").filter((dir) => dir !== "");
}
