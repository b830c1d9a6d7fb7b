// A pod whose node stopped reporting, as the node lifecycle controller leaves it (Ready False, the
// runner's status as the kubelet last wrote it): the decisions, over time. The real kubelet
// stopped for good is test/real-node/faults.test.ts.
import { describe, expect, it } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import type { PodView } from "../../src/controller/objects.js";
import { recordedRunningPod } from "../../src/controller/playbook/progress-looks.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { NODE_SILENCE_MS, nodeSilenceOf } from "../../src/controller/pods/node-lost.js";
import { at, playbook, pod, recordedStatus, SETTINGS, SPEC, T0 } from "./controller-fixtures.js";

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

function started(spec: Record<string, unknown> = {}): PlaybookStatus {
  const first = decide(input({ playbook: playbook(spec) }));
  return recordedStatus(first);
}

const succeeded = (status: PlaybookStatus | null | undefined) =>
  status?.conditions?.find((c) => c.type === "Succeeded");

/** A running pod on node-a; `markedAt` seconds: when its Ready condition turned False. */
function runningPod(
  options: {
    markedAt?: number;
    runnerReady?: boolean;
    deleting?: boolean;
    spec?: Record<string, unknown>;
  } = {},
): PodView {
  const base = pod(1, {
    nodeName: "node-a",
    spec: { ...SPEC, ...options.spec },
    ...(options.deleting ? { deleting: true } : {}),
  });
  return {
    ...base,
    status: {
      ...base.status,
      conditions: [
        {
          type: "Ready",
          status: options.markedAt === undefined ? "True" : "False",
          lastTransitionTime: at(options.markedAt ?? 2).toISOString(),
        },
      ],
      containerStatuses: [
        { name: "runner", ready: options.runnerReady ?? true, state: { running: { startedAt: at(2) } } },
        { name: "task-1", ready: true, state: { running: { startedAt: at(2) } } },
      ],
    },
  };
}

describe("nodeSilenceOf", () => {
  it("reads the node controller's mark: Ready False beside a runner that runs and is ready", () => {
    expect(nodeSilenceOf(runningPod({ markedAt: 60 }))).toEqual({
      node: "node-a",
      since: at(60).getTime(),
      lostAt: at(60).getTime() + NODE_SILENCE_MS,
    });
  });

  it("is undefined for a pod the kubelet says is ready, or not ready itself", () => {
    expect(nodeSilenceOf(runningPod())).toBeUndefined();
    // The kubelet writes Ready False with a runner that is not ready (it ended, it is starting).
    expect(nodeSilenceOf(runningPod({ markedAt: 60, runnerReady: false }))).toBeUndefined();
  });
});

describe("the progress of a run whose node stopped reporting", () => {
  it("is not read: its kubelet does not answer, so the read would wait out its deadline", () => {
    const running = (p: PodView) =>
      playbook({}, {
        phase: "Running",
        startTime: T0.toISOString(),
        podName: p.metadata.name,
        podUID: p.metadata.uid ?? "",
      } as PlaybookStatus);
    const answering = runningPod();
    expect(recordedRunningPod(running(answering), [answering])).toBe(answering);
    const silent = runningPod({ markedAt: 60 });
    expect(recordedRunningPod(running(silent), [silent])).toBeUndefined();
  });
});

describe("a running pod whose node stopped reporting", () => {
  const spec = { backoffLimit: 1 };

  it("keeps the run Running, saying so, and is looked at again when the silence reaches 30s", () => {
    const decision = decide(
      input({
        playbook: playbook(spec, started(spec)),
        pods: [runningPod({ markedAt: 60, spec })],
        now: at(70),
      }),
    );
    expect(decision.status?.phase).toBe("Running");
    expect(succeeded(decision.status)?.message).toBe(
      "pod nightly-1 is running (attempt 1); its node node-a stopped reporting",
    );
    expect(decision.actions).toEqual([]);
    expect(decision.requeueAfterMs).toBe(NODE_SILENCE_MS - 10_000);
  });

  it("is deleted and re-created once its node said nothing for 30s, while backoffLimit allows", () => {
    const decision = decide(
      input({
        playbook: playbook(spec, started(spec)),
        pods: [runningPod({ markedAt: 60, spec })],
        now: at(90),
      }),
    );
    expect(decision.actions.map((a) => [a.type, "name" in a ? a.name : undefined])).toEqual([
      ["deletePod", "nightly-1"],
      ["createPod", undefined],
    ]);
    expect(decision.status).toMatchObject({ phase: "Pending", podAttempts: 2, podName: "nightly-2" });
    expect(decision.events[0]).toMatchObject({
      type: "Warning",
      reason: "PodLost",
      message: `Pod nightly-1 was lost with its node node-a, which stopped reporting: the pod was marked not Ready at ${at(60).toISOString()} and its node said nothing for 30s since; created pod nightly-2 (attempt 2 of 2), the ceiling still counts from ${T0.toISOString()}`,
    });
  });

  it("ends the run PodLost when no re-creation is left, and a pod already deleted is not deleted again", () => {
    const decision = decide(
      input({
        playbook: playbook({ backoffLimit: 0 }, started({ backoffLimit: 0 })),
        pods: [runningPod({ markedAt: 60, deleting: true, spec: { backoffLimit: 0 } })],
        now: at(95),
      }),
    );
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({
      status: "False",
      reason: "PodLost",
      message: `pod nightly-1 was lost with its node node-a, which stopped reporting: the pod was marked not Ready at ${at(60).toISOString()} and its node said nothing for 35s since; the pod was lost 1 time, more than backoffLimit 0 allows`,
    });
  });
});
