// Finding a test's processes through /proc, independently of the code under test, to check that
// nothing it started is left alive.
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** Live (non-zombie) processes, other than this one, for which `matches(pid)` holds. */
export function liveProcesses(matches: (pid: string) => boolean): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "latin1");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      if (matches(entry)) found.push(Number(entry));
    } catch {
      // Exited meanwhile, or not ours to read.
    }
  }
  return found;
}

/** Processes whose environment carries `NAME=value`. */
export function processesWithEnv(name: string, value: string): number[] {
  const needle = Buffer.from(`${name}=${value}\0`);
  return liveProcesses((pid) => readFileSync(`/proc/${pid}/environ`).indexOf(needle) !== -1);
}

/** Processes whose command line contains `marker`. */
export function processesWithMarker(marker: string): number[] {
  return liveProcesses((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker));
}

/** Processes whose working directory is inside `dir` (pods run in their work folder). */
export function processesWorkingUnder(dir: string): number[] {
  return liveProcesses((pid) => {
    const cwd = readlinkSync(`/proc/${pid}/cwd`);
    return cwd === dir || cwd.startsWith(`${dir}/`);
  });
}

/**
 * SIGKILLs `pids` and waits until none is alive: the signal is delivered at once, but a process
 * still takes a moment to die, and a check made meanwhile would still see it.
 */
export async function killAndWaitGone(pids: number[], timeoutMs = 5000): Promise<void> {
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  const wanted = new Set(pids.map(String));
  const until = performance.now() + timeoutMs;
  while (liveProcesses((pid) => wanted.has(pid)).length > 0 && performance.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Zombies whose command name is `name`: orphans that exited and that nobody reaped. */
/** Processes whose command name is `name`, zombies included (not yet reaped). */
export function processesNamed(name: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/stat`, "latin1").startsWith(`${entry} (${name}) `))
        found.push(Number(entry));
    } catch {
      // Reaped meanwhile.
    }
  }
  return found;
}

export function zombiesNamed(name: string): number[] {
  const zombies: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/stat`, "latin1").startsWith(`${entry} (${name}) Z`))
        zombies.push(Number(entry));
    } catch {
      // Reaped meanwhile.
    }
  }
  return zombies;
}
