// `playbook run` and `playbook validate` as a user meets them: the built CLI in a real process.
import { type ChildProcess, spawn } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { planDigest, RunPlanSchema } from "../../src/api/plan.js";
import { decodeReport } from "../../src/api/report.js";
import {
  CLI,
  type CliResult,
  POD_PLAN_DEFAULTS,
  spawnPodRunner,
  startCli as startCliProcess,
  terminationLog,
} from "../support/cli.js";
import { killAndWaitGone } from "../support/processes.js";
import { checkNothingLeftBehind, MARKER_VAR, processesWithEnv } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();

/** The CLI with this test's marker in its environment, so whatever it leaves running is found. */
const startCli = (args: string[], onSpawn?: (child: ChildProcess) => void): Promise<CliResult> =>
  startCliProcess(args, { env: { [MARKER_VAR]: currentMarker() }, ...(onSpawn ? { onSpawn } : {}) });

function manifest(spec: object, name = "cli-test"): string {
  const dir = mkdtempSync(join(tmpdir(), "cli-"));
  const file = join(dir, "playbook.yaml");
  writeFileSync(
    file,
    stringify({ apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name }, spec }),
  );
  return file;
}

describe("playbook run", () => {
  it("refuses a task timeout above the ceiling with exit 2, naming the field, and runs nothing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const witness = join(dir, "ran");
    const file = manifest({
      ceiling: "30m",
      tasks: [
        { name: "first", run: `touch ${witness}` },
        { name: "long", run: "true", timeout: "2h" },
      ],
    });
    const result = await startCli(["run", "-f", file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("spec.tasks[1].timeout: 2h is longer than spec.ceiling 30m");
    expect(existsSync(witness)).toBe(false);
  });

  it.each([
    [
      "a command name found nowhere on PATH",
      { shell: "no-such-shell-here -e" },
      'spec.tasks[1].shell "no-such-shell-here -e": no-such-shell-here was not found on PATH',
    ],
    [
      "an absolute path that is no executable file",
      { shell: "/nonexistent/bash -eo pipefail" },
      'spec.tasks[1].shell "/nonexistent/bash -eo pipefail": /nonexistent/bash is not an executable file on this machine; nothing was run',
    ],
  ])(
    "refuses a task's shell that is not on this machine (%s) with exit 2, and runs nothing; validate warns",
    async (_name, shell, message) => {
      const dir = mkdtempSync(join(tmpdir(), "cli-"));
      const witness = join(dir, "ran");
      const file = manifest({
        tasks: [
          { name: "first", run: `touch ${witness}` },
          { name: "second", run: "true", ...shell },
        ],
      });
      const run = await startCli(["run", "-f", file]);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(`${message}`);
      expect(existsSync(witness)).toBe(false);
      // A manifest may be meant for a cluster, where the task runs in the runner image: validate
      // says so and passes it.
      const validate = await startCli(["validate", "-f", file]);
      expect(validate.code, validate.stderr).toBe(0);
      expect(validate.stderr).toContain(`playbook: warning: ${message.replace("; nothing was run", "")}`);
      expect(validate.stderr).toContain("`playbook run` would refuse it here");
    },
  );

  it("names spec.shell and the task it would run when the spec's shell is not here", async () => {
    const file = manifest({ shell: "no-such-shell-here", tasks: [{ name: "only", run: "true" }] });
    const result = await startCli(["run", "-f", file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      'spec.shell "no-such-shell-here" (the shell of task only): no-such-shell-here was not found on PATH',
    );
  });

  it.each([
    ["unparseable YAML", "spec: [", /line \d+, column \d+: YAML/],
    ["a missing file", null, /no such file/],
  ])("exits 2 on %s", async (_name, content, message) => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const file = join(dir, "pb.yaml");
    if (content !== null) writeFileSync(file, content);
    const result = await startCli(["run", "-f", file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(message);
  });

  it("runs nothing for a Playbook with spec.cancel: true and reports it Cancelled, as the controller does", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const witness = join(dir, "ran");
    const file = manifest({
      cancel: true,
      tasks: [
        { name: "first", run: `touch ${witness}` },
        { name: "second", run: "true" },
      ],
    });
    const result = await startCli(["run", "-f", file, "-o", "json"]);
    expect(result.code).toBe(130);
    expect(existsSync(witness)).toBe(false);
    expect(result.stderr).toContain("spec.cancel is true");
    const status = JSON.parse(result.stdout).status;
    expect(status.phase).toBe("Cancelled");
    expect(status.conditions.find((c: { type: string }) => c.type === "Succeeded")).toMatchObject({
      status: "False",
      reason: "Cancelled",
    });
    expect(status.tasks.map((t: { phase: string }) => t.phase)).toEqual(["Cancelled", "Skipped"]);
  });

  it("exits 2 on an unknown output format, naming the flag", async () => {
    const result = await startCli([
      "run",
      "-f",
      manifest({ tasks: [{ name: "a", run: "true" }] }),
      "-o",
      "xml",
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("xml");
    expect(result.stderr).toContain("--output");
  });

  it("prints a task's multi-line script back as a literal block with -o yaml", async () => {
    const file = manifest({
      tasks: [
        {
          name: "script",
          run: "echo one\necho two with a line long enough that a printer folding at eighty columns would fold it\n",
        },
      ],
    });
    const result = await startCli(["run", "-f", file, "-o", "yaml"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(
      "      run: |\n        echo one\n        echo two with a line long enough that a printer folding at eighty columns would fold it\n",
    );
    expect(parse(result.stdout).spec.tasks[0].run).toBe(
      "echo one\necho two with a line long enough that a printer folding at eighty columns would fold it\n",
    );
  });

  it("prints only the Playbook with its status on stdout with -o json; task output goes to stderr", async () => {
    const file = manifest({
      tasks: [
        { name: "hello", run: "echo hi from the task" },
        { name: "bye", run: "exit 3" },
      ],
    });
    const result = await startCli(["run", "-f", file, "-o", "json"]);
    expect(result.code).toBe(1);
    const object = JSON.parse(result.stdout);
    expect(object.kind).toBe("Playbook");
    expect(object.status.phase).toBe("Failed");
    expect(object.status.tasks.map((t: { phase: string }) => t.phase)).toEqual(["Succeeded", "Failed"]);
    expect(object.status.conditions).toEqual([
      expect.objectContaining({
        type: "Succeeded",
        status: "False",
        reason: "TaskFailed",
        message: "task bye exited with code 3",
      }),
    ]);
    expect(object.status.limits.ceiling).toEqual({ value: "1h", source: "default" });
    expect(result.stderr).toContain("[hello] hi from the task");
  });

  it("on SIGINT cancels the live task, leaves nothing behind, still reports and exits 130", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const report = join(dir, "report.json");
    const file = manifest({
      killGrace: "3s",
      tasks: [
        { name: "long", run: "(trap '' TERM INT; echo working; sleep 60) & sleep 60" },
        { name: "never", run: "echo never" },
      ],
    });
    const result = await startCli(["run", "-f", file, "--report", report], (child) => {
      child.stdout?.once("data", () => child.kill("SIGINT"));
    });
    expect(result.code).toBe(130);
    expect(result.stdout).not.toContain("never");
    const parsed = decodeReport(readFileSync(report, "utf8"), 2);
    expect(parsed).toMatchObject({ phase: "Cancelled", reason: "Cancelled" });
    expect(parsed.tasks.map((t) => t.p)).toEqual(["Cancelled", "Skipped"]);
    expect(parsed.tasks[0]?.e).toBe("Killed");
  });

  it("on SIGHUP (its terminal closed) cancels the live task and leaves nothing behind", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const report = join(dir, "report.json");
    const file = manifest({
      killGrace: "1s",
      tasks: [{ name: "long", run: "echo working; sleep 60" }],
    });
    const result = await startCli(["run", "-f", file, "--report", report], (child) => {
      child.stdout?.once("data", () => child.kill("SIGHUP"));
    });
    expect(result.code).toBe(130);
    expect(decodeReport(readFileSync(report, "utf8"), 1)).toMatchObject({ reason: "Cancelled" });
  });

  it("kills at once on a second SIGINT instead of waiting out the grace", async () => {
    const file = manifest({
      killGrace: "60s",
      tasks: [
        { name: "stubborn", run: "trap 'echo got TERM' TERM; echo working; while :; do sleep 0.1; done" },
      ],
    });
    const started = performance.now();
    const result = await startCli(["run", "-f", file, "-o", "json"], (child) => {
      // The second SIGINT once the task says it got its SIGTERM: inside the grace.
      child.stderr?.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("[stubborn] working")) child.kill("SIGINT");
        if (chunk.toString().includes("[stubborn] got TERM")) child.kill("SIGINT");
      });
    });
    expect(result.code).toBe(130);
    expect(performance.now() - started).toBeLessThan(20_000);
    expect(result.stderr).toContain("killing without waiting for the grace");
    const task = JSON.parse(result.stdout).status.tasks[0];
    expect(task).toMatchObject({ phase: "Cancelled", ending: "Killed" });
    // What happened, not the grace it would have had.
    const cut = /process group killed (at once|after \d+(\.\d)?s): another interrupt cut its 1m grace short/;
    expect(task.message).toMatch(cut);
    expect(result.stderr).toMatch(cut);
    expect(result.stderr).not.toContain("killed after 1m grace");
  });

  it("keeps running the tasks when the reader of its output goes away (playbook run | head)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const witness = join(dir, "done");
    const file = manifest({
      stall: "2s",
      tasks: [{ name: "chatty", run: `seq 1 3000000; touch ${witness}` }],
    });
    const result = await startCli(["run", "-f", file], (child) => {
      child.stdout?.once("data", () => child.stdout?.destroy());
    });
    expect(result.stderr).not.toContain("StallLimit");
    expect(result.code).toBe(0);
    expect(existsSync(witness)).toBe(true);
  });

  it("does not die and orphan its tasks when the reader of its progress goes away", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const witness = join(dir, "done");
    const file = manifest({
      tasks: [
        { name: "first", run: "sleep 0.5" },
        { name: "second", run: `touch ${witness}` },
      ],
    });
    const result = await startCli(["run", "-f", file], (child) => {
      child.stderr?.once("data", () => child.stderr?.destroy());
    });
    expect(result.code).toBe(0);
    expect(existsSync(witness)).toBe(true);
  });

  it("exits when the run is over even if a process it cannot find still holds the task's output", async () => {
    // A new session and a cleared environment: neither the group kill nor the cookie reaches it.
    const file = manifest({
      tasks: [{ name: "hidden", run: "setsid env -i sh -c 'sleep 8' & echo started" }],
    });
    const started = performance.now();
    const result = await startCli(["run", "-f", file]);
    expect(result.code).toBe(0);
    expect(performance.now() - started).toBeLessThan(6000);
  });

  // Skipped only where it cannot run: making a setuid-root program needs root, and perl writes it.
  it.skipIf(process.getuid?.() !== 0 || !existsSync("/usr/bin/perl"))(
    "still reports when a task became another user (sudo) and cannot be signalled",
    async () => {
      // A setuid-root program that takes root as its real uid too, as sudo does: the runner,
      // running as nobody, gets EPERM for every signal it sends.
      const dir = mkdtempSync(join(tmpdir(), "cli-"));
      chmodSync(dir, 0o777);
      const perl = join(dir, "perl");
      copyFileSync("/usr/bin/perl", perl);
      chmodSync(perl, 0o4755);
      const report = join(dir, "report.json");
      const file = manifest({
        killGrace: "200ms",
        tasks: [{ name: "root", timeout: "300ms", run: `exec ${perl} -e '$< = 0; $> = 0; sleep 60'` }],
      });
      chmodSync(join(file, ".."), 0o755);
      const child = spawn(process.execPath, [CLI, "run", "-f", file, "--report", report], {
        env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker() },
        stdio: ["ignore", "ignore", "pipe"],
        uid: 65534,
        gid: 65534,
      });
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const started = performance.now();
      const code = await new Promise((resolve) => child.on("close", resolve));
      const elapsed = performance.now() - started;
      await killAndWaitGone(processesWithEnv(MARKER_VAR, currentMarker()));
      expect(stderr).not.toContain("EPERM");
      expect(code).toBe(124);
      expect(elapsed).toBeLessThan(20_000);
      expect(decodeReport(readFileSync(report, "utf8"), 1)).toMatchObject({ reason: "TaskTimeout" });
    },
  );

  // Skipped only where it cannot run, as above.
  it.skipIf(process.getuid?.() !== 0 || !existsSync("/usr/bin/perl"))(
    "backs off instead of scanning flat out while a process it may not kill stays (EPERM)",
    async () => {
      // The task's shell ends at SIGTERM; its child became root and stays in the group, so every
      // look of the kill path (5s long) finds it and every SIGKILL answers EPERM.
      const dir = mkdtempSync(join(tmpdir(), "cli-"));
      chmodSync(dir, 0o777);
      const perl = join(dir, "perl");
      copyFileSync("/usr/bin/perl", perl);
      chmodSync(perl, 0o4755);
      const report = join(dir, "report.json");
      const file = manifest({
        killGrace: "200ms",
        tasks: [
          {
            name: "root",
            run: `${perl} -e '$< = 0; $> = 0; $| = 1; print "now root\\n"; sleep 60' & trap 'exit 0' TERM; while :; do sleep 0.05; done`,
          },
        ],
      });
      chmodSync(join(file, ".."), 0o755);
      const child = spawn(process.execPath, [CLI, "run", "-f", file, "--report", report], {
        env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker() },
        stdio: ["ignore", "pipe", "ignore"],
        uid: 65534,
        gid: 65534,
      });
      // The runner's CPU time in clock ticks, sampled while it runs (it is gone once it exits).
      const cpuTicks = () => {
        try {
          const fields = readFileSync(`/proc/${child.pid}/stat`, "latin1").split(") ")[1]?.split(" ") ?? [];
          return Number(fields[11]) + Number(fields[12]);
        } catch {
          return null; // exited
        }
      };
      let ticks = 0;
      let ticksAtCancel = 0;
      const sample = setInterval(() => {
        ticks = cpuTicks() ?? ticks;
      }, 50);
      child.stdout.on("data", (chunk: Buffer) => {
        if (ticksAtCancel > 0 || !chunk.toString().includes("[root] now root")) return;
        ticksAtCancel = cpuTicks() ?? 0;
        child.kill("SIGINT");
      });
      const started = performance.now();
      const code = await new Promise((resolve) => child.on("close", resolve));
      clearInterval(sample);
      const elapsed = performance.now() - started;
      await killAndWaitGone(processesWithEnv(MARKER_VAR, currentMarker()));
      expect(code).toBe(130);
      expect(decodeReport(readFileSync(report, "utf8"), 1)).toMatchObject({ reason: "Cancelled" });
      // The kill path waited out its bound for the root process...
      expect(elapsed).toBeGreaterThan(5000);
      // ...without burning a core on it: a look every 2ms for 5s costs over a second of CPU.
      expect((ticks - ticksAtCancel) / 100, "runner CPU seconds after the cancellation").toBeLessThan(0.5);
    },
  );

  it("runs and reports even without a writable temp dir for cancel files (read-only root)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const report = join(dir, "report.json");
    const file = manifest({
      killGrace: "0s",
      tasks: [
        { name: "fine", run: "echo fine" },
        { name: "slow", timeout: "300ms", run: "sleep 30" },
      ],
    });
    const child = spawn(process.execPath, [CLI, "run", "-f", file, "--report", report], {
      // Nothing, not even root, can create a directory under /proc.
      env: { PATH: process.env.PATH, TMPDIR: "/proc/no-such-tmp", [MARKER_VAR]: currentMarker() },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect(code).toBe(124);
    expect(stderr).toContain("warning: cancel file");
    const parsed = decodeReport(readFileSync(report, "utf8"), 2);
    expect(parsed.tasks.map((t) => t.p)).toEqual(["Succeeded", "TimedOut"]);
  });

  it("still ends with the run's exit code when the report cannot be written, and says why", async () => {
    // Writable when the run starts (an unwritable path is refused first: test/runner/cli-kinds.test.ts),
    // gone when it ends.
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const file = manifest({ tasks: [{ name: "ok", run: `rm -rf ${dir}` }] });
    const result = await startCli(["run", "-f", file, "--report", join(dir, "report.json")]);
    expect(result.code).toBe(0);
    expect(result.stderr).toContain(`could not write the report to ${join(dir, "report.json")}: ENOENT`);
  });

  it("writes a report under 4096 bytes for 200 tasks", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const report = join(dir, "report.json");
    const tasks = Array.from({ length: 200 }, (_, i) => ({
      name: `step-${i}`,
      run: i === 199 ? "echo boom >&2; exit 1" : "true",
    }));
    const result = await startCli(["run", "-f", manifest({ tasks }), "--report", report, "-o", "json"]);
    expect(result.code).toBe(1);
    expect(statSync(report).size).toBeLessThanOrEqual(4096);
    const status = JSON.parse(result.stdout).status;
    expect(status.tasks).toHaveLength(200);
    expect(status.tasks[199]).toMatchObject({
      name: "step-199",
      phase: "Failed",
      exitCode: 1,
      message: 'exited with code 1 (stderr: "boom")',
    });
  });

  it("delivers every line intact and in order to a slow reader of its stdout", async () => {
    // The runner reuses its output buffers once stdout has written them: a reader that keeps
    // pausing must still see each line exactly as printed.
    const file = manifest({ tasks: [{ name: "count", run: "seq 1 300000" }] });
    const child = spawn(process.execPath, [CLI, "run", "-f", file], {
      env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker() },
      stdio: ["ignore", "pipe", "ignore"],
    });
    const chunks: Buffer[] = [];
    let sinceBreak = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      sinceBreak += chunk.length;
      if (sinceBreak > 256 * 1024) {
        sinceBreak = 0;
        child.stdout.pause();
        setTimeout(() => child.stdout.resume(), 20);
      }
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect(code).toBe(0);
    const lines = Buffer.concat(chunks).toString().split("\n");
    expect(lines.pop()).toBe("");
    expect(lines).toHaveLength(300000);
    const wrong = lines.findIndex((line, i) => line !== `[count] ${i + 1}`);
    expect(wrong, `line ${wrong + 1}: ${JSON.stringify(lines[wrong])}`).toBe(-1);
  });

  it("keeps its memory bounded while a task prints 500 MB", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const peak = join(dir, "peak");
    // The task reads its parent's (the runner's) peak resident set once the output has passed.
    const file = manifest({
      tasks: [
        {
          name: "flood",
          run: `head -c 500000000 /dev/zero | tr '\\0' 'y'; grep VmHWM /proc/$PPID/status > ${peak}`,
        },
      ],
    });
    const child = spawn(process.execPath, [CLI, "run", "-f", file], {
      env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker() },
      stdio: ["ignore", "ignore", "pipe"],
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect(code).toBe(0);
    const kib = Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(peak, "utf8"))?.[1]);
    expect(kib).toBeGreaterThan(0);
    expect(kib / 1024).toBeLessThan(200);
  });
});

describe("a task that ignores SIGTERM and prints through a 20 s grace, run locally", () => {
  it.each(["slow", "fast"])(
    "keeps the runner's memory bounded with a %s reader of its stdout: the pipe stays held after the stop",
    async (reader) => {
      const file = manifest({
        killGrace: "20s",
        tasks: [{ name: "flood", timeout: "1s", run: "trap '' TERM; yes 0123456789abcdef" }],
      });
      const child = spawn(process.execPath, [CLI, "run", "-f", file], {
        env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker() },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      let read = 0;
      const timers: NodeJS.Timeout[] = [];
      if (reader === "slow") {
        // 64 KiB every 2 ms at most: some 30 MB/s, far below what `yes` prints.
        timers.push(
          setInterval(() => {
            read += (child.stdout.read(65536) as Buffer | null)?.length ?? 0;
          }, 2),
        );
      } else {
        child.stdout.on("data", (chunk: Buffer) => {
          read += chunk.length;
        });
      }
      let peak = 0;
      let killedAbove = false;
      timers.push(
        setInterval(() => {
          try {
            const kib = /VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))?.[1];
            peak = Math.max(peak, Number(kib ?? 0) * 1024);
            // A build that queues it all would take this machine's memory: it is stopped at 1 GiB.
            if (peak > 1024 ** 3 && !killedAbove) {
              killedAbove = true;
              child.kill("SIGKILL");
            }
          } catch {
            // ended
          }
        }, 50),
      );
      const code = await new Promise((resolve) => {
        child.on("exit", () => child.stdout.resume());
        child.on("close", resolve);
      });
      for (const timer of timers) clearInterval(timer);
      expect(killedAbove, `peak ${peak} bytes`).toBe(false);
      expect(code, stderr).toBe(124);
      expect(stderr).toMatch(/^playbook: task flood TimedOut in \S+ \(TaskTimeout, Killed/m);
      expect(stderr).toContain(
        "playbook: task flood passed its TaskTimeout limit: cancel file written, SIGTERM sent to its process group, SIGKILL in 20s",
      );
      expect(read).toBeGreaterThan(0);
      expect(peak).toBeGreaterThan(0);
      expect(peak / 1024 / 1024).toBeLessThan(200);
    },
    120_000,
  );
});

describe("playbook pod-runner", () => {
  it("runs the plan from $PLAYBOOK_PLAN, counts the ceiling from the run's start, and writes the report", async () => {
    const log = terminationLog("pod-");
    const plan = {
      name: "nightly",
      namespace: "team-a",
      // The first pod was lost 1.5s into a 3s ceiling; this pod has what is left.
      runStartTime: new Date(Date.now() - 1500).toISOString(),
      defaults: POD_PLAN_DEFAULTS,
      spec: { ceiling: "3s", killGrace: "0s", tasks: [{ name: "soak", run: "echo soaking; sleep 30" }] },
    };
    const child = spawnPodRunner(log, plan, { [MARKER_VAR]: currentMarker() });
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    const started = performance.now();
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect(code).toBe(124);
    expect(performance.now() - started).toBeLessThan(2900);
    expect(stdout).toContain("[soak] soaking");
    const report = decodeReport(readFileSync(log, "utf8"), 1);
    expect(report).toMatchObject({ phase: "Failed", reason: "RunCeiling" });
    expect(report.tasks[0]).toMatchObject({ p: "TimedOut", l: "RunCeiling", e: "Killed" });
  });

  it.each([
    ["an hour in the future", 3_600_000],
    ["an hour in the past", -3_600_000],
  ])(
    "counts the ceiling from the duration the pod was handed, not a run start stamp %s (a skewed node clock)",
    async (_skew, offsetMs) => {
      const log = terminationLog("pod-");
      const plan = {
        name: "nightly",
        // As a node whose clock is an hour off reads the controller's stamp.
        runStartTime: new Date(Date.now() + offsetMs).toISOString(),
        defaults: POD_PLAN_DEFAULTS,
        spec: { ceiling: "10m", killGrace: "0s", tasks: [{ name: "soak", run: "echo soaking; sleep 30" }] },
      };
      const child = spawnPodRunner(log, plan, {
        [MARKER_VAR]: currentMarker(),
        // 2 s of the ceiling were left when the controller built the pod.
        PLAYBOOK_CEILING_LEFT_MS: "2000",
      });
      let stdout = "";
      child.stdout.on("data", (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      const started = performance.now();
      const code = await new Promise((resolve) => child.on("close", resolve));
      const took = performance.now() - started;
      expect(code).toBe(124);
      // Neither at once (a stamp an hour old) nor after the task's 30 s (a stamp an hour ahead):
      // the 2 s handed, less the time since this process (the pod, outside a pod) started.
      expect(took).toBeGreaterThan(1000);
      expect(took).toBeLessThan(4000);
      expect(stdout).toContain("[soak] soaking");
      const report = decodeReport(readFileSync(log, "utf8"), 1);
      expect(report).toMatchObject({ phase: "Failed", reason: "RunCeiling" });
      expect(report.tasks[0]).toMatchObject({ p: "TimedOut", l: "RunCeiling" });
    },
  );

  it("on SIGTERM (pod deletion) cancels, reports Cancelled and exits 130", async () => {
    const log = terminationLog("pod-");
    const plan = {
      name: "nightly",
      runStartTime: new Date().toISOString(),
      defaults: POD_PLAN_DEFAULTS,
      spec: {
        killGrace: "15s",
        // "up" comes once sleep has exec'd: a SIGTERM to the group between dash's fork and the
        // exec is taken by the child's copy of the trap and lost at the exec, leaving sleep alive
        // until the grace's SIGKILL (the task then ended Killed instead of Exited).
        tasks: [
          {
            name: "work",
            run: "trap 'exit 0' TERM; sleep 30 & until [ \"$(cat /proc/$!/comm 2>/dev/null)\" = sleep ]; do :; done; echo up; wait",
          },
        ],
      },
    };
    const child = spawn(process.execPath, [CLI, "pod-runner", "--termination-log", log], {
      env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker(), PLAYBOOK_PLAN: JSON.stringify(plan) },
      stdio: ["ignore", "pipe", "ignore"],
    });
    // The runner's own lines come on stdout too (one stream in a pod): the task's line is the cue.
    let out = "";
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      if (!out.includes("[work] up")) return;
      child.stdout.off("data", onData);
      child.kill("SIGTERM");
    };
    child.stdout.on("data", onData);
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect(code).toBe(130);
    const report = decodeReport(readFileSync(log, "utf8"), 1);
    expect(report).toMatchObject({ phase: "Cancelled", reason: "Cancelled" });
    expect(report.tasks[0]).toMatchObject({ p: "Cancelled", e: "Exited" });
  });

  it("refuses a plan that is not valid, naming the field, with exit 2", async () => {
    const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [CLI, "pod-runner", "--termination-log", "/dev/null"], {
        env: { PATH: process.env.PATH, PLAYBOOK_PLAN: JSON.stringify({ name: "x", spec: { tasks: [] } }) },
        stdio: ["ignore", "ignore", "pipe"],
      });
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      child.on("close", (code) => resolve({ code, stderr }));
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("runStartTime");
  });

  it("refuses a plan file that does not hash to $PLAYBOOK_PLAN_DIGEST (rewritten on the pod), running nothing, with exit 2", async () => {
    const dir = mkdtempSync(join(tmpdir(), "pod-"));
    const planFile = join(dir, "plan.json");
    const ran = join(dir, "ran");
    const plan = {
      name: "nightly",
      runStartTime: new Date().toISOString(),
      defaults: { ceilingMs: 60_000, maxCeilingMs: 60_000, stallMs: 60_000, killGraceMs: 1000 },
      spec: { tasks: [{ name: "a", run: "true" }] },
    };
    const digest = planDigest(RunPlanSchema.parse(plan));
    // What the controller created, then the annotation (and so the file) rewritten.
    writeFileSync(
      planFile,
      JSON.stringify({ ...plan, spec: { tasks: [{ name: "a", run: `touch ${ran}` }] } }),
    );
    const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        [CLI, "pod-runner", "--plan", planFile, "--termination-log", join(dir, "log")],
        {
          env: { PATH: process.env.PATH, PLAYBOOK_PLAN_DIGEST: digest },
          stdio: ["ignore", "ignore", "pipe"],
        },
      );
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      child.on("close", (code) => resolve({ code, stderr }));
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      new RegExp(
        `^playbook: the plan \\(${planFile}\\) hashes to sha256:[0-9a-f]{64}, not to \\$PLAYBOOK_PLAN_DIGEST ${digest}: it was changed after the pod was created; nothing was run`,
      ),
    );
    expect(existsSync(ran)).toBe(false);
  });

  it("holds a task to the stall its namespace's policy gave the run (the plan's defaults.policy), not the controller's", async () => {
    const log = terminationLog("pod-");
    const plan = {
      name: "quiet",
      runStartTime: new Date().toISOString(),
      defaults: {
        ceilingMs: 3_600_000,
        maxCeilingMs: 86_400_000,
        stallMs: 600_000,
        killGraceMs: 10_000,
        policy: { ceilingMs: 120_000, stallMs: 1_000, killGraceMs: 500 },
      },
      spec: { tasks: [{ name: "silent", run: "sleep 30" }] },
    };
    const child = spawn(process.execPath, [CLI, "pod-runner", "--termination-log", log], {
      env: { PATH: process.env.PATH, [MARKER_VAR]: currentMarker(), PLAYBOOK_PLAN: JSON.stringify(plan) },
      stdio: ["ignore", "ignore", "ignore"],
    });
    const started = performance.now();
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect(code).toBe(124);
    // The policy's 1s stall and its 0.5s killGrace, far from the controller's 10m.
    expect(performance.now() - started).toBeLessThan(10_000);
    const report = decodeReport(readFileSync(log, "utf8"), 1);
    expect(report).toMatchObject({ phase: "Failed", reason: "StallLimit" });
    expect(report.tasks[0]).toMatchObject({ p: "TimedOut", l: "StallLimit" });
  });
});

describe("errors that say what to do next", () => {
  it("says there is no such file and where it looked for it", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const result = await startCli(["run", "-f", join(dir, "nope.yaml")]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`-f ${join(dir, "nope.yaml")}: no such file (${join(dir, "nope.yaml")})`);
    expect(result.stderr).not.toContain("ENOENT");
  });

  it("suggests the nearest known field for a misspelt one", async () => {
    const file = manifest({ tasks: [{ name: "a", run: "true", timout: "5m" }] });
    const result = await startCli(["validate", "-f", file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("spec.tasks[0].timout: unknown field; did you mean timeout?");
  });

  it("names a malformed duration once, with the units it takes", async () => {
    const file = manifest({ ceiling: "90x", tasks: [{ name: "a", run: "true" }] });
    const result = await startCli(["run", "-f", file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      'spec.ceiling: "90x" is not a duration (use units h, m, s, ms, e.g. 1h30m, 90s, 250ms)',
    );
    expect(result.stderr.match(/90x/g)).toHaveLength(1);
  });

  it("takes the manifest as an argument as well as with -f, as --help shows it", async () => {
    const file = manifest({ tasks: [{ name: "a", run: "echo from-the-argument" }] });
    const run = await startCli(["run", file]);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe("[a] from-the-argument\n");
    const validate = await startCli(["validate", file]);
    expect(validate.code).toBe(0);
    expect(validate.stdout).toContain(`${file}: Playbook cli-test is valid`);
    const help = await startCli(["--help"]);
    expect(help.stdout).toMatch(/^ {2}run \[options\] \[file\] /m);
  });

  it("gives a YAML error's position once and does not end it with a colon", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-"));
    const file = join(dir, "pb.yaml");
    writeFileSync(file, "spec: [\n");
    const result = await startCli(["run", "-f", file]);
    expect(result.code).toBe(2);
    const line = result.stderr.split("\n").find((l) => l.includes("YAML:")) ?? "";
    expect(line).toMatch(/^ {2}line 2, column 1: YAML: \S/);
    expect(line.match(/line \d+, column \d+/g)).toHaveLength(1);
    expect(line).not.toMatch(/:\s*$/);
  });

  it.each([
    ["no manifest", ["run"], "error: no manifest: give it as -f FILE or FILE"],
    [
      "a second manifest beside -f",
      ["run", "-f", "a.yaml", "b.yaml"],
      "error: unexpected argument 'b.yaml': the manifest is -f a.yaml",
    ],
    [
      "-o xml",
      ["run", "-f", "any.yaml", "-o", "xml"],
      "error: option '-o, --output <format>' argument 'xml' is invalid",
    ],
  ])("on %s prints the error and where to get help, not the whole help", async (_name, args, error) => {
    const result = await startCli(args);
    expect(result.code).toBe(2);
    expect(result.stderr.trimEnd().split("\n")).toEqual([
      expect.stringContaining(error),
      "See 'playbook run --help' for usage.",
    ]);
  });
});

describe("playbook validate, --help and --version", () => {
  it("shows each effective limit with its source", async () => {
    const file = manifest({
      ceiling: "30m",
      tasks: [
        { name: "build", run: "make", timeout: "10m", stall: "2m" },
        { name: "test", run: "make test" },
      ],
    });
    const result = await startCli(["validate", "-f", file]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("ceiling 30m (spec), stall 10m (default), killGrace 10s (default)");
    expect(result.stdout).toContain("task build: timeout 10m (task), stall 2m (task)");
    expect(result.stdout).toContain("task test: no timeout of its own, stall 10m (default)");
  });

  it("shows each task's image: its own, else spec.image, else the runner image", async () => {
    const plain = await startCli(["validate", "-f", manifest({ tasks: [{ name: "a", run: "true" }] })]);
    expect(plain.stdout).toMatch(/task a: .*, image the runner image\n/);
    const file = manifest({
      image: "registry.example/tools:3",
      tasks: [
        { name: "dump", run: "pg_dump", image: "postgres:16" },
        { name: "check", run: "true" },
      ],
    });
    const result = await startCli(["validate", "-f", file]);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/task dump: .*, image postgres:16\n/);
    expect(result.stdout).toMatch(/task check: .*, image registry\.example\/tools:3\n/);
  });

  it("shows each task's shell and where it came from", async () => {
    const file = manifest({
      shell: "bash -eo pipefail",
      tasks: [
        { name: "dump", run: "pg_dump | gzip > x" },
        { name: "legacy", run: "true", shell: "sh" },
      ],
    });
    const result = await startCli(["validate", "-f", file]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("task dump: no timeout of its own");
    expect(result.stdout).toMatch(/task dump: .*, shell bash -eo pipefail -c \(spec\), /);
    expect(result.stdout).toMatch(/task legacy: .*, shell sh -c \(task\), /);
    const plain = await startCli(["validate", "-f", manifest({ tasks: [{ name: "a", run: "true" }] })]);
    expect(plain.stdout).toMatch(/task a: .*, shell sh -c \(default\), /);
  });

  it.each([["run"], ["validate"], ["pod-runner"]])("prints help for %s", async (command) => {
    const result = await startCli([command, "--help"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`Usage: playbook ${command}`);
  });

  it("says in run's help how a task's shell and working directory are chosen, here and in a pod", async () => {
    const result = await startCli(["run", "--help"]);
    expect(result.stdout).toContain("shell: bash -eo pipefail");
    expect(result.stdout).toContain("Without one: sh -c RUN");
    expect(result.stdout).toContain("on this machine: the directory playbook run was started in");
    expect(result.stdout).toContain("in a task's image and in a pod: /workspace");
  });

  it("prints its version", async () => {
    const result = await startCli(["--version"]);
    expect(result.code).toBe(0);
    const pkg = JSON.parse(readFileSync(join(import.meta.dirname, "../../package.json"), "utf8"));
    expect(result.stdout.trim()).toBe(pkg.version);
  });
});
