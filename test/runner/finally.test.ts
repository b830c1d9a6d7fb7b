import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { decodeReport, encodeReport } from "../../src/api/report.js";
import { expandReport } from "../../src/api/report-expand.js";
import { tasksOfPlaybook } from "../../src/cli/cluster/run-logs.js";
import { Progress } from "../../src/cli/progress.js";
import { ProgressLineReader } from "../../src/cli/progress-lines.js";
import type { RunEvent } from "../../src/pod-runner/run.js";
import { POD_PLAN_DEFAULTS, spawnPodRunner, startCli, terminationLog } from "../support/cli.js";
import { checkNothingLeftBehind, MARKER_VAR, runSpec, type TestRun } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();

const tellOutcome = 'echo "outcome=$PLAYBOOK_OUTCOME failed=$PLAYBOOK_FAILED_TASK"';

/** The report the runner would write, read back as the controller and `-o json` read it. */
function readBack(spec: unknown, run: TestRun) {
  const parsed = PlaybookSpecSchema.parse(spec);
  const report = decodeReport(encodeReport(run.outcome), parsed.tasks.length, parsed.finally?.length ?? 0);
  return expandReport(report, resolveLimits(parsed, LOCAL_DEFAULTS));
}

describe("finally tasks", () => {
  it("run after a failed main task, in order, each whatever the one before did, told the outcome", async () => {
    const spec = {
      killGrace: "1s",
      tasks: [
        { name: "work", run: "echo working; exit 3" },
        { name: "never", run: "echo never" },
      ],
      finally: [
        { name: "unlock", run: tellOutcome },
        { name: "page", run: "echo paging; exit 2" },
        { name: "last", run: "echo last" },
      ],
    };
    const run = await runSpec(spec, { marker: currentMarker() });
    expect(run.outcome.reason).toBe("TaskFailed");
    expect(run.outcome.tasks.map((task) => task.phase)).toEqual(["Failed", "Skipped"]);
    expect(run.outcome.finally?.map((task) => task.phase)).toEqual(["Succeeded", "Failed", "Succeeded"]);
    expect(run.output).toContain("[unlock] outcome=TaskFailed failed=work\n");
    expect(run.output).not.toContain("never");
    // The finally tasks start after the main task ended, in order.
    const order = run.events
      .filter((event) => event.type === "task-started")
      .map((event) => (event.type === "task-started" ? `${event.index}:${event.name}` : ""));
    expect(order).toEqual(["0:work", "2:unlock", "3:page", "4:last"]);

    const status = readBack(spec, run);
    expect(status.reason).toBe("TaskFailed");
    expect(status.message).toBe(
      'task work exited with code 3 (stdout: "working"); finally task page exited with code 2 (stdout: "paging")',
    );
    expect(status.finally?.map((task) => [task.name, task.phase])).toEqual([
      ["unlock", "Succeeded"],
      ["page", "Failed"],
      ["last", "Succeeded"],
    ]);
  });

  it("turn a success into TaskFailed when one of them fails, naming it", async () => {
    const spec = {
      tasks: [{ name: "work", run: "true" }],
      finally: [
        { name: "report", run: tellOutcome },
        { name: "release", run: "echo lock busy >&2; exit 4" },
      ],
    };
    const run = await runSpec(spec, { marker: currentMarker() });
    expect(run.output).toContain("[report] outcome=Succeeded failed=\n");
    expect(run.outcome.reason).toBe("TaskFailed");
    expect(run.outcome.phase).toBe("Failed");
    const status = readBack(spec, run);
    expect(status.message).toBe(
      'finally task release exited with code 4 (stderr: "lock busy"); the task succeeded',
    );
  });

  it("run after the run's ceiling, which does not bound them, and keep the main tasks' reason", async () => {
    const spec = {
      ceiling: "1s",
      killGrace: "0s",
      tasks: [{ name: "slow", run: "sleep 30" }],
      // Past the run's ceiling by a second and more: only their own ceiling bounds them.
      finally: [{ name: "cleanup", run: `${tellOutcome}; sleep 1.5; echo cleaned` }],
    };
    const run = await runSpec(spec, { marker: currentMarker() });
    expect(run.outcome.reason).toBe("RunCeiling");
    expect(run.outcome.finally?.[0]).toMatchObject({ phase: "Succeeded", exitCode: 0 });
    expect(run.output).toContain("[cleanup] outcome=RunCeiling failed=slow\n");
    expect(run.output).toContain("[cleanup] cleaned\n");
  });

  it("end at their own ceiling: the running one TimedOut by FinallyCeiling, the rest Skipped", async () => {
    const spec = {
      killGrace: "0s",
      finallyCeiling: "1s",
      tasks: [{ name: "work", run: "true" }],
      finally: [
        { name: "quick", timeout: "300ms", run: "sleep 30" },
        { name: "slow", run: "sleep 30" },
        { name: "after", run: "echo after" },
      ],
    };
    const run = await runSpec(spec, { marker: currentMarker() });
    expect(run.outcome.finally?.map((task) => [task.phase, task.limit])).toEqual([
      ["TimedOut", "TaskTimeout"],
      ["TimedOut", "FinallyCeiling"],
      ["Skipped", undefined],
    ]);
    expect(run.output).not.toContain("after");
    // Within the finally ceiling and its kill, whatever the tasks wanted.
    expect(run.elapsedMs).toBeLessThan(10_000);
    const status = readBack(spec, run);
    expect(status.reason).toBe("TaskFailed");
    expect(status.finally?.[1]).toMatchObject({
      limit: "FinallyCeiling",
      limitValue: "1s",
      limitSource: "spec",
      message: "was stopped by the 1s finally ceiling (spec.finallyCeiling); process group killed at once",
    });
    expect(status.finally?.[2]?.message).toBe(
      "not started: the finally window 1s (spec.finallyCeiling) had passed",
    );
  });

  it("that the finally window left no time to start are Skipped, never run, saying why", async () => {
    // The first one's timeout fires inside the window, and its grace (it ignores SIGTERM) runs
    // past the window's end: the next ones find the window passed and do not start. A slower
    // machine only ends the grace later.
    const spec = {
      killGrace: "2s",
      finallyCeiling: "1s",
      tasks: [{ name: "work", run: "true" }],
      finally: [
        { name: "deaf", timeout: "300ms", run: "trap '' TERM; sleep 30" },
        { name: "release", run: "echo release" },
        { name: "page", run: "echo page" },
      ],
    };
    const run = await runSpec(spec, { marker: currentMarker() });
    expect(run.outcome.finally?.[0]?.phase).toBe("TimedOut");
    for (const task of run.outcome.finally?.slice(1) ?? []) {
      expect(task).toMatchObject({ phase: "Skipped", attempts: 0 });
      expect(task.limit).toBeUndefined();
    }
    expect(run.output).not.toContain("[release]");
    expect(run.output).not.toContain("[page]");
    const started = run.events.filter((event) => event.type === "task-started").map((event) => event.index);
    expect(started).toEqual([0, 1]);
    const status = readBack(spec, run);
    expect(status.reason).toBe("TaskFailed");
    for (const task of status.finally?.slice(1) ?? []) {
      expect(task).toEqual({
        name: task.name,
        phase: "Skipped",
        attempts: 0,
        message: "not started: the finally window 1s (spec.finallyCeiling) had passed",
      });
    }
  });

  it("start only once what the main tasks left running is gone", async () => {
    const dir = mkdtempSync(join(tmpdir(), "finally-leftover-"));
    const spec = {
      killGrace: "1s",
      tasks: [
        // A daemon that left the task's session, and the task fails.
        { name: "work", run: `setsid sleep 300 & echo $! > ${dir}/pid; exit 1` },
      ],
      // Gone: no such process, or a zombie (dead, not yet reaped by whoever adopted it).
      finally: [
        {
          name: "check",
          run: `state=$(cut -d' ' -f3 /proc/"$(cat ${dir}/pid)"/stat 2>/dev/null); if [ -n "$state" ] && [ "$state" != Z ]; then echo alive; else echo gone; fi`,
        },
      ],
    };
    const run = await runSpec(spec, { marker: currentMarker() });
    expect(run.output).toContain("[check] gone\n");
    expect(run.events.some((event) => event.type === "leftovers-swept")).toBe(true);
  });

  it("run after a cancel, and a cancel once they began ends them", async () => {
    const cancel = new AbortController();
    const finallyCancel = new AbortController();
    const spec = {
      killGrace: "1s",
      tasks: [{ name: "work", run: "echo up; sleep 30" }],
      finally: [
        { name: "cleanup", run: `${tellOutcome}; echo cleaning; sleep 30` },
        { name: "after", run: "echo after" },
      ],
    };
    const run = await runSpec(spec, {
      marker: currentMarker(),
      cancelSignal: cancel.signal,
      finallyCancelSignal: finallyCancel.signal,
      onOutput: (soFar) => {
        if (soFar.includes("[work] up\n")) cancel.abort();
        if (soFar.includes("[cleanup] cleaning\n")) finallyCancel.abort();
      },
    });
    expect(run.output).toContain("[cleanup] outcome=Cancelled failed=work\n");
    expect(run.outcome.reason).toBe("Cancelled");
    expect(run.outcome.tasks[0]?.phase).toBe("Cancelled");
    expect(run.outcome.finally?.map((task) => task.phase)).toEqual(["Cancelled", "Skipped"]);
    expect(run.output).not.toContain("after");
  });

  it("do not run when the run was cancelled before its first task: there is nothing to clean up", async () => {
    const cancel = new AbortController();
    cancel.abort();
    const run = await runSpec(
      { tasks: [{ name: "work", run: "echo work" }], finally: [{ name: "cleanup", run: "echo cleanup" }] },
      { marker: currentMarker(), cancelSignal: cancel.signal },
    );
    expect(run.outcome.reason).toBe("Cancelled");
    expect(run.outcome.finally?.[0]?.phase).toBe("Skipped");
    expect(run.output).toBe("");
  });
});

describe("finally tasks' progress lines", () => {
  it("read back into the events they came from (submit --watch), and print the same lines again", async () => {
    const spec = {
      killGrace: "0s",
      finallyCeiling: "2m",
      tasks: [{ name: "work", run: "exit 1" }],
      finally: [{ name: "clean", timeout: "1m", stall: "20s", run: "true" }],
    };
    const parsed = PlaybookSpecSchema.parse(spec);
    const limits = resolveLimits(parsed, LOCAL_DEFAULTS);
    const run = await runSpec(spec, { marker: currentMarker() });
    const print = (events: RunEvent[]) => {
      let text = "";
      const out = new Writable({
        write(chunk: Buffer, _encoding, callback) {
          text += chunk.toString();
          callback();
        },
      });
      const progress = new Progress({ out, tty: false, limits, outputBytes: () => 0 });
      progress.begin("ns/pb", 1);
      for (const event of events) progress.event(event, 0);
      return text;
    };
    const shown = run.events.filter((event) => event.type !== "containment");
    const first = print(shown);
    expect(first).toContain(
      "playbook: the main tasks ended (TaskFailed: work); running 1 finally task within finallyCeiling 2m (spec)\n",
    );
    expect(first).toContain(
      "playbook: task clean started (timeout 1m (task), stall 20s (task), finallyCeiling 2m (spec))\n",
    );
    const reader = new ProgressLineReader(tasksOfPlaybook({ spec } as never));
    const read = first
      .trimEnd()
      .split("\n")
      .map((line) => reader.read(line))
      .flatMap((line) => (line.kind === "event" ? [line.event] : []));
    expect(read.map((event) => event.type)).toEqual(shown.map((event) => event.type));
    expect(read.find((event) => event.type === "finally-started")).toEqual(
      shown.find((event) => event.type === "finally-started"),
    );
    // The started line says the task's limits, not its retry waits (those stay the runner's).
    const started = shown.find((event) => event.type === "task-started" && event.index === 1);
    if (started?.type !== "task-started") throw new Error("no started event of the finally task");
    const { retryWaits: _waits, ...shownLimits } = started.limits;
    expect(read.find((event) => event.type === "task-started" && event.index === 1)).toEqual({
      ...started,
      limits: shownLimits,
    });
    expect(print(read)).toBe(first);
  });
});

/** A Playbook manifest with finally tasks, in a file of its own. */
function finallyManifest(killGrace: string, work: string, unlock: string): string {
  const file = join(mkdtempSync(join(tmpdir(), "finally-cli-")), "pb.yaml");
  const quote = (run: string) => `'${run.replaceAll("'", "''")}'`;
  writeFileSync(
    file,
    [
      "apiVersion: playbook.dev/v1alpha1",
      "kind: Playbook",
      "metadata: {name: cleanup}",
      "spec:",
      `  killGrace: ${killGrace}`,
      "  tasks:",
      `    - {name: work, run: ${quote(work)}}`,
      "  finally:",
      `    - {name: unlock, run: ${quote(unlock)}}`,
      "    - {name: after, run: 'echo after'}",
      "",
    ].join("\n"),
  );
  return file;
}

/** Sends SIGINT once each of `cues` shows on stderr, in order: deterministic, not timed. */
function interruptOn(cues: readonly string[]) {
  return (child: ChildProcess) => {
    let seen = "";
    let next = 0;
    child.stderr?.on("data", (chunk: Buffer) => {
      seen += chunk.toString();
      while (next < cues.length && seen.includes(cues[next] as string)) {
        next += 1;
        child.kill("SIGINT");
      }
    });
  };
}

interface ShownRun {
  status: {
    tasks: { phase: string; ending?: string; message?: string }[];
    finally: { name: string; phase: string; ending?: string; message?: string }[];
  };
}

// A task that says it got its SIGTERM and holds on: only a SIGKILL ends it.
const holdOn = (name: string) =>
  `trap 'echo ${name} got TERM' TERM; echo ${name} up; while :; do sleep 0.1; done`;

describe("playbook run with finally tasks: each Ctrl-C acts on what runs then", () => {
  it("during a main task's grace a second Ctrl-C cuts that grace, and the finally tasks still run", async () => {
    const file = finallyManifest("5m", holdOn("work"), `${tellOutcome}; echo cleaned`);
    const result = await startCli(["run", "-f", file, "-o", "json"], {
      env: { [MARKER_VAR]: currentMarker() },
      onSpawn: interruptOn(["[work] work up\n", "[work] work got TERM\n"]),
    });
    expect(result.code).toBe(130);
    expect(result.stderr).toContain(
      "playbook: received SIGINT; cancelling the run; the finally tasks still run (again to kill the live task without waiting for the grace)",
    );
    expect(result.stderr).toContain(
      "playbook: received SIGINT again; killing the live task without waiting for the grace; the finally tasks still run (again, once they run, to cancel them)",
    );
    expect(result.stderr).toContain("[unlock] outcome=Cancelled failed=work\n");
    expect(result.stderr).toContain("[unlock] cleaned\n");
    expect(result.stderr).toContain("[after] after\n");
    const shown = JSON.parse(result.stdout) as ShownRun;
    expect(shown.status.tasks[0]).toMatchObject({ phase: "Cancelled", ending: "Killed" });
    expect(shown.status.tasks[0]?.message).toMatch(
      /killed (at once|after [\d.]+s): another interrupt cut its 5m grace short/,
    );
    expect(shown.status.finally.map((task) => [task.name, task.phase])).toEqual([
      ["unlock", "Succeeded"],
      ["after", "Succeeded"],
    ]);
  });

  it("during a finally task Ctrl-C cancels it with its own grace, and one more kills it at once", async () => {
    const file = finallyManifest("5m", "echo work up; sleep 300", `${tellOutcome}; ${holdOn("unlock")}`);
    const result = await startCli(["run", "-f", file, "-o", "json"], {
      env: { [MARKER_VAR]: currentMarker() },
      onSpawn: interruptOn(["[work] work up\n", "[unlock] unlock up\n", "[unlock] unlock got TERM\n"]),
    });
    expect(result.code).toBe(130);
    expect(result.stderr).toContain("[unlock] outcome=Cancelled failed=work\n");
    expect(result.stderr).toContain(
      "playbook: received SIGINT again; cancelling the finally task unlock: it gets its grace to stop (again to kill it at once)",
    );
    expect(result.stderr).toContain(
      "playbook: received SIGINT again; killing the finally task unlock without waiting for the grace",
    );
    expect(result.stderr).toContain("playbook: finally tasks skipped: after");
    const shown = JSON.parse(result.stdout) as ShownRun;
    expect(shown.status.tasks.map((task) => task.phase)).toEqual(["Cancelled"]);
    expect(shown.status.finally.map((task) => [task.name, task.phase])).toEqual([
      ["unlock", "Cancelled"],
      ["after", "Skipped"],
    ]);
    expect(shown.status.finally[0]).toMatchObject({ ending: "Killed" });
    expect(shown.status.finally[0]?.message).toMatch(/another interrupt cut its 5m grace short/);
  });

  it("a first Ctrl-C during a finally task cancels that task, and the run is Cancelled", async () => {
    const file = finallyManifest("1s", "echo work done", holdOn("unlock"));
    const result = await startCli(["run", "-f", file, "-o", "json"], {
      env: { [MARKER_VAR]: currentMarker() },
      onSpawn: interruptOn(["[unlock] unlock up\n"]),
    });
    expect(result.code).toBe(130);
    expect(result.stderr).toContain(
      "playbook: received SIGINT; cancelling the finally task unlock: it gets its grace to stop (again to kill it at once)",
    );
    expect(result.stderr).toContain("[unlock] unlock got TERM\n");
    const shown = JSON.parse(result.stdout) as ShownRun;
    expect(shown.status.tasks.map((task) => task.phase)).toEqual(["Succeeded"]);
    expect(shown.status.finally.map((task) => [task.name, task.phase])).toEqual([
      ["unlock", "Cancelled"],
      ["after", "Skipped"],
    ]);
  });
});

describe("a pod's runner stopped by SIGTERM (Kueue's preemption, a deletion)", () => {
  // What a pod Kueue preempts gets: one SIGTERM, then SIGKILL after terminationGracePeriodSeconds
  // (killGrace + finallyCeiling + killGrace + 5 s, pod-builder.ts). The finally tasks run as after a
  // cancel, told so, and only within finallyCeiling: the pod gives its quota back on time.
  it("cancels the main tasks, runs the finally tasks told Cancelled, and ends one at finallyCeiling however it holds on", async () => {
    const log = terminationLog("finally-pod-");
    const plan = {
      name: "nightly",
      runStartTime: new Date().toISOString(),
      defaults: POD_PLAN_DEFAULTS,
      spec: {
        killGrace: "1s",
        finallyCeiling: "2s",
        tasks: [{ name: "work", run: "echo up; sleep 300" }],
        finally: [
          // A cleanup that would hold the preempted pod (and its quota) for five minutes, deaf to SIGTERM.
          { name: "unlock", run: `${tellOutcome}; trap '' TERM; echo holding; sleep 300` },
          { name: "after", run: "echo after" },
        ],
      },
    };
    const child = spawnPodRunner(log, plan, { [MARKER_VAR]: currentMarker() });
    let stdout = "";
    let signalledAt = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      const before = stdout;
      stdout += chunk.toString();
      // The one SIGTERM of the pod's deletion, once the main task is up: deterministic, not timed.
      if (!before.includes("[work] up\n") && stdout.includes("[work] up\n")) {
        signalledAt = performance.now();
        child.kill("SIGTERM");
      }
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    const took = performance.now() - signalledAt;
    expect(signalledAt).toBeGreaterThan(0);
    expect(code).toBe(130);
    expect(stdout).toContain("[unlock] outcome=Cancelled failed=work\n");
    expect(stdout).toContain("[unlock] holding\n");
    expect(stdout).not.toContain("[after] after");
    const report = decodeReport(readFileSync(log, "utf8"), 1, 2);
    expect(report).toMatchObject({ phase: "Cancelled", reason: "Cancelled" });
    expect(report.tasks[0]).toMatchObject({ p: "Cancelled" });
    expect(report.fin?.map((task) => [task.p, task.l])).toEqual([
      ["TimedOut", "FinallyCeiling"],
      ["Skipped", undefined],
    ]);
    // killGrace 1s + finallyCeiling 2s + killGrace 1s, far inside the pod's 9 s grace (and its 300 s sleep):
    // a bound on the clock's side only, never a minimum, so a loaded machine cannot fail it early.
    expect(took).toBeLessThan(9_000);
  });
});
