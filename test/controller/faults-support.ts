// What the fault tests share: `playbook controller` as a process whose log and /metrics are read
// back, and a seeded random source (the seed is printed, and settable by FAULTS_SEED, so a run can
// be replayed). The runs' pods are on the scripted node: how and when each ends is the seed's
// script (scripted-runs.ts), not a real process's timing.
import type { ChildProcess } from "node:child_process";
import type { CoreV1Api, V1Pod } from "@kubernetes/client-node";
import { z } from "zod";
import { losePodToGc, scheduledPod, startPod } from "../harness/scripted-node.js";
import { ENDINGS, type Ending, endRun } from "./scripted-runs.js";
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

/** A pick from `from`, drawn from the seeded source. */
export function pick<T>(random: () => number, from: readonly T[]): T {
  return from[Math.floor(random() * from.length)] as T;
}

/**
 * One run's script: how it ends and whether its first pod is lost first (taken by PodGC, as when
 * its node is gone), which legitimately costs it an attempt: its second pod then ends as scripted.
 */
export interface RunScript {
  name: string;
  ending: Ending;
  lostFirst: boolean;
}

/** `count` run scripts named `prefix-NN`, drawn from the seed; a lost first pod with `lostShare`. */
export function drawRuns(random: () => number, prefix: string, count: number, lostShare = 0): RunScript[] {
  return Array.from({ length: count }, (_, i) => ({
    name: `${prefix}-${String(i).padStart(3, "0")}`,
    ending: pick(random, ENDINGS),
    lostFirst: random() < lostShare,
  }));
}

/** The attempts a run's script makes it take: 2 when its first pod is lost, else 1. */
export const scriptedAttempts = (run: RunScript) => (run.lostFirst ? 2 : 1);

/**
 * Plays one run's pod life to its end: the pod starts, then (its first pod lost) the second pod
 * starts, then the last pod ends as scripted. Waits for each pod to be bound first.
 */
export async function playRun(core: CoreV1Api, namespace: string, run: RunScript): Promise<void> {
  const first = await startPod(core, await scheduledPod(core, namespace, `${run.name}-1`));
  let last: V1Pod = first;
  if (run.lostFirst) {
    await losePodToGc(core, first);
    last = await startPod(core, await scheduledPod(core, namespace, `${run.name}-2`));
  }
  await endRun(core, last, run.ending);
}

const END_EVENTS = new Set(["RunSucceeded", "RunFailed", "RunCancelled"]);

/**
 * How many times `kubectl describe playbook` says each run in the namespace finished: the counts
 * of its RunSucceeded, RunFailed and RunCancelled events, by Playbook name.
 */
export async function runEndEvents(core: CoreV1Api, namespace: string): Promise<Map<string, number>> {
  const events = await core.listNamespacedEvent({ namespace, fieldSelector: "involvedObject.kind=Playbook" });
  const ends = new Map<string, number>();
  for (const event of events.items) {
    if (!END_EVENTS.has(event.reason ?? "")) continue;
    const name = event.involvedObject.name ?? "";
    ends.set(name, (ends.get(name) ?? 0) + (event.count ?? 1));
  }
  return ends;
}
