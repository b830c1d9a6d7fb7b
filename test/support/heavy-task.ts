// A task that costs something measurable: it holds about 200 MB and burns 2 s of CPU in a loop, and
// what /usr/bin/time (Debian's `time`) says the same command cost, to hold the runner's figures to.
// The loop's CPU is fixed; what varies between the task and the reference run is the rest (Python's
// start, touching 200 MB: 0.2 to 0.35 s on a loaded machine), so the loop is long enough that the
// rest stays within the 10% (with 1 s, one CI run under load measured 1.35 s against 1.2 s).
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** The Python that runs it: the interpreter itself, not a wrapper (pyenv's shim is a shell script). */
export const PYTHON =
  spawnSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).stdout.trim() ||
  null;

export const TIME = "/usr/bin/time";

const SCRIPT = `
import time
held = bytearray(200 * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
start = time.process_time()
while time.process_time() - start < 2.0:
    pass
`;

/** Writes the script into `dir`; the command that runs it, as a task's `run`. */
export function heavyTask(dir: string): string {
  const script = join(dir, "heavy.py");
  writeFileSync(script, SCRIPT);
  return `${PYTHON} ${script}`;
}

/** What /usr/bin/time says `sh -c RUN` cost: CPU seconds (user + system) and peak RSS in KiB. */
export function timeOf(run: string): { cpuSeconds: number; maxRssKiB: number } {
  const result = spawnSync(TIME, ["-f", "%U %S %M", "sh", "-c", run], { encoding: "utf8" });
  const last = result.stderr.trim().split("\n").at(-1) ?? "";
  const [user, system, kib] = last.split(" ").map(Number);
  if (user === undefined || system === undefined || kib === undefined || Number.isNaN(kib)) {
    throw new Error(`${TIME} said: ${result.stderr}`);
  }
  return { cpuSeconds: user + system, maxRssKiB: kib };
}

/** Within 10% of the reference. */
export function within10Percent(measured: number, reference: number): boolean {
  return Math.abs(measured - reference) <= 0.1 * reference;
}
