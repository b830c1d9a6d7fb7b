// The pod runner in agent mode with real agents: `playbook pod-runner` (the built CLI) and one
// agent (agent/agent.c, built static by tools/build-agent.sh) per task container, all started as
// local processes in a pid namespace of their own, as in a pod with shareProcessNamespace: the
// fence then ends what is in that namespace and nothing of this machine. The namespace's first
// process, a small shell, starts the agents, runs the runner and, once it has exited, says which
// of the processes the tasks recorded (their pids in the workspace) are still alive.
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { PROGRESS_MARKER, parseProgressLine } from "../../src/api/progress-record.js";
import { decodeReport, type RunnerReport } from "../../src/api/report.js";
import { agentBinary } from "../harness/agent-binary.js";
import { CLI } from "../support/cli.js";
import { cpuAgrees, heavyTask, PYTHON, selfMeasured, within10Percent } from "../support/heavy-task.js";
import { DOWNLOADING, EXAMPLE_LINES, OPEN_UNTIL_TERM, taskLinesOf } from "../support/task-lines.js";

const canUnshare = spawnSync("unshare", ["-pf", "--mount-proc", "true"]).status === 0;
const AGENT = canUnshare ? agentBinary().agent : null;

/**
 * The namespace's init: $1 agent, $2 run dir, $3 workspace, then per task container its name, the
 * seconds its agent starts late and the command its agent runs under (its user), `--`, and
 * the runner's command. Its stderr says ALIVE for every recorded pid still alive after the run,
 * and AGENT-LEFT for an agent that did not quit.
 */
const INIT = `
agent=$1 run=$2 ws=$3; shift 3
agents=""
while [ "$1" != "--" ]; do
  (sleep "$2"; cd "$ws" && IMAGE_ONLY="set in $1" exec $3 "$agent" "$run/runner.sock" "$1") &
  agents="$agents $!"
  shift 3
done
shift
RUNNER_ONLY=yes "$@"
rc=$?
alive() { [ -e /proc/$1 ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status 2>/dev/null; }
for f in "$ws"/*.pid; do
  [ -e "$f" ] || continue
  p=$(cat "$f")
  if alive "$p"; then echo "ALIVE $f $p" >&2; fi
done
i=0
for a in $agents; do
  while alive "$a" && [ $i -lt 60 ]; do sleep 0.05; i=$((i + 1)); done
  if alive "$a"; then echo "AGENT-LEFT $a" >&2; fi
done
exit $rc
`;

interface PodRun {
  code: number | null;
  stdout: string;
  stderr: string;
  report: RunnerReport;
  workspace: string;
  /**
   * with slowStdout: bytes of task lines read from the runner's stdout (its own lines and records,
   * which share it, not counted), and the runner's peak memory in bytes
   */
  stdoutBytes?: number;
  peak?: number;
  /** with slowStdout or fastStdout: every line of the runner's own ("playbook: ...") it wrote */
  runnerLines?: string[];
}

interface Control {
  /** SIGKILLs the agent of a container */
  killAgent: (container: string) => void;
  /** signals the runner, as the kubelet does when the pod is deleted */
  signalRunner: (signal: NodeJS.Signals) => void;
}

interface PodOptions {
  tasks: object[];
  /** spec.finally */
  finally?: object[];
  /** per finally task, its container (the plan's `finally`) */
  plannedFinally?: string[];
  /** spec.shell */
  shell?: string;
  ceiling?: string;
  killGrace?: string;
  containers?: Record<string, string>;
  /** containers whose agent is not started */
  absent?: string[];
  /** called with each chunk of the runner's stdout and the workspace */
  onStdout?: (all: string, control: Control) => void;
  helloMs?: number;
  /** per task, its container (the plan's `tasks`, as the controller resolves it) */
  planned?: string[];
  /**
   * As in a pod: the agents (and so the tasks) run as uid 1000, the runner as uid 65532 in
   * group 1000, so the runner cannot signal a task itself and every signal must go through K.
   */
  asInPod?: boolean;
  /**
   * As in a pod, each task container's agent under a user of its own (task-K as 1000 + K - 1,
   * group 1000), which $PLAYBOOK_TASK_UIDS tells the runner: the runner proves each agent's user
   * and starts each task once its own container's agent is in. Implies asInPod.
   */
  ownUsers?: boolean;
  /** per container, the seconds its agent starts after the runner */
  late?: Record<string, number>;
  /**
   * A slow sink: the runner's stdout is read 64 KiB at a time every 2 ms, and only its size and
   * last bytes kept; `run.peak` is then the runner's peak memory (VmHWM) as last seen alive.
   */
  slowStdout?: boolean;
  /** As slowStdout, but the runner's stdout is read as fast as it comes. */
  fastStdout?: boolean;
  /**
   * The runner is SIGKILLed once its peak memory passes this many bytes, and the run fails saying
   * so: a build that lets it grow would otherwise take this machine's memory.
   */
  killRunnerAbove?: number;
}

const TASK_UID = 1000;
const RUNNER_UID = 65532;
const asUser = (uid: number) => ["setpriv", `--reuid=${uid}`, `--regid=${TASK_UID}`, "--clear-groups"];

/** The host pid of the live process whose argv is exactly `argv`. */
function pidOfArgv(argv: string[]): number | null {
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0").slice(0, -1);
      if (cmdline.length === argv.length && cmdline.every((arg, i) => arg === argv[i])) return Number(name);
    } catch {
      // gone
    }
  }
  return null;
}

/** Writes the task's pid files into the workspace: `record(name)` as a shell snippet. */
const record = (ws: string, name: string) => `echo $$ > ${ws}/${name}.pid`;

/** A folder of this file's runs, removed once they are over. */
const made: string[] = [];
const tempDir = (prefix: string): string => {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

async function runPod(options: PodOptions, ws = tempDir("agent-ws-")): Promise<PodRun> {
  const dir = tempDir("agent-pod-");
  const runDir = join(dir, "run");
  mkdirSync(runDir);
  const log = join(dir, "termination-log");
  if (options.ownUsers) options.asInPod = true;
  if (options.asInPod) {
    // The pod's volumes: the run dir is the runner's (group 1000), the workspace the tasks'.
    chownSync(dir, RUNNER_UID, TASK_UID);
    chmodSync(dir, 0o750);
    chownSync(runDir, RUNNER_UID, TASK_UID);
    chmodSync(runDir, 0o2770);
    chownSync(ws, TASK_UID, TASK_UID);
    // The pod's group may write the workspace (fsGroup), whichever container's user a task has.
    chmodSync(ws, 0o2775);
  }
  const init = join(dir, "init.sh");
  writeFileSync(init, INIT);
  const containers = options.containers ?? { "task-1": "playbook.test/debian:1" };
  const started = Object.keys(containers).filter((name) => !options.absent?.includes(name));
  const plan = {
    name: "agents",
    runStartTime: new Date().toISOString(),
    defaults: { ceilingMs: 3_600_000, maxCeilingMs: 86_400_000, stallMs: 0, killGraceMs: 10_000 },
    spec: {
      ceiling: options.ceiling ?? "1m",
      killGrace: options.killGrace ?? "1s",
      ...(options.shell ? { shell: options.shell } : {}),
      tasks: options.tasks,
      ...(options.finally ? { finally: options.finally } : {}),
    },
    ...(options.planned ? { tasks: options.planned.map((container) => ({ container })) } : {}),
    ...(options.plannedFinally
      ? { finally: options.plannedFinally.map((container) => ({ container })) }
      : {}),
  };
  const child = spawn(
    "unshare",
    [
      "-pf",
      "--mount-proc",
      "sh",
      init,
      AGENT as string,
      runDir,
      ws,
      // Each container of a pod is a session of its own (runc's init calls setsid): no container
      // may continue another's stopped process through the same-session rule of SIGCONT.
      ...started.flatMap((name, index) => [
        name,
        String(options.late?.[name] ?? 0),
        options.asInPod
          ? ["setsid", ...asUser(options.ownUsers ? TASK_UID + index : TASK_UID)].join(" ")
          : "",
      ]),
      "--",
    ].concat([
      ...(options.asInPod ? ["setsid", ...asUser(RUNNER_UID)] : []),
      process.execPath,
      CLI,
      "pod-runner",
      "--termination-log",
      log,
    ]),
    {
      env: {
        PATH: process.env.PATH,
        PLAYBOOK_PLAN: JSON.stringify(plan),
        PLAYBOOK_TASK_CONTAINERS: JSON.stringify(containers),
        PLAYBOOK_RUN_DIR: runDir,
        PLAYBOOK_AGENT_HELLO_TIMEOUT_MS: String(options.helloMs ?? 20_000),
        ...(options.ownUsers
          ? {
              PLAYBOOK_TASK_UIDS: JSON.stringify(
                Object.fromEntries(Object.keys(containers).map((name, index) => [name, TASK_UID + index])),
              ),
            }
          : {}),
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let stdout = "";
  let stderr = "";
  const control: Control = {
    killAgent: (container) => {
      const pid = pidOfArgv([AGENT as string, join(runDir, "runner.sock"), container]);
      if (pid !== null) process.kill(pid, "SIGKILL");
    },
    signalRunner: (signal) => {
      const pid = pidOfArgv([process.execPath, CLI, "pod-runner", "--termination-log", log]);
      if (pid !== null) process.kill(pid, signal);
    },
  };
  let stdoutBytes = 0;
  let carry = "";
  const runnerLines: string[] = [];
  const countTaskBytes = (chunk: Buffer) => {
    const lines = (carry + chunk.toString("latin1")).split("\n");
    carry = lines.pop() ?? "";
    for (const line of lines) {
      if (line.startsWith("[")) stdoutBytes += line.length + 1;
      else if (line.startsWith("playbook: ")) runnerLines.push(line);
    }
  };
  let peak = 0;
  let killedAbove = false;
  const timers: NodeJS.Timeout[] = [];
  const measured = options.slowStdout || options.fastStdout;
  if (measured) {
    const keep = (chunk: Buffer) => {
      countTaskBytes(chunk);
      stdout = (stdout + chunk.toString()).slice(-4096);
    };
    if (options.slowStdout) {
      timers.push(
        setInterval(() => {
          const chunk = child.stdout.read() as Buffer | null;
          if (chunk !== null) keep(chunk);
        }, 2),
      );
    } else child.stdout.on("data", keep);
    const argv = [process.execPath, CLI, "pod-runner", "--termination-log", log];
    let runner: number | null = null;
    timers.push(
      setInterval(() => {
        runner ??= pidOfArgv(argv);
        if (runner === null) return;
        try {
          const kib = /VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${runner}/status`, "utf8"))?.[1];
          if (kib !== undefined) peak = Math.max(peak, Number(kib) * 1024);
          if (options.killRunnerAbove !== undefined && peak > options.killRunnerAbove && !killedAbove) {
            killedAbove = true;
            process.kill(runner, "SIGKILL");
          }
        } catch {
          // ended
        }
      }, 50),
    );
  } else {
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      options.onStdout?.(stdout, control);
    });
  }
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => {
    child.on("exit", () => {
      // The rest of the pipe, at full speed, so that close can come.
      if (options.slowStdout) child.stdout.on("data", countTaskBytes);
    });
    child.on("close", resolve);
  });
  for (const timer of timers) clearInterval(timer);
  if (killedAbove) {
    throw new Error(
      `the runner's peak memory passed ${options.killRunnerAbove} bytes (${peak} seen): it was killed`,
    );
  }
  let report: RunnerReport;
  try {
    report = decodeReport(readFileSync(log, "utf8"), options.tasks.length, options.finally?.length ?? 0);
  } catch (error) {
    throw new Error(
      `no report (exit ${code}): ${(error as Error).message}\nstdout:\n${stdout}\nstderr:\n${stderr}`,
    );
  }
  return {
    code,
    stdout,
    stderr,
    report,
    workspace: ws,
    ...(measured ? { stdoutBytes, peak, runnerLines } : {}),
  };
}

/** A task that leaves a grandchild holding its output pipe and an escapee in a session of its own with no env. */
const treeTask = (ws: string, tail: string) =>
  `sh -c '${record(ws, "grandchild")}; exec sleep 300' & ` +
  `setsid env -i /bin/sh -c 'trap "" TERM; ${record(ws, "escapee")}; exec /bin/sleep 300' >/dev/null 2>&1 & ` +
  `trap '' TERM; ${record(ws, "leader")}; echo started; ${tail}`;

describe.skipIf(AGENT === null)("pod runner in agent mode (real agents in a pid namespace)", () => {
  it("runs a task through its container's agent: Succeeded, output live with the task's prefix, containment agents", async () => {
    const run = await runPod({
      tasks: [
        { name: "hello", run: 'echo "hello from $(pwd)"; echo warn >&2; test -n "$PLAYBOOK_CANCEL_FILE"' },
      ],
    });
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({ phase: "Succeeded", reason: "Succeeded", ct: "agents" });
    expect(run.stdout).toContain(`[hello] hello from ${run.workspace}`);
    expect(run.stdout).toContain("[hello] warn");
    expect(run.stdout).toContain(
      "containment: agents in 1 task container(s) (task-1: playbook.test/debian:1)",
    );
  });

  it.skipIf(PYTHON === null)(
    "reports the task's CPU and peak memory from the agent's wait4, agreeing with what the task measured of itself, on the finished line too",
    async () => {
      const run = heavyTask(tempDir("agent-heavy-"));
      const pod = await runPod({ tasks: [{ name: "heavy", run }] });
      expect(pod.code, pod.stdout).toBe(0);
      const task = pod.report.tasks[0];
      const own = selfMeasured(pod.stdout);
      expect(own.maxRssKiB).toBeGreaterThan(200 * 1024);
      expect(
        cpuAgrees((task?.cpu ?? 0) / 1000, own.cpuSeconds),
        `cpu ${task?.cpu} ms, the task's own ${own.cpuSeconds} s`,
      ).toBe(true);
      expect(
        within10Percent(task?.mem ?? 0, own.maxRssKiB),
        `mem ${task?.mem} KiB, the task's own ${own.maxRssKiB} KiB`,
      ).toBe(true);
      expect(pod.stdout).toMatch(/^playbook: task heavy Succeeded in \S+ \(cpu \d+\.\d\ds, peak \d+ MiB\)$/m);
    },
  );

  it("keeps the runner's memory bounded when a task prints faster than its output is read: the agent holds the task at its pipe", async () => {
    const quiet = await runPod({
      tasks: [{ name: "flood", run: "echo 0123456789abcdef" }],
      slowStdout: true,
    });
    const lines = 6_000_000;
    const run = await runPod({
      tasks: [{ name: "flood", run: `yes 0123456789abcdef | head -n ${lines}` }],
      slowStdout: true,
      asInPod: true,
    });
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({ phase: "Succeeded" });
    // Every byte came through, in order (the last line whole), with its prefix.
    expect(run.stdoutBytes).toBe(lines * "[flood] 0123456789abcdef\n".length);
    // The last task line whole, then only the runner's own lines (its end lines and records).
    expect(run.stdout).toMatch(/\[flood\] 0123456789abcdef\n(?:playbook[^\n]*\n)+$/);
    // 150 MB went through a sink read at some 30 MB/s: the runner held a few pipes' worth.
    expect(quiet.peak).toBeGreaterThan(0);
    expect((run.peak ?? 0) - (quiet.peak ?? 0)).toBeLessThan(48 * 1024 * 1024);
  });

  it.each([
    ["slow", { slowStdout: true }],
    ["fast", { fastStdout: true }],
  ])(
    "keeps the runner's memory bounded while a task that ignores SIGTERM prints through a 20 s grace (%s reader): TaskTimeout, Killed, and the log says what was dropped",
    async (reader, stdoutReader) => {
      const quiet = await runPod({
        asInPod: true,
        tasks: [{ name: "flood", run: "echo 0123456789abcdef" }],
        ...stdoutReader,
      });
      const run = await runPod({
        asInPod: true,
        killGrace: "20s",
        tasks: [{ name: "flood", timeout: "1s", run: "trap '' TERM; yes 0123456789abcdef" }],
        ...stdoutReader,
        killRunnerAbove: 1024 * 1024 * 1024,
      });
      expect(run.code, run.stderr).toBe(124);
      expect(run.report).toMatchObject({ phase: "Failed", reason: "TaskTimeout" });
      expect(run.report.tasks[0]).toMatchObject({ p: "TimedOut", l: "TaskTimeout", e: "Killed" });
      expect(run.runnerLines).toContainEqual(
        "playbook: task flood passed its TaskTimeout limit: cancel file written, SIGTERM sent to its process group through the agent of container task-1, SIGKILL in 20s",
      );
      expect(run.stdoutBytes).toBeGreaterThan(0);
      // What the sink could not take was dropped, and the log says how much (a fast reader may
      // take it all).
      const dropped = run.runnerLines?.find((line) => line.includes("bytes of its output"));
      if (reader === "slow" || dropped !== undefined) {
        expect(dropped).toMatch(
          /^playbook: task flood: dropped \d+ bytes of its output that came after its stop faster than the runner's stdout took it$/,
        );
      }
      // Gigabytes went through the runner in the grace: it kept at most 1 MiB of them queued, and
      // what it read and dropped is garbage the GC collects in its time (some 100 MiB at 4 s, 20 s
      // and 40 s of grace alike). The build that queued it all passed 1 GiB well within 20 s.
      expect(quiet.peak).toBeGreaterThan(0);
      expect((run.peak ?? 0) - (quiet.peak ?? 0)).toBeLessThan(256 * 1024 * 1024);
      expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
    },
    120_000,
  );

  it("as in a pod: a task that stops its agent does not outlive its timeout unseen: no ending Killed, the report says what still ran", async () => {
    const started = Date.now();
    const run = await runPod({
      asInPod: true,
      killGrace: "1s",
      tasks: [
        { name: "freeze", run: "kill -STOP $PPID; exec sleep 40", timeout: "1s" },
        { name: "later", run: "true" },
      ],
    });
    // The runner may not signal the agent (another user): it gives the kill up after its
    // confirmation window, says so, and ends the run; in a cluster the controller then deletes
    // the pod whose task container still runs (test/unit/controller-reconcile.test.ts).
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(run.code).toBe(124);
    expect(run.report.reason).toBe("TaskTimeout");
    const [freeze, later] = run.report.tasks;
    expect(freeze).toMatchObject({ p: "TimedOut", l: "TaskTimeout" });
    expect(freeze?.e).toBeUndefined();
    expect(freeze?.m).toContain(
      "its process group could not be killed: the agent of container task-1 was stopped (SIGSTOP, sent by a task: they share its user) and carried out no signal; 1 process of the task still ran",
    );
    expect(later?.p).toBe("Skipped");
    // The log says what was done, not what was meant: the stopped agent carried out no SIGTERM,
    // and the sweep found the task's process but did not see it end.
    expect(run.stdout).toContain(
      "playbook: task freeze passed its TaskTimeout limit: cancel file written, SIGTERM not delivered: the agent of container task-1 is stopped (SIGSTOP, sent by a task) and carries out no signal, SIGKILL in 1s",
    );
    expect(run.stdout).not.toContain("SIGTERM sent");
    expect(run.stdout).toMatch(
      /^playbook: found 1 process\(es\) that tasks left running and ended 0: 1 still ran after the kill$/m,
    );
    expect(run.stdout).not.toMatch(/^playbook: ended \d+ process/m);
    expect(run.report.left).toMatch(
      /^processes of the run may still be running: the agents' fence did not confirm their end \(no fence answer from the agent of task-1; still running: pid \d+ sleep \(state S, user 1000\)\)$/,
    );
  });

  it("a task that stops its agent is still killed where the runner may continue the agent (same user)", async () => {
    const run = await runPod({
      killGrace: "1s",
      tasks: [{ name: "freeze", run: "kill -STOP $PPID; exec sleep 40", timeout: "1s" }],
    });
    expect(run.code).toBe(124);
    expect(run.report.tasks[0]).toMatchObject({ p: "TimedOut", l: "TaskTimeout", e: "Exited" });
    expect(run.report.left).toBeUndefined();
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("starts a task from its container's environment (the agent's), not the runner's", async () => {
    const run = await runPod({
      containers: { "task-1": "playbook.test/debian:1", "task-2": "playbook.test/static:1" },
      planned: ["task-1", "task-2"],
      tasks: [
        {
          name: "one",
          run: 'echo "image=$IMAGE_ONLY runner=[$RUNNER_ONLY] own=$OWN"',
          env: [{ name: "OWN", value: "1" }],
        },
        { name: "two", run: 'echo "image=$IMAGE_ONLY runner=[$RUNNER_ONLY]"' },
      ],
    });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("[one] image=set in task-1 runner=[] own=1");
    expect(run.stdout).toContain("[two] image=set in task-2 runner=[]");
  });

  it.each([
    ["TaskTimeout", { timeout: "3s" }, {}],
    ["StallLimit", { stall: "1s" }, {}],
    ["RunCeiling", {}, { ceiling: "4s" }],
  ])(
    "ends %s with the whole tree dead: a grandchild holding the pipe, a setsid escapee with no env",
    async (limit, taskLimits, runLimits) => {
      const ws = tempDir("agent-ws-");
      const run = await runPod(
        { tasks: [{ name: "tree", run: treeTask(ws, "sleep 300"), ...taskLimits }], ...runLimits },
        ws,
      );
      expect(run.stdout).toContain("[tree] started");
      expect(run.code).toBe(124);
      expect(run.report).toMatchObject({ phase: "Failed", reason: limit, ct: "agents" });
      expect(run.report.tasks[0]).toMatchObject({ p: "TimedOut", l: limit, e: "Killed" });
      for (const name of ["leader", "grandchild", "escapee"]) {
        expect(readdirSync(ws)).toContain(`${name}.pid`);
      }
      expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
      // The limit's own kill (the group and the agent's tree) ended it all, not the end-of-run fence.
      expect(run.stdout).not.toContain("that tasks left running");
    },
  );

  it("as in a pod (runner uid 65532, tasks uid 1000): TaskTimeout ends the whole tree through the agent", async () => {
    const ws = tempDir("agent-ws-");
    const run = await runPod(
      {
        asInPod: true,
        tasks: [
          {
            name: "tree",
            timeout: "3s",
            run:
              `setsid env -i /bin/sh -c 'trap "touch ${ws}/told.term" TERM; ${record(ws, "told")}; while :; do /bin/sleep 0.1; done' >/dev/null 2>&1 & ` +
              treeTask(ws, "sleep 300"),
          },
        ],
      },
      ws,
    );
    expect(run.stdout).toContain("[tree] started");
    expect(run.report.tasks[0]).toMatchObject({ p: "TimedOut", l: "TaskTimeout", e: "Killed" });
    // The fence ended everything the kill had not: nothing is reported left.
    expect(run.report.left).toBeUndefined();
    expect(readdirSync(ws)).toContain("escapee.pid");
    // What left the group got its own SIGTERM with the group's, before the SIGKILL.
    expect(readdirSync(ws)).toContain("told.term");
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
    expect(run.stdout).not.toContain("that tasks left running");
  });

  it("as in a pod: what a successful task left (a pipe holder, a setsid escapee with no env) ends with the run", async () => {
    const ws = tempDir("agent-ws-");
    const run = await runPod(
      {
        asInPod: true,
        tasks: [
          {
            name: "service",
            run:
              `sh -c 'trap "cp \\"\\$PLAYBOOK_CANCEL_FILE\\" ${ws}/holder.cancel" TERM; ${record(ws, "holder")}; echo holder up; while :; do sleep 0.1; done' & ` +
              `setsid env -i /bin/sh -c 'trap "" TERM; ${record(ws, "escapee")}; exec /bin/sleep 300' >/dev/null 2>&1 & ` +
              `while [ ! -e ${ws}/escapee.pid ] || [ ! -e ${ws}/holder.pid ]; do sleep 0.02; done; echo leaving`,
          },
          { name: "next", run: "echo next ran" },
        ],
      },
      ws,
    );
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({ phase: "Succeeded", ct: "agents" });
    expect(run.stdout).toContain("[next] next ran");
    expect(run.stdout).toContain("[service] holder up");
    expect(run.stdout).toMatch(/ended \d+ process\(es\) that tasks left running/);
    // Told first through its attempt's cancel file, readable by the task's user.
    expect(
      existsSync(join(ws, "holder.cancel")),
      `no holder.cancel; stderr:\n${run.stderr}\nws: ${readdirSync(ws).join(" ")}`,
    ).toBe(true);
    expect(readFileSync(join(ws, "holder.cancel"), "utf8")).toMatch(/^Succeeded: the run is over, stop now/);
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("writes the cancel file where the task sees it: a cooperative task ends Exited", async () => {
    const run = await runPod({
      killGrace: "10s",
      tasks: [
        {
          name: "polite",
          timeout: "1s",
          run: `trap '' TERM; while [ ! -e "$PLAYBOOK_CANCEL_FILE" ]; do sleep 0.05; done; echo "saw: $(cat "$PLAYBOOK_CANCEL_FILE")"; exit 0`,
        },
      ],
    });
    expect(run.report.tasks[0]).toMatchObject({ p: "TimedOut", l: "TaskTimeout", e: "Exited" });
    expect(run.stdout).toMatch(/\[polite\] saw: TaskTimeout: polite passed its limit, stop now/);
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("cancels on SIGTERM to the runner (pod deletion): Cancelled, the task's trap runs, exit 130", async () => {
    let signalled = false;
    const run = await runPod({
      // "up" once the child is sleep: a SIGTERM between its fork and its exec would be taken by
      // the shell's handler it inherited, and it would sleep on.
      tasks: [
        {
          name: "work",
          run: "trap 'echo trapped; exit 0' TERM; sleep 300 & while [ \"$(cat /proc/$!/comm)\" != sleep ]; do :; done; echo up; wait",
        },
      ],
      onStdout: (all, control) => {
        if (!signalled && all.includes("[work] up")) {
          signalled = true;
          control.signalRunner("SIGTERM");
        }
      },
    });
    expect(run.code).toBe(130);
    expect(run.report).toMatchObject({ phase: "Cancelled", reason: "Cancelled", ct: "agents" });
    expect(run.report.tasks[0], run.stderr).toMatchObject({ p: "Cancelled", e: "Exited" });
    expect(run.stdout).toContain("[work] trapped");
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("as in a pod: after a SIGTERM (pod deletion) the finally task runs in the container the plan names, told the outcome", async () => {
    let signalled = false;
    const run = await runPod({
      ownUsers: true,
      containers: { "task-1": "playbook.test/debian:1", "task-2": "playbook.test/musl:1" },
      planned: ["task-1"],
      plannedFinally: ["task-2"],
      tasks: [
        {
          name: "work",
          run: 'sleep 300 & while [ "$(cat /proc/$!/comm)" != sleep ]; do :; done; echo up; wait',
        },
      ],
      finally: [
        {
          name: "cleanup",
          run: `echo "cleanup in $(tr '\\0' ' ' < /proc/$PPID/cmdline) as $(id -u): $PLAYBOOK_OUTCOME $PLAYBOOK_FAILED_TASK"`,
        },
      ],
      onStdout: (all, control) => {
        if (!signalled && all.includes("[work] up")) {
          signalled = true;
          control.signalRunner("SIGTERM");
        }
      },
    });
    expect(run.code).toBe(130);
    expect(run.report, run.stderr).toMatchObject({
      phase: "Cancelled",
      reason: "Cancelled",
      tasks: [{ p: "Cancelled" }],
      fin: [{ p: "Succeeded" }],
    });
    // task-2's user is 1001 (1000 + K - 1).
    expect(run.stdout).toMatch(/\[cleanup\] cleanup in \S+ \S+ task-2 +as 1001: Cancelled work/);
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("runs each task through the agent of the container the plan names; files pass through the workspace", async () => {
    const run = await runPod({
      containers: {
        "task-1": "playbook.test/debian:1",
        "task-2": "playbook.test/musl:1",
        "task-3": "playbook.test/static:1",
      },
      planned: ["task-2", "task-1", "task-3"],
      tasks: [
        { name: "a", run: `echo "a in $(tr '\\0' ' ' < /proc/$PPID/cmdline)"; echo from-a > passed` },
        { name: "b", run: `echo "b in $(tr '\\0' ' ' < /proc/$PPID/cmdline)"; cat passed` },
        { name: "c", run: `echo "c in $(tr '\\0' ' ' < /proc/$PPID/cmdline)"` },
      ],
    });
    expect(run.report.phase, run.stderr).toBe("Succeeded");
    expect(run.stdout).toMatch(/\[a\] a in \S+ \S+ task-2/);
    expect(run.stdout).toMatch(/\[b\] b in \S+ \S+ task-1/);
    expect(run.stdout).toContain("[b] from-a");
    expect(run.stdout).toMatch(/\[c\] c in \S+ \S+ task-3/);
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("a stop tells what an earlier task left in another container (SIGTERM), then the fence ends it", async () => {
    const ws = tempDir("agent-ws-");
    const run = await runPod(
      {
        containers: { "task-1": "playbook.test/debian:1", "task-2": "playbook.test/musl:1" },
        planned: ["task-1", "task-2"],
        tasks: [
          {
            name: "service",
            run:
              `sh -c 'trap "cp \\"\\$PLAYBOOK_CANCEL_FILE\\" ${ws}/service.cancel; touch ${ws}/service.term" TERM; ${record(ws, "service")}; while :; do sleep 0.1; done' >/dev/null 2>&1 & ` +
              `while [ ! -e ${ws}/service.pid ]; do sleep 0.02; done`,
          },
          { name: "slow", timeout: "1s", run: "echo slow; sleep 300" },
        ],
      },
      ws,
    );
    expect(run.report).toMatchObject({ phase: "Failed", reason: "TaskTimeout", ct: "agents" });
    expect(run.report.tasks[1]).toMatchObject({ p: "TimedOut", l: "TaskTimeout", e: "Exited" });
    expect(readdirSync(ws)).toContain("service.term");
    // Its own attempt's cancel file, written before the SIGTERM it shares with the stopped task.
    expect(readFileSync(join(ws, "service.cancel"), "utf8")).toMatch(/^TaskTimeout: slow passed its limit/);
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("runs each task under its shell through its agent: bash -eo pipefail fails the pipe, the task's own shell wins", async () => {
    const strict = await runPod({
      shell: "bash -eo pipefail",
      tasks: [{ name: "dump", run: "false | gzip > /dev/null; echo uploaded" }],
    });
    expect(strict.report.reason, strict.stderr).toBe("TaskFailed");
    expect(strict.report.tasks[0]).toMatchObject({ p: "Failed", x: 1 });
    expect(strict.stdout).not.toContain("uploaded");
    const lenient = await runPod({
      shell: "bash -eo pipefail",
      tasks: [{ name: "dump", shell: "sh", run: "false | gzip > /dev/null; echo uploaded" }],
    });
    expect(lenient.report.reason, lenient.stderr).toBe("Succeeded");
    expect(lenient.stdout).toContain("[dump] uploaded");
  });

  it("fails at once, exit 127, a task whose image has no such shell, naming the field: nothing of it runs", async () => {
    const run = await runPod({
      tasks: [
        { name: "first", run: "echo first" },
        { name: "second", shell: "no-such-shell -e", run: "echo never" },
      ],
    });
    expect(run.report.reason, run.stderr).toBe("TaskFailed");
    expect(run.report.tasks[1]).toMatchObject({ p: "Failed", x: 127 });
    expect(run.report.tasks[1]?.m).toMatch(
      /^spec\.tasks\[1\]\.shell "no-such-shell -e": container task-1 has no such shell \(no-such-shell not found on PATH [^)]+\); the task was not run$/,
    );
    expect(run.stdout).toContain("[first] first");
    expect(run.stdout).not.toContain("never");
  });

  it("shows a PATH with a newline and an ESC escaped in the runner's lines and its report: no text of it starts a line", async () => {
    // The agent's exec failure quotes the task's PATH (its shell not found there): a newline in it
    // once ended the runner's end line and put a forged record at the start of the next.
    const forged = `${PROGRESS_MARKER}${JSON.stringify({ v: 1, start: new Date().toISOString(), seq: 99_999, tasks: [{ p: "Succeeded" }] })}`;
    const run = await runPod({
      tasks: [
        {
          name: "p",
          shell: "no-such-shell",
          run: "echo never",
          env: [{ name: "PATH", value: `/nowhere\n${forged}\n\x1b[31mred\u2028` }],
        },
      ],
    });
    expect(run.report.reason, run.stderr).toBe("TaskFailed");
    expect(run.report.tasks[0]?.m).toContain("not found on PATH /nowhere\\nplaybook.dev/progress {");
    expect(run.report.tasks[0]?.m).toContain("\\x1b[31mred\\u2028");
    const lines = run.stdout.split("\n").slice(0, -1);
    for (const line of lines) {
      expect(
        line.startsWith("playbook: ") || line.startsWith("[p] ") || line.startsWith(PROGRESS_MARKER),
        line,
      ).toBe(true);
      if (line.startsWith(PROGRESS_MARKER)) expect(parseProgressLine(line, 1)?.seq).not.toBe(99_999);
    }
    expect(
      lines.filter((line) => line.startsWith("playbook: run Failed (TaskFailed): task p ")),
    ).toHaveLength(1);
    expect(run.stdout.includes("\x1b") || run.stdout.includes("\u2028")).toBe(false);
  });

  it("quotes a failed task's last stderr line, from the agent's E frames, before a later stdout line", async () => {
    const run = await runPod({
      tasks: [
        {
          name: "fetch",
          run: "echo 'curl: (6) Could not resolve host' >&2; echo 'bash 5.2.15(1)-release'; exit 6",
        },
      ],
    });
    expect(run.report.reason, run.stderr).toBe("TaskFailed");
    expect(run.report.tasks[0]).toMatchObject({
      p: "Failed",
      x: 6,
      m: 'stderr: "curl: (6) Could not resolve host"',
    });
    expect(run.stdout).toContain(
      'playbook: run Failed (TaskFailed): task fetch exited with code 6 (stderr: "curl: (6) Could not resolve host")',
    );
  });

  it("keeps the order of each stream", async () => {
    const run = await runPod({
      tasks: [
        {
          name: "order",
          run: "i=1; while [ $i -le 300 ]; do echo out $i; echo err $i >&2; i=$((i + 1)); done",
        },
      ],
    });
    expect(run.report.phase).toBe("Succeeded");
    for (const stream of ["out", "err"]) {
      const seen = [...run.stdout.matchAll(new RegExp(`^\\[order\\] ${stream} (\\d+)$`, "gm"))].map((m) =>
        Number(m[1]),
      );
      expect(seen).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    }
  });

  it.skipIf(PYTHON === null)(
    "keeps a stream's partial line apart: the stderr line that comes in behind it, and the rest of it, each start with the prefix",
    async () => {
      const run = await runPod({ tasks: [{ name: "p", run: DOWNLOADING }] });
      expect(run.report.phase, run.stderr).toBe("Succeeded");
      expect(taskLinesOf(run.stdout)).toEqual(EXAMPLE_LINES);
    },
  );

  it("ends a task's open line before the runner's line on SIGTERM; the rest of it is prefixed again", async () => {
    let signalled = false;
    const run = await runPod({
      tasks: [{ name: "p", run: OPEN_UNTIL_TERM }],
      onStdout: (all, control) => {
        if (!signalled && all.includes("[p] Downloading... ")) {
          signalled = true;
          control.signalRunner("SIGTERM");
        }
      },
    });
    expect(run.stdout).toContain("playbook: received SIGTERM; cancelling the run");
    expect(taskLinesOf(run.stdout)).toEqual(["[p] Downloading... ", "[p] done"]);
  });

  it("fails the task with k when its container's agent is killed, and retries apply", async () => {
    let killed = false;
    const run = await runPod({
      tasks: [{ name: "victim", retries: 1, run: "echo up; sleep 300" }],
      onStdout: (all, control) => {
        if (!killed && all.includes("[victim] up")) {
          killed = true;
          control.killAgent("task-1");
        }
      },
    });
    expect(killed).toBe(true);
    expect(run.code).toBe(1);
    expect(run.report).toMatchObject({ phase: "Failed", reason: "TaskFailed", ct: "agents" });
    expect(run.report.tasks[0]).toMatchObject({ p: "Failed", k: "task-1", a: 2 });
    expect(run.report.tasks[0]?.m).toContain("task-1");
  });

  it("as in a pod, each container under its own user: the first task starts at its own agent's hello, while a later agent still connects, and the later task runs in its container as its user", async () => {
    const ws = tempDir("agent-ws-");
    const run = await runPod(
      {
        ownUsers: true,
        late: { "task-2": 1.5 },
        containers: { "task-1": "playbook.test/debian:1", "task-2": "playbook.test/static:1" },
        planned: ["task-1", "task-2"],
        tasks: [
          // task-2's key is still there: its agent has not said hello yet.
          { name: "first", run: `ls "$(dirname "$PLAYBOOK_CANCEL_FILE")/../keys" > ${ws}/keys-seen; id -u` },
          { name: "second", run: "id -u" },
        ],
      },
      ws,
    );
    expect(run.code).toBe(0);
    expect(run.report.phase).toBe("Succeeded");
    expect(readFileSync(join(ws, "keys-seen"), "utf8").split("\n")).toContain("task-2");
    expect(run.stdout).toContain("[first] 1000");
    expect(run.stdout).toContain("[second] 1001");
    expect(run.stderr).not.toMatch(/ALIVE|AGENT-LEFT/);
  });

  it("as in a pod, each container under its own user: a later container whose agent never connects fails its own task, after the earlier ones ran", async () => {
    const ws = tempDir("agent-ws-");
    const run = await runPod(
      {
        ownUsers: true,
        helloMs: 1000,
        containers: { "task-1": "playbook.test/debian:1", "task-2": "playbook.test/static:1" },
        planned: ["task-1", "task-2"],
        absent: ["task-2"],
        tasks: [
          { name: "first", run: `touch ${ws}/ran` },
          { name: "second", run: "true" },
        ],
      },
      ws,
    );
    expect(run.code).toBe(1);
    expect(readdirSync(ws)).toContain("ran");
    expect(run.report.tasks[0]).toMatchObject({ p: "Succeeded" });
    expect(run.report.tasks[1]).toMatchObject({ p: "Failed", k: "task-2" });
    expect(run.report.tasks[1]?.m).toContain(
      "container task-2 (image playbook.test/static:1): its agent did not connect; the task was not run",
    );
  });

  it("fails the run naming a container whose agent never connects, running nothing", async () => {
    const ws = tempDir("agent-ws-");
    const run = await runPod(
      {
        helloMs: 500,
        containers: { "task-1": "playbook.test/debian:1", "task-2": "playbook.test/static:1" },
        absent: ["task-2"],
        tasks: [{ name: "first", run: `touch ${ws}/ran` }],
      },
      ws,
    );
    expect(run.code).toBe(1);
    expect(run.report.tasks[0]).toMatchObject({ p: "Failed", k: "task-2" });
    expect(run.report.tasks[0]?.m).toContain("task-2 (image playbook.test/static:1)");
    expect(readdirSync(ws)).not.toContain("ran");
    expect(run.stdout).toContain("task-2");
  });
});
