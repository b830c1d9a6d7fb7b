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

/** One look of the controller at a pod's log, as the log's server saw it. */
interface Look {
  /** when it began (its first, short read), on this process's clock */
  at: number;
  /** the running task of the newest record it was served (as status.currentTask says it), if any */
  served?: string | undefined;
  /** status.currentTask as the API server had it when the look began */
  before?: string | undefined;
}

/** The runner containers' logs, as a kubelet would serve them through pods/log. */
class RunnerLogs {
  readonly reads: PodLogTail[] = [];
  private readonly looks = new Map<string, Look[]>();
  private readonly logs = new Map<string, string[]>();
  private readonly seqs = new Map<string, number>();
  /** The running task of each pod's newest record. */
  private readonly running = new Map<string, string | undefined>();
  /**
   * Reads status.currentTask as a look begins. The controller's looks at a run come one after
   * another, each in a pass that writes what it read before the pass ends: what a look finds in
   * status is what the looks before it wrote, however late each came.
   */
  statusOf?: (namespace: string, pod: string) => Promise<string | undefined>;

  readonly source: PodLogSource = async (tail) => {
    this.reads.push(tail);
    if (tail.tailLines === SHORT_TAIL_LINES) {
      const look: Look = { at: performance.now(), served: this.running.get(`${tail.namespace}/${tail.pod}`) };
      this.looks.set(tail.pod, [...(this.looks.get(tail.pod) ?? []), look]);
      if (this.statusOf) look.before = await this.statusOf(tail.namespace, tail.pod);
    }
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

  /**
   * The runner's next record: seq one more than its last, the run started at `start`; `names`,
   * the tasks' names, say which task status shows running once the record is taken.
   */
  record(namespace: string, pod: string, start: Date, tasks: ProgressTask[], names?: string[]): void {
    const key = `${namespace}/${pod}`;
    const seq = (this.seqs.get(key) ?? -1) + 1;
    this.seqs.set(key, seq);
    const index = tasks.findIndex((task) => task.p === "Running");
    this.running.set(key, index < 0 || !names ? undefined : `${index + 1}/${tasks.length} ${names[index]}`);
    this.print(namespace, pod, encodeProgressRecord({ v: 1, start: start.toISOString(), seq, tasks }));
  }

  /** The controller's looks at the pod's log. */
  looksAt(pod: string): Look[] {
    return this.looks.get(pod) ?? [];
  }

  readsOf(pod: string): number {
    return this.reads.filter((read) => read.pod === pod).length;
  }
}

/**
 * Each look found in status the running task the look before it was served: the controller wrote
 * a record with the look that read it, within the interval, on a machine however loaded. Returns
 * how many pairs of looks said so.
 */
function expectEachLookWritten(logs: RunnerLogs, pod: string): number {
  const looks = logs.looksAt(pod);
  let pairs = 0;
  for (let i = 1; i < looks.length; i++) {
    const served = looks[i - 1]?.served;
    if (served === undefined || looks[i]?.before === undefined) continue;
    expect(looks[i]?.before, `look ${i} of ${JSON.stringify(looks)}`).toBe(served);
    pairs++;
  }
  return pairs;
}

async function setUp(prefix: string, interval: string) {
  const ns = await createTestNamespace(core, prefix);
  namespaces.push(ns);
  const logs = new RunnerLogs();
  // The pod is `<playbook>-<attempt>`.
  logs.statusOf = async (namespace, pod) =>
    (await getPlaybook(namespace, pod.replace(/-\d+$/, ""))).status?.currentTask;
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

/** Waits for the status to show `what`. */
async function shows(ns: string, name: string, what: string, check: (p: PlaybookObject) => boolean) {
  return { playbook: await waitForPlaybook(ns, name, what, check, 30_000) };
}

describe("live progress", () => {
  it("shows each task's start and end in status.tasks and the running one in status.currentTask, within the interval", async () => {
    const { ns, logs, running } = await setUp("pb-progress", "2s");
    await createPlaybook(ns, "deploy", THREE_TASKS);
    const pod = await runningPod(ns, "deploy");
    const start = runStartOf(pod);
    logs.print(ns, "deploy-1", "playbook: run started (3 tasks)");
    const names = THREE_TASKS.tasks.map((task) => task.name);
    logs.record(ns, "deploy-1", start, [{ p: "Pending" }, { p: "Pending" }, { p: "Pending" }], names);
    logs.record(ns, "deploy-1", start, [{ p: "Running", s: 100 }, { p: "Pending" }, { p: "Pending" }], names);
    logs.print(ns, "deploy-1", "[task] fetching", "[task] fetched 12 objects");

    const first = await shows(
      ns,
      "deploy",
      "to show fetch running",
      (p) => p.status?.currentTask === "1/3 fetch",
    );
    expect(first.playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Running", "Pending", "Pending"]);
    expect(first.playbook.status?.tasks?.[0]?.startTime).toBe(new Date(start.getTime() + 100).toISOString());
    expect(condition(first.playbook, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Running" });

    logs.record(
      ns,
      "deploy-1",
      start,
      [
        { p: "Succeeded", t: [100, 1500], cpu: 1200, mem: 51200 },
        { p: "Running", s: 1500 },
        { p: "Pending" },
      ],
      names,
    );
    const second = await shows(
      ns,
      "deploy",
      "to show build running",
      (p) => p.status?.currentTask === "2/3 build",
    );
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

    logs.record(
      ns,
      "deploy-1",
      start,
      [
        { p: "Succeeded", t: [100, 1500], cpu: 1200, mem: 51200 },
        { p: "Succeeded", t: [1500, 3000], cpu: 300, mem: 2048 },
        { p: "Running", s: 3000 },
      ],
      names,
    );
    await shows(ns, "deploy", "to show migrate running", (p) => p.status?.currentTask === "3/3 migrate");
    // Within the interval: each record shown by the look that read it, not a later one. The
    // look after the last record's says so too.
    const looked = logs.looksAt("deploy-1").length;
    await eventually("one more look", async () =>
      logs.looksAt("deploy-1").length > looked ? true : undefined,
    );
    expect(expectEachLookWritten(logs, "deploy-1")).toBeGreaterThanOrEqual(3);
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
    const names = tasks.map((task) => task.name);
    const before = await counterValue(running, "statusWrites");
    const looksBefore = logs.looksAt("steps-1").length;
    // A task ends and the next starts every 250 ms or more: 40 records, each a change, for as
    // long as it takes the controller to look at least three times.
    for (let step = 0; step < 40 || logs.looksAt("steps-1").length < looksBefore + 3; step++) {
      const at = Math.min(step, 38);
      logs.record(
        ns,
        "steps-1",
        start,
        tasks.map(
          (_, i): ProgressTask =>
            i < at ? { p: "Succeeded", t: [0, 1] } : i === at ? { p: "Running", s: 1 } : { p: "Pending" },
        ),
        names,
      );
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const writes = await counterValue(running, "statusWrites");
    const looks = logs.looksAt("steps-1");
    // Status followed: each look found what the one before it was served.
    expect(expectEachLookWritten(logs, "steps-1")).toBeGreaterThanOrEqual(2);
    // Each write follows a look (one write at most per look), and no three looks come within one
    // interval: each look's pass takes its time before the next pass begins, and the next look is
    // due an interval after that time. A loaded machine only makes them later.
    expect(writes - before).toBeGreaterThanOrEqual(2);
    expect(writes - before).toBeLessThanOrEqual(looks.length);
    const at = looks.map((look) => Math.round(look.at));
    for (let i = 2; i < looks.length; i++)
      expect(
        (looks[i]?.at ?? 0) - (looks[i - 2]?.at ?? 0),
        `looks at ${at.join(", ")} ms`,
      ).toBeGreaterThanOrEqual(3000 - 50);

    // The last step starts; then the runner goes on printing and writing records, but no task
    // starts or ends: the controller keeps looking and writes nothing.
    const last = tasks.map(
      (_, i): ProgressTask => (i < 39 ? { p: "Succeeded", t: [0, 1] } : { p: "Running", s: 1 }),
    );
    logs.record(ns, "steps-1", start, last, names);
    await waitForPlaybook(
      ns,
      "steps",
      "to show the last step",
      (p) => p.status?.currentTask === "40/40 step-39",
    );
    const settled = await counterValue(running, "statusWrites");
    const reads = logs.readsOf("steps-1");
    for (let i = 0; i < 10; i++) logs.print(ns, "steps-1", `[task] line ${i}`);
    logs.record(ns, "steps-1", start, last, names);
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
