// What the fault tests share: `playbook controller` as a process whose log and /metrics are read
// back, a seeded random source (the seed is printed on failure so a run can be replayed), and
// the Playbooks a fault run mixes: ones that succeed, time out and stall under short limits.
import type { ChildProcess } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { killAndWaitGone, processesWithEnv } from "../support/processes.js";
import { spawnControllerProcess } from "./support.js";

/** mulberry32: small, fast and the same sequence for the same seed on every machine. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The seed from FAULTS_SEED, or the given default, so a failing run can be replayed exactly. */
export function faultSeed(fallback: number): number {
  const raw = process.env.FAULTS_SEED;
  return raw === undefined || raw === "" ? fallback : Number.parseInt(raw, 10);
}

export type RunKind = "succeeds" | "timesOut" | "stalls";

export const expectedReason: Record<RunKind, string> = {
  succeeds: "Succeeded",
  timesOut: "TaskTimeout",
  stalls: "StallLimit",
};

/**
 * A Playbook spec of the given kind with short limits (3s by default; a succeeding task works up
 * to 2s, or exactly `seconds` when given). Every task process carries FAULT_MARK in its
 * environment, so a leftover can be found through /proc after the run.
 */
export function faultSpec(
  kind: RunKind,
  mark: string,
  random: () => number,
  seconds?: number,
): Record<string, unknown> {
  const env = [{ name: "FAULT_MARK", value: mark }];
  const limit = `${seconds ?? 3}s`;
  const sleepFor = seconds === undefined ? 30 : seconds * 2 + 30;
  switch (kind) {
    case "succeeds":
      return {
        ceiling: "2m",
        killGrace: "1s",
        tasks: [
          { name: "work", run: `echo working; sleep ${seconds ?? Math.floor(random() * 3)}; echo done`, env },
        ],
      };
    case "timesOut":
      return {
        ceiling: "2m",
        killGrace: "1s",
        tasks: [{ name: "work", run: `echo working; sleep ${sleepFor}`, timeout: limit, env }],
      };
    case "stalls":
      return {
        ceiling: "2m",
        killGrace: "1s",
        tasks: [{ name: "work", run: `echo working; sleep ${sleepFor}`, stall: limit, env }],
      };
  }
}

const logLineSchema = z.object({
  msg: z.string(),
  namespace: z.string().optional(),
  name: z.string().optional(),
  phase: z.string().optional(),
  reason: z.string().optional(),
});
export type ControllerLogLine = z.infer<typeof logLineSchema>;

export interface ControllerProcess {
  child: ChildProcess;
  pid: number;
  url: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Everything it printed so far (JSON log lines at info). */
  output(): string;
  /** Its log lines that parse as the controller's JSON log. */
  logLines(): ControllerLogLine[];
}

/** Spawns `playbook controller` against the cluster in `kubeconfig`, logging JSON at info. */
export function spawnFaultController(options: {
  kubeconfig: string;
  port: number;
  args: string[];
}): ControllerProcess {
  const { child, output } = spawnControllerProcess(
    ["--metrics-address", `127.0.0.1:${options.port}`, ...options.args],
    { KUBECONFIG: options.kubeconfig, PLAYBOOK_LOG_LEVEL: "info", PLAYBOOK_LOG_FORMAT: "json" },
  );
  if (child.pid === undefined) throw new Error("playbook controller did not start");
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    pid: child.pid,
    url: `http://127.0.0.1:${options.port}`,
    exited,
    output,
    logLines: () =>
      output()
        .split("\n")
        .flatMap((line) => {
          if (!line.startsWith("{")) return [];
          try {
            const parsed = logLineSchema.safeParse(JSON.parse(line));
            return parsed.success ? [parsed.data] : [];
          } catch {
            // A line cut by SIGKILL.
            return [];
          }
        }),
  };
}

/** The terminal status writes a controller logged ("Updated Playbook status" with a final phase). */
export function terminalWrites(lines: ControllerLogLine[], namespace: string): ControllerLogLine[] {
  return lines.filter(
    (line) =>
      line.msg === "Updated Playbook status" &&
      line.namespace === namespace &&
      line.phase !== undefined &&
      !["Pending", "Running"].includes(line.phase),
  );
}

/** The value of one sample in a Prometheus text exposition, or 0 when it is absent. */
export function sample(metrics: string, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of metrics.split("\n")) {
    if (!line.startsWith(name)) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const present = (match[2] ?? "").split(",");
    if (wanted.every((pair) => present.includes(pair))) return Number(match[3]);
  }
  return 0;
}

/**
 * The runs' task processes (FAULT_MARK in their environment) still alive once up to 30s have
 * passed: the runner kills what it started, so none may stay. The count is printed for the
 * closing note; any found are killed so that one failure does not leak into the next test.
 */
export async function leftoverTaskProcesses(mark: string, label: string): Promise<number[]> {
  const deadline = Date.now() + 30_000;
  let left = processesWithEnv("FAULT_MARK", mark);
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(200);
    left = processesWithEnv("FAULT_MARK", mark);
  }
  process.stderr.write(`[faults] ${label}: task processes left behind: ${left.length}\n`);
  if (left.length > 0) await killAndWaitGone(left).catch(() => {});
  return left;
}
