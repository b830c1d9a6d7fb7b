// Live progress on the real API server: a running run's status.tasks and status.currentTask
// follow the runner's progress records, at most one write per --progress-interval and none when
// nothing changed, and a run shorter than the interval writes what it always did. No kubelet runs
// the scripted node's pods, so no kubelet answers pods/log: the one test double here serves the
// runner container's log (the lines a pod runner prints, its records built with
// encodeProgressRecord) through the same filter the API reader uses. Everything else is real.
import { afterAll, describe, expect, it } from "vitest";
import { encodeProgressRecord, type ProgressTask } from "../../src/api/progress-record.js";
import { PROGRESS_LINES, SHORT_TAIL_LINES } from "../../src/controller/playbook/progress-looks.js";
import { type PodLogSource, type PodLogTail, PrefixedLines } from "../../src/runtime/pod-log.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  MANUAL,
  reportFor,
  reportPod,
  SCRIPTED_NODE_NAME,
  scheduledPod,
  startPod,
} from "../harness/scripted-node.js";
import {
  clients,
  condition,
  counterValue,
  createPlaybook,
  eventually,
  getPlaybook,
  kubectl,
  type PlaybookObject,
  type RunningController,
  reconciledAgain,
  startController,
  succeedFirstPod,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

/** The runner containers' logs, as a kubelet would serve them through pods/log. */
class RunnerLogs {
  readonly reads: PodLogTail[] = [];
  /** When each look began (its first, short read), on this process's clock, as the controller made it. */
  private readonly looks = new Map<string, number[]>();
  private readonly logs = new Map<string, string[]>();
  private readonly seqs = new Map<string, number>();

  readonly source: PodLogSource = async (tail) => {
    this.reads.push(tail);
    if (tail.tailLines === SHORT_TAIL_LINES)
      this.looks.set(tail.pod, [...(this.looks.get(tail.pod) ?? []), performance.now()]);
    const all = this.logs.get(`${tail.namespace}/${tail.pod}/${tail.container}`) ?? [];
    const kept = new PrefixedLines(PROGRESS_LINES.prefix, PROGRESS_LINES.maxLineBytes);
    for (const line of all.slice(-tail.tailLines)) kept.push(`${line}\n`);
    return kept.end();
  };

  /** The runner prints lines (its own, task output with its prefix, records). */
  print(namespace: string, pod: string, ...lines: string[]): void {
    const key = `${namespace}/${pod}/runner`;
    this.logs.set(key, [...(this.logs.get(key) ?? []), ...lines]);
  }

  /** The runner's next record: seq one more than its last, the run started at `start`. */
  record(namespace: string, pod: string, start: Date, tasks: ProgressTask[]): void {
    const key = `${namespace}/${pod}`;
    const seq = (this.seqs.get(key) ?? -1) + 1;
    this.seqs.set(key, seq);
    this.print(namespace, pod, encodeProgressRecord({ v: 1, start: start.toISOString(), seq, tasks }));
  }

  /** The times the controller began its looks at the pod's log. */
  looksAt(pod: string): number[] {
    return this.looks.get(pod) ?? [];
  }

  readsOf(pod: string): number {
    return this.reads.filter((read) => read.pod === pod).length;
  }
}

async function setUp(prefix: string, interval: string) {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  const logs = new RunnerLogs();
  const running = startController([ns], { progressInterval: interval }, undefined, undefined, logs.source);
  controllers.push(running);
  return { ns, logs, running };
}

const THREE_TASKS = {
  ceiling: "5m",
  killGrace: "1s",
  tasks: [
    { name: "fetch", run: "make fetch" },
    { name: "build", run: "make build" },
    { name: "migrate", run: "make migrate" },
  ],
};

/** The run's pod, started by the scripted node, once the status shows it Running. */
async function runningPod(ns: string, name: string) {
  const pod = await scheduledPod(core, ns, `${name}-1`);
  // The runner starts at the run's start (the node's clock, as the controller bounds a record's
  // times by it): the offsets below count from both.
  await startPod(core, pod, runStartOf(pod));
  await waitForPlaybook(ns, name, "to run", (p) => p.status?.phase === "Running", 30_000);
  return pod;
}

/** The run's start the pod's runner was handed (its plan's runStartTime): records count from it. */
function runStartOf(pod: { metadata?: { annotations?: Record<string, string> } }): Date {
  const plan = JSON.parse(pod.metadata?.annotations?.["playbook.dev/plan"] ?? "{}") as {
    runStartTime?: string;
  };
  if (!plan.runStartTime) throw new Error("the pod has no plan with a runStartTime");
  return new Date(plan.runStartTime);
}

/** Waits for the status to show `what`, and says how long it took from now. */
async function shows(ns: string, name: string, what: string, check: (p: PlaybookObject) => boolean) {
  const t0 = performance.now();
  const playbook = await waitForPlaybook(ns, name, what, check, 30_000);
  return { playbook, ms: performance.now() - t0 };
}

describe("live progress", () => {
  it("shows each task's start and end in status.tasks and the running one in status.currentTask, within the interval", async () => {
    const { ns, logs, running } = await setUp("pb-progress", "2s");
    await createPlaybook(ns, "deploy", THREE_TASKS);
    const pod = await runningPod(ns, "deploy");
    const start = runStartOf(pod);
    logs.print(ns, "deploy-1", "playbook: run started (3 tasks)");
    logs.record(ns, "deploy-1", start, [{ p: "Pending" }, { p: "Pending" }, { p: "Pending" }]);
    logs.record(ns, "deploy-1", start, [{ p: "Running", s: 100 }, { p: "Pending" }, { p: "Pending" }]);
    logs.print(ns, "deploy-1", "[task] fetching", "[task] fetched 12 objects");

    const first = await shows(
      ns,
      "deploy",
      "to show fetch running",
      (p) => p.status?.currentTask === "1/3 fetch",
    );
    // The first look comes one interval after the run's start; the test began after that start.
    expect(first.ms).toBeLessThan(2000 + 2000);
    expect(first.playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Running", "Pending", "Pending"]);
    expect(first.playbook.status?.tasks?.[0]?.startTime).toBe(new Date(start.getTime() + 100).toISOString());
    expect(condition(first.playbook, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Running" });

    logs.record(ns, "deploy-1", start, [
      { p: "Succeeded", t: [100, 1500], cpu: 1200, mem: 51200 },
      { p: "Running", s: 1500 },
      { p: "Pending" },
    ]);
    const second = await shows(
      ns,
      "deploy",
      "to show build running",
      (p) => p.status?.currentTask === "2/3 build",
    );
    expect(second.ms).toBeLessThan(2000 + 2000);
    expect(second.playbook.status?.tasks?.[0]).toMatchObject({
      name: "fetch",
      phase: "Succeeded",
      exitCode: 0,
      cpuSeconds: 1.2,
      peakMemoryBytes: 51200 * 1024,
      startTime: new Date(start.getTime() + 100).toISOString(),
      completionTime: new Date(start.getTime() + 1500).toISOString(),
      // Progress, not an outcome: the API server keeps the marker (the CRD's schema has it).
      verified: false,
    });

    logs.record(ns, "deploy-1", start, [
      { p: "Succeeded", t: [100, 1500], cpu: 1200, mem: 51200 },
      { p: "Succeeded", t: [1500, 3000], cpu: 300, mem: 2048 },
      { p: "Running", s: 3000 },
    ]);
    const third = await shows(
      ns,
      "deploy",
      "to show migrate running",
      (p) => p.status?.currentTask === "3/3 migrate",
    );
    expect(third.ms).toBeLessThan(2000 + 2000);
    // What kubectl get shows: the Current column.
    const table = (await kubectl(["-n", ns, "get", "pb", "deploy"])).stdout;
    expect(table).toMatch(/\bCURRENT\b/);
    expect(table).toMatch(/Running\s+Running\s+3\/3 migrate\s/);

    // The outcome is the report's: its figures, no current task.
    await reportPod(
      core,
      pod,
      reportFor(pod, { reason: "Succeeded", tasks: { 2: { cpuSeconds: 4, peakMemoryBytes: 1 << 30 } } }),
    );
    const done = await waitForFinished(ns, "deploy", 30_000);
    expect(condition(done, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(done.status?.currentTask).toBeUndefined();
    expect(done.status?.tasks?.map((t) => [t.phase, t.cpuSeconds, t.peakMemoryBytes])).toEqual([
      ["Succeeded", undefined, undefined],
      ["Succeeded", undefined, undefined],
      ["Succeeded", 4, 1 << 30],
    ]);
    for (const task of done.status?.tasks ?? []) expect(task).not.toHaveProperty("verified");
    // Only the recorded pod's runner container was read.
    expect(new Set(logs.reads.map((r) => `${r.pod}/${r.container}`))).toEqual(new Set(["deploy-1/runner"]));
    // Running, three progress writes, the outcome.
    expect(await counterValue(running, "statusWrites")).toBe(5);
  });

  it("writes at most once per interval however fast the tasks go, and not at all when nothing changed", async () => {
    const { ns, logs, running } = await setUp("pb-progress-bound", "3s");
    const tasks = Array.from({ length: 40 }, (_, i) => ({ name: `step-${i}`, run: "true" }));
    await createPlaybook(ns, "steps", { ceiling: "5m", killGrace: "1s", tasks });
    const start = runStartOf(await runningPod(ns, "steps"));
    const before = await counterValue(running, "statusWrites");
    // A task ends and the next starts every 250 ms, for 10 s: 40 records, each a change.
    const t0 = performance.now();
    for (let step = 0; step < 40; step++) {
      logs.record(
        ns,
        "steps-1",
        start,
        tasks.map(
          (_, i): ProgressTask =>
            i < step ? { p: "Succeeded", t: [0, 1] } : i === step ? { p: "Running", s: 1 } : { p: "Pending" },
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const writes = await counterValue(running, "statusWrites");
    const elapsed = performance.now() - t0;
    // Status followed: it shows a task well past the first.
    const shown = await getPlaybook(ns, "steps");
    expect(Number(shown.status?.currentTask?.split("/")[0] ?? 0)).toBeGreaterThan(10);
    // Each write follows a look (one write at most per look), and the looks are an interval
    // apart, timed when the controller began each one: a loaded machine only makes them later.
    const looks = logs.looksAt("steps-1").filter((at) => at >= t0 - 3000);
    expect(writes - before).toBeGreaterThanOrEqual(2);
    expect(writes - before).toBeLessThanOrEqual(looks.length);
    expect(looks.length).toBeLessThanOrEqual(Math.ceil((elapsed + 3000) / 3000) + 1);
    for (let i = 1; i < looks.length; i++)
      expect((looks[i] ?? 0) - (looks[i - 1] ?? 0), `looks at ${looks.join(", ")} ms`).toBeGreaterThan(
        3000 - 100,
      );

    // The last step starts; then the runner goes on printing and writing records, but no task
    // starts or ends: the controller keeps looking and writes nothing.
    const last = tasks.map(
      (_, i): ProgressTask => (i < 39 ? { p: "Succeeded", t: [0, 1] } : { p: "Running", s: 1 }),
    );
    logs.record(ns, "steps-1", start, last);
    await waitForPlaybook(
      ns,
      "steps",
      "to show the last step",
      (p) => p.status?.currentTask === "40/40 step-39",
    );
    const settled = await counterValue(running, "statusWrites");
    const reads = logs.readsOf("steps-1");
    for (let i = 0; i < 10; i++) logs.print(ns, "steps-1", `[task] line ${i}`);
    logs.record(ns, "steps-1", start, last);
    await eventually(
      "three more looks",
      async () => (logs.readsOf("steps-1") >= reads + 3 ? true : undefined),
      20_000,
    );
    expect(await counterValue(running, "statusWrites")).toBe(settled);
  });

  it("makes a run shorter than the interval write exactly what it always did, and reads no log", async () => {
    const { ns, logs, running } = await setUp("pb-progress-short", "10s");
    await createPlaybook(ns, "quick", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    logs.record(ns, "quick-1", new Date(), [{ p: "Running", s: 0 }]);
    await succeedFirstPod(ns, "quick", { afterRunning: true });
    const done = await waitForFinished(ns, "quick", 30_000);
    expect(condition(done, "Succeeded")?.reason).toBe("Succeeded");
    await eventually("the run counted", async () =>
      (await counterValue(running, "runsTotal")) === 1 ? true : undefined,
    );
    await reconciledAgain(running, ns);
    // Running (with the start record) and Succeeded, as test/controller/lifecycle.test.ts counts them.
    expect(await counterValue(running, "statusWrites")).toBe(2);
    expect(logs.reads).toEqual([]);
  });

  it("takes nothing from a pod that is not the recorded one, a record of another task count, or one going back", async () => {
    const { ns, logs } = await setUp("pb-progress-ignored", "2s");
    await createPlaybook(ns, "gate", THREE_TASKS);
    const real = await runningPod(ns, "gate");
    const start = runStartOf(real);
    // A pod someone made with the run's label, owner and plan, whose log claims the run is at its last task.
    const forged = await core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: {
          name: "gate-9",
          labels: { ...real.metadata?.labels, "playbook.dev/pod-attempt": "9" },
          annotations: {
            "playbook.dev/plan": real.metadata?.annotations?.["playbook.dev/plan"] ?? "",
            [MANUAL]: "true",
          },
          ownerReferences: real.metadata?.ownerReferences ?? [],
        },
        spec: {
          nodeName: SCRIPTED_NODE_NAME,
          restartPolicy: "Never",
          containers: [{ name: "runner", image: "attacker/anything:1" }],
        },
      },
    });
    await startPod(core, forged);
    logs.record(ns, "gate-9", start, [
      { p: "Succeeded", t: [0, 1] },
      { p: "Succeeded", t: [1, 2] },
      { p: "Running", s: 2 },
    ]);
    // The real runner: fetch done, build running; then a line that forges a record of two tasks
    // with a higher seq (a line a task cannot print: its lines start "[task] ").
    logs.record(ns, "gate-1", start, [
      { p: "Succeeded", t: [0, 500] },
      { p: "Running", s: 500 },
      { p: "Pending" },
    ]);
    logs.print(
      ns,
      "gate-1",
      encodeProgressRecord({
        v: 1,
        start: start.toISOString(),
        seq: 99,
        tasks: [{ p: "Running", s: 1 }, { p: "Pending" }],
      }),
    );
    const shown = await waitForPlaybook(
      ns,
      "gate",
      "to show build",
      (p) => p.status?.currentTask === "2/3 build",
    );
    expect(shown.status?.tasks?.map((t) => t.phase)).toEqual(["Succeeded", "Running", "Pending"]);
    expect(logs.readsOf("gate-9")).toBe(0);

    // A later record that takes fetch back to Running is not believed.
    logs.record(ns, "gate-1", start, [{ p: "Running", s: 0 }, { p: "Pending" }, { p: "Pending" }]);
    const reads = logs.readsOf("gate-1");
    await eventually(
      "two more looks",
      async () => (logs.readsOf("gate-1") >= reads + 2 ? true : undefined),
      20_000,
    );
    const after = await getPlaybook(ns, "gate");
    expect(after.status?.currentTask).toBe("2/3 build");
    expect(after.status?.tasks?.map((t) => t.phase)).toEqual(["Succeeded", "Running", "Pending"]);

    // A record saying the run failed changes no outcome: the run is Running until the report says.
    logs.record(ns, "gate-1", start, [
      { p: "Succeeded", t: [0, 500] },
      { p: "Failed", x: 1, t: [500, 900] },
      { p: "Skipped" },
    ]);
    const failedTask = await waitForPlaybook(
      ns,
      "gate",
      "to show build failed",
      (p) => p.status?.tasks?.[1]?.phase === "Failed",
    );
    expect(failedTask.status?.phase).toBe("Running");
    expect(condition(failedTask, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Running" });
    await reportPod(core, real, reportFor(real, { reason: "Succeeded" }));
    const done = await waitForFinished(ns, "gate", 30_000);
    expect(condition(done, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(done.status?.tasks?.map((t) => t.phase)).toEqual(["Succeeded", "Succeeded", "Succeeded"]);
    expect(done.status?.currentTask).toBeUndefined();
  });
});
