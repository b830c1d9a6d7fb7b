// The cooperative stop: a file whose appearance tells a tool to wind down before the signals come.
// Created exclusively and never through a symlink, so a task cannot aim the runner's write at a
// file of its choosing.
import { closeSync, constants, mkdirSync, openSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import type { ProcessTable } from "./process-table.js";

export type CancelFileResult = { written: true } | { written: false; reason: string };

const openExclusive = (path: string) =>
  openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);

export function writeCancelFile(path: string, text: string): CancelFileResult {
  let fd: number;
  try {
    try {
      fd = openExclusive(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      // The directory lives in the tasks' temp dir, which a task may have cleaned: recreate it.
      // Not recursively: its parent is the temp dir itself, and Node's recursive mkdir spins on
      // file systems such as /proc that answer ENOENT.
      mkdirSync(dirname(path), { mode: 0o700 });
      fd = openExclusive(path);
    }
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const reason =
      code === "EEXIST"
        ? "something already exists at that path (a file or symlink placed there); not written"
        : String(code);
    return { written: false, reason };
  }
  try {
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
  return { written: true };
}

/**
 * Writes the cancel file of every attempt of the run that one of `pids` belongs to, except
 * `except` (whose file is already written), once each: what earlier tasks left running is told
 * to stop the same way as the live task before the signal comes. Returns what could not be
 * written, for a warning.
 */
export async function writeCancelFilesOf(
  table: ProcessTable,
  pids: readonly number[],
  runCookie: string,
  fileOf: (attemptId: string) => string,
  text: string,
  except?: string,
): Promise<string[]> {
  const attempts = new Set<string>();
  for (const id of await Promise.all(pids.map((pid) => table.attemptIdOf(pid, runCookie)))) {
    if (id !== null && id !== except) attempts.add(id);
  }
  return writeCancelFiles(attempts, fileOf, text);
}

/** The cancel file of each of `attempts`; returns what could not be written, for a warning. */
export function writeCancelFiles(
  attempts: Iterable<string>,
  fileOf: (attemptId: string) => string,
  text: string,
): string[] {
  const failures: string[] = [];
  for (const id of attempts) {
    const path = fileOf(id);
    const written = writeCancelFile(path, text);
    if (!written.written) failures.push(`cancel file ${path}: ${written.reason}`);
  }
  return failures;
}
