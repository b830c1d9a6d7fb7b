import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import {
  detectIsolation,
  type Isolation,
  startContainerProcess,
} from "../harness/process-node/container-process.js";
import { processesWithMarker } from "../support/processes.js";

const started: ReturnType<typeof startContainerProcess>[] = [];
// A test that fails midway must not leave its container running.
afterEach(() => {
  for (const container of started.splice(0)) container.signal("SIGKILL");
});

function start(isolation: Isolation, script: string) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "container-process-"));
  const container = startContainerProcess({
    argv: ["/bin/sh", "-c", script],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    cwd: dir,
    logFile: path.join(dir, "log"),
    cookie: randomBytes(8).toString("hex"),
    isolation,
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

  it("reports SIGKILL as exit code 137 and signal 9", async () => {
    const marker = `marker-${randomBytes(6).toString("hex")}`;
    const container = start(isolation, `sh -c 'sleep 300' ${marker} & while true; do sleep 0.05; done`);
    await waitUntil(() => container.mainPid() !== undefined && processesWithMarker(marker).length > 0);
    container.signal("SIGKILL");
    expect(await container.exited).toEqual({ exitCode: 137, signal: 9 });
    await waitUntil(() => processesWithMarker(marker).length === 0);
  });
});
