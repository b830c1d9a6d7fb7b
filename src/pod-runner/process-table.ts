// Finding an attempt's processes through /proc: the members of its process group, and those that
// left it (setsid, double fork into a new session) but still carry the attempt's cookie in their
// environment. Linux only, like the pods this runs in.
import { readdirSync, readFileSync } from "node:fs";

export const ATTEMPT_ID_VAR = "PLAYBOOK_ATTEMPT_ID";
export const CANCEL_FILE_VAR = "PLAYBOOK_CANCEL_FILE";

interface ProcessStat {
  pgrp: number;
  /** clock ticks after boot */
  startTime: number;
  alive: boolean;
}

function readStat(pid: number | "self"): ProcessStat | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    // The command name is in parentheses and may itself contain spaces or ')'.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const state = fields[0] ?? "?";
    return { pgrp: Number(fields[2]), startTime: Number(fields[19]), alive: state !== "Z" && state !== "X" };
  } catch {
    return null; // gone since the directory was listed
  }
}

/** When `pid` started, in clock ticks after boot; 0 when it is already gone. */
export function processStartTime(pid: number): number {
  return readStat(pid)?.startTime ?? 0;
}

function listPids(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    const code = name.charCodeAt(0);
    if (code >= 48 && code <= 57) pids.push(Number(name));
  }
  return pids;
}

export interface ScanQuery {
  /** report live members of this process group */
  pgid?: number;
  /** skip members of this process group without reading their environment (they were just killed whole) */
  excludePgid?: number;
  /** report live processes whose environment holds PLAYBOOK_ATTEMPT_ID=<prefix>… */
  cookiePrefix: string;
  /**
   * Processes that started before this tick cannot be the attempt's, so their environment is not
   * read: it keeps a scan cheap on a busy machine.
   */
  startedFrom?: number;
}

/** One pass over /proc: the attempt's group members and every process carrying its cookie. */
export function scanProcesses(query: ScanQuery): number[] {
  const needle = Buffer.from(`${ATTEMPT_ID_VAR}=${query.cookiePrefix}`);
  const found: number[] = [];
  // Every pid is looked at: pids wrap (pid_max may be 32768), so a low pid is no proof of age.
  for (const pid of listPids()) {
    if (pid === process.pid) continue;
    const stat = readStat(pid);
    if (!stat?.alive) continue;
    if (query.pgid !== undefined && stat.pgrp === query.pgid) {
      found.push(pid);
      continue;
    }
    if (stat.pgrp === query.excludePgid) continue;
    if (query.startedFrom !== undefined && stat.startTime < query.startedFrom) continue;
    try {
      if (readFileSync(`/proc/${pid}/environ`).indexOf(needle) !== -1) found.push(pid);
    } catch {
      // gone, or not ours to read
    }
  }
  return found;
}

/**
 * Sends a signal, treating "no such process" as done: the target may end at any moment. A target
 * that became another user (sudo) answers EPERM: nothing more can be done to it, and throwing
 * would cost the run its report.
 */
export function sendSignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "ESRCH" && code !== "EPERM") throw error;
  }
}
