// A pipe's chunk is a fresh ArrayBuffer per read (Node's stream_base), and only a GC frees it. At
// hundreds of MiB/s they pile up between scavenges as external memory (the runner's own heap grows
// slowly, so scavenges are rare), and V8 answers with a mark-compact every ~60 ms: 20 to 30 a GiB,
// with its marking threads on the cores the task needs. Once the runner's tail and its sink are
// both done with a chunk nothing holds it: detaching the buffer frees it at once.

interface Transferable {
  transfer?(length: number): ArrayBuffer;
}

/**
 * Frees `chunk` now when it is a buffer of its own (a read of a pipe or socket); a view of a larger
 * buffer is left to the GC, as others may share it. Only for a chunk nothing else holds.
 */
export function freeChunk(chunk: Buffer): void {
  // transfer(0) detaches the buffer and releases its memory; where it is missing, the GC does.
  if (chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength) {
    (chunk.buffer as Transferable).transfer?.(0);
  }
}

/**
 * Pipe chunks still held by the tail (always) and by the sink (when it was handed the chunk itself,
 * not a copy), freed when the last lets go (by freeChunk, which leaves a view of a larger buffer
 * alone). Only for chunks nobody else holds (a pipe read by Node, see Launched.chunksOwned).
 */
export class SpentChunks {
  private readonly holders = new WeakMap<Buffer, number>();

  /** `chunk` went into the tail, and to the sink itself when `bySink` (a copy of it otherwise). */
  passed(chunk: Buffer, bySink: boolean): void {
    this.holders.set(chunk, bySink ? 2 : 1);
  }

  /** The tail or the sink let go of `chunk`: freed when it was the last. */
  release(chunk: Buffer): void {
    const left = this.holders.get(chunk);
    if (left === undefined) return;
    if (left > 1) {
      this.holders.set(chunk, left - 1);
      return;
    }
    this.holders.delete(chunk);
    freeChunk(chunk);
  }
}
