// A local task container's processes as its agent numbers them. In a pod the runner shares the
// task containers' process namespace, so the pids an agent reports are the runner's pids too.
// Locally each container has a process namespace of its own, nested in the host's: the runner
// sees the container's processes in the host's /proc under other numbers. Here they are found
// below the agent's host pid and renumbered with the kernel's NSpid/NSpgid (their numbers in
// each namespace they are in, the innermost last), so the runner's watch and the agent's kills
// speak of the same processes.
import { readFileSync } from "node:fs";
import { descendantsIn, liveProcesses, type ProcEntry } from "./proc-tree.js";

/** One live process, numbered in its container's namespace; start in clock ticks since boot. */
export interface ContainerProcess {
  pid: number;
  ppid: number;
  pgrp: number;
  start: number;
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
  const all = liveProcesses(proc);
  const children = new Map<number, ProcEntry[]>();
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
  return descendantsIn(agentHostPid, liveProcesses(proc)).map((entry) => entry.pid);
}
