// The whole tree ends with the task: grandchildren that hold the pipes, and processes that left
// the group, are killed; what a finished task left running is ended when the run ends.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { killLookDelay } from "../../src/pod-runner/process-table.js";
import { checkNothingLeftBehind, MARKER_VAR, runSpec } from "../support/runner.js";

const CLI = join(import.meta.dirname, "../../dist/src/cli/main.js");
/** A private pid namespace whose pid counter a test may set (root only). */
const canSetPids =
  process.getuid?.() === 0 &&
  spawnSync("unshare", [
    "--pid",
    "--fork",
    "--mount-proc",
    "sh",
    "-c",
    "echo 1 > /proc/sys/kernel/ns_last_pid",
  ]).status === 0;

const currentMarker = checkNothingLeftBehind();

describe("process trees", () => {
  it("kills a grandchild that holds the output pipe and returns at the deadline", async () => {
    const run = await runSpec(
      {
        killGrace: "0s",
        tasks: [
          {
            name: "holder",
            timeout: "1s",
            run: "(trap '' TERM HUP; sleep 60; echo late) & echo started; sleep 60",
          },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", limit: "TaskTimeout", ending: "Killed" });
    expect(run.elapsedMs).toBeLessThan(3000);
    expect(run.output).toContain("[holder] started");
    expect(run.output).not.toContain("late");
  });

  it("finds and kills a process that escaped into its own session (setsid)", async () => {
    const run = await runSpec(
      {
        killGrace: "200ms",
        tasks: [
          {
            name: "escaper",
            timeout: "800ms",
            run: "setsid sh -c 'trap \"\" TERM; sleep 60' & setsid -f sleep 61; sleep 60",
          },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "TimedOut", ending: "Killed" });
    // afterEach proves neither setsid'd sleep survived.
  });

  it("does not wait for a background process a finished task left behind, and ends it with the run", async () => {
    const run = await runSpec(
      {
        killGrace: "1s",
        tasks: [
          { name: "service", run: "sleep 60 & echo service up" },
          { name: "uses-it", run: "echo using the service" },
        ],
      },
      { marker: currentMarker() },
    );
    expect(run.outcome.tasks.map((t) => t.phase)).toEqual(["Succeeded", "Succeeded"]);
    expect(run.output).toContain("[uses-it] using the service");
    expect(run.elapsedMs).toBeLessThan(5000);
    expect(run.events.some((e) => e.type === "leftovers-swept")).toBe(true);
  });

  it("kills leftovers at once on a second Ctrl-C instead of waiting out their grace", async () => {
    // The second Ctrl-C comes once the leftover says it got its SIGTERM: inside its grace.
    const hurry = new AbortController();
    const run = await runSpec(
      {
        killGrace: "30s",
        tasks: [
          { name: "service", run: "(trap 'echo got TERM' TERM; while :; do sleep 0.1; done) & echo up" },
        ],
      },
      {
        marker: currentMarker(),
        hurrySignal: hurry.signal,
        onOutput: (soFar) => soFar.includes("[service] got TERM") && hurry.abort(),
      },
    );
    expect(run.outcome.tasks[0]).toMatchObject({ phase: "Succeeded" });
    expect(hurry.signal.aborted).toBe(true);
    expect(run.elapsedMs).toBeLessThan(10_000);
  });

  // Skipped only where it cannot run: setting a pid namespace's counter needs root and unshare.
  it.skipIf(!canSetPids)(
    "ends a leftover whose pid is lower than the run's first after the pids wrapped",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "wrap-"));
      const leftover = join(dir, "leftover");
      const file = join(dir, "playbook.yaml");
      // The run starts near pid 20000; the task then makes the counter wrap (as a busy machine with
      // pid_max 32768 does) to leave a process at a low pid, and climb back above the run's first.
      const task = [
        "echo 100 > /proc/sys/kernel/ns_last_pid",
        `setsid sleep 60 >/dev/null 2>&1 & echo $! > ${leftover}`,
        "echo 25000 > /proc/sys/kernel/ns_last_pid",
        "sh -c true",
      ].join("; ");
      writeFileSync(
        file,
        stringify({
          apiVersion: "playbook.dev/v1alpha1",
          kind: "Playbook",
          metadata: { name: "wrap" },
          spec: { killGrace: "0s", tasks: [{ name: "wrapper", run: task }] },
        }),
      );
      // The namespace's init (sh) outlives the runner to say whether the leftover did too.
      const script = `echo 20000 > /proc/sys/kernel/ns_last_pid; "$NODE" "$CLI" run -f "$FILE" >/dev/null 2>&1; if kill -0 "$(cat ${leftover})" 2>/dev/null; then echo alive; else echo gone; fi`;
      const child = spawn("unshare", ["--pid", "--fork", "--mount-proc", "sh", "-c", script], {
        env: {
          PATH: process.env.PATH,
          NODE: process.execPath,
          CLI,
          FILE: file,
          [MARKER_VAR]: currentMarker(),
        },
        stdio: ["ignore", "pipe", "inherit"],
      });
      let stdout = "";
      child.stdout.on("data", (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      await new Promise((resolve) => child.on("close", resolve));
      expect(stdout.trim()).toBe("gone");
    },
  );
});

describe("the kill path's looks for survivors", () => {
  it("back off exponentially to a cap while they keep finding what SIGKILL cannot end", () => {
    expect([0, 1, 2, 3, 4, 5, 6, 7, 30].map(killLookDelay)).toEqual([2, 4, 8, 16, 32, 64, 128, 128, 128]);
    // The kill path's 5s bound then takes a few dozen looks, not 2500.
    let waited = 0;
    let looks = 0;
    while (waited < 5000) waited += killLookDelay(looks++);
    expect(looks).toBeLessThan(50);
  });
});
