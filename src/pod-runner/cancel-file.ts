// The cooperative stop: a file whose appearance tells a tool to wind down before the signals come.
// Created exclusively and never through a symlink, so a task cannot aim the runner's write at a
// file of its choosing.
import { closeSync, constants, openSync, writeSync } from "node:fs";

export type CancelFileResult = { written: true } | { written: false; reason: string };

export function writeCancelFile(path: string, text: string): CancelFileResult {
  let fd: number;
  try {
    fd = openSync(
      path,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o644,
    );
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
