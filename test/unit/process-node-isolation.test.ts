import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import {
  detectIsolation,
  type Isolation,
  startContainerProcess,
} from "../harness/process-node/container-process.js";

function withMarker(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(marker)) found.push(Number(entry));
    } catch {
      // Exited meanwhile.
    }
  }
  return found;
}

function start(isolation: Isolation, script: string) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "container-process-"));
  return startContainerProcess({
    argv: ["/bin/sh", "-c", script],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    cwd: dir,
    logFile: path.join(dir, "log"),
    cookie: randomBytes(8).toString("hex"),
    isolation,
  });
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
    await waitUntil(() => withMarker(marker).length === 0);
  });

  it("delivers SIGTERM to a main process that handles it", async () => {
    const container = start(isolation, "trap 'exit 7' TERM; while true; do sleep 0.05; done");
    await waitUntil(() => container.mainPid() !== undefined);
    await sleep(100);
    container.signal("SIGTERM");
    expect(await container.exited).toEqual({ exitCode: 7 });
  });

  it("reports SIGKILL as exit code 137 and signal 9", async () => {
    const marker = `marker-${randomBytes(6).toString("hex")}`;
    const container = start(isolation, `sh -c 'sleep 300' ${marker} & while true; do sleep 0.05; done`);
    await waitUntil(() => container.mainPid() !== undefined && withMarker(marker).length > 0);
    container.signal("SIGKILL");
    expect(await container.exited).toEqual({ exitCode: 137, signal: 9 });
    await waitUntil(() => withMarker(marker).length === 0);
  });
});
