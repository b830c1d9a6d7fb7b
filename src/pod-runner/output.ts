// Task output: streamed through with a "[task] " prefix at each line start, bytes untouched
// (no decoding, so invalid UTF-8 and lines without newlines pass as they are), and a bounded
// tail kept for the report.
import { KERNEL_MIN_CHUNK, kernelPrefixed } from "./line-kernel.js";

/**
 * Keeps (at least) the last `limit` bytes written to it. Chunks are held by reference, not
 * copied: a pipe's chunks are not reused once emitted, and at most one chunk beyond the limit
 * is held. `dropped` hears of each chunk it lets go of (to free it: spent-chunks.ts).
 */
export class OutputTail {
  private chunks: Buffer[] = [];
  private size = 0;
  private readonly limit: number;
  private readonly dropped: ((chunk: Buffer) => void) | undefined;

  constructor(limit: number, dropped?: (chunk: Buffer) => void) {
    this.limit = limit;
    this.dropped = dropped;
  }

  push(chunk: Buffer): void {
    if (chunk.length >= this.limit) {
      if (this.dropped) for (const old of this.chunks) this.dropped(old);
      this.chunks = [chunk];
      this.size = chunk.length;
      return;
    }
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size - (this.chunks[0]?.length ?? 0) >= this.limit) {
      const old = this.chunks.shift() as Buffer;
      this.size -= old.length;
      this.dropped?.(old);
    }
  }

  /** The last non-empty line, decoded leniently, for a failure message. */
  lastLine(maxChars = 200): string {
    const all = Buffer.concat(this.chunks);
    const text = all
      .subarray(Math.max(0, all.length - this.limit))
      .toString("utf8")
      .replace(/\s+$/, "");
    const line = text.slice(text.lastIndexOf("\n") + 1).trim();
    return line.length > maxChars ? `…${line.slice(line.length - maxChars + 1)}` : line;
  }
}

/** Which of a task's streams a line came from. */
export type OutputStream = "stdout" | "stderr";

/**
 * A task's stdout and stderr tails, apart: a failure message quotes stderr's last line, where the
 * error usually is, before stdout's (a version banner, a progress line). Each chunk goes into one
 * tail by reference: no per-byte work while the task prints; lines are looked for at the end.
 */
export class TaskOutputTails {
  private readonly tails: Record<OutputStream, OutputTail>;

  constructor(limit: number, dropped?: (chunk: Buffer) => void) {
    this.tails = { stdout: new OutputTail(limit, dropped), stderr: new OutputTail(limit, dropped) };
  }

  push(stream: OutputStream, chunk: Buffer): void {
    this.tails[stream].push(chunk);
  }

  /** stderr's last non-empty line, else stdout's, with the stream it came from. */
  lastLine(maxChars = 200): { stream: OutputStream; line: string } | undefined {
    for (const stream of ["stderr", "stdout"] as const) {
      const line = this.tails[stream].lastLine(maxChars);
      if (line) return { stream, line };
    }
    return undefined;
  }
}

/**
 * How a chunk of LinePrefixer's output sits on its lines: what a writer that puts lines of its own
 * between task chunks (the pod's log, pod-log.ts) needs to keep every line start a prefix or its own.
 */
export interface ChunkLines {
  from: LinePrefixer;
  /** it goes on with the line its source left open: no prefix at its start */
  continues: boolean;
  /** it leaves its last line open: no newline at its end */
  leavesOpen: boolean;
}

const chunkLines = new WeakMap<Uint8Array, ChunkLines>();

/** What LinePrefixer said of a chunk it gave out (undefined: not one of its chunks, or no prefix). */
export function linesOf(chunk: Uint8Array): ChunkLines | undefined {
  return chunkLines.get(chunk);
}

// Output buffers kept for reuse: about one pipe chunk with its prefixes. Larger ones are not kept.
const SPARE_CAPACITY = 128 * 1024;
const MAX_SPARES = 4;

/**
 * Prefixes each line with `prefix`, byte for byte otherwise. Newline positions are collected
 * first so each chunk gets one output buffer of the right size: at 1 GiB of short lines the
 * per-line cost is what decides the runner's throughput.
 *
 * With `recycle`, output buffers handed back through `release` are reused. A fresh buffer per
 * chunk is fresh memory the kernel must fault in and zero, which at 100-byte lines costs as much
 * as the prefixing itself. Only for a sink that is done with a chunk once it has called back.
 */
export class LinePrefixer {
  private atLineStart = true;
  readonly prefix: Buffer;
  private positions = new Int32Array(1024);
  private readonly spares: Buffer[] = [];
  private readonly owned = new WeakSet<ArrayBufferLike>();
  private readonly recycle: boolean;

  private readonly allocateBound = (size: number) => this.allocate(size);

  constructor(prefix: string, recycle = false) {
    this.prefix = Buffer.from(prefix);
    this.recycle = recycle;
  }

  /** Takes back a buffer `push` returned, once its reader is done with it. */
  release(out: Buffer): void {
    if (this.owned.has(out.buffer) && this.spares.length < MAX_SPARES)
      this.spares.push(Buffer.from(out.buffer));
  }

  private allocate(size: number): Buffer {
    if (!this.recycle || size > SPARE_CAPACITY) return Buffer.allocUnsafe(size);
    const spare = this.spares.pop();
    if (spare) return spare.subarray(0, size);
    // Its own ArrayBuffer (never a slice of Node's shared pool), so it can be recognised and reused.
    const fresh = Buffer.allocUnsafeSlow(SPARE_CAPACITY);
    this.owned.add(fresh.buffer);
    return fresh.subarray(0, size);
  }

  push(chunk: Buffer): Buffer {
    const prefix = this.prefix;
    const size = prefix.length;
    if (size === 0 || chunk.length === 0) return chunk;
    const continues = !this.atLineStart;
    let out: Buffer | undefined;
    if (chunk.length >= KERNEL_MIN_CHUNK) {
      if (chunk.indexOf(0x0a) === -1) {
        out = this.unended(chunk, prefix);
      } else {
        // Large chunks through the SIMD kernel (line-kernel.ts) where it runs.
        out = kernelPrefixed(chunk, prefix, this.atLineStart, this.allocateBound);
        if (out) this.atLineStart = chunk[chunk.length - 1] === 0x0a;
      }
    }
    out ??= this.prefixed(chunk, prefix, size);
    chunkLines.set(out, { from: this, continues, leavesOpen: !this.atLineStart });
    return out;
  }

  /** A chunk with no line end: only one that starts a line needs a copy (of prefix + chunk). */
  private unended(chunk: Buffer, prefix: Buffer): Buffer {
    const starts = this.atLineStart;
    this.atLineStart = false;
    return starts ? Buffer.concat([prefix, chunk]) : chunk;
  }

  private prefixed(chunk: Buffer, prefix: Buffer, size: number): Buffer {
    // Buffer#indexOf per line: cheaper than a latin1 string of the chunk searched with
    // String#indexOf (which also made a string of every byte for the collector), 150 against
    // 190 ms/GiB of 100-byte lines on Node 20.
    let positions = this.positions;
    let count = 0;
    for (let at = chunk.indexOf(0x0a); at !== -1; at = chunk.indexOf(0x0a, at + 1)) {
      if (count === positions.length) {
        const grown = new Int32Array(count * 2);
        grown.set(positions);
        this.positions = positions = grown;
      }
      positions[count++] = at;
    }
    if (count === 0) return this.unended(chunk, prefix);
    const starts = this.atLineStart;
    // The chunk is copied once to the end of the output, then each line is moved down to its
    // place behind its prefix with copyWithin: no per-line Buffer objects, which at 100-byte
    // lines cost more than the bytes themselves. The loop keeps everything in locals: at ten
    // million lines a GiB, a field write or a closure call per line shows in the profile.
    const length = chunk.length;
    const total = length + (count + 1) * size;
    const out = this.allocate(total);
    const shift = total - length;
    out.set(chunk, shift);
    let written = 0;
    let from = 0;
    if (!starts) {
      // The first line goes on with the one the last chunk left open: no prefix.
      const end = (positions[0] as number) + 1;
      out.copyWithin(0, shift, end + shift);
      written = end;
      from = end;
    }
    for (let k = starts ? 0 : 1; k < count; k++) {
      for (let i = 0; i < size; i++) out[written + i] = prefix[i] as number;
      written += size;
      const end = (positions[k] as number) + 1;
      out.copyWithin(written, from + shift, end + shift);
      written += end - from;
      from = end;
    }
    if (from < length) {
      for (let i = 0; i < size; i++) out[written + i] = prefix[i] as number;
      written += size;
      out.copyWithin(written, from + shift, length + shift);
      written += length - from;
    }
    this.atLineStart = from === length;
    return out.subarray(0, written);
  }

  /** Ends an unterminated last line so the next task's prefix starts on a line of its own. */
  end(): Buffer | null {
    if (this.atLineStart || this.prefix.length === 0) return null;
    this.atLineStart = true;
    const newline = Buffer.from("\n");
    chunkLines.set(newline, { from: this, continues: true, leavesOpen: false });
    return newline;
  }
}

/**
 * Writes `pieces` to `target` and calls `done` once the target has written the last one out, not
 * when it merely queued it: the caller reuses the chunks' memory after that. A reader that went
 * away fails the write; the error releases it too, or the tasks' pipes would stay paused and the
 * run hang on its stall limit.
 */
export function writeThenRelease(
  target: NodeJS.WritableStream,
  pieces: readonly Buffer[],
  done: () => void,
): void {
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    target.off("error", release);
    done();
  };
  const last = pieces.at(-1);
  if (last === undefined) {
    release();
    return;
  }
  target.on("error", release);
  for (const piece of pieces.slice(0, -1)) target.write(piece);
  target.write(last, release);
}
