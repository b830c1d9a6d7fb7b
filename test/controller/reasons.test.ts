// Every reason of docs/design.md's table, decided by the controller against the real API server
// from the pod status a test writes (the scripted node: no kubelet runs the pods). What only a real
// run produces (the runner's own limits, task output in `kubectl logs`, the kill of a pod's
// processes) is the real node's table: test/real-node/reasons.test.ts.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { REPORT_MAX_BYTES } from "../../src/api/report.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  endPod,
  evictPod,
  exceedDeadline,
  holdPod,
  losePodToGc,
  reportFor,
  reportPod,
  scheduledPod,
  scriptManually,
  startPod,
} from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  eventsOf,
  eventually,
  getPlaybook,
  kubectl,
  kubectlResult,
  type PlaybookObject,
  patchSpec,
  playbookManifest,
  podsOf,
  type RunningController,
  runsCounted,
  sleep,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
let namespace: string;
let controller: RunningController;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-reasons");
  controller = startController([namespace]);
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

/** Creates the Playbook and returns its first pod once the scheduler bound it. */
async function firstPod(name: string, spec: Record<string, unknown>): Promise<V1Pod> {
  await createPlaybook(namespace, name, spec);
  return scheduledPod(core, namespace, `${name}-1`);
}

/** The pod started and the controller saw it: the run is Running. */
async function running(name: string, pod: V1Pod, startedAt?: Date): Promise<V1Pod> {
  const started = await startPod(core, pod, startedAt);
  await waitForPlaybook(namespace, name, "to be Running", (p) => p.status?.phase === "Running", 30_000);
  return started;
}

/** The pod's activeDeadlineSeconds once the controller lowered it below `above` (a cancel). */
async function loweredDeadline(pod: V1Pod, above: number): Promise<number> {
  return eventually("the pod's deadline to be lowered", async () => {
    const current = await core.readNamespacedPod({ namespace, name: pod.metadata?.name ?? "" });
    const seconds = current.spec?.activeDeadlineSeconds ?? above;
    return seconds < above ? seconds : undefined;
  });
}

const message = (playbook: PlaybookObject) => condition(playbook, "Succeeded")?.message ?? "";

interface ReasonCase {
  name: string;
  spec: Record<string, unknown>;
  /** The pod's life, as its node and runner would have written it. */
  script: (pod: V1Pod, name: string) => Promise<void>;
  /** No pod is bound to the node (refused, or held by the scheduler): nothing to script. */
  noPod?: boolean;
  reason: string;
  phase: string;
  limit?: string;
  endingTask?: string;
  check?: (playbook: PlaybookObject, name: string) => Promise<void>;
}

const cases: ReasonCase[] = [
  {
    name: "Succeeded: every task's report says Succeeded",
    spec: {
      ceiling: "1m",
      tasks: [
        { name: "build", run: "make" },
        { name: "test", run: "true" },
      ],
    },
    script: async (pod, name) => {
      await running(name, pod);
      await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    },
    reason: "Succeeded",
    phase: "Succeeded",
    check: async (playbook, name) => {
      expect(playbook.status?.tasks?.map((t) => [t.name, t.phase])).toEqual([
        ["build", "Succeeded"],
        ["test", "Succeeded"],
      ]);
      expect(playbook.status).toMatchObject({ podName: `${name}-1`, podAttempts: 1 });
      expect(message(playbook)).toBe("all 2 tasks succeeded");
      const events = await eventsOf(namespace, name, ["RunSucceeded"]);
      expect(events.find((e) => e.reason === "RunSucceeded")?.type).toBe("Normal");
    },
  },
  {
    name: "TaskFailed: a task exited 3 after its one retry, the next one skipped",
    spec: {
      ceiling: "1m",
      tasks: [
        { name: "build", run: "exit 3", retries: 1 },
        { name: "test", run: "true" },
      ],
    },
    script: async (pod, name) => {
      await running(name, pod);
      await reportPod(
        core,
        pod,
        reportFor(pod, { reason: "TaskFailed", at: 0, task: { exitCode: 3, attempts: 2 } }),
      );
    },
    reason: "TaskFailed",
    phase: "Failed",
    endingTask: "build",
    check: async (playbook, name) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({ phase: "Failed", exitCode: 3, attempts: 2 });
      expect(playbook.status?.tasks?.[1]).toMatchObject({ phase: "Skipped" });
      expect(message(playbook)).toBe("task build exited with code 3 after 2 attempts");
      const events = await eventsOf(namespace, name, ["RunFailed"]);
      expect(events.find((e) => e.reason === "RunFailed")?.type).toBe("Warning");
    },
  },
  {
    name: "TaskTimeout: the task's own 2s timeout fired",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "slow", run: "sleep 30", timeout: "2s" }] },
    script: async (pod, name) => {
      await running(name, pod);
      await reportPod(core, pod, reportFor(pod, { reason: "TaskTimeout", at: 0 }));
    },
    reason: "TaskTimeout",
    phase: "Failed",
    limit: "TaskTimeout",
    endingTask: "slow",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({
        phase: "TimedOut",
        limit: "TaskTimeout",
        limitValue: "2s",
        limitSource: "task",
      });
      expect(message(playbook)).toBe(
        "task slow exceeded its 2s timeout (spec.tasks[0].timeout); process group stopped within the 1s grace",
      );
    },
  },
  {
    name: "StallLimit: the task printed nothing for the spec's 2s",
    spec: { ceiling: "1m", killGrace: "1s", stall: "2s", tasks: [{ name: "quiet", run: "sleep 30" }] },
    script: async (pod, name) => {
      await running(name, pod);
      await reportPod(core, pod, reportFor(pod, { reason: "StallLimit", at: 0 }));
    },
    reason: "StallLimit",
    phase: "Failed",
    limit: "StallLimit",
    endingTask: "quiet",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({
        limit: "StallLimit",
        limitValue: "2s",
        limitSource: "spec",
      });
      expect(message(playbook)).toBe(
        "task quiet printed nothing for 2s, its stall limit (spec.stall); process group stopped within the 1s grace",
      );
    },
  },
  {
    name: "RunCeiling: the runner stopped the run at its ceiling, the later task skipped",
    spec: {
      ceiling: "10s",
      killGrace: "1s",
      tasks: [
        { name: "long", run: "sleep 30" },
        { name: "after", run: "true" },
      ],
    },
    script: async (pod, name) => {
      await running(name, pod);
      await reportPod(core, pod, reportFor(pod, { reason: "RunCeiling", at: 0 }));
    },
    reason: "RunCeiling",
    phase: "Failed",
    limit: "RunCeiling",
    endingTask: "long",
    check: async (playbook) => {
      expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["TimedOut", "Skipped"]);
      expect(playbook.status?.tasks?.[0]).toMatchObject({ limit: "RunCeiling", limitValue: "10s" });
      expect(message(playbook)).toBe(
        "task long was stopped by the run's 10s ceiling (spec.ceiling); process group stopped within the 1s grace",
      );
    },
  },
  {
    name: "PodDeadlineExceeded: the kubelet's activeDeadlineSeconds backstop fired and the runner could not report",
    spec: { ceiling: "15s", killGrace: "1s", tasks: [{ name: "held", run: "sleep 60" }] },
    script: async (pod, name) => {
      await scriptManually(core, pod);
      // Started its activeDeadlineSeconds ago: the kubelet fails it, no report written.
      const deadline = pod.spec?.activeDeadlineSeconds ?? 0;
      await running(name, pod, new Date(Date.now() - deadline * 1000));
      await exceedDeadline(core, pod);
    },
    reason: "PodDeadlineExceeded",
    phase: "Failed",
    limit: "PodDeadlineExceeded",
    check: async (playbook, name) => {
      const [pod] = await podsOf(namespace, name);
      expect(pod?.status?.reason).toBe("DeadlineExceeded");
      // The ceiling + killGrace + the controller's 5s for the runner's report.
      expect(pod?.spec?.activeDeadlineSeconds).toBe(15 + 1 + 5);
      expect(message(playbook)).toBe(
        `the kubelet stopped pod ${name}-1 at its activeDeadlineSeconds backstop: the run's 15s ceiling (spec.ceiling) plus killGrace and a margin passed before the runner reported`,
      );
      // The runner never reported: no task row says more than the run's reason.
      expect(playbook.status?.tasks ?? []).toEqual([]);
    },
  },
  {
    name: "Cancelled: the runner reports the cancel when the lowered deadline stops its pod, and the pod is kept",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "waits", run: "sleep 60" }] },
    script: async (pod, name) => {
      await scriptManually(core, pod);
      await running(name, pod);
      await patchSpec(namespace, name, { cancel: true });
      await loweredDeadline(pod, pod.spec?.activeDeadlineSeconds ?? 0);
      await exceedDeadline(core, pod, reportFor(pod, { reason: "Cancelled", at: 0 }));
    },
    reason: "Cancelled",
    phase: "Cancelled",
    endingTask: "waits",
    check: async (playbook, name) => {
      expect(playbook.status?.tasks?.[0]).toMatchObject({
        name: "waits",
        phase: "Cancelled",
        ending: "Exited",
      });
      // Kept for its logs like any finished run's pod.
      const [pod] = await podsOf(namespace, name);
      expect(pod?.metadata?.deletionTimestamp).toBeUndefined();
      expect(pod?.status?.reason).toBe("DeadlineExceeded");
      const events = await eventsOf(namespace, name, ["Cancelling", "RunCancelled"]);
      expect(events.find((e) => e.reason === "RunCancelled")?.type).toBe("Normal");
      expect(events.find((e) => e.reason === "Cancelling")?.message).toContain(
        "killGrace 1s (spec.killGrace)",
      );
    },
  },
  {
    name: "Cancelled: a pod stopped at the lowered deadline without a report is Cancelled as asked",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "waits", run: "sleep 60" }] },
    script: async (pod, name) => {
      // The scripted node fails the pod at its lowered deadline as a kubelet would, and writes no report.
      await running(name, pod);
      await patchSpec(namespace, name, { cancel: true });
    },
    reason: "Cancelled",
    phase: "Cancelled",
    check: async (playbook, name) => {
      expect(message(playbook)).toBe(
        `the run was cancelled (spec.cancel); pod ${name}-1 was stopped at its lowered activeDeadlineSeconds without a valid runner report (pod DeadlineExceeded: Pod was active on the node longer than the specified deadline, Error, exit code 137): the termination message is empty`,
      );
    },
  },
  {
    name: "RunnerLost: the runner was SIGKILLed (exit code 137) before it wrote a report",
    spec: { ceiling: "1m", tasks: [{ name: "victim", run: "sleep 60" }] },
    script: async (pod, name) => {
      await running(name, pod);
      await endPod(core, pod, { exitCode: 137 });
    },
    reason: "RunnerLost",
    phase: "Failed",
    check: async (playbook, name) => {
      // What the kubelet said: the container's reason and exit code, 128 + SIGKILL.
      expect(message(playbook)).toBe(
        `pod ${name}-1 ended without a valid runner report (Error, exit code 137): the termination message is empty`,
      );
    },
  },
  {
    name: "PodLost: with backoffLimit 0 the first lost pod ends the run",
    spec: { ceiling: "1m", backoffLimit: 0, tasks: [{ name: "waits", run: "sleep 60" }] },
    script: async (pod, name) => {
      await running(name, pod);
      await losePodToGc(core, pod);
    },
    reason: "PodLost",
    phase: "Failed",
    check: async (playbook, name) => {
      expect(message(playbook)).toBe(
        `pod ${name}-1 was disrupted (DeletionByPodGC: PodGC: node no longer exists); the pod was lost 1 time, more than backoffLimit 0 allows`,
      );
      expect(await podsOf(namespace, name)).toEqual([]);
    },
  },
  {
    name: "StartTimeout: no node can take the pod (it asks for more cpu than any node has)",
    spec: {
      ceiling: "1m",
      startTimeout: "3s",
      resources: { requests: { cpu: "1000" } },
      tasks: [{ name: "never", run: "true" }],
    },
    // The scheduler keeps it Pending: nothing to write.
    script: async () => {},
    noPod: true,
    reason: "StartTimeout",
    phase: "Failed",
    limit: "StartTimeout",
    check: async (playbook, name) => {
      expect(message(playbook)).toMatch(
        new RegExp(
          `^pod ${name}-1 \\(attempt 1\\) never started: its containers did not all start within the 3s start timeout \\(spec.startTimeout\\); Unschedulable: 0/1 nodes are available: 1 Insufficient cpu`,
        ),
      );
      expect(playbook.status?.limits?.startTimeout).toEqual({ value: "3s", source: "spec" });
      // No runner ever started: no task began, and the pod is gone.
      expect(playbook.status?.tasks?.some((t) => t.startTime !== undefined) ?? false).toBe(false);
      await eventually("the pod to be deleted", async () =>
        (await podsOf(namespace, name)).length === 0 ? true : undefined,
      );
      // Counted as the limit that fired and as the run's reason.
      const counted = (text: string, series: string) =>
        Number(text.match(new RegExp(`^${series.replace(/[{}]/g, "\\$&")} (\\d+)$`, "m"))?.[1] ?? 0);
      await eventually("the run to be counted as StartTimeout", async () => {
        const text = await controller.controller.metrics.registry.metrics();
        return counted(text, `playbook_limit_fired_total{namespace="${namespace}",limit="StartTimeout"}`) >=
          1 && counted(text, `playbook_runs_total{namespace="${namespace}",reason="StartTimeout"}`) >= 1
          ? true
          : undefined;
      });
    },
  },
  {
    name: "StartTimeout: the runner's image cannot be pulled, and the message says so",
    // Long enough that the test holds the pod (ten tests start at once) before the timeout passes.
    spec: { ceiling: "1m", startTimeout: "8s", tasks: [{ name: "never", run: "true" }] },
    script: async (pod) => {
      await holdPod(core, pod, "ErrImagePull", 'failed to pull image "runner": not found');
    },
    reason: "StartTimeout",
    phase: "Failed",
    limit: "StartTimeout",
    check: async (playbook, name) => {
      expect(message(playbook)).toBe(
        `pod ${name}-1 (attempt 1) never started: its containers did not all start within the 8s start timeout (spec.startTimeout); container runner (image ${inject("runnerImage")}): ErrImagePull: failed to pull image "runner": not found`,
      );
      await eventually("the pod to be deleted", async () =>
        (await podsOf(namespace, name)).length === 0 ? true : undefined,
      );
    },
  },
  {
    name: "Succeeded: a start timeout the pod meets changes nothing",
    spec: { ceiling: "1m", startTimeout: "30s", tasks: [{ name: "quick", run: "true" }] },
    script: async (pod, name) => {
      await running(name, pod);
      await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    },
    reason: "Succeeded",
    phase: "Succeeded",
    check: async (playbook) => {
      expect(playbook.status?.limits?.startTimeout).toEqual({ value: "30s", source: "spec" });
      expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "quick", phase: "Succeeded" });
    },
  },
  {
    name: "InvalidSpec: a ceiling above the controller's maximum, which admission cannot know",
    spec: { ceiling: "48h", tasks: [{ name: "a", run: "true" }] },
    script: async () => {},
    noPod: true,
    reason: "InvalidSpec",
    phase: "Failed",
    check: async (playbook, name) => {
      expect(message(playbook)).toContain("spec.ceiling: 48h is longer than the maximum ceiling 24h");
      expect(await podsOf(namespace, name)).toEqual([]);
    },
  },
  {
    name: "InvalidSpec: a pod the API server refuses (requests above limits)",
    spec: {
      ceiling: "1m",
      resources: { requests: { memory: "2Gi" }, limits: { memory: "1Gi" } },
      tasks: [{ name: "a", run: "true" }],
    },
    script: async () => {},
    noPod: true,
    reason: "InvalidSpec",
    phase: "Failed",
    check: async (playbook, name) => {
      expect(message(playbook)).toContain("must be less than or equal to memory limit");
      const events = await eventsOf(namespace, name, ["FailedCreate"]);
      expect(events.find((e) => e.reason === "FailedCreate")?.type).toBe("Warning");
    },
  },
];

describe.concurrent("each reason of the Succeeded condition, from the pod status the node wrote", () => {
  it.each(cases.map((c, i) => ({ ...c, index: i })))("$name", async (c) => {
    const name = `r${c.index}-${c.reason.toLowerCase()}`;
    await createPlaybook(namespace, name, c.spec);
    if (!c.noPod) await c.script(await scheduledPod(core, namespace, `${name}-1`), name);
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded"), JSON.stringify(playbook.status)).toMatchObject({
      status: c.reason === "Succeeded" ? "True" : "False",
      reason: c.reason,
      observedGeneration: playbook.metadata.generation,
    });
    expect(playbook.status?.phase).toBe(c.phase);
    expect(playbook.status?.endingTask).toBe(c.endingTask);
    if (c.limit) {
      expect(condition(playbook, "LimitExceeded")).toMatchObject({ status: "True", reason: c.limit });
      const events = await eventsOf(namespace, name, ["LimitFired"]);
      const fired = events.find((e) => e.reason === "LimitFired");
      expect(fired?.type).toBe("Warning");
      expect(fired?.message).toContain(c.limit);
    } else {
      expect(condition(playbook, "LimitExceeded")).toBeUndefined();
    }
    await c.check?.(playbook, name);
  });
});

describe.concurrent("a report at the edge of the pod's deadline", () => {
  it("written in the last millisecond before the deadline, by a runner that then exited, decides the run", async () => {
    const name = "edge-exited";
    const pod = await firstPod(name, { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await scriptManually(core, pod);
    const seconds = pod.spec?.activeDeadlineSeconds ?? 0;
    // Started (whole seconds, as a kubelet writes it) exactly its activeDeadlineSeconds ago.
    const startedAt = new Date(Math.floor(Date.now() / 1000) * 1000 - seconds * 1000);
    const deadline = new Date(startedAt.getTime() + seconds * 1000);
    await running(name, pod, startedAt);
    const lastMs = new Date(deadline.getTime() - 1);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded", completionTime: lastMs }), {
      finishedAt: lastMs,
    });
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(condition(playbook, "LimitExceeded")).toBeUndefined();
    // The run ended when the runner said, a millisecond before the kubelet would have stopped it.
    expect(playbook.status?.completionTime).toBe(lastMs.toISOString());
  });

  it("written in the last millisecond, but the kubelet failed the pod DeadlineExceeded before the runner exited: the report decides", async () => {
    const name = "edge-deadline";
    const pod = await firstPod(name, { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await scriptManually(core, pod);
    const seconds = pod.spec?.activeDeadlineSeconds ?? 0;
    const startedAt = new Date(Math.floor(Date.now() / 1000) * 1000 - seconds * 1000);
    const deadline = new Date(startedAt.getTime() + seconds * 1000);
    await running(name, pod, startedAt);
    await exceedDeadline(
      core,
      pod,
      reportFor(pod, { reason: "Succeeded", completionTime: new Date(deadline.getTime() - 1) }),
    );
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded"), JSON.stringify(playbook.status)).toMatchObject({
      status: "True",
      reason: "Succeeded",
    });
    expect(condition(playbook, "LimitExceeded")).toBeUndefined();
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "a", phase: "Succeeded" });
  });

  it("written at the deadline itself, as a runner does when the kubelet's SIGTERM stops it: PodDeadlineExceeded, the report's task rows kept", async () => {
    const name = "edge-late";
    const pod = await firstPod(name, {
      ceiling: "1m",
      tasks: [
        { name: "a", run: "true" },
        { name: "b", run: "sleep 600" },
      ],
    });
    await scriptManually(core, pod);
    const seconds = pod.spec?.activeDeadlineSeconds ?? 0;
    const startedAt = new Date(Math.floor(Date.now() / 1000) * 1000 - seconds * 1000);
    const deadline = new Date(startedAt.getTime() + seconds * 1000);
    await running(name, pod, startedAt);
    await exceedDeadline(core, pod, reportFor(pod, { reason: "Cancelled", at: 1, completionTime: deadline }));
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({
      status: "False",
      reason: "PodDeadlineExceeded",
    });
    expect(condition(playbook, "LimitExceeded")).toMatchObject({
      status: "True",
      reason: "PodDeadlineExceeded",
    });
    expect(playbook.status?.tasks?.map((t) => [t.name, t.phase])).toEqual([
      ["a", "Succeeded"],
      ["b", "Cancelled"],
    ]);
  });
});

/** One byte more than a termination message holds (a kubelet cuts longer ones; the runner never writes them). */
const OVERSIZED = `{"v":1,"pad":"${"x".repeat(REPORT_MAX_BYTES - 16 + 1)}"}`;

describe.concurrent("a termination message that is not a runner's report", () => {
  it.each([
    {
      what: "corrupt (cut JSON)",
      message: (pod: V1Pod) => reportFor(pod, { reason: "Succeeded" }).slice(0, 40),
      problem: /: the report is not JSON: \{/,
    },
    {
      what: "oversized (more than a termination message holds)",
      message: () => OVERSIZED,
      problem: new RegExp(
        `: the report is ${Buffer.byteLength(OVERSIZED)} bytes, more than the ${REPORT_MAX_BYTES} a termination message holds$`,
      ),
    },
    {
      what: "text that is not a report (a crash's stack trace in the file)",
      message: () => "node:internal/process: Error: boom\n    at main (runner.js:1:1)\n",
      problem: /: the report is not JSON: node:internal\/process: Error: boom/,
    },
  ])(
    "ends the run RunnerLost when it is $what, naming what was wrong",
    async ({ what, message: text, problem }) => {
      const name = `bad-${what.split(" ")[0]}`;
      const pod = await firstPod(name, { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
      await running(name, pod);
      await endPod(core, pod, { exitCode: 1, message: text(pod) });
      const playbook = await waitForFinished(namespace, name, 30_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "RunnerLost" });
      expect(message(playbook)).toMatch(
        new RegExp(`^pod ${name}-1 ended without a valid runner report \\(Error, exit code 1\\)`),
      );
      expect(message(playbook)).toMatch(problem);
    },
  );

  it("is not trusted when the runner container was then SIGKILLed (exit code 137): RunnerLost, saying why", async () => {
    // Whoever killed the runner may have written its termination message (issue 23's forge).
    const name = "report-137";
    const pod = await firstPod(name, { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await running(name, pod);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }), { exitCode: 137 });
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(message(playbook)).toBe(
      `pod ${name}-1 ended without a valid runner report (Error, exit code 137): the runner container was killed by SIGKILL (exit code 137) and did not end on its own, so its termination message is not its report`,
    );
    expect(playbook.status?.tasks ?? []).toEqual([]);
  });

  it("is not trusted when the runner's exit code does not explain it: RunnerLost, saying why", async () => {
    const name = "report-exit";
    const pod = await firstPod(name, { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
    await running(name, pod);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }), { exitCode: 1 });
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(message(playbook)).toBe(
      `pod ${name}-1 ended without a valid runner report (Error, exit code 1): the runner exited with code 1, which its report does not explain (a runner that reports Succeeded exits 0), so its termination message is not trusted`,
    );
  });
});

describe.concurrent("a pod taken away while its run is live", () => {
  it("is re-created when lost with its node, the ceiling still counted from the run's start, and the run settles", async () => {
    const name = "lost-once";
    const first = await firstPod(name, {
      ceiling: "90s",
      backoffLimit: 1,
      tasks: [{ name: "naps", run: "sleep 4" }],
    });
    // The test controller's default killGrace is 2s.
    const firstDeadline = first.spec?.activeDeadlineSeconds ?? 0;
    expect(firstDeadline).toBe(90 + 2 + 5);
    await running(name, first);
    // Two seconds of the run pass before the loss (time, not a synchronisation): the new pod's
    // deadline must show the ceiling counted from the run's start.
    await sleep(2000);
    await losePodToGc(core, first);
    const second = await scheduledPod(core, namespace, `${name}-2`);
    expect(second.spec?.activeDeadlineSeconds).toBeLessThan(firstDeadline - 1);
    expect(second.metadata?.annotations?.["playbook.dev/run-start-time"]).toBe(
      first.metadata?.annotations?.["playbook.dev/run-start-time"],
    );
    await running(name, second);
    await reportPod(core, second, reportFor(second, { reason: "Succeeded" }));
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
    // The loss is not a task attempt: the task ran once, in the second pod.
    expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "naps", phase: "Succeeded", attempts: 1 });
    const lost = (await eventsOf(namespace, name, ["PodLost"])).find((e) => e.reason === "PodLost");
    expect(lost?.message).toContain("DeletionByPodGC");
    expect(lost?.message).toContain(`created pod ${name}-2 (attempt 2 of 2)`);
  });

  it.each([
    {
      how: "deleted (kubectl delete pod)",
      take: (pod: string) => kubectl(["-n", namespace, "delete", "pod", pod, "--wait=false"]),
    },
    {
      how: "evicted through the Eviction API",
      take: (pod: string) =>
        core.createNamespacedPodEviction({
          namespace,
          name: pod,
          body: { apiVersion: "policy/v1", kind: "Eviction", metadata: { name: pod, namespace } },
        }),
    },
    {
      how: "evicted by its node (memory pressure)",
      take: (pod: string) => evictPod(core, { namespace, name: pod }),
    },
  ])("is re-created when $how", async ({ how, take }) => {
    const name = `taken-${how.split(" ")[0]}${how.includes("node") ? "-node" : ""}`;
    const first = await firstPod(name, {
      ceiling: "90s",
      killGrace: "1s",
      tasks: [{ name: "naps", run: "sleep 3" }],
    });
    await running(name, first);
    await take(`${name}-1`);
    const second = await scheduledPod(core, namespace, `${name}-2`);
    await running(name, second);
    await reportPod(core, second, reportFor(second, { reason: "Succeeded" }));
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
    const lost = (await eventsOf(namespace, name, ["PodLost"])).find((e) => e.reason === "PodLost");
    expect(lost?.message).toContain(`${name}-2`);
  });
});

describe("a pod drained from its node", () => {
  it("is re-created: the Cancelled report its runner wrote on the kubelet's SIGTERM is not the run's cancel", async () => {
    const name = "drained";
    const first = await firstPod(name, {
      ceiling: "90s",
      killGrace: "1s",
      tasks: [{ name: "naps", run: "sleep 3" }],
    });
    // The test plays the kubelet: it stops the runner, which reports, then removes the pod.
    await scriptManually(core, first);
    await running(name, first);
    await core.deleteNamespacedPod({ namespace, name: `${name}-1`, gracePeriodSeconds: 30 });
    await endPod(core, first, {
      exitCode: 130,
      message: reportFor(first, { reason: "Cancelled", at: 0 }),
    });
    // The controller judges the ended pod (it makes the next one) before the kubelet removes it.
    const second = await scheduledPod(core, namespace, `${name}-2`);
    await core.deleteNamespacedPod({ namespace, name: `${name}-1`, gracePeriodSeconds: 0 });
    await running(name, second);
    await reportPod(core, second, reportFor(second, { reason: "Succeeded" }));
    const playbook = await waitForFinished(namespace, name, 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status).toMatchObject({ podAttempts: 2, podName: `${name}-2` });
    const lost = (await eventsOf(namespace, name, ["PodLost"])).find((e) => e.reason === "PodLost");
    expect(lost?.message).toBe(
      `Pod ${name}-1 was stopped from outside (Error, exit code 130); created pod ${name}-2 (attempt 2 of 3), the ceiling still counts from ${playbook.status?.startTime}`,
    );
  });
});

describe("the largest Playbook the CRD admits", () => {
  it("runs to Succeeded: its whole plan reaches the pod", async () => {
    // 204800 characters as the CRD counts them: 96 per task plus its name and run script.
    const fill = (name: string, size: number) => ({ name, run: `: ${"x".repeat(size - 2)}` });
    const tasks = [
      fill("a", 65_536),
      fill("b", 65_536),
      fill("c", 65_536),
      fill("d", 204_800 - 3 * 65_633 - 97),
    ];
    const tooLarge = await kubectlResult(
      ["-n", namespace, "create", "-f", "-"],
      JSON.stringify(
        playbookManifest("too-large", {
          tasks: [...tasks.slice(0, 3), fill("d", 204_800 - 3 * 65_633 - 96)],
        }),
      ),
    );
    expect(tooLarge.stderr).toContain("spec.tasks is too large to run");
    const pod = await firstPod("largest", { ceiling: "1m", tasks });
    // The runner reads its plan from the pod: every task's script is there whole.
    const plan = pod.metadata?.annotations?.["playbook.dev/plan"] ?? "";
    for (const task of tasks) expect(plan).toContain(task.run);
    await running("largest", pod);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const playbook = await waitForFinished(namespace, "largest", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual([
      "Succeeded",
      "Succeeded",
      "Succeeded",
      "Succeeded",
    ]);
  });
});

describe("a running Playbook", () => {
  it("refuses an edit of its tasks and keeps running what its pod was started with", async () => {
    const waits = { name: "waits", run: "sleep 600" };
    const pod = await firstPod("running-edit", { ceiling: "1m", tasks: [waits] });
    await running("running-edit", pod);
    await waitForPlaybook(namespace, "running-edit", "to have started", (p) => !!p.status?.startTime);
    const edit = await kubectlResult([
      ...["-n", namespace, "patch", "pb", "running-edit", "--type=merge"],
      ...["-p", JSON.stringify({ spec: { tasks: [waits, { name: "more", run: "true" }] } })],
    ]);
    expect(edit.stderr).toContain(
      "spec.tasks: Forbidden: spec.tasks cannot change once the run has started (status.startTime is set); only spec.cancel may",
    );
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const playbook = await waitForFinished(namespace, "running-edit", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(playbook.status?.tasks?.map((t) => t.name)).toEqual(["waits"]);
  });
});

describe("a run whose spec changed after its pod started", () => {
  it("is decided against its pod's plan", async () => {
    // Admission freezes the spec once status.startTime is set; between the pod's creation and
    // that status write an edit still gets through, which this test makes by removing startTime
    // while no controller runs.
    const ns = await createTestNamespace(core, "pb-plan");
    let second: RunningController | undefined;
    const first = startController([ns]);
    try {
      await createPlaybook(ns, "edited", { ceiling: "1m", tasks: [{ name: "waits", run: "sleep 600" }] });
      const pod = await scheduledPod(core, ns, "edited-1");
      await startPod(core, pod);
      await waitForPlaybook(ns, "edited", "to be Running", (p) => p.status?.phase === "Running", 30_000);
      await first.stop();
      await kubectl([
        ...["-n", ns, "patch", "pb", "edited", "--subresource=status", "--type=json"],
        ...["-p", JSON.stringify([{ op: "remove", path: "/status/startTime" }])],
      ]);
      // A ceiling the controller refuses and a task the pod never heard of.
      await patchSpec(ns, "edited", {
        ceiling: "48h",
        tasks: [
          { name: "waits", run: "sleep 600" },
          { name: "later", run: "true" },
        ],
      });
      second = startController([ns]);
      // The runner reports for the plan its pod carries: one task.
      await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
      const playbook = await waitForFinished(ns, "edited", 30_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status?.tasks?.map((t) => t.name)).toEqual(["waits"]);
      expect(playbook.status?.limits?.ceiling).toEqual({ value: "1m", source: "spec" });
      // The edit made generation 2; the run applied generation 1's spec.
      expect(playbook.metadata.generation).toBe(2);
      expect(playbook.status?.observedGeneration).toBe(1);
      expect(condition(playbook, "Succeeded")?.observedGeneration).toBe(1);
    } finally {
      await first.stop();
      await second?.stop();
      await deleteTestNamespace(core, ns);
    }
  });
});

describe("a pod that ends while no controller runs", () => {
  it("ends its run once, when the next controller starts", async () => {
    const ns = await createTestNamespace(core, "pb-down");
    const first = startController([ns]);
    let second: RunningController | undefined;
    try {
      await createPlaybook(ns, "ended", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
      const pod = await scheduledPod(core, ns, "ended-1");
      await startPod(core, pod);
      await waitForPlaybook(ns, "ended", "to be Running", (p) => p.status?.phase === "Running", 30_000);
      await first.stop();
      await reportPod(core, pod, reportFor(pod, { reason: "TaskFailed", at: 0, task: { exitCode: 2 } }));
      expect((await getPlaybook(ns, "ended")).status?.phase).toBe("Running");
      second = startController([ns]);
      const playbook = await waitForFinished(ns, "ended", 30_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "TaskFailed" });
      expect(playbook.status?.tasks?.[0]).toMatchObject({ name: "a", phase: "Failed", exitCode: 2 });
      expect(playbook.status).toMatchObject({ podAttempts: 1, podName: "ended-1" });
      expect((await podsOf(ns, "ended")).map((p) => p.metadata?.name)).toEqual(["ended-1"]);
      await runsCounted(second, ns, 1);
      const events = await eventsOf(ns, "ended", ["RunFailed"]);
      expect(events.filter((e) => e.reason === "RunFailed").map((e) => e.count ?? 1)).toEqual([1]);
      expect(events.filter((e) => e.reason === "PodCreated")).toHaveLength(1);
    } finally {
      await first.stop();
      await second?.stop();
      await deleteTestNamespace(core, ns);
    }
  });
});

describe("a pod lost while no controller runs", () => {
  it("is re-created once, by the next controller, and the run settles", async () => {
    const ns = await createTestNamespace(core, "pb-down-lost");
    const first = startController([ns]);
    let second: RunningController | undefined;
    try {
      await createPlaybook(ns, "gone", { ceiling: "1m", tasks: [{ name: "a", run: "true" }] });
      const pod = await scheduledPod(core, ns, "gone-1");
      await startPod(core, pod);
      await waitForPlaybook(ns, "gone", "to be Running", (p) => p.status?.phase === "Running", 30_000);
      await first.stop();
      await losePodToGc(core, pod);
      second = startController([ns]);
      const again = await scheduledPod(core, ns, "gone-2");
      await startPod(core, again);
      await reportPod(core, again, reportFor(again, { reason: "Succeeded" }));
      const playbook = await waitForFinished(ns, "gone", 30_000);
      expect(condition(playbook, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      expect(playbook.status).toMatchObject({ podAttempts: 2, podName: "gone-2" });
      await runsCounted(second, ns, 1);
      expect((await podsOf(ns, "gone")).map((p) => p.metadata?.name)).toEqual(["gone-2"]);
      const events = await eventsOf(ns, "gone", ["PodLost", "RunSucceeded"]);
      expect(events.filter((e) => e.reason === "PodLost")).toHaveLength(1);
      expect(events.filter((e) => e.reason === "PodCreated")).toHaveLength(2);
    } finally {
      await first.stop();
      await second?.stop();
      await deleteTestNamespace(core, ns);
    }
  });
});

describe("kubectl", () => {
  it("waits for --for=condition=Succeeded of a successful run", async () => {
    const pod = await firstPod("waited", { ceiling: "1m", tasks: [{ name: "a", run: "sleep 1" }] });
    const waiting = kubectl([
      ...["-n", namespace, "wait", "--for=condition=Succeeded", "playbook/waited", "--timeout=60s"],
    ]);
    await running("waited", pod);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    expect((await waiting).stdout).toContain("condition met");
  });

  it("shows phase, reason, the task that ended the run and age in `kubectl get pb`", async () => {
    const pod = await firstPod("shown", {
      ceiling: "1m",
      killGrace: "1s",
      tasks: [{ name: "slow", run: "sleep 30", timeout: "1s" }],
    });
    await running("shown", pod);
    await reportPod(core, pod, reportFor(pod, { reason: "TaskTimeout", at: 0 }));
    await waitForFinished(namespace, "shown", 30_000);
    const { stdout } = await kubectl(["-n", namespace, "get", "pb", "shown"]);
    const [header, row] = stdout.trim().split("\n");
    expect(header?.split(/\s+/)).toEqual(["NAME", "PHASE", "REASON", "TASK", "CURRENT", "AGE"]);
    expect(row?.split(/\s+/).slice(0, 4)).toEqual(["shown", "Failed", "TaskTimeout", "slow"]);
  });
});
