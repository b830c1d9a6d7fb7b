// A bounded read of a container's log through the API server (pods/log): the last lines of it,
// keeping only those that start with a given prefix and are no longer than a bound. What the
// controller reads a runner's progress records with; tests inject their own source for a node
// without a kubelet (src/controller/playbook/progress-looks.ts).
import type { ApiClient, CallOptions } from "./api-client.js";

/** Which log, how much of its end, and which of its lines are wanted. */
export interface PodLogTail {
  namespace: string;
  pod: string;
  container: string;
  tailLines: number;
}

/** The lines of a log's tail that start with the reader's prefix, oldest first. */
export type PodLogSource = (tail: PodLogTail, options?: CallOptions) => Promise<string[]>;

/**
 * Keeps, from text that arrives in chunks, the lines that start with `prefix` and hold at most
 * `maxLineBytes` bytes; the rest is dropped as it passes, so a task's megabyte line costs nothing.
 * A last line without its newline is kept too (the caller's parse decides what it is worth).
 */
export class PrefixedLines {
  readonly lines: string[] = [];
  private current = "";
  /** The current line is not wanted: everything up to its newline is dropped. */
  private skipping = false;
  private readonly prefix: string;
  private readonly maxLineBytes: number;

  constructor(prefix: string, maxLineBytes: number) {
    this.prefix = prefix;
    this.maxLineBytes = maxLineBytes;
  }

  push(chunk: string): void {
    let from = 0;
    while (from < chunk.length) {
      const newline = chunk.indexOf("\n", from);
      const end = newline < 0 ? chunk.length : newline;
      if (!this.skipping) {
        this.current += chunk.slice(from, end);
        const known = Math.min(this.current.length, this.prefix.length);
        if (
          this.current.slice(0, known) !== this.prefix.slice(0, known) ||
          Buffer.byteLength(this.current) > this.maxLineBytes
        ) {
          this.skipping = true;
          this.current = "";
        }
      }
      if (newline < 0) return;
      this.endLine();
      from = newline + 1;
    }
  }

  /** The text ended: a last line without its newline counts as a line. */
  end(): string[] {
    this.endLine();
    return this.lines;
  }

  private endLine(): void {
    const line = this.current.endsWith("\r") ? this.current.slice(0, -1) : this.current;
    if (!this.skipping && line.length >= this.prefix.length) this.lines.push(line);
    this.current = "";
    this.skipping = false;
  }
}

/** A PodLogSource over the API server's pods/log: one GET per call, of the tail's lines only. */
export function apiPodLogSource(api: ApiClient, prefix: string, maxLineBytes: number): PodLogSource {
  return async (tail, options) => {
    const kept = new PrefixedLines(prefix, maxLineBytes);
    await api.readPodLog(
      { namespace: tail.namespace, name: tail.pod, container: tail.container, tailLines: tail.tailLines },
      (chunk) => kept.push(chunk),
      options,
    );
    return kept.end();
  };
}
