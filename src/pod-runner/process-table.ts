// Finding an attempt's processes through /proc: the members of its process group, and those that
// left it (setsid, double fork into a new session) but still carry the attempt's cookie in their
// environment. Linux only, like the pods this runs in.
//
// A read of /proc/PID/environ (or cmdline) waits for the target's memory map lock: a process
// stuck in uninterruptible sleep on a hung mount (NFS, FUSE) can hold it, and the read then blocks
// for as long. So those reads are made off the main thread (on libuv's threadpool) and bounded: a
// read that has not answered within `readBoundMs` is given up and its process counted as unknown
// (not known to carry the cookie, so left alone; a member of the group is still found by its
// stat and killed by pid or pgid), and the runner's deadline and stall timers keep firing. The
// directory listing and /proc/PID/stat are answered without that lock and stay synchronous: a
// scan reads a stat per process and they are the bulk of a kill's latency.
import { closeSync, open, openSync, read, readdirSync, readSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

export const ATTEMPT_ID_VAR = "PLAYBOOK_ATTEMPT_ID";
export const CANCEL_FILE_VAR = "PLAYBOOK_CANCEL_FILE";

/** How long a read of a process's environment may take before it is given up. */
export const PROC_READ_BOUND_MS = 100;
/**
 * Reads given up on still hold a threadpool thread each (libuv has 4 by default) until they
 * answer: beyond this many, no new environment read is started, so threads stay free.
 */
const MAX_HUNG_READS = 2;

interface ProcessStat {
  pgrp: number;
  /** clock ticks after boot */
  startTime: number;
  alive: boolean;
}

// One buffer for every synchronous /proc read: a scan reads a small file per process, and at a
// few hundred processes the allocations of readFileSync are a good part of a kill's latency.
let scratch = Buffer.allocUnsafe(1 << 16);

/** Reads a whole /proc file into the shared buffer; null when it is gone or not ours to read. */
function readProcFile(path: string): Buffer | null {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return null;
  }
  try {
    let size = 0;
    for (;;) {
      if (size === scratch.length) {
        const grown = Buffer.allocUnsafe(scratch.length * 2);
        scratch.copy(grown);
        scratch = grown;
      }
      const read = readSync(fd, scratch, size, scratch.length - size, null);
      if (read === 0) return scratch.subarray(0, size);
      size += read;
    }
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

const openOffThread = (path: string) =>
  new Promise<number>((resolve, reject) =>
    open(path, "r", (error, fd) => (error ? reject(error) : resolve(fd))),
  );
const readOffThread = (fd: number, into: Buffer, at: number) =>
  new Promise<number>((resolve, reject) =>
    read(fd, into, at, into.length - at, null, (error, bytes) => (error ? reject(error) : resolve(bytes))),
  );

/**
 * Reads a whole /proc file on the threadpool; null when it is gone or not ours to read. Never
 * rejects. Two trips to the threadpool for most environments: a short read of one is its end
 * (the kernel fills what was asked for), and a close is quick, so it is made here.
 */
async function readProcFileOffThread(path: string): Promise<Buffer | null> {
  let fd: number;
  try {
    fd = await openOffThread(path);
  } catch {
    return null;
  }
  try {
    let bytes = Buffer.allocUnsafe(1 << 15);
    let size = 0;
    for (;;) {
      const got = await readOffThread(fd, bytes, size);
      size += got;
      if (got === 0 || size < bytes.length) return bytes.subarray(0, size);
      const grown = Buffer.allocUnsafe(bytes.length * 2);
      bytes.copy(grown);
      bytes = grown;
    }
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

const SPACE = 0x20;
const CLOSE_PAREN = 0x29;

/** The decimal number at `at` in `bytes` (a /proc field), up to the next space. */
function numberAt(bytes: Buffer, at: number): number {
  let value = 0;
  for (let i = at; i < bytes.length && bytes[i] !== SPACE; i++)
    value = value * 10 + ((bytes[i] as number) - 48);
  return value;
}

/** `unknown`: the read did not answer within the bound (or an earlier one of it still has not). */
const UNKNOWN = Symbol("unknown");

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

export interface ProcessTableOptions {
  /** where the proc file system is (default /proc): a test points it at a folder of its own */
  root?: string;
  /** how long a read of a process's environment may take (default PROC_READ_BOUND_MS) */
  readBoundMs?: number;
}

/** The processes of the machine (of the pod), as /proc shows them. */
export class ProcessTable {
  readonly root: string;
  readonly readBoundMs: number;
  /** environment reads given up on that have not answered yet, by path: not started again */
  private readonly hung = new Map<string, Promise<Buffer | null>>();

  constructor(options: ProcessTableOptions = {}) {
    this.root = options.root ?? "/proc";
    this.readBoundMs = options.readBoundMs ?? PROC_READ_BOUND_MS;
  }

  /** When `pid` started, in clock ticks after boot; 0 when it is already gone. */
  startTime(pid: number): number {
    return this.stat(pid)?.startTime ?? 0;
  }

  /** Pids whose environment read was given up on and has not answered yet. */
  unanswered(): number[] {
    return [...this.hung.keys()].map((path) =>
      Number(path.slice(this.root.length + 1, path.lastIndexOf("/"))),
    );
  }

  /** One pass over /proc: the attempt's group members and every process carrying its cookie. */
  async scan(query: ScanQuery): Promise<number[]> {
    const needle = Buffer.from(`${ATTEMPT_ID_VAR}=${query.cookiePrefix}`);
    const found: number[] = [];
    const reads: Promise<void>[] = [];
    // Every pid is looked at: pids wrap (pid_max may be 32768), so a low pid is no proof of age.
    for (const pid of this.pids()) {
      if (pid === process.pid) continue;
      const stat = this.stat(pid);
      if (!stat?.alive) continue;
      if (query.pgid !== undefined && stat.pgrp === query.pgid) {
        found.push(pid);
        continue;
      }
      if (stat.pgrp === query.excludePgid) continue;
      if (query.startedFrom !== undefined && stat.startTime < query.startedFrom) continue;
      // All at once: one that hangs costs the scan the bound, not the bound per process.
      reads.push(
        this.environ(pid).then((environ) => {
          // null: gone, or not ours to read; UNKNOWN: it did not answer
          if (environ !== null && environ !== UNKNOWN && environ.includes(needle)) found.push(pid);
        }),
      );
    }
    await Promise.all(reads);
    return found;
  }

  /**
   * The attempt id (`PLAYBOOK_ATTEMPT_ID`) a live process carries, if it starts with `cookiePrefix`;
   * null when it carries none of the run's, is gone, is not ours to read or did not answer.
   */
  async attemptIdOf(pid: number, cookiePrefix: string): Promise<string | null> {
    const environ = await this.environ(pid);
    if (environ === null || environ === UNKNOWN) return null;
    const needle = Buffer.from(`${ATTEMPT_ID_VAR}=${cookiePrefix}`);
    for (let at = environ.indexOf(needle); at !== -1; at = environ.indexOf(needle, at + 1)) {
      // Only at the start of a variable: not inside another variable's name or value.
      if (at > 0 && environ[at - 1] !== 0) continue;
      const start = at + needle.length - cookiePrefix.length;
      const end = environ.indexOf(0, start);
      return environ.toString("latin1", start, end === -1 ? environ.length : end);
    }
    return null;
  }

  /** /proc/PID/environ, read off the main thread within the bound. */
  private async environ(pid: number): Promise<Buffer | null | typeof UNKNOWN> {
    const path = `${this.root}/${pid}/environ`;
    if (this.hung.has(path) || this.hung.size >= MAX_HUNG_READS) return UNKNOWN;
    const pending = readProcFileOffThread(path);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<typeof UNKNOWN>((resolve) => {
      timer = setTimeout(() => resolve(UNKNOWN), this.readBoundMs);
    });
    const first = await Promise.race([pending, late]);
    clearTimeout(timer);
    if (first === UNKNOWN) {
      this.hung.set(path, pending);
      void pending.then(() => this.hung.delete(path));
    }
    return first;
  }

  private pids(): number[] {
    const pids: number[] = [];
    for (const name of readdirSync(this.root)) {
      const code = name.charCodeAt(0);
      if (code >= 48 && code <= 57) pids.push(Number(name));
    }
    return pids;
  }

  private stat(pid: number): ProcessStat | null {
    const bytes = readProcFile(`${this.root}/${pid}/stat`);
    if (bytes === null) return null; // gone since the directory was listed
    // The command name is in parentheses and may itself contain spaces or ')'. After it: state,
    // ppid, pgrp, ... starttime (the 20th); read in place, as a scan does this for every process.
    const afterName = bytes.lastIndexOf(CLOSE_PAREN) + 2;
    const state = bytes[afterName];
    let pgrp = Number.NaN;
    let startTime = Number.NaN;
    for (let field = 0, at = afterName; field <= 19 && at > 0 && at < bytes.length; field++) {
      if (field === 2) pgrp = numberAt(bytes, at);
      else if (field === 19) startTime = numberAt(bytes, at);
      at = bytes.indexOf(SPACE, at) + 1;
    }
    // Z (zombie) and X (dead) are no longer running anything.
    return { pgrp, startTime, alive: state !== 0x5a && state !== 0x58 };
  }
}

/** The machine's own /proc: the table a run uses unless it is given another. */
export const PROC = new ProcessTable();

/** The first look after a kill comes this soon: most trees are gone by then. */
const KILL_LOOK_FIRST_MS = 2;
/** Looks that keep finding the same processes slow down to this. */
const KILL_LOOK_MAX_MS = 128;

/**
 * How long to wait before looking for survivors again after `repeats` looks in a row found only
 * processes already sent SIGKILL. Those are in uninterruptible sleep (D state) or not ours to
 * kill (EPERM): looking every 2ms would only burn a core for the kill path's whole bound.
 */
export function killLookDelay(repeats: number): number {
  return Math.min(KILL_LOOK_FIRST_MS * 2 ** Math.max(0, repeats), KILL_LOOK_MAX_MS);
}

/**
 * SIGKILLs what `find` reports until a look finds nothing (true) or `until` (a performance.now()
 * value) passes (false). The look is repeated because an escaper may fork between looks; a new
 * process found looks again at once, the same ones found again back off (killLookDelay).
 */
export async function killUntilGone(
  find: () => Promise<number[]>,
  until: number,
  signal: (pid: number, signal: NodeJS.Signals) => unknown = sendSignal,
): Promise<boolean> {
  const killed = new Set<number>();
  let repeats = 0;
  while (performance.now() < until) {
    const left = await find();
    if (left.length === 0) return true;
    repeats = left.some((pid) => !killed.has(pid)) ? 0 : repeats + 1;
    for (const pid of left) {
      killed.add(pid);
      signal(pid, "SIGKILL");
    }
    await sleep(Math.min(killLookDelay(repeats), Math.max(0, until - performance.now())));
  }
  return false;
}

/**
 * Sends a signal, treating "no such process" as done: the target may end at any moment. A target
 * that became another user (sudo) answers EPERM: nothing more can be done to it, and throwing
 * would cost the run its report. Says whether the kernel took it (false: ESRCH or EPERM).
 */
export function sendSignal(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "ESRCH" && code !== "EPERM") throw error;
    return false;
  }
}
