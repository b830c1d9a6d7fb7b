// `playbook submit --watch` and `playbook logs` against runs on the real node: the output a user
// sees comes from the runner's log (read through the API server, from the real kubelet) and the
// Playbook's status, and the exit code from the terminal condition.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import {
  clients,
  condition,
  eventually,
  getPlaybook,
  kubectl,
  type RunningController,
  startController,
  waitForFinished,
} from "../controller/support.js";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace, deleteTestNamespace, marker } from "../harness/cluster-test.js";

const { core } = clients();
let namespace: string;
let controller: RunningController;
let dir: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-cli-watch");
  controller = startController([namespace]);
  dir = path.join(repoRoot(), ".cluster", `cli-watch-${process.pid}`);
  mkdirSync(dir, { recursive: true });
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
  rmSync(dir, { recursive: true, force: true });
});

const PLAYBOOK = path.join(repoRoot(), "dist", "bin", "playbook.js");

function manifest(name: string, spec: Record<string, unknown>): string {
  const file = path.join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    stringify({ apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name }, spec }),
  );
  return file;
}

interface Cli {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
  /** when each stream first held the text */
  seen: (text: string) => Promise<number>;
}

function watchText(child: ChildProcess, streams: ("stdout" | "stderr")[]): Cli {
  const text = { stdout: "", stderr: "" };
  const waiters: { text: string; resolve: (at: number) => void }[] = [];
  const check = () => {
    for (const waiter of [...waiters]) {
      if (text.stdout.includes(waiter.text) || text.stderr.includes(waiter.text)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve(Date.now());
      }
    }
  };
  for (const stream of streams) {
    child[stream]?.on("data", (chunk: Buffer) => {
      text[stream] += chunk.toString();
      check();
    });
  }
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    child,
    stdout: () => text.stdout,
    stderr: () => text.stderr,
    exited,
    seen: (wanted) =>
      new Promise((resolve, reject) => {
        waiters.push({ text: wanted, resolve });
        check();
        exited.then(() =>
          setTimeout(
            () =>
              reject(new Error(`exited without ${JSON.stringify(wanted)}:\n${text.stdout}\n${text.stderr}`)),
            100,
          ),
        );
      }),
  };
}

/** The command, as a user runs it, against the test cluster. */
function playbook(args: string[]): Cli {
  const child = spawn(process.execPath, [PLAYBOOK, ...args], {
    env: { ...process.env, KUBECONFIG: inject("kubeconfig") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return watchText(child, ["stdout", "stderr"]);
}

/** The command under a pseudo-terminal (util-linux `script`): its output, and keys typed at it. */
function playbookOnTerminal(args: string[]): Cli & { type: (keys: string) => void } {
  const command = [process.execPath, PLAYBOOK, ...args].map((arg) => `'${arg}'`).join(" ");
  const child = spawn("script", ["-qfec", command, "/dev/null"], {
    env: { ...process.env, KUBECONFIG: inject("kubeconfig"), TERM: "xterm" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  const cli = watchText(child, ["stdout", "stderr"]);
  return { ...cli, type: (keys) => child.stdin?.write(keys) };
}

async function result(cli: Cli): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const code = await cli.exited;
  return { code, stdout: cli.stdout(), stderr: cli.stderr() };
}

/** The runner's process of the pod whose task printed `mark`: the pod-runner in the task's PID namespace. */
function runnerOfTask(mark: string): number | undefined {
  const pids = readdirSync("/proc").filter((entry) => /^\d+$/.test(entry));
  const read = (pid: string, file: string) => {
    try {
      return readFileSync(`/proc/${pid}/${file}`, "utf8");
    } catch {
      return "";
    }
  };
  const ns = (pid: string) => {
    try {
      return readlinkSync(`/proc/${pid}/ns/pid`);
    } catch {
      return "";
    }
  };
  const task = pids.find((pid) => read(pid, "cmdline").includes(mark));
  if (!task) return undefined;
  const runner = pids.find((pid) => ns(pid) === ns(task) && read(pid, "cmdline").includes("pod-runner"));
  return runner === undefined ? undefined : Number(runner);
}

const ns = () => ["-n", namespace];

describe("playbook submit --watch on the real node", () => {
  it("streams a task's line before the task ends, with the local run's progress lines, and exits 0", async () => {
    const file = manifest("streams", {
      ceiling: "2m",
      tasks: [
        { name: "first", run: "echo one" },
        { name: "slow", run: "echo early; sleep 8; echo late", timeout: "1m" },
      ],
    });
    const cli = playbook(["submit", "-f", file, "--watch", ...ns()]);
    const earlyAt = await cli.seen("[slow] early");
    const lateAt = await cli.seen("[slow] late");
    const { code, stdout, stderr } = await result(cli);
    expect(code).toBe(0);
    // The line came while the task was still running: seconds before its last line.
    expect(lateAt - earlyAt).toBeGreaterThan(5_000);
    expect(stdout).toBe("streams\n[first] one\n[slow] early\n[slow] late\n");
    expect(stderr).toMatch(/^playbook: running .*streams: 2 tasks, ceiling 2m \(spec\)/m);
    expect(stderr).toMatch(
      /^playbook: task slow started \(timeout 1m \(task\), stall 10m \(default\), ceiling 2m \(spec\)\)$/m,
    );
    // The agent's rusage rides on the finished line, read back from the pod's log.
    expect(stderr).toMatch(
      /^playbook: task slow Succeeded in [89](\.\d+)?s \(cpu \d+\.\d\ds, peak \d+ [KMG]iB\)$/m,
    );
    expect(stderr).toMatch(/^playbook: run Succeeded \(Succeeded\): .*$/m);
  }, 120_000);

  it("runs examples/hello.yaml as `playbook run` shows it, exit 0", async () => {
    const cli = playbook([
      "submit",
      "-f",
      path.join(repoRoot(), "examples", "hello.yaml"),
      "--watch",
      ...ns(),
    ]);
    const { code, stdout, stderr } = await result(cli);
    expect(code, stderr).toBe(0);
    expect(stdout).toContain("[build] compile...\n[build] link...\n[build] package...\n");
    for (const task of ["prepare", "build", "test"]) {
      expect(stderr).toMatch(new RegExp(`^playbook: task ${task} Succeeded in `, "m"));
    }
    // The outcome is the last line: nothing the streams still deliver comes after it.
    expect(stderr.trimEnd().split("\n").at(-1)).toBe(
      "playbook: run Succeeded (Succeeded): all 3 tasks succeeded",
    );
  }, 120_000);

  it.each([
    { reason: "TaskFailed", code: 1, task: { name: "fail", run: "echo failing; exit 3" } },
    {
      reason: "TaskTimeout",
      code: 124,
      task: { name: "late", run: "echo waiting; sleep 60", timeout: "3s" },
    },
  ])(
    "exits $code when the run ends $reason",
    async ({ reason, code, task }) => {
      const name = `exit-${code}`;
      const cli = playbook([
        "submit",
        "-f",
        manifest(name, { ceiling: "2m", killGrace: "2s", tasks: [task] }),
        "--watch",
        ...ns(),
      ]);
      const out = await result(cli);
      expect(out.code, out.stderr).toBe(code);
      expect(out.stdout).toContain(`[${task.name}] `);
      expect(out.stderr).toMatch(new RegExp(`^playbook: run Failed \\(${reason}\\): `, "m"));
    },
    120_000,
  );

  it("exits 130 when the run is cancelled, and -o json prints the final Playbook with task output on stderr", async () => {
    const cli = playbook([
      "submit",
      "-f",
      manifest("cancelled", {
        ceiling: "2m",
        killGrace: "2s",
        tasks: [{ name: "wait", run: "echo waiting; sleep 60" }],
      }),
      "--watch",
      "-o",
      "json",
      ...ns(),
    ]);
    await cli.seen("[wait] waiting");
    await kubectl([
      "-n",
      namespace,
      "patch",
      "playbook",
      "cancelled",
      "--type=merge",
      "-p",
      '{"spec":{"cancel":true}}',
    ]);
    const out = await result(cli);
    expect(out.code, out.stderr).toBe(130);
    expect(out.stderr).toContain("[wait] waiting");
    expect(out.stderr).toMatch(/^playbook: run Cancelled \(Cancelled\): /m);
    const printed = JSON.parse(out.stdout);
    expect(printed.metadata.name).toBe("cancelled");
    expect(printed.status.conditions).toContainEqual(
      expect.objectContaining({ type: "Succeeded", reason: "Cancelled" }),
    );
  }, 120_000);
});

describe("Ctrl-C under a terminal", () => {
  it("stops watching, says how to follow or cancel, exits 130, and the run goes on", async () => {
    const cli = playbookOnTerminal([
      "submit",
      "-f",
      manifest("goes-on", {
        ceiling: "2m",
        tasks: [{ name: "work", run: "echo started; sleep 6; echo finished" }],
      }),
      "--watch",
      ...ns(),
    ]);
    await cli.seen("[work] started");
    cli.type("\x03");
    const out = await result(cli);
    expect(out.code, out.stdout).toBe(130);
    // On a terminal: the task's line with its symbol, its live clock.
    expect(out.stdout).toContain("\x1b[36m▶\x1b[0m work");
    expect(out.stdout).toMatch(/work: \d+s of|work: \d+s \(no timeout\)/);
    expect(out.stdout).toContain(`logs -f goes-on -n ${namespace}`);
    expect(out.stdout).toContain(`cancel goes-on -n ${namespace}`);
    expect(condition(await getPlaybook(namespace, "goes-on"), "Succeeded")?.status).toBe("Unknown");
    const ended = await waitForFinished(namespace, "goes-on", 60_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
  }, 120_000);

  it("with --cancel-on-interrupt cancels the run, waits for it to settle and exits 130", async () => {
    const cli = playbookOnTerminal([
      "submit",
      "-f",
      manifest("interrupted", {
        ceiling: "2m",
        killGrace: "2s",
        tasks: [{ name: "work", run: "echo started; sleep 60" }],
      }),
      "--watch",
      "--cancel-on-interrupt",
      ...ns(),
    ]);
    await cli.seen("[work] started");
    cli.type("\x03");
    const out = await result(cli);
    expect(out.code, out.stdout).toBe(130);
    expect(out.stdout).toContain("cancelling");
    expect(out.stdout).toMatch(/playbook: run Cancelled \(Cancelled\)/);
    const ended = await getPlaybook(namespace, "interrupted");
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
  }, 120_000);
});

describe("playbook logs on the real node", () => {
  it("shows every attempt's output after the run, and one task's lines with --task", async () => {
    const mark = marker();
    const file = manifest("attempts", {
      ceiling: "2m",
      backoffLimit: 1,
      tasks: [
        { name: "first", run: "echo one" },
        {
          name: "hold",
          // The first attempt waits to be stopped from outside; the second goes through.
          run: `case "$(cat /etc/hostname)" in *-1) echo ${mark}; sleep 60;; *) echo second;; esac`,
        },
      ],
    });
    const cli = playbook(["submit", "-f", file, "--watch", ...ns()]);
    await cli.seen(`[hold] ${mark}`);
    // The runner stopped from outside (as a node drain would) reports Cancelled without
    // spec.cancel: the controller takes the pod as lost and runs the next attempt, keeping this pod.
    const runner = await eventually("the runner", async () => runnerOfTask(mark), 30_000);
    process.kill(runner, "SIGTERM");
    const out = await result(cli);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toContain("[hold] second");
    expect(out.stderr).toContain("playbook: following pod attempts-2 (attempt 2)");

    const logs = await result(playbook(["logs", "attempts", ...ns()]));
    expect(logs.code, logs.stderr).toBe(0);
    expect(logs.stdout).toMatch(
      new RegExp(
        `^--- pod attempts-1 \\(attempt 1\\) ---\\n(.*\\n)*\\[first\\] one\\n(.*\\n)*\\[hold\\] ${mark}\\n(.*\\n)*--- pod attempts-2 \\(attempt 2\\) ---\\n(.*\\n)*\\[first\\] one\\n(.*\\n)*\\[hold\\] second\\n`,
      ),
    );
    expect(logs.stdout).toMatch(/^playbook: task hold started/m);

    const hold = await result(playbook(["logs", "attempts", "--task", "hold", ...ns()]));
    expect(hold.code, hold.stderr).toBe(0);
    expect(hold.stdout).toBe(`${mark}\nsecond\n`);

    const followed = await result(playbook(["logs", "-f", "attempts", "--task", "first", ...ns()]));
    expect(followed.code, followed.stderr).toBe(0);
    expect(followed.stdout).toBe("one\none\n");
  }, 180_000);

  it("follows a running run's output with -f until it ends", async () => {
    const cli = playbook([
      "submit",
      "-f",
      manifest("followed", { ceiling: "2m", tasks: [{ name: "tick", run: "echo a; sleep 4; echo b" }] }),
      ...ns(),
    ]);
    expect((await result(cli)).code).toBe(0);
    const logs = playbook(["logs", "-f", "followed", ...ns()]);
    const aAt = await logs.seen("[tick] a");
    const bAt = await logs.seen("[tick] b");
    const out = await result(logs);
    expect(out.code, out.stderr).toBe(0);
    expect(bAt - aAt).toBeGreaterThan(2_000);
    expect(out.stdout).toMatch(/^playbook: run Succeeded \(Succeeded\): /m);
  }, 120_000);

  it("says which pod is gone when the run's pod was removed before its log was read, exit 3", async () => {
    const cli = playbook([
      "submit",
      "-f",
      manifest("collected", { ceiling: "2m", tasks: [{ name: "quick", run: "echo done" }] }),
      "--watch",
      ...ns(),
    ]);
    expect((await result(cli)).code).toBe(0);
    await kubectl(["-n", namespace, "delete", "pod", "collected-1", "--wait=true"]);
    const out = await result(playbook(["logs", "collected", ...ns()]));
    expect(out.code).toBe(3);
    expect(out.stdout).toBe("");
    expect(out.stderr.trim().split("\n")).toHaveLength(1);
    expect(out.stderr).toContain("pod collected-1 is gone");
    expect(out.stderr).toContain(`namespace ${namespace}`);
  }, 120_000);
});
