// The process tree as /proc shows it: every live process with its parent, group and start, and
// the descendants of one of them. Read by agent mode (a pod's shared process namespace) and by a
// local run's containers (the host's view, renumbered in local-pids.ts).
import { readdirSync, readFileSync } from "node:fs";

export interface ProcEntry {
  pid: number;
  ppid: number;
  pgrp: number;
  /** start in clock ticks since boot */
  start: number;
}

/** Every live (not zombie) process in `proc`, with its parent, group and start. */
export function liveProcesses(proc = "/proc"): ProcEntry[] {
  const found: ProcEntry[] = [];
  let names: string[];
  try {
    names = readdirSync(proc);
  } catch {
    return found;
  }
  for (const name of names) {
    const code = name.charCodeAt(0);
    if (code < 48 || code > 57) continue;
    const entry = processEntry(Number(name), proc);
    if (entry) found.push(entry);
  }
  return found;
}

/**
 * The fields of /proc/PID/stat after "(comm) ": state ppid pgrp session tty tpgid flags minflt
 * cminflt majflt cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime ...;
 * null when the process is gone or its stat cannot be read.
 */
function statFields(pid: number, proc: string): string[] | null {
  try {
    const stat = readFileSync(`${proc}/${pid}/stat`, "latin1");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return null;
  }
}

/** One live (not zombie) process's entry; null when it is gone, a zombie, or its stat unreadable. */
export function processEntry(pid: number, proc = "/proc"): ProcEntry | null {
  const fields = statFields(pid, proc);
  if (!fields || fields[0] === "Z" || fields[0] === "X") return null;
  return { pid, ppid: Number(fields[1]), pgrp: Number(fields[2]), start: Number(fields[19]) };
}

/** A process's parent, a zombie's too; null when it is gone or its stat cannot be read. */
export function parentPid(pid: number, proc = "/proc"): number | null {
  const fields = statFields(pid, proc);
  return fields ? Number(fields[1]) : null;
}

/**
 * A process's state letter from /proc/PID/stat (`R`, `S`, `T` for stopped, `t` for traced, ...);
 * null when it is gone. Readable for a process of any user.
 */
export function processState(pid: number, proc = "/proc"): string | null {
  return statFields(pid, proc)?.[0] || null;
}

/**
 * The live processes of users `uids` but `except`, from /proc (status is readable for a process
 * of any user): what the agents' fence was to end, as the runner checks it in a pod.
 */
export function processesOf(
  uids: ReadonlySet<number>,
  except: ReadonlySet<number>,
  proc = "/proc",
): number[] {
  const found: number[] = [];
  for (const entry of liveProcesses(proc)) {
    if (except.has(entry.pid)) continue;
    try {
      const uid = /^Uid:\s+(\d+)/m.exec(readFileSync(`${proc}/${entry.pid}/status`, "latin1"))?.[1];
      if (uid !== undefined && uids.has(Number(uid))) found.push(entry.pid);
    } catch {
      // gone
    }
  }
  return found;
}

/** A few processes in words, for a report: `pid 45 spin (state D, user 1000), ...`, at most 5. */
export function describeProcesses(pids: readonly number[], proc = "/proc"): string {
  const described = pids.slice(0, 5).map((pid) => {
    try {
      const stat = readFileSync(`${proc}/${pid}/stat`, "latin1");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const state = stat.charAt(stat.lastIndexOf(")") + 2);
      const uid = /^Uid:\s+(\d+)/m.exec(readFileSync(`${proc}/${pid}/status`, "latin1"))?.[1];
      return `pid ${pid} ${comm} (state ${state}, user ${uid ?? "?"})`;
    } catch {
      return `pid ${pid} (gone since)`;
    }
  });
  return `${described.join(", ")}${pids.length > 5 ? ` and ${pids.length - 5} more` : ""}`;
}

/** Stopped (SIGSTOP, or a tracer holding it): it runs none of its code until continued. */
export function isStopped(pid: number, proc = "/proc"): boolean {
  const state = processState(pid, proc);
  return state === "T" || state === "t";
}

/** The live descendants of `root` among `processes`, parents before their children. */
export function descendantsIn(root: number, processes: readonly ProcEntry[]): ProcEntry[] {
  const children = new Map<number, ProcEntry[]>();
  for (const entry of processes) {
    const list = children.get(entry.ppid);
    if (list) list.push(entry);
    else children.set(entry.ppid, [entry]);
  }
  const found: ProcEntry[] = [];
  const todo = [...(children.get(root) ?? [])];
  for (let entry = todo.pop(); entry !== undefined; entry = todo.pop()) {
    found.push(entry);
    todo.push(...(children.get(entry.pid) ?? []));
  }
  return found;
}

/** Clock ticks per second in /proc's start times: USER_HZ, 100 on every Linux ABI Node runs on. */
const USER_HZ = 100;

/** Now, in the clock ticks since boot that /proc/PID/stat's start times count (0 if unreadable). */
export function ticksNow(proc = "/proc"): number {
  try {
    return Math.floor(Number.parseFloat(readFileSync(`${proc}/uptime`, "latin1")) * USER_HZ);
  } catch {
    return 0;
  }
}
