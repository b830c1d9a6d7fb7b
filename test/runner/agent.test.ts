// The task containers' agent, built static with musl, driven through the runner's AgentHub with
// real processes and signals. As root the agent runs as a user of its own (as in a pod, where
// every task container shares one non-root user), so its fence sweeps only this test's processes.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  type Agent,
  type AgentHub,
  type AgentTask,
  type AgentTaskSpec,
  openAgentHub,
} from "../../src/pod-runner/agent-hub.js";
import { agentLauncher } from "../../src/pod-runner/agent-launcher.js";
import { runAttempt } from "../../src/pod-runner/attempt.js";
import { agentBinary } from "../harness/agent-binary.js";
import { recordingLauncher, unfreedBytes } from "../support/chunks.js";

const root = process.getuid?.() === 0;
/** A user no other test or helper on this machine runs as. */
const uid = root ? 200_000 + (process.pid % 50_000) : (process.getuid?.() ?? 0);
const gid = root ? uid : (process.getgid?.() ?? 0);
const PATH = "/usr/local/bin:/usr/bin:/bin";
/** Every exit carries the leader's rusage from the agent's wait4 (CPU µs, peak RSS KiB). */
const USAGE = { usage: { cpuMicros: expect.any(Number), maxRssKiB: expect.any(Number) } };

let dir = "";
let work = "";
let busybox: string | null = null;
let sockets = 0;
const cleanups: Array<() => Promise<void> | void> = [];

beforeAll(() => {
  const built = agentBinary();
  dir = mkdtempSync(join(tmpdir(), "playbook-agent-"));
  chmodSync(dir, 0o755);
  copyFileSync(built.agent, join(dir, "agent"));
  chmodSync(join(dir, "agent"), 0o755);
  if (built.busybox) {
    busybox = join(dir, "busybox");
    copyFileSync(built.busybox, busybox);
    chmodSync(busybox, 0o755);
  }
  work = join(dir, "work");
  mkdirSync(work);
  if (root) chownSync(work, uid, gid);
  work = realpathSync(work);
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  if (root) {
    for (const pid of processesOf(uid)) kill(pid, "SIGKILL");
  }
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function kill(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

function stat(pid: number): { state: string; ppid: number; pgrp: number; session: number } | null {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    const [state = "", ppid, pgrp, session] = text.slice(text.lastIndexOf(")") + 2).split(" ");
    return { state, ppid: Number(ppid), pgrp: Number(pgrp), session: Number(session) };
  } catch {
    return null;
  }
}

const alive = (pid: number) => {
  const s = stat(pid);
  return s !== null && s.state !== "Z";
};

/** Every live process whose real user is `user`. */
function processesOf(user: number): number[] {
  const found: number[] = [];
  for (const name of readdirProc()) {
    try {
      const status = readFileSync(`/proc/${name}/status`, "utf8");
      const real = /^Uid:\s+(\d+)/m.exec(status)?.[1];
      if (Number(real) === user && alive(Number(name))) found.push(Number(name));
    } catch {
      // ended while read
    }
  }
  return found;
}

function readdirProc(): string[] {
  return readdirSync("/proc").filter((name) => /^\d+$/.test(name));
}

/** The live descendants of `ancestor`. */
function descendantsOf(ancestor: number): number[] {
  const parents = new Map<number, number>();
  for (const name of readdirProc()) {
    const s = stat(Number(name));
    if (s && s.state !== "Z") parents.set(Number(name), s.ppid);
  }
  return [...parents.keys()].filter((pid) => {
    for (let at = parents.get(pid); at !== undefined && at > 1; at = parents.get(at)) {
      if (at === ancestor) return true;
    }
    return false;
  });
}

async function until(check: () => boolean, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

interface RunningAgent {
  hub: AgentHub;
  agent: Agent;
  child: ChildProcess;
  ended: Promise<{ code: number | null; signal: string | null }>;
  stderr: () => string;
}

/**
 * Starts the agent as the test's user, or, with `wrap`, as root through a command that ends by
 * executing the agent (its path and arguments as "$@").
 */
async function startAgent(env: Record<string, string> = {}, wrap?: string): Promise<RunningAgent> {
  const socket = join(dir, `run-${++sockets}.sock`);
  // As in a pod: the runner's socket and keys are its own, the agents reach them through the
  // shared group.
  const hub = await openAgentHub(socket, { expect: ["task-1"], ...(root ? { group: gid } : {}) });
  const args = [join(dir, "agent"), socket, "task-1"];
  const child = spawn(wrap ? "sh" : (args[0] as string), wrap ? ["-c", wrap, "sh", ...args] : args.slice(1), {
    env,
    stdio: ["ignore", "ignore", "pipe"],
    ...(root && !wrap ? { uid, gid } : {}),
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const ended = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal })),
  );
  cleanups.push(async () => {
    await hub.close();
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  await hub.ready(5000).catch((error: Error) => {
    throw new Error(`${error.message}; agent stderr: ${stderr}`);
  });
  return { hub, agent: hub.agent("task-1"), child, ended, stderr: () => stderr };
}

interface Observed {
  task: AgentTask;
  events: string[];
  stdout: () => string;
  stderr: () => string;
  started: Promise<number>;
  exited: Promise<{ code: number | null; signal: string | null }>;
  done: Promise<void>;
}

function observe(agent: Agent, spec: Partial<AgentTaskSpec> & { run: string }): Observed {
  const task = agent.start({ cwd: work, env: { PATH }, ...spec });
  const events: string[] = [];
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  task.on("stdout", (data) => {
    out.push(data);
    events.push("stdout");
  });
  task.on("stderr", (data) => {
    err.push(data);
    events.push("stderr");
  });
  task.on("closed", (stream) => events.push(`closed ${stream}`));
  task.on("failed", (text) => events.push(`failed ${text}`));
  const started = new Promise<number>((resolve) => task.once("started", resolve));
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    task.once("exited", (exit) => {
      events.push("exited");
      resolve(exit);
    }),
  );
  const done = new Promise<void>((resolve, reject) => {
    const check = () => {
      if (task.done) resolve();
    };
    task.on("exited", check);
    task.on("closed", check);
    task.once("lost", (reason) => reject(new Error(`agent lost: ${reason}`)));
  });
  // Tests that end the agent on purpose never await it.
  done.catch(() => {});
  return {
    task,
    events,
    stdout: () => Buffer.concat(out).toString(),
    stderr: () => Buffer.concat(err).toString(),
    started,
    exited,
    done,
  };
}

/** Pids the task printed, one a line, once `count` are out. */
async function printedPids(observed: Observed, count: number): Promise<number[]> {
  await until(() => observed.stdout().split("\n").filter(Boolean).length >= count, `${count} pids printed`);
  return observed
    .stdout()
    .split("\n")
    .filter((line) => /^\d+$/.test(line))
    .map(Number);
}

describe("agent", () => {
  it("says hello with its container, pid, user and the image's shell", async () => {
    const { agent, child } = await startAgent();
    expect(agent).toMatchObject({ container: "task-1", pid: child.pid, uid, shell: "/bin/sh" });
  });

  it("waits for the runner's socket to appear, and the hub waits for every expected agent", async () => {
    const socket = join(dir, `late-${++sockets}.sock`);
    const spawnAgent = (container: string) =>
      spawn(join(dir, "agent"), [socket, container], {
        env: {},
        stdio: "ignore",
        ...(root ? { uid, gid } : {}),
      });
    const first = spawnAgent("task-1");
    cleanups.push(() => {
      first.kill("SIGKILL");
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const hub = await openAgentHub(socket, { expect: ["task-1", "task-2"], ...(root ? { group: gid } : {}) });
    cleanups.push(() => hub.close());
    await expect(hub.ready(500)).rejects.toThrow("no agent connected for task-2 within 500 ms");
    const second = spawnAgent("task-2");
    cleanups.push(() => {
      second.kill("SIGKILL");
    });
    await hub.ready(5000);
    expect(hub.agents().map((agent) => [agent.container, agent.pid])).toEqual([
      ["task-1", first.pid],
      ["task-2", second.pid],
    ]);
  });

  it("refuses an agent of a container it does not expect", async () => {
    const socket = join(dir, `unexpected-${++sockets}.sock`);
    const hub = await openAgentHub(socket, { expect: ["task-1"], ...(root ? { group: gid } : {}) });
    cleanups.push(() => hub.close());
    const stranger = spawn(join(dir, "agent"), [socket, "task-9"], {
      env: {},
      stdio: ["ignore", "ignore", "pipe"],
      ...(root ? { uid, gid } : {}),
    });
    let stderr = "";
    stranger.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    // "close", not "exit": its stderr is read to the end by then.
    const ended = await new Promise<number | null>((resolve) =>
      stranger.on("close", (code) => resolve(code)),
    );
    // The runner made no key for it: it is refused before it can say anything.
    expect(ended).toBe(1);
    expect(stderr).toContain(`agent: no key for container task-9 at ${dir}`);
    expect(() => hub.agent("task-9")).toThrow("no agent connected for container task-9");
  });

  it("streams stdout and stderr apart, each in order, and reports the exit code", async () => {
    const { agent } = await startAgent();
    const task = observe(agent, {
      run: "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done; exit 3",
    });
    await task.done;
    expect(task.stdout()).toBe("out1\nout2\nout3\nout4\nout5\n");
    expect(task.stderr()).toBe("err1\nerr2\nerr3\nerr4\nerr5\n");
    expect(await task.exited).toEqual({ code: 3, signal: null, ...USAGE });
    expect(await task.started).toBeGreaterThan(1);
  });

  it("hands an attempt the task's output as chunks of their own, which it frees once passed on", async () => {
    const { agent } = await startAgent();
    const seen: Buffer[] = [];
    const written: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        written.push(Buffer.from(chunk));
        callback();
      },
    });
    const result = await runAttempt({
      taskName: "flood",
      run: "seq 1 1000000",
      env: { PATH },
      cwd: work,
      attemptId: "flood.0.1",
      runCookie: "flood",
      cancelFileOf: (id) => join(work, id),
      deadline: null,
      stallMs: 0,
      killGraceMs: 0,
      drainWindowMs: 2000,
      sink,
      prefix: "[flood] ",
      tailBytes: 4096,
      launcher: recordingLauncher(agentLauncher(agent), seen),
    });
    await new Promise<void>((resolve) => sink.end(resolve));
    expect(result.exitCode).toBe(0);
    const lines: string[] = [];
    for (let i = 1; i <= 1_000_000; i++) lines.push(`[flood] ${i}\n`);
    expect(Buffer.concat(written).toString("latin1")).toBe(lines.join(""));
    // 6.9 MB went through: all but what the tail still holds was freed (a freed chunk reads empty).
    expect(seen.length).toBeGreaterThan(10);
    expect(unfreedBytes(seen)).toBeLessThan(4096 + 256 * 1024);
  });

  it("reports the signal that ended the leader by name", async () => {
    const { agent } = await startAgent();
    const task = observe(agent, { run: "kill -KILL $$" });
    await task.done;
    expect(await task.exited).toEqual({ code: null, signal: "SIGKILL", ...USAGE });
  });

  it("starts the task with exactly its env and in its working directory", async () => {
    const { agent } = await startAgent();
    const env = { PATH, A: "1", B: "x y=z", PLAYBOOK_CANCEL_FILE: "/playbook/run/cancel/7" };
    const task = observe(agent, { env, run: "tr '\\0' '\\n' < /proc/$$/environ; echo cwd=$(pwd -P)" });
    await task.done;
    const lines = task.stdout().trim().split("\n");
    expect(lines.pop()).toBe(`cwd=${work}`);
    expect(lines.sort()).toEqual(
      Object.entries(env)
        .map(([k, v]) => `${k}=${v}`)
        .sort(),
    );
  });

  it("starts the task in a new session and group whose id is the pid it reports, easy to OOM-kill", async () => {
    const { agent } = await startAgent();
    const task = observe(agent, { run: "cat /proc/$$/stat; cat /proc/$$/oom_score_adj" });
    await task.done;
    const pid = await task.started;
    const [statLine = "", oom] = task.stdout().trim().split("\n");
    const [, ppid, pgrp, session] = statLine.slice(statLine.lastIndexOf(")") + 2).split(" ");
    expect(Number(statLine.split(" ")[0])).toBe(pid);
    expect({ ppid: Number(ppid), pgrp: Number(pgrp), session: Number(session) }).toEqual({
      ppid: agent.pid,
      pgrp: pid,
      session: pid,
    });
    expect(oom).toBe("1000");
  });

  it("passes the task stdin from /dev/null and no descriptor of its own", async () => {
    const { agent } = await startAgent();
    // exec: the shell's own descriptors are what the task got; ls would add the one it reads with.
    const task = observe(agent, { run: "readlink /proc/$$/fd/0; exec ls /proc/self/fd" });
    await task.done;
    const [stdin, ...fds] = task.stdout().trim().split("\n");
    expect(stdin).toBe("/dev/null");
    // 0, 1, 2 and the one ls reads /proc/self/fd with.
    expect(fds.map(Number).sort()).toEqual([0, 1, 2, 3]);
  });

  it("signals the task's group with -PGID", async () => {
    const { agent } = await startAgent();
    const task = observe(agent, { run: "sleep 300 & echo $!; sleep 300 & echo $!; wait" });
    const pgid = await task.started;
    const pids = await printedPids(task, 2);
    agent.kill(-pgid, "SIGTERM");
    expect(await task.exited).toEqual({ code: null, signal: "SIGTERM", ...USAGE });
    await task.done;
    await until(() => pids.every((pid) => !alive(pid)), "the group's sleeps to end");
  });

  it("kills the whole tree, a setsid escapee and a grandchild holding the pipe among them", async () => {
    const { agent } = await startAgent();
    const task = observe(agent, {
      run: "setsid sleep 300 & echo $!; sh -c 'sleep 301 & echo $!'; echo leader-done",
    });
    expect(await task.exited).toEqual({ code: 0, signal: null, ...USAGE });
    const [escapee = 0, grandchild = 0] = await printedPids(task, 3);
    // `setsid` calls setsid(2) after the shell forked it: $! can be printed before it has.
    await until(() => stat(escapee)?.session === escapee, "the escapee to lead a session of its own");
    // Orphaned by the inner shell: the agent, a subreaper, is its parent now.
    expect(stat(grandchild)?.ppid).toBe(agent.pid);
    expect(task.task.open).toEqual({ out: true, err: true });
    agent.kill("tree", "SIGKILL");
    await task.done;
    await until(() => !alive(escapee) && !alive(grandchild), "the tree to end");
  });

  it("kills a tree of 100 processes and one that keeps forking while it is swept", async () => {
    const { agent } = await startAgent();
    const task = observe(agent, {
      run: "for i in $(seq 100); do sleep 300 & done; (while :; do sleep 300 & done) & echo ready; wait",
    });
    await until(() => task.stdout().includes("ready"), "the tree to start");
    await until(() => descendantsOf(agent.pid).length > 100, "a hundred descendants");
    const started = Date.now();
    agent.kill("tree", "SIGKILL");
    expect(await task.exited).toEqual({ code: null, signal: "SIGKILL", ...USAGE });
    await task.done;
    await until(() => descendantsOf(agent.pid).length === 0, "every descendant to end");
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it.skipIf(!root)(
    "fences every process of its user, one that cleared its environment and left its session too, but the spared",
    async () => {
      const { agent } = await startAgent();
      // Stand-ins for processes of the same user in other containers of the pod.
      const outsider = spawn("/usr/bin/env", ["-i", "/usr/bin/setsid", "/bin/sleep", "300"], {
        uid,
        gid,
        stdio: "ignore",
      });
      const spared = spawn("/bin/sleep", ["300"], { uid, gid, stdio: "ignore" });
      cleanups.push(() => {
        outsider.kill("SIGKILL");
        spared.kill("SIGKILL");
      });
      const task = observe(agent, {
        run: "env -i /usr/bin/setsid -f /bin/sleep 302; echo started; sleep 303",
      });
      await until(() => task.stdout().includes("started"), "the task to start its escapee");
      await until(() => alive(outsider.pid ?? 0) && alive(spared.pid ?? 0), "the stand-ins to start");
      expect(await agent.fence([spared.pid ?? 0])).toBe(0);
      expect(await task.exited).toEqual({ code: null, signal: "SIGKILL", ...USAGE });
      await task.done;
      await until(() => !alive(outsider.pid ?? 0), "the outsider to end");
      expect(alive(spared.pid ?? 0)).toBe(true);
      expect(processesOf(uid).sort()).toEqual([agent.pid, spared.pid].sort());
    },
  );

  // PID 1 of a process namespace: as in a pod, the agent is not it. `asInit` is what PID 1 runs
  // as: root stands for the pod's sandbox (a user of its own, which the agent may not signal).
  const inPidNamespace = (asInit: "root" | "agent's user") => {
    const become = `setpriv --reuid ${uid} --regid ${gid} --clear-groups`;
    // PID 1 is a shell that waits for the agent (no exec: it stays PID 1).
    return asInit === "root"
      ? `exec unshare -pf --mount-proc /bin/sh -c '${become} "$0" "$@"; exit $?' "$@"`
      : `exec unshare -pf --mount-proc ${become} /bin/sh -c '"$0" "$@"; exit $?' "$@"`;
  };
  const canUnshare = root && spawnSync("unshare", ["-pf", "--mount-proc", "true"]).status === 0;

  it.skipIf(!canUnshare)(
    "fences around a PID 1 it may not signal (the sandbox), and ends the rest of its user",
    async () => {
      const { agent } = await startAgent({}, inPidNamespace("root"));
      const task = observe(agent, { run: "setsid sleep 300 & echo started; wait" });
      await until(() => task.stdout().includes("started"), "the task to start its escapee");
      expect(await agent.fence([])).toBe(0);
      await task.done;
    },
  );

  it.skipIf(!canUnshare)(
    "does not spare a PID 1 of its own user: that is not the sandbox, and the fence says it is left",
    async () => {
      // A task that took PID 1 (a pod whose sandbox ran as the tasks' user, traced and made to
      // exec) would outlive the run if the fence spared every PID 1; SIGKILL from inside its
      // namespace cannot end an init, so the fence counts it as left.
      const { agent } = await startAgent({}, inPidNamespace("agent's user"));
      expect(await agent.fence([])).toBe(1);
    },
  );

  it.skipIf(!agentBinaryHasBusybox())(
    "runs tasks under its own busybox where the image has no /bin/sh",
    async () => {
      const { agent } = await startAgent({ PLAYBOOK_AGENT_SHELL: "/nonexistent/sh" });
      expect(agent.shell).toBe(busybox);
      const task = observe(agent, { run: "readlink /proc/$$/exe; echo $((6 * 7))" });
      await task.done;
      expect(task.stdout()).toBe(`${busybox}\n42\n`);
      expect(await task.exited).toEqual({ code: 0, signal: null, ...USAGE });
    },
  );

  it.skipIf(!root || !agentBinaryHasBusybox())(
    "runs tasks under its busybox in a mount namespace where /bin/sh and every other program is gone",
    async () => {
      // A tmpfs over /usr/bin (and so /bin) in a mount namespace of the agent's own: an image
      // without a shell. The agent, static, and its busybox live elsewhere.
      const { agent } = await startAgent(
        {},
        'exec unshare --mount --propagation private /bin/sh -c \'mount -t tmpfs none /usr/bin && exec "$0" "$@"\' "$@"',
      );
      expect(agent.shell).toBe(busybox);
      const task = observe(agent, { run: "[ -e /bin/sh ] || echo no /bin/sh; echo $((6 * 7)) >&2; exit 4" });
      await task.done;
      expect({ stdout: task.stdout(), stderr: task.stderr() }).toEqual({
        stdout: "no /bin/sh\n",
        stderr: "42\n",
      });
      expect(await task.exited).toEqual({ code: 4, signal: null, ...USAGE });
    },
  );

  describe("a task's own shell (spec.tasks[].shell)", () => {
    it("executes its words with -c RUN: a bare name found on the task's PATH, an absolute path as given", async () => {
      const { agent } = await startAgent();
      // The case: the dump fails, the pipe's last command succeeds.
      const strict = observe(agent, {
        run: "readlink /proc/$$/exe; false | true; echo uploaded",
        shell: ["bash", "-eo", "pipefail"],
      });
      await strict.done;
      expect(strict.stdout()).toMatch(/\/bash\n$/);
      expect(await strict.exited).toEqual({ code: 1, signal: null, ...USAGE });
      const byPath = observe(agent, { run: 'echo "$0 $-"', shell: ["/bin/bash", "-eu"] });
      await byPath.done;
      expect(byPath.stdout()).toMatch(/^\/bin\/bash .*e.*u/);
      // Without a shell of its own: sh -c, which goes on after the pipe, as always.
      const plain = observe(agent, { run: "false | true; echo uploaded" });
      await plain.done;
      expect(plain.stdout()).toBe("uploaded\n");
      expect(await plain.exited).toEqual({ code: 0, signal: null, ...USAGE });
    });

    it("is the attempt's leader: its pid is the group's the agent reports", async () => {
      const { agent } = await startAgent();
      const task = observe(agent, { run: "echo $$", shell: ["bash", "-e"] });
      const pid = await task.started;
      await task.done;
      expect(task.stdout()).toBe(`${pid}\n`);
    });

    it("reports a shell it cannot find, and exits 127: never the busybox in its place", async () => {
      const { agent } = await startAgent();
      const missing = observe(agent, { run: "true", shell: ["no-such-shell", "-e"] });
      expect(await missing.exited).toEqual({ code: 127, signal: null, ...USAGE });
      await missing.done;
      expect(missing.events).toContainEqual(`failed no-such-shell not found on PATH ${PATH}`);
      const absolute = observe(agent, { run: "true", shell: ["/nonexistent/bash"] });
      expect(await absolute.exited).toEqual({ code: 127, signal: null, ...USAGE });
      await absolute.done;
      expect(absolute.events).toContainEqual(
        expect.stringMatching(/^failed exec \/nonexistent\/bash: No such file or directory$/),
      );
    });
  });

  it("ends its descendants and exits 0 when the runner's connection drops", async () => {
    const { agent, hub, ended } = await startAgent();
    const task = observe(agent, { run: "sleep 300 & echo $!; setsid sleep 300 & echo $!; wait" });
    const pids = [await task.started, ...(await printedPids(task, 2))];
    const lost = new Promise<string>((resolve) => agent.onLost(resolve));
    await hub.close();
    expect(await ended).toEqual({ code: 0, signal: null });
    await until(() => pids.every((pid) => !alive(pid)), "the task's tree to end");
    expect(await lost).toMatch(/closed/);
  });

  it("ends its descendants and exits 0 when told to quit, and the hub does not call that lost", async () => {
    const { agent, ended } = await startAgent();
    const task = observe(agent, { run: "setsid sleep 300 & echo $!; wait" });
    const pids = [await task.started, ...(await printedPids(task, 1))];
    let lost = false;
    agent.onLost(() => {
      lost = true;
    });
    await agent.quit();
    expect(await ended).toEqual({ code: 0, signal: null });
    await until(() => pids.every((pid) => !alive(pid)), "the task's tree to end");
    expect(lost).toBe(false);
  });

  it("goes on through SIGTERM, SIGINT and SIGHUP: only the runner ends it", async () => {
    const { agent, child } = await startAgent();
    const task = observe(agent, { run: "sleep 0.3; echo done" });
    for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) kill(child.pid ?? 0, signal);
    await task.done;
    expect(task.stdout()).toBe("done\n");
    expect(await task.exited).toEqual({ code: 0, signal: null, ...USAGE });
    expect(child.exitCode).toBeNull();
  });

  it("reports a task it could not start and its exit 127", async () => {
    const { agent } = await startAgent();
    const task = observe(agent, { cwd: "/nonexistent", run: "true" });
    expect(await task.exited).toEqual({ code: 127, signal: null, ...USAGE });
    await task.done;
    expect(task.events).toContainEqual(expect.stringMatching(/^failed chdir \/nonexistent: No such file/));
  });

  it("refuses to signal 0, -1 and itself, and goes on", async () => {
    const { agent, child } = await startAgent();
    agent.kill(0, "SIGKILL");
    agent.kill(-1, "SIGKILL");
    agent.kill(agent.pid, "SIGKILL");
    await until(() => agent.errors.length === 3, "three refusals");
    expect(agent.errors).toEqual([
      "refused to signal 0",
      "refused to signal -1",
      `refused to signal ${agent.pid}`,
    ]);
    const task = observe(agent, { run: "echo still here" });
    await task.done;
    expect(task.stdout()).toBe("still here\n");
    expect(child.exitCode).toBeNull();
  });
});

describe("an agent's errors that name no task", () => {
  it("are kept up to 20, the rest counted: a task cannot grow the runner's memory through them", async () => {
    const { agent } = await startAgent();
    for (let i = 0; i < 520; i++) agent.kill(0, "SIGKILL");
    // The agent answers in order: a task's output after the refusals comes after all of them.
    const task = observe(agent, { run: "echo after" });
    await task.done;
    expect(agent.errors).toHaveLength(21);
    expect(agent.errors.slice(0, 20)).toEqual(Array(20).fill("refused to signal 0"));
    expect(agent.errors.at(-1)).toBe("500 more error(s) from the agent were not kept");
  });
});

function agentBinaryHasBusybox(): boolean {
  try {
    return agentBinary().busybox !== null;
  } catch {
    return false;
  }
}
