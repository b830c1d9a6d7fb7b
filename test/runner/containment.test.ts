// Nothing a task starts outlives a local run, however it detached: the tricks real daemons use
// (double fork into a new session, a cleared environment, argv and environment rewritten in
// place, made non-dumpable, nohup), none of which keeps the PLAYBOOK_ATTEMPT_ID cookie where a
// sweep can read it. The run holds them in a cgroup of its own and says which containment it had.
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { decodeReport } from "../../src/api/report.js";
import { ownCgroupDir } from "../../src/pod-runner/containment.js";
import { CLI, type CliResult, startCli } from "../support/cli.js";

/** A cgroup v2 sub-group can be made here: the machine this suite's cgroup tests need. */
function cgroupWritable(): boolean {
  const dir = ownCgroupDir();
  if (dir === null) return false;
  const probe = join(dir, `containment-probe-${process.pid}`);
  return (
    spawnSync("sh", [
      "-c",
      `mkdir "${probe}" && test -e "${probe}/cgroup.kill"; s=$?; rmdir "${probe}"; exit $s`,
    ]).status === 0
  );
}
const withCgroup = cgroupWritable();
const withPerl = spawnSync("perl", ["-e", "1"]).status === 0;

interface Escaper {
  name: string;
  /** starts a process that leaves the task behind and writes its pid to $D/<name>.pid */
  start: string;
}

// Each one writes its own pid (the one that stays) and holds none of the task's pipes.
const ESCAPERS: Escaper[] = [
  {
    name: "double-fork-env-i",
    start: `(setsid env -i sh -c 'echo $$ > "$0/double-fork-env-i.pid"; exec sleep 60' "$D" </dev/null >/dev/null 2>&1 &)`,
  },
  {
    name: "nohup-setsid",
    start: `(nohup setsid env -i sh -c 'echo $$ > "$0/nohup-setsid.pid"; exec sleep 61' "$D" </dev/null >/dev/null 2>&1 &)`,
  },
  {
    // A perl daemon: double fork, setsid, then $0 overwritten far past argv (perl uses the
    // environment's memory for it, so /proc/PID/environ no longer holds the cookie) and
    // PR_SET_DUMPABLE 0 (prctl is syscall 157 on x86_64), which makes /proc/PID/environ
    // unreadable to anyone without CAP_SYS_PTRACE.
    name: "perl-daemon",
    start: `perl -MPOSIX -e 'fork and exit; POSIX::setsid(); fork and exit; open(my $f, ">", "$ENV{D}/perl-daemon.pid"); print $f $$; close $f; %ENV = (); $0 = "x" x 4096; syscall(157, 4, 0) if $^O eq "linux"; open(STDIN, "<", "/dev/null"); open(STDOUT, ">", "/dev/null"); open(STDERR, ">", "/dev/null"); sleep 62' </dev/null >/dev/null 2>&1`,
  },
];

/** State and start time of a process, or null when it is gone (a zombie counts as gone). */
function processState(pid: number): { state: string; start: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const state = fields[0] ?? "?";
    if (state === "Z" || state === "X") return null;
    return { state, start: fields[19] ?? "" };
  } catch {
    return null;
  }
}

/** The PID namespace of a process (`pid:[inode]`), or null when it is gone. */
function namespaceOf(pid: number | "self"): string | null {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return null;
  }
}
const OWN_NAMESPACE = namespaceOf("self");

/**
 * A process of the PID namespace `namespace` as the host numbers it, from its number there (the
 * last of its NSpid), or null. Where the run has no namespace of its own, its numbers are the host's.
 */
function hostPidIn(namespace: string, pid: number): number | null {
  if (namespace === OWN_NAMESPACE) return processState(pid) === null ? null : pid;
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || namespaceOf(Number(name)) !== namespace) continue;
    try {
      const numbers = /^NSpid:\s*(.*)$/m.exec(readFileSync(`/proc/${name}/status`, "latin1"))?.[1];
      if (Number(numbers?.trim().split(/\s+/).at(-1)) === pid) return Number(name);
    } catch {
      // gone
    }
  }
  return null;
}

let started: number[] = [];
afterEach(() => {
  // A failing run must not leave its escapers for a minute.
  for (const pid of started) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  started = [];
});

function manifest(dir: string, tasks: object[]): string {
  const file = join(dir, "playbook.yaml");
  writeFileSync(
    file,
    stringify({
      apiVersion: "playbook.dev/v1alpha1",
      kind: "Playbook",
      metadata: { name: "escapers" },
      spec: { killGrace: "1s", tasks },
    }),
  );
  return file;
}

/**
 * A run whose first task starts every escaper and whose second checks, from inside the run, that
 * each is alive and carries no readable cookie. Returns the CLI's result, the report and the
 * escapers' pids with their start times (as seen while the run ran).
 */
async function runEscapers(env: NodeJS.ProcessEnv = {}, asNobody = false) {
  const dir = mkdtempSync(join(tmpdir(), "containment-"));
  chmodSync(dir, 0o777);
  const check = [
    // The perl daemon writes its pid after two forks: wait for every pid file.
    `for n in ${ESCAPERS.map((e) => e.name).join(" ")}; do i=0; while [ ! -s "$D/$n.pid" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; done`,
    `for f in "$D"/*.pid; do p=$(cat "$f"); if kill -0 "$p" 2>/dev/null; then if grep -q PLAYBOOK_ATTEMPT_ID "/proc/$p/environ" 2>/dev/null; then echo "cookie $f"; else echo "alive without cookie $(basename "$f" .pid)"; fi; fi; done`,
    // The pids above are the run's PID namespace's where it has one of its own.
    `readlink /proc/self/ns/pid > "$D/namespace"`,
  ].join("\n");
  const file = manifest(dir, [
    { name: "detach", run: ESCAPERS.map((e) => e.start).join("\n"), env: [{ name: "D", value: dir }] },
    { name: "check", run: check, env: [{ name: "D", value: dir }] },
  ]);
  const reportFile = join(dir, "report.json");
  const args = ["run", "-f", file, "--report", reportFile];
  const result: CliResult = asNobody ? await startAsNobody(args, dir) : await startCli(args, { env });
  const pids = readdirSync(dir)
    .filter((name) => name.endsWith(".pid"))
    .map((name) => Number(readFileSync(join(dir, name), "utf8").trim()));
  const namespaceFile = join(dir, "namespace");
  const namespace = existsSync(namespaceFile) ? readFileSync(namespaceFile, "utf8").trim() : OWN_NAMESPACE;
  // Another namespace's numbers are not the host's: nothing to kill by them after the test.
  if (namespace === OWN_NAMESPACE) started.push(...pids);
  const report = existsSync(reportFile) ? decodeReport(readFileSync(reportFile, "utf8")) : null;
  return { result, report, pids, namespace };
}

/**
 * A cgroup for one test's runs, next to which nothing else runs: a run cleans the stale run
 * cgroups next to its own, and runs of other suites on this machine must not clean this test's
 * first. Removed after the test (empty by then).
 */
let testCgroups: string[] = [];
function testCgroup(): string {
  const dir = join(ownCgroupDir() as string, `containment-test-${process.pid}-${testCgroups.length}`);
  spawnSync("mkdir", [dir]);
  testCgroups.push(dir);
  return dir;
}
afterEach(() => {
  // What a failed test left in it is ended first (on success it is empty already).
  for (const dir of testCgroups) {
    spawnSync("sh", ["-c", 'echo 1 > "$0/cgroup.kill"; sleep 0.2; rmdir "$0"/*/ "$0"', dir], {
      stdio: "ignore",
    });
  }
  testCgroups = [];
});

/** `playbook <args>` started in the cgroup `cgroup` (it joins it first, then becomes the CLI). */
function cliIn(cgroup: string, args: string[]): [string, string[]] {
  return ["sh", ["-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup, process.execPath, CLI, ...args]];
}

/** Runs `playbook <args>` in the cgroup `cgroup` to its end. */
function runCliIn(cgroup: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> {
  const [file, argv] = cliIn(cgroup, args);
  const child = spawn(file, argv, {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

/** The CLI as user nobody (65534), who may not make a cgroup here. */
function startAsNobody(args: string[], home: string): Promise<CliResult> {
  const child = spawn(
    "setpriv",
    ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, CLI, ...args],
    { env: { PATH: process.env.PATH, HOME: home }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

/** Each escaper existed while the run ran without a cookie a sweep could read, and none outlives it. */
function expectHeldAndEnded(run: Awaited<ReturnType<typeof runEscapers>>): void {
  for (const escaper of ESCAPERS) {
    expect(run.result.stdout).toContain(`[check] alive without cookie ${escaper.name}`);
  }
  expect(run.result.stdout).not.toContain("[check] cookie");
  expect(run.pids).toHaveLength(ESCAPERS.length);
  expect(run.result.code).toBe(0);
  // In a namespace of its own, the run's end is its namespace's: no process is left in it.
  expect(run.pids.filter((pid) => run.namespace !== null && hostPidIn(run.namespace, pid) !== null)).toEqual(
    [],
  );
}

describe("containment of a local run", () => {
  // Skipped only where it cannot hold: a cgroup v2 sub-group needs a writable (root or
  // delegated) cgroup v2 hierarchy with cgroup.kill; the fallback is tested below.
  it.skipIf(!withCgroup)(
    "ends escapers that left the group and dropped, rewrote or hid their environment, and says it held them in a cgroup",
    async () => {
      const run = await runEscapers();
      expectHeldAndEnded(run);
      const { result, report } = run;
      expect(result.stderr).toMatch(/playbook: containment: a cgroup v2 sub-group of its own \(\S+\)/);
      expect(report?.ct).toBe("cgroup");
    },
  );

  it("says clearly when it has no containment, and still ends what kept the cookie", async () => {
    const dir = mkdtempSync(join(tmpdir(), "containment-"));
    const pidFile = join(dir, "kept.pid");
    const file = manifest(dir, [
      { name: "service", run: `setsid sleep 63 </dev/null >/dev/null 2>&1 & echo $! > ${pidFile}` },
    ]);
    const reportFile = join(dir, "report.json");
    const result = await startCli(["run", "-f", file, "--report", reportFile], {
      env: { PLAYBOOK_CONTAINMENT: "none" },
    });
    const pid = Number(readFileSync(pidFile, "utf8"));
    started.push(pid);
    expect(result.code).toBe(0);
    expect(result.stderr).toContain(
      "playbook: containment: none: neither a cgroup v2 sub-group of its own nor a child subreaper, so only the process group kill and the PLAYBOOK_ATTEMPT_ID sweep end what tasks leave; a process that leaves its group and drops or hides its environment can outlive the run (PLAYBOOK_CONTAINMENT=none)",
    );
    expect(result.stderr).toContain("playbook: ended 1 process(es) that tasks left running");
    expect(decodeReport(readFileSync(reportFile, "utf8")).ct).toBe("none");
    expect(processState(pid)).toBeNull();
  });

  // Skipped only where the suite is not root (it becomes another user, who may not make a
  // cgroup here) or there is no perl (the subreaper is a few lines of it).
  it.skipIf(process.getuid?.() !== 0 || !withPerl)(
    "holds them with a child subreaper for a user who may not make a cgroup, and says why",
    async () => {
      const run = await runEscapers({}, true);
      expectHeldAndEnded(run);
      expect(run.result.stderr).toMatch(
        /playbook: containment: a child subreaper \(pid \d+; no cgroup: (cannot make \S+: EACCES|no cgroup v2 hierarchy is mounted)\): every process the tasks orphan is re-parented to it and ended with the run/,
      );
      expect(run.report?.ct).toBe("subreaper");
      // Not root: no PID namespace, and the run says what a hostile task can do.
      expect(run.result.stderr).toContain(
        "what holds them runs as the tasks' user, so a task that stops or kills it and then the runner outlives the run",
      );
    },
  );

  // Skipped as the one above.
  it.skipIf(process.getuid?.() !== 0 || !withPerl)(
    "ends what the tasks left even when the runner itself is killed (SIGKILL), through the subreaper",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "containment-"));
      chmodSync(dir, 0o777);
      const escaper = ESCAPERS[0] as Escaper;
      const file = manifest(dir, [
        { name: "detach", run: `${escaper.start}\necho ready; sleep 60`, env: [{ name: "D", value: dir }] },
      ]);
      const child = spawn(
        "setpriv",
        ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, CLI, "run", "-f", file],
        { env: { PATH: process.env.PATH, HOME: dir }, stdio: ["ignore", "pipe", "pipe"] },
      );
      const closed = new Promise<string | null>((resolve) =>
        child.on("close", (_code, signal) => resolve(signal)),
      );
      child.stderr.resume();
      await new Promise<void>((resolve) =>
        child.stdout.on("data", (chunk: Buffer) => chunk.toString().includes("[detach] ready") && resolve()),
      );
      const pidFile = join(dir, `${escaper.name}.pid`);
      while (!existsSync(pidFile) || readFileSync(pidFile, "utf8").trim() === "") {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const escaped = Number(readFileSync(pidFile, "utf8"));
      started.push(escaped);
      expect(processState(escaped)).not.toBeNull();
      // The runner is the child of the subreaper (the keeper), the CLI process's child.
      const childrenOf = (pid: number) =>
        readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(" ").map(Number);
      const [keeper] = childrenOf(child.pid as number);
      const [runner] = childrenOf(keeper as number);
      expect(readFileSync(`/proc/${runner}/cmdline`, "utf8")).toMatch(/^[^\0]*node[^\0]*\0.*run\0-f/);
      process.kill(runner as number, "SIGKILL");
      // The CLI ends as its runner did, and nothing of the run is left.
      expect(await closed).toBe("SIGKILL");
      expect(processState(escaped)).toBeNull();
    },
  );

  // Skipped as the ones above. `kill PID` (systemd's stop, a CI job's first signal) reaches the
  // command the user started: the keeper passes it to the runner, once, which cancels with the grace.
  it.skipIf(process.getuid?.() !== 0 || !withPerl)(
    "cancels once, with the grace, on a SIGTERM to the command under the subreaper, and reports",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "containment-"));
      chmodSync(dir, 0o777);
      const file = manifest(dir, [
        { name: "wait", run: "trap 'echo got TERM; exit 0' TERM; echo up; while :; do sleep 0.1; done" },
      ]);
      const reportFile = join(dir, "report.json");
      const child = spawn(
        "setpriv",
        [
          "--reuid=65534",
          "--regid=65534",
          "--clear-groups",
          process.execPath,
          CLI,
          "run",
          "-f",
          file,
          "--report",
          reportFile,
        ],
        { env: { PATH: process.env.PATH, HOME: dir }, stdio: ["ignore", "pipe", "pipe"] },
      );
      let stdout = "";
      let stderr = "";
      let sent = false;
      child.stdout.on("data", (chunk: Buffer) => {
        stdout += chunk.toString();
        if (!sent && stdout.includes("[wait] up")) {
          sent = true;
          child.kill("SIGTERM");
        }
      });
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
      expect(stderr).toContain("playbook: containment: a child subreaper");
      expect(stderr.match(/received SIGTERM/g)).toEqual(["received SIGTERM"]);
      expect(stdout).toContain("[wait] got TERM");
      expect(stderr).toMatch(/task wait Cancelled in \S+ \(Exited/);
      expect(code).toBe(130);
      expect(decodeReport(readFileSync(reportFile, "utf8")).reason).toBe("Cancelled");
    },
  );

  // Skipped as the ones above. A Ctrl-C at a terminal reaches the runner and its subreaper alike
  // (one process group): the subreaper must not pass it on, or the runner sees it twice and kills
  // without the grace.
  it.skipIf(process.getuid?.() !== 0 || !withPerl)(
    "cancels once, with the grace, on a Ctrl-C at a terminal under the subreaper",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "containment-"));
      chmodSync(dir, 0o777);
      const file = manifest(dir, [
        { name: "wait", run: "trap 'echo got TERM; exit 0' TERM; echo up; while :; do sleep 0.1; done" },
      ]);
      const command = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        process.execPath,
        CLI,
        "run",
        "-f",
        file,
      ]
        .map((word) => `'${word}'`)
        .join(" ");
      // util-linux `script` runs it on a pseudo-terminal and types what it reads on its stdin there.
      const child = spawn("script", ["-qfec", command, "/dev/null"], {
        env: { PATH: process.env.PATH, HOME: dir, TERM: "dumb" },
        stdio: ["pipe", "pipe", "pipe"],
      });
      let screen = "";
      let typed = false;
      child.stdout.on("data", (chunk: Buffer) => {
        screen += chunk.toString();
        if (!typed && screen.includes("[wait] up")) {
          typed = true;
          child.stdin.write("\x03");
        }
      });
      const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
      expect(screen).toContain("playbook: containment: a child subreaper");
      expect(screen.match(/received SIGINT/g)).toEqual(["received SIGINT"]);
      expect(screen).toContain("[wait] got TERM");
      expect(screen).toMatch(/wait {2}Cancelled in \S+ \(Exited/);
      expect(code).toBe(130);
    },
  );

  // Skipped as the first.
  it.skipIf(!withCgroup)(
    "removes the empty cgroup a runner killed by SIGKILL left, at the next run",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "containment-"));
      const file = manifest(dir, [
        {
          name: "hold",
          run: `echo $$ > ${dir}/task.pid; readlink /proc/self/ns/pid > ${dir}/namespace; echo ready; exec sleep 60`,
        },
      ]);
      const mine = testCgroup();
      const child = spawn(...cliIn(mine, ["run", "-f", file]), {
        env: { PATH: process.env.PATH, HOME: process.env.HOME },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const closed = new Promise((resolve) => child.on("close", resolve));
      await new Promise<void>((resolve) =>
        child.stdout.on("data", (chunk: Buffer) => chunk.toString().includes("[hold] ready") && resolve()),
      );
      const cgroup = /containment: a cgroup v2 sub-group of its own \((\S+)\)/.exec(stderr)?.[1] as string;
      expect(existsSync(cgroup)).toBe(true);
      // The runner dies without its clean-up; its anchor ends the cgroup, its task with it.
      const namespace = readFileSync(join(dir, "namespace"), "utf8").trim();
      const task = hostPidIn(namespace, Number(readFileSync(join(dir, "task.pid"), "utf8")));
      if (task !== null) started.push(task);
      process.kill(child.pid as number, "SIGKILL");
      await closed;
      for (let i = 0; i < 100 && readFileSync(join(cgroup, "cgroup.procs"), "utf8").trim() !== ""; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(readFileSync(join(cgroup, "cgroup.events"), "utf8")).toContain("populated 0");
      const hello = manifest(dir, [{ name: "hello", run: "echo hello" }]);
      // Empty but young, it may be a starting run's (made, its anchor not yet in): left alone.
      expect((await runCliIn(mine, ["run", "-f", hello])).code).toBe(0);
      expect(existsSync(cgroup)).toBe(true);
      // Empty for longer than a run takes to start: the next run removes it.
      const past = new Date(Date.now() - 60_000);
      utimesSync(cgroup, past, past);
      const next = await runCliIn(mine, ["run", "-f", hello]);
      expect(next.code).toBe(0);
      expect(existsSync(cgroup)).toBe(false);
      expect(next.stderr).toContain(
        `playbook: removed the cgroup of an earlier run whose runner was killed (${cgroup}); nothing was left in it`,
      );
    },
  );
});

// `timeout -k`, a CI job's cancel, systemd's stop after its own timeout: the runner is sent
// SIGTERM, starts its grace, and is killed outright (SIGKILL) before the grace is over, alone or
// with its whole process group. What holds its tasks (the cgroup's anchor, the subreaper) ends
// them at once: the design's bound is one second; the tests allow five, for a loaded machine.
describe("a runner killed from outside", () => {
  const GONE_WITHIN_MS = 5000;
  const MARKER = "RUNNER_KILLED_TEST_MARKER";

  /** Live processes whose environment carries the marker. */
  function withMarker(marker: string): number[] {
    const needle = Buffer.from(`${MARKER}=${marker}\0`);
    return readdirSync("/proc")
      .filter((name) => /^\d+$/.test(name) && Number(name) !== process.pid)
      .map(Number)
      .filter((pid) => {
        try {
          return processState(pid) !== null && readFileSync(`/proc/${pid}/environ`).includes(needle);
        } catch {
          return false;
        }
      });
  }

  /**
   * Starts the CLI in a process group of its own (as root: a cgroup; as nobody: the subreaper)
   * on a task that starts a `setsid` escaper without its environment and then ignores SIGTERM,
   * with a 30 s grace; sends the CLI SIGTERM, and once the grace has begun SIGKILLs `target`.
   * Returns what is left alive, polled until it is gone or GONE_WITHIN_MS has passed.
   */
  async function killMidGrace(mode: "cgroup" | "subreaper", target: "command" | "group") {
    const dir = mkdtempSync(join(tmpdir(), "runner-killed-"));
    chmodSync(dir, 0o777);
    const marker = `${process.pid}-${Math.random()}`;
    const escaper = ESCAPERS[0] as Escaper;
    const file = join(dir, "playbook.yaml");
    writeFileSync(
      file,
      stringify({
        apiVersion: "playbook.dev/v1alpha1",
        kind: "Playbook",
        metadata: { name: "killed" },
        spec: {
          killGrace: "30s",
          tasks: [
            {
              name: "hold",
              run: `${escaper.start}\ntrap '' TERM; echo $$ > "$D/task.pid"; readlink /proc/self/ns/pid > "$D/namespace"; echo ready; sleep 300`,
              env: [{ name: "D", value: dir }],
            },
          ],
        },
      }),
    );
    const cli = [process.execPath, CLI, "run", "-f", file];
    const [command, ...args] =
      mode === "cgroup" ? cli : ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", ...cli];
    const child = spawn(command as string, args, {
      env: { PATH: process.env.PATH, HOME: dir, [MARKER]: marker },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let stdout = "";
    let stderr = "";
    const seen = (what: () => boolean) =>
      new Promise<void>((resolve) => {
        const look = () => what() && resolve();
        child.stdout.on("data", look);
        child.stderr.on("data", look);
      });
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    // Its exit, not its pipes' close: a runner left alive would hold them.
    const exited = new Promise<string | null>((resolve) =>
      child.on("exit", (_code, signal) => resolve(signal)),
    );
    await seen(() => stdout.includes("[hold] ready"));
    const pidFile = join(dir, `${escaper.name}.pid`);
    while (!existsSync(pidFile) || readFileSync(pidFile, "utf8").trim() === "") {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // Numbered as the host numbers them, where the run has a PID namespace of its own.
    const namespace = readFileSync(join(dir, "namespace"), "utf8").trim();
    const escaped = hostPidIn(namespace, Number(readFileSync(pidFile, "utf8"))) ?? 0;
    const task = hostPidIn(namespace, Number(readFileSync(join(dir, "task.pid"), "utf8"))) ?? 0;
    expect([escaped, task]).not.toContain(0);
    started.push(escaped, task);
    expect(stderr).toContain(
      `playbook: containment: a ${mode === "cgroup" ? "cgroup v2" : "child subreaper"}`,
    );
    const cgroup = /containment: a cgroup v2 sub-group of its own \((\S+)\)/.exec(stderr)?.[1];
    expect(processState(escaped)).not.toBeNull();
    expect(withMarker(marker).length).toBeGreaterThan(1);
    // Its orderly path begins: the task ignores the SIGTERM, the grace runs.
    process.kill(child.pid as number, "SIGTERM");
    await seen(() => stderr.includes("SIGKILL in 30s"));
    const killedAt = performance.now();
    process.kill(target === "group" ? -(child.pid as number) : (child.pid as number), "SIGKILL");
    expect(await exited).toBe("SIGKILL");
    const left = () => {
      const alive = [...new Set([...withMarker(marker), escaped, task])].filter(
        (pid) => processState(pid) !== null,
      );
      const full =
        cgroup !== undefined &&
        existsSync(cgroup) &&
        /populated 1/.test(readFileSync(`${cgroup}/cgroup.events`, "utf8"));
      return full ? [...alive, `cgroup ${cgroup} still populated`] : alive;
    };
    while (left().length > 0 && performance.now() - killedAt < GONE_WITHIN_MS) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const tookMs = Math.round(performance.now() - killedAt);
    const stillAlive = left();
    console.info(`${mode}, SIGKILL of the ${target}: everything gone ${tookMs} ms after the kill`);
    return { stillAlive, tookMs, stderr };
  }

  for (const target of ["command", "group"] as const) {
    it.skipIf(!withCgroup)(
      `ends the cgroup when the runner is killed by SIGKILL mid-grace (the ${target})`,
      async () => {
        const { stillAlive } = await killMidGrace("cgroup", target);
        expect(stillAlive, "alive after the runner's SIGKILL").toEqual([]);
      },
    );

    // Skipped as the subreaper tests above.
    it.skipIf(process.getuid?.() !== 0 || !withPerl)(
      `ends the subreaper's tree when the command is killed by SIGKILL mid-grace (the ${target})`,
      async () => {
        const { stillAlive } = await killMidGrace("subreaper", target);
        expect(stillAlive, "alive after the runner's SIGKILL").toEqual([]);
      },
    );
  }

  // Skipped as the cgroup tests above. An earlier run whose anchor was killed with it (or an older
  // build's, whose anchor did not end the cgroup) left its tasks running in its cgroup.
  it.skipIf(!withCgroup)(
    "kills and removes the cgroup an earlier killed run left its processes in, and says so",
    async () => {
      const parent = testCgroup();
      // A runner that is gone: a run's cgroup is named after its runner's pid.
      const gone = spawnSync("true").pid;
      const cgroup = join(parent, `playbook-${gone.toString(16)}-0123abcd`);
      spawnSync("mkdir", [cgroup]);
      const marker = `${process.pid}-${Math.random()}`;
      const leftover = spawn(
        "sh",
        ["-c", `echo $$ > "${cgroup}/cgroup.procs" && echo in && exec sleep 302`],
        {
          env: { PATH: process.env.PATH, [MARKER]: marker },
          stdio: ["ignore", "pipe", "ignore"],
          detached: true,
        },
      );
      started.push(leftover.pid as number);
      await new Promise<void>((resolve) => leftover.stdout.on("data", () => resolve()));
      expect(readFileSync(`${cgroup}/cgroup.procs`, "utf8").trim()).toBe(String(leftover.pid));
      const dir = mkdtempSync(join(tmpdir(), "runner-killed-"));
      // A runner in the host's PID namespace: one in a namespace of its own sees no pid of the
      // leftover (cgroup.procs says 0) and leaves the cgroup alone.
      const next = await runCliIn(
        parent,
        ["run", "-f", manifest(dir, [{ name: "hello", run: "echo hello" }])],
        {
          PLAYBOOK_CONTAINMENT: "cgroup",
        },
      );
      expect(next.code).toBe(0);
      expect(next.stderr).toContain(
        `playbook: removed the cgroup of an earlier run whose runner was killed (${cgroup}), and ended the 1 process(es) still in it`,
      );
      expect(existsSync(cgroup)).toBe(false);
      expect(withMarker(marker)).toEqual([]);
    },
  );
});

// Issue 53: what holds a local run (the cgroup's anchor, the subreaper's keeper) runs as the tasks'
// user. A task that finds it, stops and kills it, and then kills the runner must not outlive the
// run for it. Where the runner is root, the run has a PID namespace of its own, held from outside.
describe("a task that turns on what holds the run", () => {
  const canIsolate =
    process.getuid?.() === 0 &&
    withPerl &&
    spawnSync("unshare", ["--pid", "--fork", "--mount", "--mount-proc", "true"]).status === 0;

  /** Live processes on this machine whose command line is exactly `words` (the escaper's, unique per test). */
  function withCommandLine(words: string[]): number[] {
    const wanted = `${words.join("\0")}\0`;
    return readdirSync("/proc")
      .filter((name) => /^\d+$/.test(name))
      .map(Number)
      .filter((pid) => {
        try {
          return processState(pid) !== null && readFileSync(`/proc/${pid}/cmdline`, "latin1") === wanted;
        } catch {
          return false;
        }
      });
  }

  // Skipped where the runner cannot have a PID namespace (not root, no perl, no unshare); a run
  // there says its containment is within the tasks' reach (below).
  it.skipIf(!canIsolate)(
    "ends a detached process of a task that stopped and killed the anchor and the keeper, then the runner",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "hostile-"));
      const seconds = `${300 + Math.floor(Math.random() * 1e6) / 1e3}`;
      const escaper = ["sleep", seconds];
      const file = join(dir, "playbook.yaml");
      const attack = [
        // A process that leaves everything behind: a new session, no environment, no pipe.
        `(setsid env -i sh -c 'echo $$ > "$0/escaper.pid"; exec sleep ${seconds}' "$D" </dev/null >/dev/null 2>&1 &)`,
        `while [ ! -s "$D/escaper.pid" ]; do sleep 0.01; done`,
        "echo escaper up",
        `while [ ! -e "$D/go" ]; do sleep 0.01; done`,
        // Everything that holds the run and that this task can see: the cgroup's anchor, any
        // perl (the keeper, the command, a namespace's init): stopped, then killed.
        `for p in $(ls /proc | grep -E '^[0-9]+$'); do c=$(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null); case "$c" in "sh -c read _"*|"perl -e"*) kill -STOP $p; kill -KILL $p;; esac; done 2>/dev/null`,
        // Then the runner: the process that runs this manifest.
        `for p in $(ls /proc | grep -E '^[0-9]+$'); do [ "$p" = $$ ] && continue; c=$(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null); case "$c" in *"run -f $M"*) kill -KILL $p;; esac; done 2>/dev/null`,
        "echo still here; sleep 300",
      ].join("\n");
      writeFileSync(
        file,
        stringify({
          apiVersion: "playbook.dev/v1alpha1",
          kind: "Playbook",
          metadata: { name: "hostile" },
          spec: {
            killGrace: "1s",
            tasks: [
              {
                name: "attack",
                run: attack,
                env: [
                  { name: "D", value: dir },
                  { name: "M", value: file },
                ],
              },
            ],
          },
        }),
      );
      // In a cgroup of the test's own: no other run on this machine cleans up after this one.
      const child = spawn(...cliIn(testCgroup(), ["run", "-f", file]), {
        env: { PATH: process.env.PATH, HOME: dir },
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
      while (!stdout.includes("[attack] escaper up")) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const alive = withCommandLine(escaper);
      started.push(...alive);
      expect(alive, "the escaper, running before the attack").toHaveLength(1);
      writeFileSync(join(dir, "go"), "");
      // The task kills the runner; where it could not, the test does, as a user would.
      const done = await Promise.race([
        exited.then(() => true),
        new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 30_000)),
      ]);
      if (!done) process.kill(-(child.pid as number), "SIGKILL");
      await exited;
      console.info(`hostile task: the runner was killed by ${done ? "the task" : "the test"}`);
      // No bound on how soon: only that it does end, polled for long enough for any machine.
      for (let i = 0; i < 600 && withCommandLine(escaper).length > 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(withCommandLine(escaper), `left running after the run (${stderr})`).toEqual([]);
      expect(stderr).toContain("in a PID namespace of its own, held by a keeper outside it");
    },
    60_000,
  );

  // Skipped as the one above. Stdin is read once: the command keeps it for itself started again.
  it.skipIf(!canIsolate)("holds a run whose manifest comes on stdin in its namespace too", async () => {
    const dir = mkdtempSync(join(tmpdir(), "hostile-"));
    const text = readFileSync(manifest(dir, [{ name: "ns", run: "readlink /proc/self/ns/pid" }]), "utf8");
    const kept = () => readdirSync(tmpdir()).filter((name) => name.startsWith("playbook-stdin-"));
    const before = kept();
    const result = await startCli(["run", "-f", "-"], { stdin: text });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain("in a PID namespace of its own, held by a keeper outside it");
    expect(result.stdout).toMatch(/\[ns\] pid:\[\d+\]/);
    expect(result.stdout).not.toContain(`[ns] ${OWN_NAMESPACE}`);
    // What it kept of stdin is gone.
    expect(kept().filter((name) => !before.includes(name))).toEqual([]);
  });
});
