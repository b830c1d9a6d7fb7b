import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, existsSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import {
  detectIsolation,
  type Isolation,
  startContainerProcess,
} from "../harness/process-node/container-process.js";
import { processesWithMarker, zombiesNamed } from "../support/processes.js";

const started: ReturnType<typeof startContainerProcess>[] = [];
// A test that fails midway must not leave its container running.
afterEach(() => {
  for (const container of started.splice(0)) container.signal("SIGKILL");
});

/** Starts a container running `command`: a script for `sh -c`, or an argv. */
function start(isolation: Isolation, command: string | [string, ...string[]], shared = false) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "container-process-"));
  const container = startContainerProcess({
    argv: typeof command === "string" ? ["/bin/sh", "-c", command] : command,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    cwd: dir,
    logFile: path.join(dir, "log"),
    cookie: randomBytes(8).toString("hex"),
    isolation,
    sharedPidNamespace: shared,
  });
  started.push(container);
  return container;
}

async function waitUntil(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await sleep(20);
  }
}

// The PID-namespace case needs unshare to work here; the session fallback runs everywhere.
const isolations: Isolation[] =
  detectIsolation() === "pid-namespace" ? ["pid-namespace", "session"] : ["session"];

describe.each(isolations)("a container process with %s isolation", (isolation) => {
  it("reports the exit code and kills what the main process left running", async () => {
    const marker = `marker-${randomBytes(6).toString("hex")}`;
    const container = start(isolation, `sh -c 'sleep 300' ${marker} & sleep 0.2; exit 3`);
    expect(await container.exited).toEqual({ exitCode: 3 });
    await waitUntil(() => processesWithMarker(marker).length === 0);
  });

  it("delivers SIGTERM to a main process that handles it", async () => {
    // As PID 1 of its namespace the shell ignores SIGTERM until its trap is set, as a
    // container's init does: signal only once the script says the trap is in place.
    const ready = path.join(mkdtempSync(path.join(os.tmpdir(), "trap-ready-")), "ready");
    const container = start(isolation, `trap 'exit 7' TERM; touch ${ready}; while true; do sleep 0.05; done`);
    await waitUntil(() => container.mainPid() !== undefined && existsSync(ready));
    container.signal("SIGTERM");
    expect(await container.exited).toEqual({ exitCode: 7 });
  });

  it("reports SIGKILL as exit code 137, as the kubelet does", async () => {
    const marker = `marker-${randomBytes(6).toString("hex")}`;
    const container = start(isolation, `sh -c 'sleep 300' ${marker} & while true; do sleep 0.05; done`);
    await waitUntil(() => container.mainPid() !== undefined && processesWithMarker(marker).length > 0);
    container.signal("SIGKILL");
    expect(await container.exited).toEqual({ exitCode: 137 });
    await waitUntil(() => processesWithMarker(marker).length === 0);
  });

  it("reports a main process SIGKILLed from outside (as by the OOM killer) as exit code 137 and kills what it left", async () => {
    const marker = `marker-${randomBytes(6).toString("hex")}`;
    const container = start(isolation, `sh -c 'sleep 300' ${marker} & while true; do sleep 0.05; done`);
    await waitUntil(() => container.mainPid() !== undefined && processesWithMarker(marker).length > 0);
    process.kill(container.mainPid() ?? 0, "SIGKILL");
    expect(await container.exited).toEqual({ exitCode: 137 });
    await waitUntil(() => processesWithMarker(marker).length === 0);
  });
});

/**
 * A container whose main process is Node, which reaps only the children it spawned: a shell it
 * starts leaves three short-lived orphans behind, named `name`, and exits.
 */
function startOrphanMaker(isolation: Isolation, name: string, shared: boolean) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "orphans-"));
  const orphan = path.join(dir, name);
  copyFileSync(execFileSync("sh", ["-c", "command -v sleep"], { encoding: "utf8" }).trim(), orphan);
  const script = `for i in 1 2 3; do (${orphan} 0.05 &); done`;
  const main = `require("child_process").spawn("sh", ["-c", ${JSON.stringify(script)}]); setInterval(() => {}, 1000);`;
  return start(isolation, [process.execPath, "-e", main], shared);
}

describe.each(isolations)("shareProcessNamespace with %s isolation", (isolation) => {
  it("reaps what the container orphans, as the sandbox's pause does, and signals the container's process", async () => {
    const name = `orph${randomBytes(4).toString("hex")}`;
    const container = startOrphanMaker(isolation, name, true);
    await waitUntil(() => container.mainPid() !== undefined);
    await sleep(1_000);
    expect(zombiesNamed(name)).toEqual([]);
    // SIGTERM reaches Node, not the reaper: Node's default action ends it, 128 + 15.
    container.signal("SIGTERM");
    expect(await container.exited).toEqual({ exitCode: 143 });
  });
});

describe.runIf(detectIsolation() === "pid-namespace")("without shareProcessNamespace", () => {
  it("leaves orphans as zombies of a main process that does not reap, as a container's init does", async () => {
    const name = `orph${randomBytes(4).toString("hex")}`;
    const container = startOrphanMaker("pid-namespace", name, false);
    await waitUntil(() => zombiesNamed(name).length === 3);
    container.signal("SIGKILL");
    await container.exited;
    await waitUntil(() => zombiesNamed(name).length === 0);
  });
});
