// The scripted node under the controller: the controller's pod is bound to it by the real
// scheduler, and what the test writes as the pod's status is what the controller judges. This
// file is also the pattern for the cluster suites: create a Playbook, take its pod, write the
// pod's life, read the Playbook's status.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { createTestNamespace, deleteTestNamespace, waitForPodGone } from "../harness/cluster-test.js";
import {
  endPod,
  holdPod,
  reportFor,
  reportPod,
  SCRIPTED_NODE_NAME,
  scheduledPod,
  startPod,
} from "../harness/scripted-node.js";
import {
  clients,
  condition,
  createPlaybook,
  getPlaybook,
  patchSpec,
  type RunningController,
  startController,
  waitForFinished,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
let namespace: string;
let restricted: string;
let controller: RunningController;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "scripted");
  restricted = await createTestNamespace(core, "scripted-restricted", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  controller = startController([namespace, restricted]);
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
  if (restricted) await deleteTestNamespace(core, restricted);
});

describe("the scripted node", () => {
  it("gets the controller's pod from the scheduler, and the report the test writes decides the run", async () => {
    await createPlaybook(namespace, "timeout", {
      ceiling: "1m",
      tasks: [
        { name: "build", run: "make" },
        { name: "slow", run: "sleep 30", timeout: "2s" },
        { name: "after", run: "true" },
      ],
    });
    const pod = await scheduledPod(core, namespace, "timeout-1");
    expect(pod.spec?.nodeName).toBe(SCRIPTED_NODE_NAME);
    await startPod(core, pod);
    await waitForPlaybook(namespace, "timeout", "to be Running", (p) => p.status?.phase === "Running");
    await reportPod(core, pod, reportFor(pod, { reason: "TaskTimeout", at: 1 }));
    const playbook = await waitForFinished(namespace, "timeout", 30_000);
    expect(condition(playbook, "LimitExceeded")).toMatchObject({ status: "True", reason: "TaskTimeout" });
    expect(playbook.status?.tasks?.map((t) => t.phase)).toEqual(["Succeeded", "TimedOut", "Skipped"]);
    expect(playbook.status?.tasks?.[1]).toMatchObject({
      limit: "TaskTimeout",
      limitValue: "2s",
      limitSource: "task",
    });
  });

  it("stops a cancelled run's pod at the deadline the controller lowered, as a kubelet would", async () => {
    await createPlaybook(namespace, "cancel", { ceiling: "1m", tasks: [{ name: "wait", run: "sleep 60" }] });
    const pod = await scheduledPod(core, namespace, "cancel-1");
    await startPod(core, pod);
    await waitForPlaybook(namespace, "cancel", "to be Running", (p) => p.status?.phase === "Running");
    await patchSpec(namespace, "cancel", { cancel: true });
    const playbook = await waitForFinished(namespace, "cancel", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
    const stopped = await core.readNamespacedPod({ namespace, name: "cancel-1" });
    expect(stopped.status).toMatchObject({ phase: "Failed", reason: "DeadlineExceeded" });
  });

  it("ends and removes a running pod deleted with a grace period, as a kubelet would", async () => {
    await createPlaybook(namespace, "deleted", { ceiling: "1m", tasks: [{ name: "wait", run: "sleep 60" }] });
    const pod = await scheduledPod(core, namespace, "deleted-1");
    await startPod(core, pod);
    await core.deleteNamespacedPod({ namespace, name: "deleted-1", gracePeriodSeconds: 30 });
    await waitForPodGone(core, namespace, "deleted-1", 30_000);
    // Gone without a word from the infrastructure: the controller makes the pod again.
    const again = await scheduledPod(core, namespace, "deleted-2");
    expect(again.metadata?.labels?.["playbook.dev/pod-attempt"]).toBe("2");
    expect((await getPlaybook(namespace, "deleted")).status).toMatchObject({
      podAttempts: 2,
      podName: "deleted-2",
    });
  });

  it("fails a running pod past its activeDeadlineSeconds as DeadlineExceeded, without a report", async () => {
    await createPlaybook(namespace, "deadline", {
      ceiling: "1m",
      tasks: [{ name: "held", run: "sleep 600" }],
    });
    const pod = await scheduledPod(core, namespace, "deadline-1");
    // Started long enough ago that its deadline (ceiling + margin) has passed.
    const deadline = pod.spec?.activeDeadlineSeconds ?? 0;
    expect(deadline).toBeGreaterThan(60);
    await startPod(core, pod, new Date(Date.now() - (deadline + 1) * 1000));
    const playbook = await waitForFinished(namespace, "deadline", 30_000);
    expect(condition(playbook, "LimitExceeded")).toMatchObject({
      status: "True",
      reason: "PodDeadlineExceeded",
    });
  });

  it("writes a runner's exit without a report as it is: the controller names what the kubelet said", async () => {
    await createPlaybook(namespace, "lost", { ceiling: "1m", tasks: [{ name: "one", run: "true" }] });
    const pod = await scheduledPod(core, namespace, "lost-1");
    await startPod(core, pod);
    await endPod(core, pod, { exitCode: 137, reason: "OOMKilled" });
    const playbook = await waitForFinished(namespace, "lost", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition(playbook, "Succeeded")?.message).toMatch(/OOMKilled, exit code 137/);
  });

  it("runs the tasks' containers beside the runner: all of them must run before the run is Running", async () => {
    await createPlaybook(namespace, "images", {
      ceiling: "1m",
      startTimeout: "4s",
      tasks: [{ name: "dump", run: "true" }],
    });
    const pod = await scheduledPod(core, namespace, "images-1");
    expect(pod.spec?.initContainers).toBeUndefined();
    expect(pod.spec?.containers[0]?.lifecycle?.postStart?.exec?.command).toEqual([
      "/usr/local/lib/playbook/agent",
      "--install",
      "/playbook/agent",
    ]);
    expect(pod.spec?.containers.map((c) => [c.name, c.image])).toEqual([
      ["runner", inject("runnerImage")],
      ["task-1", inject("runnerImage")],
    ]);
    // The runner runs; the task container's image cannot be pulled: the run has not started.
    await holdPod(core, pod, "ImagePullBackOff", `Back-off pulling image "${inject("runnerImage")}"`, [
      "task-1",
    ]);
    const playbook = await waitForFinished(namespace, "images", 30_000);
    expect(condition(playbook, "Succeeded")).toMatchObject({ status: "False", reason: "StartTimeout" });
    expect(condition(playbook, "Succeeded")?.message).toBe(
      `pod images-1 (attempt 1) never started: its containers did not all start within the 4s start timeout (spec.startTimeout); container task-1 (image ${inject("runnerImage")}): ImagePullBackOff: Back-off pulling image "${inject("runnerImage")}"`,
    );
  });

  it("fails a task whose container was OOMKilled, naming the container, its image and the kubelet's reason", async () => {
    await createPlaybook(namespace, "oom", {
      ceiling: "1m",
      tasks: [
        { name: "big", run: "make big" },
        { name: "after", run: "true" },
      ],
    });
    const pod = await scheduledPod(core, namespace, "oom-1");
    await startPod(core, pod);
    await waitForPlaybook(namespace, "oom", "to be Running", (p) => p.status?.phase === "Running");
    const report = reportFor(pod, {
      reason: "TaskFailed",
      at: 0,
      task: { exitCode: null, signal: "SIGKILL", lostContainer: "task-1" },
    });
    await reportPod(core, pod, report, { containers: { "task-1": { exitCode: 137, reason: "OOMKilled" } } });
    const playbook = await waitForFinished(namespace, "oom", 30_000);
    const lost = `container task-1 (image ${inject("runnerImage")}) was OOMKilled (exit 137)`;
    expect(condition(playbook, "Succeeded")).toMatchObject({
      status: "False",
      reason: "TaskFailed",
      message: `task big failed: ${lost}`,
    });
    expect(playbook.status?.tasks?.[0]).toMatchObject({
      name: "big",
      phase: "Failed",
      image: inject("runnerImage"),
      message: lost,
    });
  });

  it("creates pods the API server admits in a namespace that enforces restricted", async () => {
    await createPlaybook(restricted, "admitted", {
      ceiling: "1m",
      tasks: [
        { name: "one", run: "true" },
        { name: "two", run: "true", image: inject("runnerImage") },
      ],
    });
    const pod = await scheduledPod(core, restricted, "admitted-1");
    expect(pod.spec?.shareProcessNamespace).toBe(true);
    expect(pod.spec?.containers.map((c) => c.name)).toEqual(["runner", "task-1"]);
  });
});
