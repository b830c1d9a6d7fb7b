// Where a bench's CPU goes, by process: the CPU seconds (user + system, /proc/PID/stat) of every
// process under the given roots (a cluster's recorded processes and what they started), summed by
// command name. Linux only. A process that exits between two readings takes its CPU with it, so
// this is for the long-lived daemons (kube-apiserver, etcd, the kubelet, containerd, weed), not
// for a pod's short processes.
import { readdirSync, readFileSync } from "node:fs";

/** clock ticks a second of /proc/PID/stat's utime and stime (USER_HZ, 100 on Linux) */
const TICKS = 100;

interface Stat {
  comm: string;
  ppid: number;
  cpuSeconds: number;
}

function readStat(pid: number): Stat | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const open = stat.indexOf("(");
    const close = stat.lastIndexOf(")");
    // After the name: state ppid ... utime (14th field of the line) stime (15th).
    const fields = stat.slice(close + 2).split(" ");
    return {
      comm: stat.slice(open + 1, close),
      ppid: Number(fields[1]),
      cpuSeconds: (Number(fields[11]) + Number(fields[12])) / TICKS,
    };
  } catch {
    return undefined;
  }
}

/** CPU seconds by pid and its command name, of the roots and every process below them. */
export type CpuReading = Map<number, { comm: string; cpuSeconds: number }>;

/** `labels` names some pids apart from their command (two controllers, both `node`). */
export function readTreeCpu(roots: readonly number[], labels = new Map<number, string>()): CpuReading {
  const stats = new Map<number, Stat>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readStat(Number(entry));
    if (stat) stats.set(Number(entry), stat);
  }
  const rootSet = new Set(roots);
  const under = (pid: number): boolean => {
    for (let at: number | undefined = pid, hops = 0; at !== undefined && at > 1 && hops < 64; hops++) {
      if (rootSet.has(at)) return true;
      at = stats.get(at)?.ppid;
    }
    return false;
  };
  const reading: CpuReading = new Map();
  for (const [pid, stat] of stats)
    if (under(pid)) reading.set(pid, { comm: labels.get(pid) ?? stat.comm, cpuSeconds: stat.cpuSeconds });
  return reading;
}

/**
 * CPU seconds spent between two readings, by command name: each process's growth, from 0 for a
 * process that started in between; one that ended in between is not counted.
 */
export function cpuByCommand(before: CpuReading, after: CpuReading): Map<string, number> {
  const out = new Map<string, number>();
  for (const [pid, now] of after) {
    const then = before.get(pid);
    const spent = now.cpuSeconds - (then && then.comm === now.comm ? then.cpuSeconds : 0);
    out.set(now.comm, (out.get(now.comm) ?? 0) + spent);
  }
  return out;
}
