// spec.startTimeout, the fifth limit: from a pod's creation until its runner starts. The decision
// is a pure function of the Playbook, its pods and the time.
import { describe, expect, it } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import type { PodView } from "../../src/controller/objects.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { at, playbook, pod, recordedStatus, SETTINGS, SPEC, T0 } from "./controller-fixtures.js";

const succeeded = (status: PlaybookStatus | null | undefined) =>
  status?.conditions?.find((c) => c.type === "Succeeded");
const limitExceeded = (status: PlaybookStatus | null | undefined) =>
  status?.conditions?.find((c) => c.type === "LimitExceeded");

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

/** The status after the given attempt's pod was created; the run started at T0. */
function started(spec: Record<string, unknown> = {}, attempts = 1): PlaybookStatus {
  const first = decide(input({ playbook: playbook(spec) }));
  return recordedStatus(first, attempts);
}

/** A pod the API server created at `createdAt` that no node has started. */
function waitingPod(
  attempt: number,
  createdAt: Date,
  status: NonNullable<PodView["status"]>,
  spec?: Record<string, unknown>,
): PodView {
  const manifest = pod(attempt, { phase: "Pending", ...(spec ? { spec } : {}) });
  return {
    ...manifest,
    metadata: { ...manifest.metadata, creationTimestamp: createdAt.toISOString() },
    status: { phase: "Pending", ...status },
  };
}

const UNSCHEDULABLE = {
  conditions: [
    {
      type: "PodScheduled",
      status: "False",
      reason: "Unschedulable",
      message: "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available.",
    },
  ],
};

const waitingFor = (reason: string, message: string) => ({
  conditions: [{ type: "PodScheduled", status: "True" }],
  containerStatuses: [{ name: "runner", state: { waiting: { reason, message } } }],
});

describe("a pod that does not start", () => {
  it("is looked at again when its start window closes", () => {
    const decision = decide(
      input({ playbook: playbook({}, started()), pods: [waitingPod(1, T0, UNSCHEDULABLE)], now: at(60) }),
    );
    expect(decision.finished).toBeUndefined();
    expect(decision.actions).toEqual([]);
    expect(decision.requeueAfterMs).toBe((300 - 60) * 1000);
  });

  it("ends the run StartTimeout with the scheduler's reason once the default 5m passed, and removes the pod", () => {
    const decision = decide(
      input({ playbook: playbook({}, started()), pods: [waitingPod(1, T0, UNSCHEDULABLE)], now: at(300) }),
    );
    expect(decision.status?.phase).toBe("Failed");
    const condition = succeeded(decision.status);
    expect(condition).toMatchObject({ status: "False", reason: "StartTimeout" });
    expect(condition?.message).toBe(
      "pod nightly-1 (attempt 1) never started: its containers did not all start within the 5m start timeout (the default start timeout); Unschedulable: 0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available.",
    );
    expect(limitExceeded(decision.status)).toMatchObject({ status: "True", reason: "StartTimeout" });
    expect(decision.status?.limits?.startTimeout).toEqual({ value: "5m", source: "default" });
    expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
    expect(decision.finished).toMatchObject({ reason: "StartTimeout", limit: "StartTimeout" });
    expect(decision.events.map((e) => e.reason)).toEqual(["LimitFired", "RunFailed"]);
    expect(decision.events[0]?.message).toContain("StartTimeout fired: start timeout 5m (source default");
  });

  it.each([
    ["ErrImagePull", "failed to pull image registry.example/tools:1: not found"],
    ["ImagePullBackOff", 'Back-off pulling image "registry.example/tools:1"'],
    ["RunContainerError", "failed to create containerd task"],
  ])("names the kubelet's waiting reason %s in the message", (reason, message) => {
    const decision = decide(
      input({
        playbook: playbook({}, started()),
        pods: [waitingPod(1, T0, waitingFor(reason, message))],
        now: at(301),
      }),
    );
    expect(succeeded(decision.status)?.reason).toBe("StartTimeout");
    expect(succeeded(decision.status)?.message).toContain(`never started`);
    expect(succeeded(decision.status)?.message).toContain(
      `; container runner (image runner:test): ${reason}: ${message}`,
    );
  });

  it("waits for every task container: one whose image cannot be pulled holds a running pod, and ends it StartTimeout naming it", () => {
    const spec = { ...SPEC, tasks: [{ name: "dump", run: "pg_dump", image: "postgres:16" }] };
    const settings = { ...SETTINGS, allowedImages: ["postgres:16"] };
    const first = decide({ ...input({ playbook: playbook(spec) }), settings });
    const status = recordedStatus(first);
    const decideAt = (pod: PodView, seconds: number) =>
      decide({
        ...input({ playbook: playbook(spec, structuredClone(status)), pods: [pod], now: at(seconds) }),
        settings,
      });
    const held = {
      ...waitingPod(1, T0, {}, spec),
      status: {
        phase: "Running",
        containerStatuses: [
          { name: "runner", state: { running: {} } },
          {
            name: "task-1",
            state: {
              waiting: { reason: "ImagePullBackOff", message: 'Back-off pulling image "postgres:16"' },
            },
          },
        ],
      },
    };
    const pending = decideAt(held, 60);
    expect(pending.status?.phase).toBe("Pending");
    expect(succeeded(pending.status)?.message).toBe(
      'pod nightly-1 is pending (attempt 1): container task-1 (image postgres:16): ImagePullBackOff: Back-off pulling image "postgres:16"',
    );
    const decision = decideAt(held, 300);
    expect(succeeded(decision.status)).toMatchObject({
      reason: "StartTimeout",
      message:
        'pod nightly-1 (attempt 1) never started: its containers did not all start within the 5m start timeout (the default start timeout); container task-1 (image postgres:16): ImagePullBackOff: Back-off pulling image "postgres:16"',
    });
    const running = {
      ...held,
      status: {
        phase: "Running",
        containerStatuses: [
          { name: "runner", state: { running: {} } },
          { name: "task-1", state: { running: {} } },
        ],
      },
    };
    const startedRun = decideAt(running, 400);
    expect(startedRun.status?.phase).toBe("Running");
  });

  it("takes spec.startTimeout over the default, and says so", () => {
    const spec = { startTimeout: "1m" };
    const decision = decide(
      input({
        playbook: playbook(spec, started(spec)),
        pods: [waitingPod(1, T0, UNSCHEDULABLE, { ...SPEC, ...spec })],
        now: at(60),
      }),
    );
    expect(succeeded(decision.status)?.reason).toBe("StartTimeout");
    expect(succeeded(decision.status)?.message).toContain("the 1m start timeout (spec.startTimeout)");
    expect(decision.status?.limits?.startTimeout).toEqual({ value: "1m", source: "spec" });
  });

  it("does not end a run whose pod started, however long the start took", () => {
    const running = { ...waitingPod(1, T0, {}), status: { phase: "Running" } };
    const decision = decide(input({ playbook: playbook({}, started()), pods: [running], now: at(400) }));
    expect(decision.finished).toBeUndefined();
    expect(decision.status?.phase).toBe("Running");
  });

  it("gives a pod re-created after a loss a fresh window", () => {
    const status = started({}, 2);
    const recreated = waitingPod(2, at(600), UNSCHEDULABLE);
    const before = decide(input({ playbook: playbook({}, status), pods: [recreated], now: at(899) }));
    expect(before.finished).toBeUndefined();
    expect(before.requeueAfterMs).toBe(1000);
    const after = decide(input({ playbook: playbook({}, status), pods: [recreated], now: at(900) }));
    expect(succeeded(after.status)?.message).toContain("pod nightly-2 (attempt 2) never started");
  });

  it("but not a fresh ceiling: the ceiling ends a re-created pod that cannot start in time, StartTimeout saying so", () => {
    const status = started({}, 2);
    const recreated = waitingPod(2, at(1700), UNSCHEDULABLE);
    const waiting = decide(input({ playbook: playbook({}, status), pods: [recreated], now: at(1750) }));
    expect(waiting.requeueAfterMs).toBe((1810 - 1750) * 1000);
    const decision = decide(input({ playbook: playbook({}, status), pods: [recreated], now: at(1810) }));
    expect(succeeded(decision.status)).toMatchObject({
      reason: "StartTimeout",
      message:
        "pod nightly-2 (attempt 2) never started: its containers did not all start before the run's 30m ceiling (spec.ceiling) passed, sooner than its 5m start timeout (the default start timeout); Unschedulable: 0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available.",
    });
    expect(limitExceeded(decision.status)).toMatchObject({ status: "True", reason: "StartTimeout" });
  });

  it("names the start timeout in the status of a run from its first status write", () => {
    const decision = decide(input({}));
    expect((decision.status ?? decision.pending)?.limits).toMatchObject({
      ceiling: { value: "30m", source: "spec" },
      startTimeout: { value: "5m", source: "default" },
    });
  });
});

describe("a pod whose runner image cannot be pulled, whatever the ceiling (issue 34 item 2)", () => {
  const pullFailing = (reason: string, message: string) => ({
    conditions: [{ type: "PodScheduled", status: "True" }],
    containerStatuses: [
      { name: "runner", state: { waiting: { reason, message } } },
      { name: "task-1", state: { waiting: { reason: "PodInitializing" } } },
    ],
  });
  const PULL = 'Back-off pulling image "runner:test": ErrImagePull: failed to pull and unpack image';
  // No task timeout: SPEC's 10m would not fit a 1m ceiling.
  const TASKS = [{ name: "build", run: "make" }];

  it.each([
    {
      name: "a ceiling shorter than the start timeout: StartTimeout when the ceiling and killGrace passed",
      spec: { ceiling: "1m", killGrace: "10s", tasks: TASKS },
      endsAt: 70,
      ceilingUsed: 0,
      when: "before the run's 1m ceiling (spec.ceiling) passed, sooner than its 5m start timeout (the default start timeout)",
    },
    {
      name: "a start timeout shorter than the ceiling: StartTimeout when the window closed",
      spec: { ceiling: "10m", startTimeout: "2m", tasks: TASKS },
      endsAt: 120,
      ceilingUsed: 1,
      when: "within the 2m start timeout (spec.startTimeout)",
    },
    {
      name: "a start timeout as long as the ceiling: StartTimeout when the window closed",
      spec: { ceiling: "1m", startTimeout: "1m", killGrace: "0s", tasks: TASKS },
      endsAt: 60,
      ceilingUsed: 0,
      when: "within the 1m start timeout (spec.startTimeout)",
    },
  ])("$name, naming the image and the kubelet's reason", ({ spec, endsAt, when, ceilingUsed }) => {
    const podSpec = { ...SPEC, ...spec };
    const pending = waitingPod(1, T0, pullFailing("ImagePullBackOff", PULL), podSpec);
    const before = decide(
      input({ playbook: playbook(spec, started(spec)), pods: [pending], now: at(endsAt - 1) }),
    );
    expect(before.finished).toBeUndefined();
    expect(before.requeueAfterMs).toBe(1000);
    const decision = decide(
      input({ playbook: playbook(spec, started(spec)), pods: [pending], now: at(endsAt) }),
    );
    expect(succeeded(decision.status)).toMatchObject({
      status: "False",
      reason: "StartTimeout",
      message: `pod nightly-1 (attempt 1) never started: its containers did not all start ${when}; container runner (image runner:test): ImagePullBackOff: ${PULL}`,
    });
    expect(limitExceeded(decision.status)).toMatchObject({ status: "True", reason: "StartTimeout" });
    expect(decision.finished).toMatchObject({ reason: "StartTimeout", limit: "StartTimeout" });
    // No near miss of the ceiling is counted for a run the ceiling ended.
    expect(decision.finished?.usage.filter((u) => u.limit === "RunCeiling").length).toBe(ceilingUsed);
    expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
  });

  it("never ends RunCeiling while the pod has not started, long after both limits passed", () => {
    const spec = { ceiling: "1m", tasks: TASKS };
    const pending = waitingPod(1, T0, pullFailing("ErrImagePull", "not found"), { ...SPEC, ...spec });
    const decision = decide(
      input({ playbook: playbook(spec, started(spec)), pods: [pending], now: at(3600) }),
    );
    expect(succeeded(decision.status)?.reason).toBe("StartTimeout");
    expect(succeeded(decision.status)?.message).toContain(
      "container runner (image runner:test): ErrImagePull: not found",
    );
  });
});

describe("spec.startTimeout the API server could not check", () => {
  it("refuses one longer than the default ceiling as InvalidSpec, naming the field", () => {
    const decision = decide(input({ playbook: playbook({ ceiling: undefined, startTimeout: "2h" }) }));
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({
      reason: "InvalidSpec",
      message: "spec.startTimeout: 2h is longer than the default ceiling 1h",
    });
  });
});

describe("a pending run says what holds its pod", () => {
  /** The first pod was created at T0, its status (Pending, the start and plan) written first. */
  const fresh = () => playbook({}, started());
  const firstPass = (status: NonNullable<PodView["status"]>, seconds: number, previous = fresh()) =>
    decide(input({ playbook: previous, pods: [waitingPod(1, T0, status)], now: at(seconds) }));

  it.each([
    {
      name: "an image pull failing (ErrImagePull)",
      status: waitingFor("ErrImagePull", 'failed to pull image "nope:1": not found'),
      says: 'pod nightly-1 is pending (attempt 1): container runner (image runner:test): ErrImagePull: failed to pull image "nope:1": not found',
    },
    {
      name: "the kubelet backing off the pull (ImagePullBackOff)",
      status: waitingFor("ImagePullBackOff", 'Back-off pulling image "nope:1"'),
      says: 'pod nightly-1 is pending (attempt 1): container runner (image runner:test): ImagePullBackOff: Back-off pulling image "nope:1"',
    },
    {
      name: "no node for it (Unschedulable, in the scheduler's words)",
      status: UNSCHEDULABLE,
      says: "pod nightly-1 is pending (attempt 1): Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.",
    },
    {
      name: "its init container's image (naming the container)",
      status: {
        conditions: [{ type: "PodScheduled", status: "True" }],
        initContainerStatuses: [
          { name: "agent", state: { waiting: { reason: "ErrImagePull", message: "x" } } },
        ],
        containerStatuses: [{ name: "runner", state: { waiting: { reason: "PodInitializing" } } }],
      },
      says: "pod nightly-1 is pending (attempt 1): container agent: ErrImagePull: x",
    },
  ])("within a second for $name", ({ status, says }) => {
    const decision = firstPass(status, 1);
    expect(decision.status?.phase).toBe("Pending");
    expect(succeeded(decision.status)).toMatchObject({ status: "Unknown", reason: "Pending" });
    expect(succeeded(decision.status)?.message).toContain(says);
  });

  it("writes nothing while the pod is only on its way up (ContainerCreating, PodInitializing)", () => {
    for (const reason of ["ContainerCreating", "PodInitializing"]) {
      const decision = firstPass(waitingFor(reason, ""), 1);
      expect(decision.status).toBeNull();
      // Looked at again when its start window closes.
      expect(decision.requeueAfterMs).toBe((300 - 1) * 1000);
    }
  });

  it("writes again only when what holds it changes", () => {
    const pulling = waitingFor("ErrImagePull", "not found");
    const first = firstPass(pulling, 1);
    const shown = playbook({}, first.status as PlaybookStatus);
    expect(firstPass(pulling, 5, shown).status).toBeNull();
    const backingOff = firstPass(waitingFor("ImagePullBackOff", "Back-off"), 12, shown);
    expect(succeeded(backingOff.status)?.message).toBe(
      "pod nightly-1 is pending (attempt 1): container runner (image runner:test): ImagePullBackOff: Back-off",
    );
    // The condition's transition time stays: its status is Unknown throughout.
    expect(succeeded(backingOff.status)?.lastTransitionTime).toBe(
      succeeded(first.status)?.lastTransitionTime,
    );
  });
});
