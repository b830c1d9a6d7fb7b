import { existsSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { type V1Pod, Watch } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeReport } from "../../src/api/report.js";
import { repoRoot } from "../harness/binaries.js";
import {
  clusterClients,
  createTestNamespace,
  deleteTestNamespace,
  losePod,
  marker,
  processesWithMarker,
  waitForPod,
  waitForPodGone,
} from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";

const { kubeConfig, core } = clusterClients();
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "process-node");
});
afterAll(() => deleteTestNamespace(core, namespace));

function shellPod(
  name: string,
  script: string,
  spec: Partial<V1Pod["spec"]> = {},
  args: string[] = [],
): V1Pod {
  return {
    metadata: { name },
    spec: {
      restartPolicy: "Never",
      containers: [
        {
          name: "main",
          image: "ghcr.io/example/shell:1",
          command: ["sh", "-c", script],
          args,
          env: [
            { name: "GREETING", value: "hello" },
            { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
          ],
        },
      ],
      ...spec,
    },
  };
}

const terminated = (pod: V1Pod) => pod.status?.containerStatuses?.[0]?.state?.terminated;
const finished = (pod: V1Pod) => pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed";

describe("the process node", () => {
  it("is scheduled to by the real scheduler, runs the pod and reports exit code and termination message", async () => {
    await core.createNamespacedPod({
      namespace,
      body: shellPod(
        "exits-three",
        'echo "$GREETING from $POD_NAME"; printf "report of %s" "$POD_NAME" > "$PLAYBOOK_TERMINATION_MESSAGE_PATH"; exit 3',
      ),
    });
    const pod = await waitForPod(core, namespace, "exits-three", "to finish", finished);

    expect(pod.spec?.nodeName).toBe("process-node");
    expect(pod.status?.conditions?.find((c) => c.type === "PodScheduled")?.status).toBe("True");
    expect(pod.status?.phase).toBe("Failed");
    expect(pod.status?.startTime).toBeDefined();
    expect(terminated(pod)).toMatchObject({ exitCode: 3, reason: "Error", message: "report of exits-three" });
  });

  it("points an argument naming terminationMessagePath at a writable file", async () => {
    const body = shellPod("message-arg", 'printf "all done" > "$1"', {}, ["sh", "/dev/termination-log"]);
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "message-arg", "to finish", finished);
    expect(pod.status?.phase).toBe("Succeeded");
    expect(terminated(pod)).toMatchObject({ exitCode: 0, reason: "Completed", message: "all done" });
  });

  it("falls back to the log tail for FallbackToLogsOnError when the message file is empty", async () => {
    const body = shellPod("falls-back", 'echo "first line"; echo "disk full" >&2; exit 1');
    const container = body.spec?.containers[0];
    if (container) container.terminationMessagePolicy = "FallbackToLogsOnError";
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "falls-back", "to finish", finished);
    expect(terminated(pod)).toMatchObject({
      exitCode: 1,
      reason: "Error",
      message: "first line\ndisk full\n",
    });
  });

  it("fails a pod that runs past activeDeadlineSeconds with DeadlineExceeded and kills its container", async () => {
    const tag = marker();
    await core.createNamespacedPod({
      namespace,
      body: shellPod("overruns", `sh -c 'sleep 300' ${tag} & sleep 300`, {
        activeDeadlineSeconds: 2,
        terminationGracePeriodSeconds: 1,
      }),
    });
    const pod = await waitForPod(
      core,
      namespace,
      "overruns",
      "to be killed",
      (p) => terminated(p) !== undefined,
    );

    expect(pod.status).toMatchObject({
      phase: "Failed",
      reason: "DeadlineExceeded",
      message: "Pod was active on the node longer than the specified deadline",
    });
    const started = new Date(pod.status?.startTime ?? 0).getTime();
    const ended = new Date(terminated(pod)?.finishedAt ?? 0).getTime();
    expect(ended - started).toBeGreaterThanOrEqual(2_000);
    // sh as the container's pid 1 ignores SIGTERM without a trap, as in a container: SIGKILL ends it.
    expect(terminated(pod)).toMatchObject({ exitCode: 137, signal: 9, reason: "Error" });
    expect(processesWithMarker(tag)).toEqual([]);
  });

  it("on deletion sends SIGTERM, waits the grace period, then SIGKILLs and completes the deletion", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "process-node-test-"));
    const signals = path.join(dir, "signals");
    const tag = marker();
    const script = `trap 'echo TERM >> ${signals}' TERM; sh -c 'sleep 300' ${tag} & while true; do sleep 0.1; done`;
    await core.createNamespacedPod({
      namespace,
      body: shellPod("ignores-term", script, { terminationGracePeriodSeconds: 3 }),
    });
    await waitForPod(
      core,
      namespace,
      "ignores-term",
      "to run",
      (p) => p.status?.containerStatuses?.[0]?.state?.running !== undefined,
    );
    await waitFor(
      "the pod's processes",
      async () => (processesWithMarker(tag).length > 0 ? true : undefined),
      {
        timeoutMs: 10_000,
      },
    );

    const deletedAt = Date.now();
    await core.deleteNamespacedPod({ namespace, name: "ignores-term" });
    await waitFor(
      "SIGTERM to reach the pod",
      async () => ((await readFile(signals, "utf8").catch(() => "")) ? true : undefined),
      {
        timeoutMs: 5_000,
      },
    );
    expect(processesWithMarker(tag).length).toBeGreaterThan(0);
    await waitForPodGone(core, namespace, "ignores-term", 30_000);
    const elapsed = Date.now() - deletedAt;

    expect(await readFile(signals, "utf8")).toBe("TERM\n");
    expect(elapsed).toBeGreaterThanOrEqual(3_000);
    expect(elapsed).toBeLessThan(10_000);
    expect(processesWithMarker(tag)).toEqual([]);
  });

  it("kills what the main process left running when it exits", async () => {
    const tag = marker();
    await core.createNamespacedPod({
      namespace,
      body: shellPod("leaves-a-child", `sh -c 'sleep 300' ${tag} & sleep 0.5; exit 0`),
    });
    const pod = await waitForPod(core, namespace, "leaves-a-child", "to finish", finished);
    expect(pod.status?.phase).toBe("Succeeded");
    await waitFor(
      "the orphan to be killed",
      async () => (processesWithMarker(tag).length === 0 ? true : undefined),
      {
        timeoutMs: 5_000,
      },
    );
  });

  it("can lose a pod as a node failure would: processes gone, pod failed and removed", async () => {
    const tag = marker();
    await core.createNamespacedPod({
      namespace,
      body: shellPod("lost", `sh -c 'sleep 300' ${tag}; sleep 300`),
    });
    await waitForPod(core, namespace, "lost", "to run", (p) => p.status?.phase === "Running");
    await waitFor(
      "the pod's processes",
      async () => (processesWithMarker(tag).length > 0 ? true : undefined),
      {
        timeoutMs: 10_000,
      },
    );

    const seen: { type: string; pod: V1Pod }[] = [];
    const watch = await new Watch(kubeConfig).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      { fieldSelector: "metadata.name=lost" },
      (type, pod: V1Pod) => seen.push({ type, pod }),
      () => {},
    );
    try {
      await losePod(namespace, "lost");
      await waitForPodGone(core, namespace, "lost", 10_000);
      await waitFor(
        "the DELETED event",
        async () => (seen.some((e) => e.type === "DELETED") ? true : undefined),
        {
          timeoutMs: 5_000,
        },
      );
    } finally {
      watch.abort();
    }

    // What a controller sees: Failed with PodGC's DisruptionTarget condition, and no container
    // termination reported, because the node never said another word about the pod.
    const last = seen.filter((e) => e.type === "DELETED").at(-1)?.pod;
    expect(last?.status?.phase).toBe("Failed");
    expect(last?.status?.conditions?.find((c) => c.type === "DisruptionTarget")).toMatchObject({
      status: "True",
      reason: "DeletionByPodGC",
      message: "PodGC: node no longer exists",
    });
    expect(last?.status?.containerStatuses?.[0]?.state?.running).toBeDefined();
    expect(processesWithMarker(tag)).toEqual([]);
  });

  it("runs the runner image's `playbook` command as this checkout's build and reports its report", async () => {
    if (!existsSync(path.join(repoRoot(), "dist", "src", "cli", "main.js"))) {
      throw new Error("dist/src/cli/main.js is missing: run `npm run build` (npm test does it in pretest)");
    }
    const plan = {
      name: "nightly",
      namespace,
      runStartTime: new Date().toISOString(),
      defaults: { ceilingMs: 3_600_000, maxCeilingMs: 86_400_000, stallMs: 600_000, killGraceMs: 10_000 },
      spec: { tasks: [{ name: "greet", run: "echo hello" }] },
    };
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: "runner" },
        spec: {
          restartPolicy: "Never",
          containers: [
            {
              name: "runner",
              image: "ghcr.io/playbook-controller/playbook-controller:dev",
              command: ["playbook", "pod-runner"],
              env: [{ name: "PLAYBOOK_PLAN", value: JSON.stringify(plan) }],
            },
          ],
        },
      },
    });
    const pod = await waitForPod(core, namespace, "runner", "to finish", finished);
    expect(pod.status?.phase).toBe("Succeeded");
    const report = decodeReport(terminated(pod)?.message ?? "", 1);
    expect(report).toMatchObject({ phase: "Succeeded", reason: "Succeeded" });
  });

  it("restarts an OnFailure container after a back-off and keeps its last termination", async () => {
    const script = 'if [ -f "$HOME/ran" ]; then exit 0; fi; touch "$HOME/ran"; exit 1';
    await core.createNamespacedPod({
      namespace,
      body: shellPod("retries", script, { restartPolicy: "OnFailure" }),
    });
    const pod = await waitForPod(core, namespace, "retries", "to succeed", finished, 60_000);
    expect(pod.status?.phase).toBe("Succeeded");
    const status = pod.status?.containerStatuses?.[0];
    expect(status?.restartCount).toBe(1);
    expect(status?.lastState?.terminated).toMatchObject({ exitCode: 1, reason: "Error" });
    expect(status?.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
  });

  it("serves the container's output to `kubectl logs` through the apiserver", async () => {
    await core.createNamespacedPod({
      namespace,
      body: shellPod("talks", 'for i in 1 2 3; do echo "line $i"; done; echo "to stderr" >&2'),
    });
    await waitForPod(core, namespace, "talks", "to finish", finished);
    expect(await core.readNamespacedPodLog({ namespace, name: "talks" })).toBe(
      "line 1\nline 2\nline 3\nto stderr\n",
    );
    expect(await core.readNamespacedPodLog({ namespace, name: "talks", tailLines: 2 })).toBe(
      "line 3\nto stderr\n",
    );
  });

  it("reports StartError when the command does not exist", async () => {
    const body = shellPod("no-such-command", "");
    const container = body.spec?.containers[0];
    if (container) container.command = ["definitely-not-a-command"];
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "no-such-command", "to finish", finished);
    expect(pod.status?.phase).toBe("Failed");
    expect(terminated(pod)).toMatchObject({ exitCode: 128, reason: "StartError" });
    expect(terminated(pod)?.message).toContain('"definitely-not-a-command": executable file not found');
  });
});
