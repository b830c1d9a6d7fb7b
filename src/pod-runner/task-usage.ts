// What an attempt cost where the runner starts its shell itself (a local run's host tasks): Node
// spawns `sh -c` and gives no child rusage, so the runner measures it from the kernel's figures.
//
// CPU: the runner's own cutime + cstime (/proc/self/stat) before the spawn and after the shell was
// reaped. The kernel adds a reaped child's CPU, with what the child reaped, to its parent's: the
// difference is the shell's rusage as wait4 would give it (in clock ticks, 10 ms), provided no
// other child of the runner is reaped meanwhile (a run starts one attempt at a time; the engine's
// clients of a local image run outlive the run).
//
// Peak memory: ru_maxrss, the largest process's peak RSS, is not in /proc for reaped children.
// It is sampled: the kernel's high-water mark (VmHWM, exact for each process) of the shell and
// its descendants, read at its start, then soon after and every SAMPLE_MS while the attempt runs; a process that lives shorter than a
// sample is not seen. Agents (a pod, a local image task) send wait4's figures instead.
import { readdirSync, readFileSync } from "node:fs";
import { readKept } from "./kept-file.js";

/** What an attempt cost, where it was measured. */
export interface TaskUsage {
  cpuSeconds?: number;
  peakMemoryBytes?: number;
}

/** /proc's clock ticks per second (USER_HZ): 100 on every Linux ABI Node runs on. */
const USER_HZ = 100;
/** The samples of the peak come at these intervals: soon after the start, then every 100 ms. */
const SAMPLE_DELAYS_MS = [5, 10, 20, 40, 80];
const SAMPLE_MS = 100;
/** A tree deeper or wider than this is sampled in part: the sampler must stay cheap. */
const MAX_SAMPLED = 256;

/** The runner's reaped children's CPU (cutime + cstime) in clock ticks; null where /proc is not readable. */
export function childrenCpuTicks(proc = "/proc"): number | null {
  // Read before and after every attempt: the file is kept open (kept-file.ts).
  const stat = readKept(`${proc}/self/stat`);
  if (stat === null) return null;
  // After "(comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const cutime = Number(fields[13]);
  const cstime = Number(fields[14]);
  return Number.isFinite(cutime) && Number.isFinite(cstime) ? cutime + cstime : null;
}

/** A process's peak RSS in KiB (VmHWM), or null when it is gone or shows none (a kernel thread). */
export function peakRssKiB(pid: number, proc = "/proc"): number | null {
  try {
    const status = readFileSync(`${proc}/${pid}/status`, "latin1");
    const m = /^VmHWM:\s+(\d+) kB/m.exec(status);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** The children of `pid`, from each of its threads' children list (the kernel's CONFIG_PROC_CHILDREN). */
function childrenOf(pid: number, proc: string): number[] | null {
  let threads: string[];
  try {
    threads = readdirSync(`${proc}/${pid}/task`);
  } catch {
    return [];
  }
  const found: number[] = [];
  for (const tid of threads) {
    let text: string;
    try {
      text = readFileSync(`${proc}/${pid}/task/${tid}/children`, "latin1");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT" && tid === String(pid)) return null;
      continue;
    }
    for (const child of text.split(" ")) if (child) found.push(Number(child));
  }
  return found;
}

/**
 * Samples the peak RSS of `root` and its descendants until stopped: the largest VmHWM seen, in
 * bytes (0 until a sample saw one). Without the kernel's children lists, the root alone.
 */
export class PeakSampler {
  private peakKiB = 0;
  private timer: NodeJS.Timeout | undefined;
  private samples = 0;
  private readonly root: number;
  private readonly proc: string;

  constructor(root: number, proc = "/proc") {
    this.root = root;
    this.proc = proc;
    // The shell has just been exec'd (Node's spawn event): a first look now sees even a short task.
    this.sample();
    this.schedule();
  }

  private schedule(): void {
    const delay = SAMPLE_DELAYS_MS[this.samples] ?? SAMPLE_MS;
    this.timer = setTimeout(() => {
      this.sample();
      this.samples += 1;
      this.schedule();
    }, delay);
    this.timer.unref();
  }

  /** One look at the tree now. */
  sample(): void {
    const todo = [this.root];
    for (let seen = 0; seen < MAX_SAMPLED; seen++) {
      const pid = todo.pop();
      if (pid === undefined) break;
      const peak = peakRssKiB(pid, this.proc);
      if (peak !== null && peak > this.peakKiB) this.peakKiB = peak;
      const children = childrenOf(pid, this.proc);
      if (children) todo.push(...children);
    }
  }

  /** Stops sampling; the peak seen, in bytes (undefined when no sample saw the tree). */
  stop(): number | undefined {
    clearTimeout(this.timer);
    this.timer = undefined;
    return this.peakKiB > 0 ? this.peakKiB * 1024 : undefined;
  }
}

/** The CPU a local attempt used: the runner's children's ticks since `before`, in seconds. */
export function cpuSecondsSince(before: number | null, proc = "/proc"): number | undefined {
  const after = childrenCpuTicks(proc);
  if (before === null || after === null || after < before) return undefined;
  return (after - before) / USER_HZ;
}
