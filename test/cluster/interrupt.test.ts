import { spawn } from "node:child_process";
import { readFileSync, readlinkSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { processesWithMarker, processesWorkingUnder } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";

/** What is still running of the run in `stateDir`: pid, command line and working folder each. */
function describeProcesses(stateDir: string): string {
  const pids = [...new Set([...processesWithMarker(stateDir), ...processesWorkingUnder(stateDir)])];
  return pids
    .map((pid) => {
      try {
        const command = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
        return `${pid} [${command}] in ${readlinkSync(`/proc/${pid}/cwd`)}`;
      } catch {
        return `${pid} (gone)`;
      }
    })
    .join("; ");
}

describe("an interrupted cluster test run", () => {
  it.each([
    ["while its global setup starts the cluster", "kube-apiserver ready", 2],
    ["while its tests run pods", "Cluster ready", 4],
  ])("leaves no control-plane, node or pod process behind after SIGINT %s", async (_when, cue, atLeast) => {
    // A nested run of one cluster file, interrupted when its log shows the cue.
    const vitest = path.join(repoRoot(), "node_modules", "vitest", "vitest.mjs");
    const child = spawn(
      process.execPath,
      [vitest, "run", "--project", "cluster", "test/cluster/process-node.test.ts"],
      // Its own process group, so the interrupt reaches it and its workers as Ctrl-C in a terminal does.
      {
        cwd: repoRoot(),
        stdio: ["ignore", "ignore", "pipe"],
        env: { ...process.env, CI: "true" },
        detached: true,
      },
    );
    const stateDir = path.join(repoRoot(), ".cluster", `test-${child.pid}`);
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    try {
      await waitFor(
        "the nested run's cluster",
        async () => (stderr.includes("Cluster ready") ? true : undefined),
        {
          timeoutMs: 90_000,
          abortIf: () => (child.exitCode !== null ? `nested vitest exited early:\n${stderr}` : undefined),
        },
      );
      expect(processesWithMarker(stateDir).length).toBeGreaterThanOrEqual(atLeast);
      if (cue === "Cluster ready") {
        await waitFor(
          "a pod process",
          async () => (processesWorkingUnder(stateDir).length > 0 ? true : undefined),
          {
            timeoutMs: 30_000,
          },
        );
      }

      process.kill(-(child.pid ?? 0), "SIGINT");
      await exited;

      await waitFor(
        "every process of the interrupted run to be gone",
        async () =>
          processesWithMarker(stateDir).length === 0 && processesWorkingUnder(stateDir).length === 0
            ? true
            : undefined,
        { timeoutMs: 15_000 },
      ).catch((error: Error) => {
        throw new Error(`${error.message}; left: ${describeProcesses(stateDir)}`);
      });
    } finally {
      try {
        process.kill(-(child.pid ?? 0), "SIGKILL");
      } catch {
        // The whole group is gone already.
      }
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});
