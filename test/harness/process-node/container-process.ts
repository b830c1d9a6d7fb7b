import { spawn, spawnSync } from "node:child_process";
import { closeSync, openSync, readdirSync, readFileSync } from "node:fs";
import { constants, tmpdir } from "node:os";
import { type MountStep, type MountTools, mountWrapper } from "./mounts.js";

/** How one container's process ended, in the terms the kubelet reports. */
export interface ProcessExit {
  /** 128 + the signal when a signal ended it, as containerd reports (the kubelet sets no `signal`). */
  exitCode: number;
  /** Set when the container never started (a mount failed): the runtime's message. */
  startError?: string;
}

export interface ContainerProcess {
  /** The pid the node signals: the container's main process (pid 1 of its PID namespace). */
  readonly mainPid: () => number | undefined;
  readonly exited: Promise<ProcessExit>;
  signal(signal: "SIGTERM" | "SIGKILL"): void;
}

export type Isolation = "pid-namespace" | "session";

const unshareArgs = (mountNamespace = false): string[] => [
  // Unprivileged users need a user namespace to own the PID namespace; root does not.
  ...(process.getuid?.() === 0 ? [] : ["--user", "--map-root-user"]),
  // Private propagation: nothing mounted for the container shows on this machine, and it all
  // goes away with the namespace's last process.
  ...(mountNamespace ? ["--mount", "--propagation", "private"] : []),
  // No --fork: util-linux's unshare reports a child killed by a signal as exit code 1 (2.38
  // fails to re-raise it), so the reporter below forks the namespace's init and waits for it.
  "--pid",
];

/**
 * Runs in the namespaces unshare made, outside the new PID namespace: its one child is that
 * namespace's PID 1 (the container's main process), and its exit status is the child's as the
 * kubelet reports it: the exit code, or 128 + the signal that ended it. `&` in sh ignores SIGINT
 * and SIGQUIT, so env restores them; setpriv kills the child if the reporter dies, as
 * `--kill-child` did. Its own stderr is dropped: sh would print "Killed" into the container's log.
 */
const exitReporter = 'exec 3>&2 2>/dev/null; "$@" 2>&3 3>&- & wait $!';

interface ReporterTools {
  shell: string;
  setpriv: string;
  env: string;
}

let probedReporterTools: ReporterTools | undefined;

function reporterTools(): ReporterTools {
  probedReporterTools ??= {
    shell: onPath("sh") ?? "sh",
    setpriv: onPath("setpriv") ?? "setpriv",
    env: onPath("env") ?? "env",
  };
  return probedReporterTools;
}

/** The command that runs argv as PID 1 of a new PID namespace (and mount namespace if asked). */
function inPidNamespace(argv: readonly string[], mountNamespace = false): string[] {
  const tools = reporterTools();
  return [
    "unshare",
    ...unshareArgs(mountNamespace),
    "--",
    tools.shell,
    "-c",
    exitReporter,
    "container-exit-reporter",
    tools.setpriv,
    "--pdeathsig",
    "KILL",
    "--",
    tools.env,
    "--default-signal=INT,QUIT",
    "--",
    ...argv,
  ];
}

let probedIsolation: Isolation | undefined;

/**
 * A PID namespace per pod when `unshare` works on this machine: when the container's main
 * process (the namespace's init) ends, the kernel kills everything left in it, as container
 * teardown does. Otherwise a session per pod plus a sweep by environment cookie.
 */
export function detectIsolation(): Isolation {
  if (probedIsolation) return probedIsolation;
  const [file, ...args] = inPidNamespace(["true"]);
  const probe = spawnSync(file ?? "unshare", args, { stdio: "ignore", timeout: 5_000 });
  probedIsolation = probe.status === 0 ? "pid-namespace" : "session";
  return probedIsolation;
}

export function onPath(file: string): string | undefined {
  const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", file], { encoding: "utf8", timeout: 5_000 });
  const resolved = found.stdout?.trim();
  return found.status === 0 && resolved?.startsWith("/") ? resolved : undefined;
}

let probedMountTools: MountTools | null | undefined;

/**
 * The tools that mount a container's volumes in its own mount namespace, when this machine can
 * make one (`unshare --mount` with private propagation, beside the PID namespace); else undefined.
 * Their paths are fixed here so that a pod's PATH cannot change them.
 */
export function detectMountNamespaces(): MountTools | undefined {
  if (probedMountTools !== undefined) return probedMountTools ?? undefined;
  const shell = onPath("sh");
  const mount = onPath("mount");
  const mkdir = onPath("mkdir");
  const works =
    shell !== undefined &&
    mount !== undefined &&
    mkdir !== undefined &&
    detectIsolation() === "pid-namespace" &&
    spawnSync("unshare", [...unshareArgs(true), mount, "-t", "tmpfs", "tmpfs", tmpdir()], {
      stdio: "ignore",
      timeout: 5_000,
    }).status === 0;
  probedMountTools = works ? { shell, mount, mkdir } : null;
  return probedMountTools ?? undefined;
}

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8")
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

/** Processes whose environment carries the cookie, for the session fallback's sweep. */
function processesWithCookie(cookie: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, "utf8").split("\0").includes(cookie))
        found.push(Number(entry));
    } catch {
      // Gone or not ours to read.
    }
  }
  return found;
}

function kill(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}

export interface StartContainerOptions {
  argv: [string, ...string[]];
  env: Record<string, string>;
  cwd: string;
  logFile: string;
  /** Unique per container run; marks its processes for the session fallback's sweep. */
  cookie: string;
  isolation: Isolation;
  /**
   * `shareProcessNamespace: true`: the pod's sandbox (pause) is PID 1 and reaps orphans, and the
   * container's main process is its child. tini plays pause here.
   */
  sharedPidNamespace?: boolean;
  /**
   * Mounts made in a private mount namespace before the container's process starts (needs
   * detectMountNamespaces()); `errorFile` receives the StartError message when one fails.
   */
  mounts?: { tools: MountTools; steps: MountStep[]; errorFile: string; stash: string };
  /** The pod's network namespace (`/proc/<pid>/ns/net`) to join; else the machine's network. */
  network?: string;
}

/** Whether tini, which plays the pod sandbox's pause process, is installed. */
export function reaperInstalled(): boolean {
  return spawnSync("tini", ["--version"], { stdio: "ignore", timeout: 5_000 }).status === 0;
}

function readStartError(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8") || undefined;
  } catch {
    return undefined;
  }
}

export function startContainerProcess(options: StartContainerOptions): ContainerProcess {
  const log = openSync(options.logFile, "a");
  const cookieEntry = `PROCESS_NODE_CONTAINER=${options.cookie}`;
  const env = { ...options.env, PROCESS_NODE_CONTAINER: options.cookie };
  // With a shared namespace, tini is PID 1 (as pause is) and a subreaper in the session fallback.
  const shared = options.sharedPidNamespace === true;
  let argv: [string, ...string[]] = shared ? ["tini", "-s", "--", ...options.argv] : options.argv;
  const mounts = options.mounts;
  if (mounts && options.isolation !== "pid-namespace")
    throw new Error("mounts need a PID and mount namespace");
  // The wrapper becomes the namespace's PID 1 and then execs the container's process in its place.
  if (mounts)
    argv = mountWrapper(mounts.tools, mounts.steps, mounts.errorFile, options.cwd, mounts.stash, argv);
  if (options.network && options.isolation !== "pid-namespace")
    throw new Error("a pod network needs a PID namespace");
  // nsenter execs unshare in its own place, so the pids the node signals stay the same.
  const joinNetwork = options.network ? ["nsenter", `--net=${options.network}`, "--"] : [];
  const [file, ...args]: string[] =
    options.isolation === "pid-namespace"
      ? [...joinNetwork, ...inPidNamespace(argv, mounts !== undefined)]
      : argv;
  if (file === undefined) throw new Error("empty argv");
  const child = spawn(file, args, { cwd: options.cwd, env, stdio: ["ignore", log, log], detached: true });
  closeSync(log);

  const mainPid = (): number | undefined => {
    if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return undefined;
    // The namespace's init (under the exit reporter), then the container's process (under the reaper).
    let pid: number | undefined = child.pid;
    if (options.isolation === "pid-namespace") pid = childrenOf(pid)[0];
    if (shared && pid !== undefined) pid = childrenOf(pid)[0];
    return pid;
  };

  const exited = new Promise<ProcessExit>((resolve) => {
    child.once("error", () => resolve({ exitCode: 128 }));
    child.once("exit", (code, signal) => {
      if (options.isolation === "session") {
        // The container's main process is gone: take down whatever it left behind.
        for (const pid of processesWithCookie(cookieEntry)) kill(pid, "SIGKILL");
      }
      const startError = mounts ? readStartError(mounts.errorFile) : undefined;
      if (startError !== undefined && code === 128) {
        resolve({ exitCode: 128, startError });
      } else if (signal) {
        const number = constants.signals[signal] ?? 0;
        resolve({ exitCode: 128 + number });
      } else {
        resolve({ exitCode: code ?? 128 });
      }
    });
  });

  return {
    mainPid,
    exited,
    signal(signal) {
      const pid = mainPid();
      if (pid !== undefined) kill(pid, signal);
      else if (signal === "SIGKILL" && child.pid !== undefined) kill(child.pid, signal);
      if (signal === "SIGKILL" && options.isolation === "session" && child.pid !== undefined) {
        kill(-child.pid, "SIGKILL");
        for (const stray of processesWithCookie(cookieEntry)) kill(stray, "SIGKILL");
      }
    },
  };
}
