// Task output: streamed through with a "[task] " prefix at each line start, bytes untouched
// (no decoding, so invalid UTF-8 and lines without newlines pass as they are), and a bounded
// tail kept for the report.
import { Transform, type TransformCallback } from "node:stream";

const NEWLINE = 0x0a;

/** Keeps the last `limit` bytes written to it. */
export class OutputTail {
  private chunks: Buffer[] = [];
  private size = 0;
  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  push(chunk: Buffer): void {
    if (chunk.length >= this.limit) {
      this.chunks = [Buffer.from(chunk.subarray(chunk.length - this.limit))];
      this.size = this.limit;
      return;
    }
    this.chunks.push(Buffer.from(chunk));
    this.size += chunk.length;
    while (this.size - (this.chunks[0]?.length ?? 0) >= this.limit) {
      this.size -= this.chunks.shift()?.length ?? 0;
    }
  }

  /** The last non-empty line, decoded leniently, for a failure message. */
  lastLine(maxChars = 200): string {
    const text = Buffer.concat(this.chunks).toString("utf8").replace(/\s+$/, "");
    const line = text.slice(text.lastIndexOf("\n") + 1).trim();
    return line.length > maxChars ? `…${line.slice(line.length - maxChars + 1)}` : line;
  }
}

/** Prefixes each line with `prefix`; `onData` sees every raw chunk first (stall timer, tail). */
export class LinePrefixer extends Transform {
  private atLineStart = true;
  private readonly prefix: Buffer;
  private readonly onData: (chunk: Buffer) => void;

  constructor(prefix: string, onData: (chunk: Buffer) => void) {
    super();
    this.prefix = Buffer.from(prefix);
    this.onData = onData;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.onData(chunk);
    if (this.prefix.length === 0) {
      callback(null, chunk);
      return;
    }
    const parts: Buffer[] = [];
    let from = 0;
    while (from < chunk.length) {
      if (this.atLineStart) parts.push(this.prefix);
      const newline = chunk.indexOf(NEWLINE, from);
      if (newline === -1) {
        parts.push(chunk.subarray(from));
        this.atLineStart = false;
        break;
      }
      parts.push(chunk.subarray(from, newline + 1));
      this.atLineStart = true;
      from = newline + 1;
    }
    callback(null, parts.length === 1 ? parts[0] : Buffer.concat(parts));
  }

  override _flush(callback: TransformCallback): void {
    // End an unterminated last line so the next task's prefix starts on a line of its own.
    callback(null, this.atLineStart || this.prefix.length === 0 ? undefined : Buffer.from("\n"));
  }
}
