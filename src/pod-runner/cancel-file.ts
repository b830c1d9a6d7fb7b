// The cooperative stop: a file whose appearance tells a tool to wind down before the signals come.
// Created exclusively and never through a symlink, so a task cannot aim the runner's write at a
// file of its choosing.
import { closeSync, constants, mkdirSync, openSync, writeSync } from "node:fs";
import { dirname } from "node:path";

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
