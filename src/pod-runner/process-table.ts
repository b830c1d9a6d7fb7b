// Finding an attempt's processes through /proc: the members of its process group, and those that
// left it (setsid, double fork into a new session) but still carry the attempt's cookie in their
// environment. Linux only, like the pods this runs in.
import { readdirSync, readFileSync } from "node:fs";

export const ATTEMPT_ID_VAR = "PLAYBOOK_ATTEMPT_ID";
export const CANCEL_FILE_VAR = "PLAYBOOK_CANCEL_FILE";

interface ProcessEntry {
  pid: number;
  pgrp: number;
  state: string;
}

function readStat(pid: number): ProcessEntry | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    // The command name is in parentheses and may itself contain spaces or ')'.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const state = fields[0] ?? "?";
    const pgrp = Number(fields[2]);
    return { pid, pgrp, state };
  } catch {
    return null; // gone since the directory was listed
  }
}

function listPids(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    const code = name.charCodeAt(0);
    if (code >= 48 && code <= 57) pids.push(Number(name));
  }
  return pids;
}

/** Live (non-zombie) processes whose process group is `pgid`. */
export function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const pid of listPids()) {
    const entry = readStat(pid);
    if (entry && entry.pgrp === pgid && entry.state !== "Z" && entry.state !== "X") members.push(pid);
  }
  return members;
}

function environHas(pid: number, needles: readonly Buffer[]): boolean {
  let environ: Buffer;
  try {
    environ = readFileSync(`/proc/${pid}/environ`);
  } catch {
    return false; // gone, or not ours to read
  }
  return needles.some((needle) => environ.indexOf(needle) !== -1);
}

/**
 * Live processes whose environment holds `PLAYBOOK_ATTEMPT_ID=<prefix>` — every process an
 * attempt started, wherever it went. Matching a prefix lets a whole run be swept at once.
 */
export function processesWithCookie(prefix: string): number[] {
  const needles = [Buffer.from(`\0${ATTEMPT_ID_VAR}=${prefix}`), Buffer.from(`${ATTEMPT_ID_VAR}=${prefix}`)];
  const found: number[] = [];
  for (const pid of listPids()) {
    if (pid === process.pid) continue;
    const entry = readStat(pid);
    if (!entry || entry.state === "Z" || entry.state === "X") continue;
    if (environHas(pid, needles)) found.push(pid);
  }
  return found;
}

/** Sends a signal, treating "no such process" as done: the target may end at any moment. */
export function sendSignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}
