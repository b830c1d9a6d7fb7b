import { execFile, spawn } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";

/** A process the harness started: enough to find it again from another process and stop it. */
export interface RecordedProcess {
  name: string;
  pid: number;
  /** The executable, checked against /proc before signalling so a reused pid is never killed. */
  executable: string;
  logFile: string;
}

export interface StartedProcess extends RecordedProcess {
  /** Resolves when the process exits; only for processes this Node process spawned. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts a process in its own process group with stdout and stderr appended to a log file.
 * `daemon` processes are unreferenced so the caller may exit and leave them running.
 */
export function startProcess(
  name: string,
  executable: string,
  args: string[],
  options: { logFile: string; env?: NodeJS.ProcessEnv; daemon?: boolean; diesWithParent?: boolean },
): StartedProcess {
  const log = openSync(options.logFile, "a");
  // setpriv (util-linux) sets the parent-death signal and execs the executable: the process is
  // killed with the test worker that started it, even when the worker is killed before teardown.
  const [command, argv] =
    options.diesWithParent && !options.daemon
      ? ["setpriv", ["--pdeathsig", "KILL", "--", executable, ...args]]
      : [executable, args];
  try {
    const child = spawn(command, argv, {
      detached: true,
      stdio: ["ignore", log, log],
      env: options.env ?? process.env,
    });
    if (child.pid === undefined) throw new Error(`${name} did not start (${executable})`);
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      child.once("exit", (code, signal) => resolve({ code, signal }));
      child.once("error", () => resolve({ code: null, signal: null }));
    });
    if (options.daemon) child.unref();
    return { name, pid: child.pid, executable, logFile: options.logFile, exited };
  } finally {
    closeSync(log);
  }
}

/** True while the pid runs the recorded executable; zombies and reused pids count as gone. */
export function isRunning(recorded: Pick<RecordedProcess, "pid" | "executable">): boolean {
  try {
    const stat = readFileSync(`/proc/${recorded.pid}/stat`, "utf8");
    // After the command's name: state ppid pgrp session tty_nr tpgid flags ...
    const [state, , , , , , flags] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (state === "Z" || state === "X") return false;
    const cmdline = readFileSync(`/proc/${recorded.pid}/cmdline`, "utf8");
    // Empty while an exec replaces the process's memory (setpriv becoming the executable): it
    // runs, unless the pid is now a kernel thread's (PF_KTHREAD in stat's flags).
    if (cmdline === "") return (Number(flags) & 0x200000) === 0;
    const argv = cmdline.split("\0");
    // startProcess's setpriv (diesWithParent) until it has exec'd the executable.
    if (argv[0] === "setpriv") return argv[argv.indexOf("--") + 1] === recorded.executable;
    return argv[0] === recorded.executable;
  } catch {
    return false;
  }
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}

/** SIGTERM to the process group, SIGKILL after `graceMs`, and wait until it is gone. */
export async function stopProcess(recorded: RecordedProcess, graceMs = 10_000): Promise<void> {
  if (!isRunning(recorded)) return;
  signalGroup(recorded.pid, "SIGTERM");
  const deadline = Date.now() + graceMs;
  while (isRunning(recorded) && Date.now() < deadline) await sleep(50);
  if (isRunning(recorded)) {
    signalGroup(recorded.pid, "SIGKILL");
    const killDeadline = Date.now() + 5_000;
    while (isRunning(recorded) && Date.now() < killDeadline) await sleep(20);
  }
  if (isRunning(recorded)) throw new Error(`${recorded.name} (pid ${recorded.pid}) survived SIGKILL`);
}

/** A port the kernel reports free on loopback right now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === "object") resolve(address.port);
        else reject(new Error("no port assigned"));
      });
    });
  });
}

/** Whether 127.0.0.1:port can be listened on right now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/**
 * A free loopback port below the kernel's ephemeral range (32768-60999), for a server that binds
 * it later in another network namespace. A port from `freePort` is ephemeral: there, any outgoing
 * connection (the kubelet's own, to the API server, before it listens) may take it as its local
 * port first, and the listen fails with "address already in use". Nothing takes these by chance.
 */
export async function freeFixedPort(): Promise<number> {
  for (let tries = 0; tries < 200; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (await canListen(port)) return port;
  }
  throw new Error("no free loopback port in 20000-31999 after 200 tries");
}

/** True when something accepts connections on 127.0.0.1:port. */
export async function isListening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Polls `check` until it returns a value, failing with the last error after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined>,
  options: { timeoutMs: number; intervalMs?: number; abortIf?: () => string | undefined },
): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  let lastError: unknown;
  for (;;) {
    const reason = options.abortIf?.();
    if (reason !== undefined) throw new Error(`${what}: ${reason}`);
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const detail = lastError instanceof Error ? `: ${lastError.message}` : "";
      throw new Error(`timed out after ${options.timeoutMs}ms waiting for ${what}${detail}`);
    }
    await sleep(options.intervalMs ?? 100);
  }
}

/** The last lines of a log file, for error messages. */
export function logTail(file: string, lines = 20): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** A cluster tool (kubectl, helm) run against `kubeconfig`: its exit code and both streams, never a throw. */
export async function runClusterTool(
  file: string,
  args: string[],
  kubeconfig: string | undefined,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(file, args, {
      env: { ...process.env, KUBECONFIG: kubeconfig },
      maxBuffer: 1 << 24,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: string; stderr?: string };
    const code = typeof failed.code === "number" ? failed.code : 1;
    return { code, stdout: failed.stdout ?? "", stderr: failed.stderr ?? "" };
  }
}
