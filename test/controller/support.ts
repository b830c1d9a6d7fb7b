// What the controller's end-to-end tests share: a controller started in this process against the
// shared control plane (each test file its own Lease and namespaces), kubectl, and waits on what
// a user would look at — the Playbook's status, its pods and its events.
import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { CoreV1Api, CustomObjectsApi, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { type Logger, pino } from "pino";
import { inject } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { loadControllerConfig } from "../../src/controller/config.js";
import { PlaybookController } from "../../src/controller/controller.js";
import type { Clock } from "../../src/runtime/clock.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import type { PodLogSource } from "../../src/runtime/pod-log.js";
import { repoRoot } from "../harness/binaries.js";
import { runClusterTool, waitFor } from "../harness/processes.js";
import { reportFor, reportPod, scheduledPod, startPod } from "../harness/scripted-node.js";

const run = promisify(execFile);

export function clients() {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(inject("kubeconfig"));
  return {
    kubeConfig,
    core: kubeConfig.makeApiClient(CoreV1Api),
    custom: kubeConfig.makeApiClient(CustomObjectsApi),
  };
}

export interface RunningController {
  controller: PlaybookController;
  done: Promise<void>;
  identity: string;
  stop(): Promise<void>;
}

/** The configuration startController runs a controller with. */
export function testControllerConfig(
  namespaces: string[],
  overrides: Record<string, string | boolean> = {},
  identity = `test-${randomBytes(3).toString("hex")}`,
) {
  return loadControllerConfig(
    {
      namespaces: namespaces.join(","),
      metricsAddress: "127.0.0.1:0",
      // With the log archive on: no port of the shared machine's every address taken (log-api.suite.ts sets its own).
      logApiAddress: "127.0.0.1:0",
      leaderElectionNamespace: namespaces[0],
      leaderElectionId: `playbook-controller-${namespaces[0]}`,
      leaseDuration: "4s",
      renewDeadline: "3s",
      retryPeriod: "500ms",
      defaultKillGrace: "2s",
      identity,
      // A name no one pulls on the scripted node; a real node has the project's image.
      runnerImage: inject("runnerImage"),
      // Containers starting at once load a real node's machine for seconds, past a 4s Lease.
      ...(inject("nodeKind") === "real"
        ? { leaseDuration: "20s", renewDeadline: "15s", retryPeriod: "2s" }
        : {}),
      ...overrides,
    },
    {},
  );
}

/** Starts a controller in this process, watching only the given namespaces (through kubeConfig when given). */
export function startController(
  namespaces: string[],
  overrides: Record<string, string | boolean> = {},
  kubeConfig?: KubeConfig,
  /** The clock CronPlaybook schedules are read against (test/controller/cron.test.ts moves it). */
  scheduleClock?: Clock,
  /** Runner logs for live progress: no kubelet answers pods/log here (test/controller/live-progress.test.ts). */
  podLogs?: PodLogSource,
): RunningController {
  const log = pino({ level: process.env.CONTROLLER_TEST_LOG ?? "silent" }, pino.destination(2));
  return runController(namespaces, overrides, log, kubeConfig, scheduleClock, podLogs);
}

/**
 * startController, its whole log (debug and up, as JSON lines) kept in memory for the test to
 * read: what the controller says of a run, e.g. that it never says a Secret's value.
 */
export function startLoggedController(
  namespaces: string[],
  overrides: Record<string, string | boolean> = {},
): RunningController & { log(): string } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString("utf8"));
      if (process.env.CONTROLLER_TEST_LOG) process.stderr.write(chunk);
      done();
    },
  });
  const running = runController(namespaces, overrides, pino({ level: "debug" }, sink));
  return { ...running, log: () => lines.join("") };
}

function runController(
  namespaces: string[],
  overrides: Record<string, string | boolean>,
  log: Logger,
  kubeConfig?: KubeConfig,
  scheduleClock?: Clock,
  podLogs?: PodLogSource,
): RunningController {
  const identity = `test-${randomBytes(3).toString("hex")}`;
  const config = testControllerConfig(namespaces, overrides, identity);
  const controller = new PlaybookController({
    config,
    clients: makeClients(kubeConfig ?? clients().kubeConfig),
    log,
    ...(scheduleClock ? { scheduleClock } : {}),
    ...(podLogs ? { podLogs } : {}),
  });
  const done = controller.run();
  done.catch(() => {});
  return {
    controller,
    done,
    identity,
    async stop() {
      controller.stop();
      await done.catch(() => {});
    },
  };
}

export async function kubectl(args: string[], options: { input?: string } = {}) {
  const child = run(path.join(inject("binDir"), "kubectl"), args, {
    env: { ...process.env, KUBECONFIG: inject("kubeconfig") },
    maxBuffer: 1 << 22,
  });
  if (options.input !== undefined) {
    child.child.stdin?.end(options.input);
  }
  return child;
}

/**
 * `playbook controller` from this checkout's build as a process against the test cluster, its
 * streams kept: `stdout()`, `stderr()` and both interleaved as `output()`.
 */
export function spawnControllerProcess(args: string[], env: Record<string, string> = {}) {
  const child = spawn(
    process.execPath,
    [path.join(repoRoot(), "dist", "bin", "playbook.js"), "controller", ...args],
    {
      env: { ...process.env, KUBECONFIG: inject("kubeconfig"), ...env },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let stdout = "";
  let stderr = "";
  let output = "";
  child.stdout.on("data", (chunk) => {
    stdout += chunk;
    output += chunk;
  });
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
    output += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, exited, stdout: () => stdout, stderr: () => stderr, output: () => output };
}

/** helm (built into the tools folder) against the test cluster, resolving with its exit code and both streams. */
export function helm(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return runClusterTool(path.join(inject("binDir"), "helm"), args, inject("kubeconfig"));
}

/** kubectl that resolves with its exit code and both streams instead of throwing. */
export async function kubectlResult(args: string[], input?: string) {
  try {
    const { stdout, stderr } = await kubectl(args, input === undefined ? {} : { input });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? 1, stdout: failed.stdout ?? "", stderr: failed.stderr ?? "" };
  }
}

export interface PlaybookObject {
  metadata: { name: string; namespace: string; uid: string; generation: number; resourceVersion: string };
  spec: Record<string, unknown>;
  status?: PlaybookStatus;
}

export function playbookManifest(name: string, spec: Record<string, unknown>) {
  return { apiVersion: `${GROUP}/${VERSION}`, kind: "Playbook", metadata: { name }, spec };
}

export async function createPlaybook(namespace: string, name: string, spec: Record<string, unknown>) {
  const { custom } = clients();
  return (await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace,
    body: playbookManifest(name, spec),
  })) as PlaybookObject;
}

export async function getPlaybook(namespace: string, name: string): Promise<PlaybookObject> {
  const { custom } = clients();
  return (await custom.getNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace,
    name,
  })) as PlaybookObject;
}

export async function patchSpec(namespace: string, name: string, spec: Record<string, unknown>) {
  await kubectl(["-n", namespace, "patch", "playbook", name, "--type=merge", "-p", JSON.stringify({ spec })]);
}

export const condition = (playbook: PlaybookObject, type: string) =>
  playbook.status?.conditions?.find((c) => c.type === type);

export async function waitForPlaybook(
  namespace: string,
  name: string,
  what: string,
  predicate: (playbook: PlaybookObject) => boolean,
  timeoutMs = 90_000,
): Promise<PlaybookObject> {
  return waitFor(
    `playbook ${namespace}/${name} ${what}`,
    async () => {
      const playbook = await getPlaybook(namespace, name);
      return predicate(playbook) ? playbook : undefined;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

export const finished = (playbook: PlaybookObject) => {
  const succeeded = condition(playbook, "Succeeded");
  return succeeded !== undefined && succeeded.status !== "Unknown";
};

export async function waitForFinished(namespace: string, name: string, timeoutMs = 90_000) {
  return waitForPlaybook(namespace, name, "to finish", finished, timeoutMs);
}

export async function podsOf(namespace: string, name: string): Promise<V1Pod[]> {
  const { core } = clients();
  const list = await core.listNamespacedPod({ namespace, labelSelector: `playbook.dev/name=${name}` });
  return list.items;
}

/** What the runner container of the run's first pod printed. */
export async function runnerLogs(namespace: string, name: string): Promise<string> {
  return (await kubectl(["-n", namespace, "logs", `${name}-1`, "-c", "runner"])).stdout;
}

/** The lines the runner printed for `task`, without its prefix. */
export function taskLines(logs: string, task: string): string[] {
  const prefix = `[${task}] `;
  return logs
    .split("\n")
    .filter((line) => line.startsWith(prefix))
    .map((line) => line.slice(prefix.length));
}

/** The Playbook's events, once those with the given reasons are there (events are written after the status). */
export async function eventsOf(namespace: string, name: string, reasons: string[] = []) {
  const { core } = clients();
  const list = async () =>
    (
      await core.listNamespacedEvent({
        namespace,
        fieldSelector: `involvedObject.name=${name},involvedObject.kind=Playbook`,
      })
    ).items;
  return waitFor(
    `events ${reasons.join(", ")} of playbook ${namespace}/${name}`,
    async () => {
      const items = await list();
      return reasons.every((reason) => items.some((e) => e.reason === reason)) ? items : undefined;
    },
    { timeoutMs: 15_000, intervalMs: 200 },
  );
}

/** Polls until the check passes or the time is up; for "eventually" assertions. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000) {
  return waitFor(what, check, { timeoutMs, intervalMs: 200 });
}

export { sleep };

/** A finalizer the tests put on a pod to hold it (terminating, or taken) as long as they need. */
export const HOLD_FINALIZER = "test.playbook.dev/hold";

/** Removes HOLD_FINALIZER from these pods, so they can go (one already gone is fine). */
export async function releaseHeldPods(held: { namespace: string; name: string }[]): Promise<void> {
  for (const pod of held) {
    await kubectl([
      "-n",
      pod.namespace,
      "patch",
      "pod",
      pod.name,
      "--type=json",
      "-p",
      '[{"op":"remove","path":"/metadata/finalizers"}]',
    ]).catch(() => {});
  }
}

/** The sum of one of the controller's counters over its labels. */
export async function counterValue(
  running: RunningController,
  name: "statusWrites" | "runsTotal",
): Promise<number> {
  const metric = await running.controller.metrics[name].get();
  return metric.values.reduce((sum, v) => sum + v.value, 0);
}

/** Reconcile passes the controller finished (each observes playbook_reconcile_duration_seconds). */
export async function reconcilePasses(running: RunningController): Promise<number> {
  const metric = await running.controller.metrics.reconcileDuration.get();
  return metric.values.find((v) => v.metricName === "playbook_reconcile_duration_seconds_count")?.value ?? 0;
}

/**
 * Queues every cached Playbook again (as the periodic resync does) and waits until the
 * controller finished a pass for each Playbook of the namespace: whatever a pass would write or
 * count has then been written or counted, so "nothing more happened" is a checked fact, not a pause.
 */
export async function reconciledAgain(running: RunningController, ns: string): Promise<void> {
  const { items } = JSON.parse((await kubectl(["-n", ns, "get", "pb", "-o", "json"])).stdout) as {
    items: unknown[];
  };
  if (items.length === 0) throw new Error(`no Playbook in ${ns} to reconcile again`);
  const before = await reconcilePasses(running);
  running.controller.resync();
  await eventually(`${items.length} passes after a resync`, async () =>
    (await reconcilePasses(running)) >= before + items.length ? true : undefined,
  );
}

/**
 * Waits until the controller counted `count` finished runs (a test can read the terminal status
 * from the API server a moment before the controller has the response to its write), then until
 * every Playbook of the namespace was reconciled again, and checks that no pass counted one twice.
 */
export async function runsCounted(running: RunningController, ns: string, count: number): Promise<void> {
  await eventually(`${count} runs counted`, async () =>
    (await counterValue(running, "runsTotal")) === count ? true : undefined,
  );
  await reconciledAgain(running, ns);
  const counted = await counterValue(running, "runsTotal");
  if (counted !== count) throw new Error(`${counted} runs counted after a resync, expected ${count}`);
}

/**
 * The first pod of the Playbook, on the scripted node, runs and its runner reports that every task
 * succeeded; with `afterRunning`, only once the Playbook shows the pod Running.
 */
export async function succeedFirstPod(
  namespace: string,
  playbook: string,
  options: { afterRunning?: boolean } = {},
): Promise<void> {
  const { core } = clients();
  const pod = await scheduledPod(core, namespace, `${playbook}-1`);
  await startPod(core, pod);
  if (options.afterRunning) {
    await waitForPlaybook(namespace, playbook, "to be Running", (p) => p.status?.phase === "Running");
  }
  await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
}
