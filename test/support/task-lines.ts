// What the tests of task lines share (test/runner/task-lines.test.ts, agent-mode.test.ts): tasks
// that interleave a partial line with other output, and a check that every line of the log is a
// task's behind its prefix or the runner's own.
//
// The task waits until the runner has read what it wrote (its pipe is empty, FIONREAD) before it
// writes on the other stream, so each piece reaches the runner as a chunk of its own, in order:
// the interleaving does not depend on the machine's load.
import { expect } from "vitest";
import { PROGRESS_MARKER } from "../../src/api/progress-record.js";
import { PYTHON } from "./heavy-task.js";

/** `drained FD`: returns once the runner has read everything written to the task's FD. */
export const DRAINED = `drained() { ${PYTHON} -c 'import fcntl, struct, sys, termios, time
while struct.unpack("i", fcntl.ioctl(int(sys.argv[1]), termios.FIONREAD, bytes(4)))[0]: time.sleep(0.005)' "$1"; }`;

/** The example, each piece read by the runner before the next is written. */
export const DOWNLOADING = `${DRAINED}; printf 'Downloading... '; drained 1; echo warn >&2; drained 2; echo done`;
export const EXAMPLE_LINES = ["[p] Downloading... ", "[p] warn", "[p] done"];

/** A partial line left open until the runner cancels the task (SIGTERM), then the rest of it (the shell's "Terminated" for its sleep not shown). */
export const OPEN_UNTIL_TERM =
  "trap 'echo done; exit 0' TERM; printf 'Downloading... '; exec 2>/dev/null; while :; do sleep 0.05; done";

/**
 * The lines of a log where task output and the runner's lines meet: each must be a task's (behind
 * its prefix) or the runner's own (`playbook: ...`, a progress record); the task's are returned.
 */
export function taskLinesOf(log: string, prefix = "[p] "): string[] {
  expect(log.endsWith("\n"), `the log ends inside a line: ${JSON.stringify(log.slice(-80))}`).toBe(true);
  const lines = log.split("\n").slice(0, -1);
  for (const line of lines) {
    const owned =
      line.startsWith(prefix) || line.startsWith("playbook: ") || line.startsWith(PROGRESS_MARKER);
    expect(owned, `a line that is neither the task's nor the runner's: ${JSON.stringify(line)}\n${log}`).toBe(
      true,
    );
  }
  return lines.filter((line) => line.startsWith(prefix));
}
