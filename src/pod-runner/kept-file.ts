// A small kernel file the runner reads before and after every task (/proc/self/stat, the memory
// cgroup's OOM count): opened once and read again from its start with pread, which makes the
// kernel render it anew, instead of an open, a read and a close each time (a trivial task's
// profile showed them). The files are few and named by the runner, never by a task, so they stay
// open for the process's life.
import { openSync, readSync } from "node:fs";

const kept = new Map<string, { fd: number; buffer: Buffer }>();

/** The file's whole text now (latin1), or null when it cannot be opened or read. */
export function readKept(file: string): string | null {
  let entry = kept.get(file);
  try {
    if (!entry) {
      entry = { fd: openSync(file, "r"), buffer: Buffer.allocUnsafe(4096) };
      kept.set(file, entry);
    }
    for (;;) {
      const length = readSync(entry.fd, entry.buffer, 0, entry.buffer.length, 0);
      // A full buffer may have cut the file short: read it again into one twice the size.
      if (length < entry.buffer.length) return entry.buffer.toString("latin1", 0, length);
      entry.buffer = Buffer.allocUnsafe(entry.buffer.length * 2);
    }
  } catch {
    return null;
  }
}

/** The number after `name ` at a line's start in `text` (`oom_kill 3`), or null. */
export function fieldIn(text: string, name: string): number | null {
  const at = text.startsWith(`${name} `) ? 0 : text.indexOf(`\n${name} `);
  if (at === -1) return null;
  const from = at === 0 ? name.length + 1 : at + name.length + 2;
  const end = text.indexOf("\n", from);
  const value = text.slice(from, end === -1 ? undefined : end);
  return /^\d+$/.test(value) ? Number(value) : null;
}
