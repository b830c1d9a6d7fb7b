// Holding a run's processes with what the kernel offers, so that nothing a task starts outlives
// the run however it detached (a new session, a double fork, a cleared or rewritten environment,
// an unreadable /proc/PID/environ). The process group kill and the PLAYBOOK_ATTEMPT_ID sweep find
// what stayed in the group or kept the cookie; this is the fence for the rest.
//
// What is used, in order:
// 1. cgroup: a cgroup v2 sub-group of the runner's own cgroup, for the run alone. Every task's
//    shell joins it before it runs anything, so every process a task starts is in it and stays
//    in it (only its owner can move a process out). At the end of the run `cgroup.kill` ends
//    all of it at once. A small anchor process in the cgroup holds it while the run lives and
//    ends it when the runner is gone however it ended (SIGKILL too): it reads a pipe only the
//    runner holds, and at its end writes `cgroup.kill`, which takes the anchor with the rest.
//    What a killed runner leaves (the empty cgroup, or a full one where the anchor was killed
//    too) the next run next to it kills and removes, and says so. Needs a writable cgroup v2
//    hierarchy with `cgroup.kill` (Linux 5.14): root, or a cgroup delegated to the user (a
//    systemd user session gives one).
// 2. subreaper: `playbook run` started again under a child subreaper (subreaper.ts) in a process
//    group of its own, so every orphan of the run is re-parented to it and found by ancestry;
//    what the runner does not end, the subreaper ends once the runner, or the command the user
//    started, is gone (SIGKILL too, of one or of the whole process group).
// 3. none: the group kill and the cookie sweep only, and the run says so.
//
// Every task also starts with `oom_score_adj` 1000 (its children inherit it): under memory
// pressure the kernel's OOM killer picks a task's process before the runner, so the report
// survives. Raising one's own value needs no privilege.
import { type ChildProcess, spawn } from "node:child_process";
import {
  existsSync,
  type FSWatcher,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  statSync,
  watch,
  writeFileSync,
} from "node:fs";
import { dirname } from "node:path";
import { performance } from "node:perf_hooks";
import type { Writable } from "node:stream";
import type { ContainmentKind } from "../api/report.js";
import { parentPid } from "./proc-tree.js";
import { sendSignal } from "./process-table.js";
import { descendantsOf, maySignal, namespaceKeeper, subreaperPid } from "./subreaper.js";

export type { ContainmentKind };

export interface Containment {
  kind: ContainmentKind;
  /** a sentence for the run's progress: what holds the run's processes */
  description: string;
  /**
   * how to start a task's shell (`shell` is its words, `sh` by default, run as `SHELL... -c RUN`):
   * it joins the containment and raises its oom_score_adj first
   */
  command(run: string, shell: readonly string[]): { file: string; args: string[] };
  /** live processes inside (none for `none`) */
  members(): number[];
  /**
   * Signals one of its members where the runner may not signal it itself (another uid: agent
   * mode); absent when the runner signals its tasks' processes directly.
   */
  signal?(pid: number, signal: NodeJS.Signals): void;
  /**
   * The attempts its live members belong to, where the runner cannot read their environment's
   * cookie (agent mode): their cancel files are written from this.
   */
  liveAttempts?(): Set<string>;
  /** SIGKILLs everything inside and waits, until `until` (a performance.now() value), for it to be empty */
  killAll(until: number): Promise<boolean>;
  /** After a killAll that returned false: what it could not confirm ended, in words (agents only). */
  unconfirmed?(): string | undefined;
  /** removes what was made for the run; call once everything inside is gone */
  close(): void | Promise<void>;
  /** what was found and cleaned when it was opened (an earlier killed run's cgroup), in sentences */
  notices?: string[];
}

/** The OOM killer's preference for a task's processes: the highest there is. */
export const TASK_OOM_SCORE_ADJ = 1000;

const RAISE_OOM = `echo ${TASK_OOM_SCORE_ADJ} > /proc/self/oom_score_adj 2>/dev/null`;

/** A task's shell with no containment: only the OOM preference, then the task's shell words. */
const PLAIN_WRAPPER = `${RAISE_OOM}; exec "$@"`;
/** The same, as the head of the default shell's own script; `:` leaves $? 0 for the task. */
const PLAIN_PRELUDE = `${RAISE_OOM}; :; `;
/**
 * Joins the cgroup whose cgroup.procs is $1 before anything of the task runs, then becomes the
 * task's shell, the words after $1 (same pid, so the group and the pid the runner holds stay the
 * leader's). A task that could not join is not run: the run promised to hold it.
 */
const CGROUP_WRAPPER =
  `${RAISE_OOM}; ` +
  `if ! echo $$ 2>/dev/null > "$1"; then echo "playbook: could not join the run's cgroup ($1); the task is not run" >&2; exit 125; fi; ` +
  `shift; exec "$@"`;

/** Words quoted for sh: inside single quotes nothing but the quote itself is special. */
const quoted = (word: string) => `'${word.replaceAll("'", `'\\''`)}'`;

/**
 * CGROUP_WRAPPER's work as the head of the default shell's own script, on the task's first line
 * (its line numbers stay its own), so the task runs in the same `sh` with no second exec. The
 * task sees what `sh -c RUN` gives it: $0 `sh`, no arguments, $? 0 (an `if` that took no branch).
 */
function cgroupPrelude(procs: string): string {
  const message = `playbook: could not join the run's cgroup (${procs}); the task is not run`;
  return (
    `${RAISE_OOM}; ` +
    `if ! echo $$ 2>/dev/null > ${quoted(procs)}; then echo ${quoted(message)} >&2; exit 125; fi; `
  );
}

/**
 * How a task's shell is started: the default `sh` runs the prelude and then the task in one
 * process (one exec, as a bare `sh -c`); another shell is exec'd by the wrapper, which is `sh`
 * whatever the task's shell is. Both raise the OOM preference and join the cgroup before any of
 * the task runs, in the process that becomes the task's shell (same pid: the group stays the leader's).
 */
function wrapped(
  prelude: string,
  wrapper: string,
  wrapperArgs: readonly string[],
): (run: string, shell: readonly string[]) => { file: string; args: string[] } {
  return (run, shell) =>
    shell.length === 1 && shell[0] === "sh"
      ? { file: "sh", args: ["-c", `${prelude}${run}`] }
      : { file: "sh", args: ["-c", wrapper, "sh", ...wrapperArgs, ...shell, "-c", run] };
}

/** What a task can do to a containment that runs as its own user, outside a PID namespace. */
const REACHABLE =
  "; what holds them runs as the tasks' user, so a task that stops or kills it and then the runner outlives the run";

/** What the keeper of the runner's PID namespace adds, where it has one. */
function namespaceDescription(keeper: number): string {
  return `; in a PID namespace of its own, held by a keeper outside it (pid ${keeper}): no task can signal the keeper or the namespace's init, and every process in the namespace ends with the runner, however it ends`;
}

const NONE_DESCRIPTION =
  "none: neither a cgroup v2 sub-group of its own nor a child subreaper, so only the process group kill and the " +
  "PLAYBOOK_ATTEMPT_ID sweep end what tasks leave; a process that leaves its group and drops " +
  "or hides its environment can outlive the run";

/**
 * The directory of this process's cgroup in a hierarchy: of cgroup v2 (`controller` undefined),
 * or of the cgroup v1 hierarchy with that controller. Null when none is mounted where this process
 * can see its own cgroup (a container shows a mount of its own cgroup only, whose root is the
 * container's path: the path is taken relative to it).
 */
export function ownCgroupDirOf(controller?: string): string | null {
  let path: string | undefined;
  let mounts: string;
  try {
    for (const line of readFileSync("/proc/self/cgroup", "utf8").split("\n")) {
      // "id:controllers:path"; the path may itself hold ':'.
      const [id = "", controllers = ""] = line.split(":", 2);
      if (line.length <= id.length + controllers.length + 1) continue;
      const matches =
        controller === undefined
          ? id === "0" && controllers === ""
          : controllers.split(",").includes(controller);
      if (matches) path = line.slice(id.length + controllers.length + 2);
    }
    mounts = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return null;
  }
  if (path === undefined) return null;
  // mountinfo: "id parent major:minor root mountpoint options ... - fstype source super-options"
  for (const line of mounts.split("\n")) {
    const [left, right] = line.split(" - ");
    const [fstype, , options] = right?.split(" ") ?? [];
    const wanted =
      controller === undefined
        ? fstype === "cgroup2"
        : fstype === "cgroup" && (options ?? "").split(",").includes(controller);
    if (!wanted) continue;
    const fields = left?.split(" ") ?? [];
    const root = unescapeMount(fields[3] ?? "");
    const mountpoint = unescapeMount(fields[4] ?? "");
    const inside =
      root === "/"
        ? path
        : path === root
          ? "/"
          : path.startsWith(`${root}/`)
            ? path.slice(root.length)
            : null;
    if (inside === null) continue;
    return inside === "/" ? mountpoint : `${mountpoint}${inside}`;
  }
  return null;
}

/** Where this process's cgroup v2 directory is, or null (no cgroup v2 hierarchy mounted). */
export function ownCgroupDir(): string | null {
  return ownCgroupDirOf();
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMount(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

function readPids(file: string): number[] {
  try {
    return readFileSync(file, "latin1")
      .split("\n")
      .filter((line) => line !== "")
      .map(Number);
  } catch {
    return [];
  }
}

/**
 * The name of a run's cgroup: `playbook-<run id>`, whose first part is its runner's pid in hex (a
 * probe's is not one), or `ns` and its keeper's, where the runner has a PID namespace of its own:
 * a build that knows only the first form leaves such a cgroup alone rather than take it for a dead
 * run's (its anchor is not the keeper's child).
 */
const RUN_CGROUP = /^playbook-(?:ns)?([0-9a-f]+)-[0-9a-f]{8}$/;

/**
 * How long a run's cgroup may be empty before another run takes it for a dead runner's: between
 * its mkdir and its anchor's join a live run's cgroup is empty too, for a moment.
 */
const STALE_AFTER_MS = 10_000;

/** How long the kill of a stale cgroup's processes is waited for before its removal is given up. */
const STALE_KILL_WAIT_MS = 1000;

/**
 * Whether a run's cgroup belongs to a live run. A live run's anchor, a descendant of the process
 * its name holds (its runner's child, or, where the runner has a PID namespace of its own, the
 * great-grandchild of the namespace's keeper), is in it from its first moments to the run's end,
 * so a cgroup with processes but none below that pid is a dead run's, whatever runs there now
 * under that pid. A process this one cannot see (another PID namespace: cgroup.procs says 0) or
 * whose parent it may not read may be a live run's anchor: such a cgroup is left alone. An empty
 * one is a dead run's once it is older than a start takes.
 */
function runIsOver(dir: string, runnerPid: number): boolean {
  const pids = readPids(`${dir}/cgroup.procs`);
  if (pids.length === 0) return statSync(dir).mtimeMs <= Date.now() - STALE_AFTER_MS;
  if (pids.includes(0)) return false;
  // One whose stat this process may not read (/proc mounted with hidepid) may be the anchor.
  return !pids.some((pid) => {
    for (let at = pid, depth = 0; depth < RUN_DEPTH; depth++) {
      const parent = parentPid(at);
      if (parent === null) return existsSync(`/proc/${at}`);
      if (parent === runnerPid) return true;
      if (parent <= 1) return false;
      at = parent;
    }
    return false;
  });
}

/** How far above a run's anchor the pid its cgroup's name holds may be: keeper, pid 1, runner, anchor. */
const RUN_DEPTH = 3;

/**
 * Waits, blocking, for a cgroup to be empty: only a stale cgroup's kill is waited for so, before
 * the run starts, and the kernel's SIGKILL takes milliseconds.
 */
function untilEmptySync(dir: string, until: number): boolean {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      if (/^populated 0$/m.test(readFileSync(`${dir}/cgroup.events`, "latin1"))) return true;
    } catch {
      return true;
    }
    if (performance.now() >= until) return false;
    Atomics.wait(pause, 0, 0, 10);
  }
}

/** How often an empty cgroup is looked for where its cgroup.events cannot be watched. */
const EMPTY_LOOK_MS = 5;
/** And where it is watched: a notice the kernel merged or lost costs at most this. */
const EMPTY_WATCHED_LOOK_MS = 50;

/**
 * Waits for a cgroup to be empty, until `until` (a performance.now() value): woken by the kernel's
 * change notice on its cgroup.events (inotify), not by a clock, so it answers as soon as the last
 * process is gone. Where the file cannot be watched, it looks every EMPTY_LOOK_MS. Each wake looks
 * at the file itself: a notice says something changed, not what.
 */
function untilEmpty(events: string, populated: () => boolean, until: number): Promise<boolean> {
  return new Promise((resolve) => {
    let watcher: FSWatcher | undefined;
    let timer: NodeJS.Timeout | undefined;
    const finish = (empty: boolean) => {
      watcher?.close();
      clearTimeout(timer);
      resolve(empty);
    };
    const look = () => {
      if (!populated()) return finish(true);
      const left = until - performance.now();
      if (left <= 0) return finish(false);
      clearTimeout(timer);
      timer = setTimeout(look, Math.min(watcher ? EMPTY_WATCHED_LOOK_MS : EMPTY_LOOK_MS, left));
    };
    try {
      watcher = watch(events, { persistent: true }, look);
      watcher.on("error", () => {
        watcher?.close();
        watcher = undefined;
        look();
      });
    } catch {
      watcher = undefined;
    }
    look();
  });
}

/**
 * Kills and removes the cgroups of runs that are over, next to this run's: a runner killed
 * outright (SIGKILL) cannot remove its own, and where its anchor was killed with it (or it was an
 * older build's), its tasks' processes are still in it. Returns a sentence for each it found.
 */
function cleanStaleRunCgroups(parent: string, own: string): string[] {
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return [];
  }
  const notices: string[] = [];
  for (const name of names) {
    const runner = RUN_CGROUP.exec(name)?.[1];
    const dir = `${parent}/${name}`;
    // Its own, whose name holds its keeper where the runner has a PID namespace: not seen from inside.
    if (runner === undefined || dir === own) continue;
    try {
      if (!runIsOver(dir, Number.parseInt(runner, 16))) continue;
      const left = readPids(`${dir}/cgroup.procs`).length;
      if (left > 0) {
        writeFileSync(`${dir}/cgroup.kill`, "1");
        if (!untilEmptySync(dir, performance.now() + STALE_KILL_WAIT_MS)) {
          notices.push(
            `the cgroup of an earlier run that was killed (${dir}) still holds processes after cgroup.kill (in D state?); it is left as it is`,
          );
          continue;
        }
      }
      rmdirSync(dir);
      notices.push(
        `removed the cgroup of an earlier run whose runner was killed (${dir})${left > 0 ? `, and ended the ${left} process(es) still in it` : "; nothing was left in it"}`,
      );
    } catch {
      // Gone meanwhile (another run cleaned it), or populated again: left to the next look.
    }
  }
  return notices;
}

/**
 * A cgroup's anchor: a process in it that holds it for the run's life, so that a live run's
 * cgroup is never empty, even between tasks. It reads a pipe only the runner writes to, and when
 * that ends (the runner is gone, however it ended: a SIGKILL too) it writes `cgroup.kill`, which
 * ends everything in the cgroup, itself with the rest, at once. A runner that ends its run kills
 * it first (killAll). In a session of its own: a Ctrl-C, or a kill of the runner's process
 * group, is not for it.
 */
function startAnchor(procs: string, kill: string): ChildProcess | null {
  let anchor: ChildProcess;
  try {
    anchor = spawn("sh", ["-c", 'read _ || :; echo 1 > "$1"', "playbook-anchor", kill], {
      detached: true,
      stdio: ["pipe", "ignore", "ignore"],
      env: { PATH: process.env.PATH },
    });
  } catch {
    return null;
  }
  anchor.on("error", () => {});
  if (anchor.pid === undefined) return null;
  try {
    writeFileSync(procs, String(anchor.pid));
  } catch {
    anchor.kill("SIGKILL");
    return null;
  }
  // Neither keeps the runner's event loop alive.
  anchor.unref();
  (anchor.stdin as (Writable & { unref?: () => void }) | null)?.unref?.();
  return anchor;
}

/** A cgroup v2 sub-group for the run, or the reason there is none. */
function makeRunCgroup(runId: string): { dir: string } | { problem: string } {
  const parent = ownCgroupDir();
  if (parent === null) return { problem: "no cgroup v2 hierarchy is mounted" };
  const dir = `${parent}/playbook-${runId}`;
  try {
    mkdirSync(dir);
  } catch (error) {
    return { problem: `cannot make ${dir}: ${(error as NodeJS.ErrnoException).code ?? error}` };
  }
  try {
    readFileSync(`${dir}/cgroup.events`);
    // cgroup.kill is write-only: its presence is what is checked (Linux 5.14 and later).
    writeFileSync(`${dir}/cgroup.kill`, "", { flag: "r+" });
  } catch (error) {
    try {
      rmdirSync(dir);
    } catch {
      // gone already
    }
    const code = (error as NodeJS.ErrnoException).code;
    return { problem: `${dir} has no usable cgroup.kill (${code ?? error})` };
  }
  return { dir };
}

/** Whether a run here can have a cgroup v2 sub-group of its own (made and removed again to see). */
export function cgroupAvailable(): boolean {
  const made = makeRunCgroup(`probe-${process.pid}`);
  if ("problem" in made) return false;
  try {
    rmdirSync(made.dir);
  } catch {
    // gone already
  }
  return true;
}

/**
 * What holds this run's processes. `PLAYBOOK_CONTAINMENT=none` (read from the runner's own
 * environment, never a task's) turns the cgroup off, to see how a machine without one behaves;
 * `=cgroup` keeps the runner out of a PID namespace of its own (subreaper.ts), as it is where
 * it may not make one.
 */
export function openContainment(
  runId: string,
  env: NodeJS.ProcessEnv = process.env,
  noCgroup?: string,
): Containment {
  const wanted = env.PLAYBOOK_CONTAINMENT;
  const made =
    noCgroup !== undefined
      ? { problem: noCgroup }
      : wanted === "none"
        ? { problem: "PLAYBOOK_CONTAINMENT=none" }
        : makeRunCgroup(runId);
  const reaper = wanted === "none" ? null : subreaperPid(env);
  const keeper = wanted === "none" ? null : namespaceKeeper(env);
  const held = keeper === null ? REACHABLE : namespaceDescription(keeper);
  if ("problem" in made && reaper !== null) {
    const members = () => descendantsOf(reaper, process.pid);
    return {
      kind: "subreaper",
      description: `a child subreaper (pid ${reaper}; no cgroup: ${made.problem}): every process the tasks orphan is re-parented to it and ended with the run, or as soon as the runner is killed${held}`,
      command: wrapped(PLAIN_PRELUDE, PLAIN_WRAPPER, []),
      members,
      // One pass: the sweep has looked and killed until its bound already, and what is left
      // then (another user's, or in D state) the subreaper ends once the runner has exited.
      async killAll() {
        for (const pid of members()) sendSignal(pid, "SIGKILL");
        return members().length === 0;
      },
      close: () => {},
    };
  }
  if ("problem" in made) {
    return {
      kind: "none",
      description: `${NONE_DESCRIPTION} (${made.problem})`,
      command: wrapped(PLAIN_PRELUDE, PLAIN_WRAPPER, []),
      members: () => [],
      killAll: async () => true,
      close: () => {},
    };
  }
  const { dir } = made;
  const procs = `${dir}/cgroup.procs`;
  const anchor = startAnchor(procs, `${dir}/cgroup.kill`);
  if (anchor === null) {
    try {
      rmdirSync(dir);
    } catch {
      // removed by another run's look for stale ones: it was empty
    }
    return openContainment(runId, env, `could not hold ${dir} (its anchor did not start or join)`);
  }
  const notices = cleanStaleRunCgroups(dirname(dir), dir);
  const populated = () => {
    try {
      return /^populated 1$/m.test(readFileSync(`${dir}/cgroup.events`, "latin1"));
    } catch {
      return false;
    }
  };
  return {
    kind: "cgroup",
    description: `a cgroup v2 sub-group of its own (${dir}), ended with cgroup.kill when the run ends or its runner is killed${held}`,
    notices,
    command: wrapped(cgroupPrelude(procs), CGROUP_WRAPPER, [procs]),
    // Not what this process may not signal: cgroup.kill ends those at the end.
    members: () => readPids(procs).filter((pid) => pid !== anchor.pid && maySignal(pid)),
    async killAll(until) {
      if (!populated()) return true;
      // Watched before the kill, so the change it makes cannot come before the watch.
      const emptied = untilEmpty(`${dir}/cgroup.events`, populated, until);
      try {
        writeFileSync(`${dir}/cgroup.kill`, "1");
      } catch {
        // Gone already: nothing inside to kill.
      }
      return await emptied;
    },
    close() {
      try {
        rmdirSync(dir);
      } catch {
        // Still populated (a process in D state) or gone: the kernel keeps or drops it.
      }
    },
  };
}
