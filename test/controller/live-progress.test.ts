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

/** One look of the controller at a pod's log (its first, short read), as the log's server saw it. */
interface Look {
  /** when it began, on this process's clock */
  at: number;
  /** the running task's number (1-based) in the newest record the log held then; 0 for none */
  served: number;
  /** status.currentTask as the API server had it then */
  before: string | undefined;
  /** whether `before` has been read */
  read: boolean;
}

/** The runner containers' logs, as a kubelet would serve them through pods/log. */
class RunnerLogs {
  readonly reads: PodLogTail[] = [];
  private readonly looks = new Map<string, Look[]>();
  private readonly logs = new Map<string, string[]>();
  private readonly seqs = new Map<string, number>();
  private readonly running = new Map<string, number>();

  readonly source: PodLogSource = async (tail) => {
    this.reads.push(tail);
    if (tail.tailLines === SHORT_TAIL_LINES) {
      const look: Look = {
        at: performance.now(),
        served: this.running.get(`${tail.namespace}/${tail.pod}`) ?? 0,
        before: undefined,
        read: false,
      };
      this.looks.set(tail.pod, [...(this.looks.get(tail.pod) ?? []), look]);
      // The controller's looks at a run come one at a time, each in a pass that writes what it
      // took before the pass ends (playbook-reconciler.ts decideAndApply): status read here, while the
      // look waits for its lines, is what the looks before this one wrote.
      look.before = (await getPlaybook(tail.namespace, tail.pod.replace(/-\d+$/, ""))).status?.currentTask;
      look.read = true;
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

  /** The runner's next record: seq one more than its last, the run started at `start`. */
  record(namespace: string, pod: string, start: Date, tasks: ProgressTask[]): void {
    const key = `${namespace}/${pod}`;
    const seq = (this.seqs.get(key) ?? -1) + 1;
    this.seqs.set(key, seq);
    this.running.set(key, tasks.findIndex((task) => task.p === "Running") + 1);
    this.print(namespace, pod, encodeProgressRecord({ v: 1, start: start.toISOString(), seq, tasks }));
  }

  /** The controller's looks at the pod's log, in the order they began. */
  looksAt(pod: string): Look[] {
    return this.looks.get(pod) ?? [];
  }

  /** At least `count` looks at the pod have begun and read status. */
  async looked(pod: string, count: number): Promise<Look[]> {
    await eventually(`${count} looks at ${pod}`, async () => {
      const looks = this.looksAt(pod);
      return looks.length >= count && looks.every((look) => look.read) ? true : undefined;
    });
    return this.looksAt(pod);
  }

  readsOf(pod: string): number {
    return this.reads.filter((read) => read.pod === pod).length;
  }
}

/** The running task's number in a status.currentTask such as "2/3 build"; 0 for none. */
function taskNumber(currentTask: string | undefined): number {
  return Number(currentTask?.split("/")[0] ?? 0);
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

/**
 * Prints a record and waits for status to show it; then, as "within the interval", that the look
 * after the first one to read it found it in status already: the first look that reads a record
 * writes it, whenever on a loaded machine that look comes.
 */
async function shows(
  logs: RunnerLogs,
  where: { ns: string; name: string; pod: string; start: Date },
  tasks: ProgressTask[],
  currentTask: string,
) {
  const looked = logs.looksAt(where.pod).length;
  logs.record(where.ns, where.pod, where.start, tasks);
  const playbook = await waitForPlaybook(
    where.ns,
    where.name,
    `to show ${currentTask}`,
    (p) => p.status?.currentTask === currentTask,
    30_000,
  );
  // The look after the one that read the record.
  const looks = await logs.looked(where.pod, looked + 2);
  expect(looks[looked]?.served, JSON.stringify(looks)).toBe(taskNumber(currentTask));
  expect(looks[looked + 1]?.before, JSON.stringify(looks)).toBe(currentTask);
  return playbook;
}

/** The steps run's tasks: enough for records that change every 250 ms over four looks under load. */
const TASKS = 120;

describe("live progress", () => {
  it("shows each task's start and end in status.tasks and the running one in status.currentTask, within the interval", async () => {
    const { ns, logs, running } = await setUp("pb-progress", "2s");
    await createPlaybook(ns, "deploy", THREE_TASKS);
    const pod = await runningPod(ns, "deploy");
    const start = runStartOf(pod);
    const where = { ns, name: "deploy", pod: "deploy-1", start };
    logs.print(ns, "deploy-1", "playbook: run started (3 tasks)");
    logs.record(ns, "deploy-1", start, [{ p: "Pending" }, { p: "Pending" }, { p: "Pending" }]);
    logs.print(ns, "deploy-1", "[task] fetching", "[task] fetched 12 objects");

    const first = await shows(
      logs,
      where,
      [{ p: "Running", s: 100 }, { p: "Pending" }, { p: "Pending" }],
      "1/3 fetch",
    );
    expect(first.status?.tasks?.map((t) => t.phase)).toEqual(["Running", "Pending", "Pending"]);
    expect(first.status?.tasks?.[0]?.startTime).toBe(new Date(start.getTime() + 100).toISOString());
    expect(condition(first, "Succeeded")).toMatchObject({ status: "Unknown", reason: "Running" });

    const second = await shows(
      logs,
      where,
      [
        { p: "Succeeded", t: [100, 1500], cpu: 1200, mem: 51200 },
        { p: "Running", s: 1500 },
        { p: "Pending" },
      ],
      "2/3 build",
    );
    expect(second.status?.tasks?.[0]).toMatchObject({
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

    await shows(
      logs,
      where,
      [
        { p: "Succeeded", t: [100, 1500], cpu: 1200, mem: 51200 },
        { p: "Succeeded", t: [1500, 3000], cpu: 300, mem: 2048 },
        { p: "Running", s: 3000 },
      ],
      "3/3 migrate",
    );
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
    const tasks = Array.from({ length: TASKS }, (_, i) => ({ name: `step-${i}`, run: "true" }));
    await createPlaybook(ns, "steps", { ceiling: "5m", killGrace: "1s", tasks });
    const start = runStartOf(await runningPod(ns, "steps"));
    const at = (step: number) =>
      tasks.map(
        (_, i): ProgressTask =>
          i < step ? { p: "Succeeded", t: [0, 1] } : i === step ? { p: "Running", s: 1 } : { p: "Pending" },
      );
    const looksBefore = logs.looksAt("steps-1").length;
    const before = await counterValue(running, "statusWrites");
    // A task ends and the next starts every 250 ms, each record a change, until the controller has
    // begun four looks (or the tasks run out): however loaded the machine, the looks see changes.
    for (let step = 0; step < TASKS - 1 && logs.looksAt("steps-1").length < looksBefore + 4; step++) {
      logs.record(ns, "steps-1", start, at(step));
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const writes = await counterValue(running, "statusWrites");
    const looks = await logs.looked("steps-1", logs.looksAt("steps-1").length);
    const during = looks.slice(looksBefore);
    expect(during.length, JSON.stringify(looks)).toBeGreaterThanOrEqual(3);
    // Status followed: each look found in status at least what the look before it was served,
    // so a record is shown by the first look that reads it.
    for (let i = 1; i < during.length; i++) {
      expect(during[i - 1]?.served, JSON.stringify(during)).toBeGreaterThan(0);
      expect(taskNumber(during[i]?.before), JSON.stringify(during)).toBeGreaterThanOrEqual(
        during[i - 1]?.served ?? 0,
      );
    }
    // At most one write per look (one more for a look under way when the count was read), and no
    // three looks within one interval: each is due an interval after the one before it began. A
    // loaded machine only makes them later.
    expect(writes - before).toBeGreaterThanOrEqual(2);
    expect(writes - before).toBeLessThanOrEqual(during.length + 1);
    for (let i = 2; i < looks.length; i++)
      expect((looks[i]?.at ?? 0) - (looks[i - 2]?.at ?? 0), JSON.stringify(looks)).toBeGreaterThan(3000);

    // The last step starts; then the runner goes on printing and writing records, but no task
    // starts or ends: the controller keeps looking and writes nothing.
    const last = at(TASKS - 1);
    logs.record(ns, "steps-1", start, last);
    await waitForPlaybook(
      ns,
      "steps",
      "to show the last step",
      (p) => p.status?.currentTask === `${TASKS}/${TASKS} step-${TASKS - 1}`,
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
