// A task that costs something measurable: it holds about 200 MB and burns 1 s of CPU in a loop,
// then says what it cost as it measured itself (its own CPU time and peak resident memory, read
// just before it exits). The runner's figures are held to those: the same process measured two
// ways, so neither another run of the script nor the machine's load is in the comparison (a second
// run under /usr/bin/time differed by Python's start and the 200 MB it touches: 2.73 s against
// 2.19 s on a loaded fresh machine).
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** The Python that runs it: the interpreter itself, not a wrapper (pyenv's shim is a shell script). */
export const PYTHON =
  spawnSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).stdout.trim() ||
  null;

const SCRIPT = `
import os, time
held = bytearray(200 * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
start = time.process_time()
while time.process_time() - start < 1.0:
    pass
# Freed before the measure: giving 200 MB back is the costliest part of an exit.
del held
own = os.times()
with open("/proc/self/status") as status:
    peak = next(line for line in status if line.startswith("VmHWM:")).split()[1]
print(f"self-measured cpu {own.user + own.system:.3f} peak {peak}", flush=True)
`;

/** Writes the script into `dir`; the command that runs it, as a task's `run`. */
export function heavyTask(dir: string): string {
  const script = join(dir, "heavy.py");
  writeFileSync(script, SCRIPT);
  return `${PYTHON} ${script}`;
}

/** What the task said it cost (its line `self-measured cpu S peak KIB`, prefixed or not). */
export function selfMeasured(output: string): { cpuSeconds: number; maxRssKiB: number } {
  const m = /self-measured cpu ([\d.]+) peak (\d+)/.exec(output);
  if (!m) throw new Error(`the task did not say what it cost: ${output.slice(-500)}`);
  return { cpuSeconds: Number(m[1]), maxRssKiB: Number(m[2]) };
}

/**
 * The runner's CPU figure against the task's own: never below it (the runner's covers the task's
 * whole life, its shell and its exit too; /proc's clock ticks are 10 ms), and above it only by what
 * the process did after it measured (the interpreter's exit, tearing down its memory: 0.06 to
 * 0.1 s measured here), 10% and 50 ms at most. The same process's work, so the machine's load
 * does not enter it.
 */
export function cpuAgrees(runner: number, own: number): boolean {
  return runner >= own - 0.02 && runner <= own * 1.1 + 0.05;
}

/** Within 10% of the reference. */
export function within10Percent(measured: number, reference: number): boolean {
  return Math.abs(measured - reference) <= 0.1 * reference;
}
