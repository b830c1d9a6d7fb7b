// A local task container's processes as its agent numbers them. In a pod the runner shares the
// task containers' process namespace, so the pids an agent reports are the runner's pids too.
// Locally each container has a process namespace of its own, nested in the host's: the runner
// sees the container's processes in the host's /proc under other numbers. Here they are found
// below the agent's host pid and renumbered with the kernel's NSpid/NSpgid (their numbers in
// each namespace they are in, the innermost last), so the runner's watch and the agent's kills
// speak of the same processes.
import { readdirSync, readFileSync } from "node:fs";

/** One live process, numbered in its container's namespace; start in clock ticks since boot. */
export interface ContainerProcess {
  pid: number;
  ppid: number;
  pgrp: number;
  start: number;
}

interface HostEntry {
  pid: number;
  ppid: number;
  start: number;
}

function hostProcesses(proc: string): HostEntry[] {
  const found: HostEntry[] = [];
  let names: string[];
  try {
    names = readdirSync(proc);
  } catch {
    return found;
  }
  for (const name of names) {
    const code = name.charCodeAt(0);
    if (code < 48 || code > 57) continue;
    let stat: string;
    try {
      stat = readFileSync(`${proc}/${name}/stat`, "latin1");
    } catch {
      continue;
    }
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z" || fields[0] === "X") continue;
    found.push({ pid: Number(name), ppid: Number(fields[1]), start: Number(fields[19]) });
  }
  return found;
}

/** The innermost numbers of a process (NSpid, NSpgid of /proc/PID/status), or null when it is gone. */
function innermost(proc: string, pid: number): { pid: number; pgrp: number } | null {
  let status: string;
  try {
    status = readFileSync(`${proc}/${pid}/status`, "latin1");
  } catch {
    return null;
  }
  const last = (field: string): number | undefined => {
    const line = new RegExp(`^${field}:\\s*(.*)$`, "m").exec(status)?.[1];
    const value = line?.trim().split(/\s+/).at(-1);
    return value === undefined ? undefined : Number(value);
  };
  const nsPid = last("NSpid");
  const nsPgid = last("NSpgid");
  if (nsPid === undefined || nsPgid === undefined) return null;
  return { pid: nsPid, pgrp: nsPgid };
}

/**
 * The live descendants of the agent whose host pid is `agentHostPid`, numbered as the agent
 * numbers them (the agent itself left out, as a pod's view leaves it out).
 */
export function containerDescendants(agentHostPid: number, proc = "/proc"): ContainerProcess[] {
  const all = hostProcesses(proc);
  const children = new Map<number, HostEntry[]>();
  for (const entry of all) {
    const list = children.get(entry.ppid);
    if (list) list.push(entry);
    else children.set(entry.ppid, [entry]);
  }
  const agent = innermost(proc, agentHostPid);
  const numbers = new Map<number, number>([[agentHostPid, agent?.pid ?? 1]]);
  const found: ContainerProcess[] = [];
  const todo = [...(children.get(agentHostPid) ?? [])];
  for (let entry = todo.pop(); entry !== undefined; entry = todo.pop()) {
    const inner = innermost(proc, entry.pid);
    if (inner === null) continue;
    numbers.set(entry.pid, inner.pid);
    found.push({ pid: inner.pid, ppid: numbers.get(entry.ppid) ?? 0, pgrp: inner.pgrp, start: entry.start });
    todo.push(...(children.get(entry.pid) ?? []));
  }
  return found;
}

/** The host pids of the live descendants of the agent whose host pid is `agentHostPid`. */
export function hostDescendants(agentHostPid: number, proc = "/proc"): number[] {
  const children = new Map<number, number[]>();
  for (const entry of hostProcesses(proc)) {
    const list = children.get(entry.ppid);
    if (list) list.push(entry.pid);
    else children.set(entry.ppid, [entry.pid]);
  }
  const found: number[] = [];
  const todo = [...(children.get(agentHostPid) ?? [])];
  for (let pid = todo.pop(); pid !== undefined; pid = todo.pop()) {
    found.push(pid);
    todo.push(...(children.get(pid) ?? []));
  }
  return found;
}
