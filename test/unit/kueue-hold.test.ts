// A run's pod while Kueue holds it (issue 43): Queued with Kueue's words from the pod's Workload,
// the queue timeout counted from the pod's creation and ending QueueTimeout (a limit: exit 124),
// the start timeout and the ceiling counted from the admission; a gated pod without a queue name
// reported as such. Pure decisions over observed state, as the end-to-end tests will drive them.
import { describe, expect, it } from "vitest";
import { exitCodeForReason } from "../../src/api/exit-codes.js";
import { isLimitReason } from "../../src/api/reasons.js";
import { KUEUE_ADMISSION_GATE } from "../../src/controller/kueue/kueue-names.js";
import type { WorkloadView } from "../../src/controller/kueue/workload-view.js";
import type { PodView } from "../../src/controller/objects.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { at, playbook, pod, recordedStatus, SETTINGS, SPEC, T0 } from "./controller-fixtures.js";

const QUEUED_SPEC = { ...SPEC, queueName: "team-a", queueTimeout: "10m" };

/** The run's first pod as Kueue's webhook left it: gated, created at T0. */
function gatedPod(spec: Record<string, unknown> = QUEUED_SPEC): PodView {
  const view = pod(1, { phase: "Pending", spec, created: T0 });
  view.spec = { ...view.spec, schedulingGates: [{ name: KUEUE_ADMISSION_GATE }] };
  view.status = {
    phase: "Pending",
    conditions: [
      {
        type: "PodScheduled",
        status: "False",
        reason: "SchedulingGated",
        message: "Scheduling is blocked due to non-empty scheduling gates",
      },
    ],
  };
  return view;
}

function workload(conditions: NonNullable<WorkloadView["status"]>["conditions"]): WorkloadView {
  return {
    metadata: {
      name: "pod-nightly-1-3f2a1",
      namespace: "ops",
      ownerReferences: [{ uid: "pod-uid-1", kind: "Pod" }],
    },
    status: { conditions },
  };
}

const NO_QUOTA = workload([
  {
    type: "QuotaReserved",
    status: "False",
    reason: "Pending",
    message:
      "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 100m more needed",
    lastTransitionTime: T0.toISOString(),
  },
]);

function decideAt(
  seconds: number,
  spec: Record<string, unknown>,
  pods: PodView[],
  workloads: WorkloadView[] = [],
) {
  const first = decide({ playbook: playbook(spec), pods: [], now: T0, settings: SETTINGS });
  return decide({
    playbook: playbook(spec, recordedStatus(first)),
    pods,
    now: at(seconds),
    settings: SETTINGS,
    workloads,
  });
}

const succeeded = (decision: ReturnType<typeof decide>) =>
  decision.status?.conditions?.find((c) => c.type === "Succeeded");

describe("a run whose pod Kueue holds", () => {
  it("is Queued with the Workload's reason and message, the queue and the time queued", () => {
    const decision = decideAt(200, QUEUED_SPEC, [gatedPod()], [NO_QUOTA]);
    expect(decision.status?.phase).toBe("Pending");
    expect(succeeded(decision)).toMatchObject({ status: "Unknown", reason: "Queued" });
    expect(succeeded(decision)?.message).toBe(
      `pod nightly-1 (attempt 1) waits for Kueue's admission in LocalQueue team-a: Pending: couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 100m more needed; queued 3m20s (since ${T0.toISOString()})`,
    );
    expect(decision.status?.queuedSince).toBe(T0.toISOString());
    expect(decision.finished).toBeUndefined();
    expect(decision.actions).toEqual([]);
  });

  it("says the quota is reserved in the moment before Kueue writes Admitted", () => {
    const reserved = workload([
      {
        type: "QuotaReserved",
        status: "True",
        reason: "QuotaReserved",
        message: "Quota reserved in ClusterQueue team-a",
        lastTransitionTime: at(25).toISOString(),
      },
    ]);
    const decision = decideAt(26, QUEUED_SPEC, [gatedPod()], [reserved]);
    expect(succeeded(decision)?.message).toContain(
      "in LocalQueue team-a: QuotaReserved: Quota reserved in ClusterQueue team-a; queued 26s",
    );
  });

  it("says the pod is admitted in the moment before Kueue removes its gate", () => {
    const admittedStill = workload([
      {
        type: "QuotaReserved",
        status: "True",
        reason: "QuotaReserved",
        message: "Quota reserved in ClusterQueue team-a",
      },
      { type: "Admitted", status: "True", reason: "Admitted", message: "The workload is admitted" },
    ]);
    const decision = decideAt(27, QUEUED_SPEC, [gatedPod()], [admittedStill]);
    expect(succeeded(decision)).toMatchObject({ status: "Unknown", reason: "Queued" });
    expect(succeeded(decision)?.message).toBe(
      `pod nightly-1 (attempt 1) is admitted by Kueue in LocalQueue team-a (Admitted: The workload is admitted); its admission gate is being removed; queued 27s (since ${T0.toISOString()})`,
    );
  });

  it("says so when Kueue has made no Workload for the pod yet", () => {
    const decision = decideAt(5, QUEUED_SPEC, [gatedPod()]);
    expect(succeeded(decision)?.message).toContain("in LocalQueue team-a: no Workload seen for it yet");
  });

  it("is not ended by its start timeout or its ceiling while it waits: only the queue timeout counts", () => {
    const spec = { ...SPEC, ceiling: "15m", startTimeout: "1m", queueName: "team-a" };
    const decision = decideAt(3600, spec, [gatedPod(spec)], [NO_QUOTA]);
    expect(decision.finished).toBeUndefined();
    expect(succeeded(decision)?.reason).toBe("Queued");
  });

  it("ends QueueTimeout when its queue timeout passes, naming the queue and Kueue's last word, and deletes the pod", () => {
    const decision = decideAt(600, QUEUED_SPEC, [gatedPod()], [NO_QUOTA]);
    expect(succeeded(decision)).toMatchObject({ status: "False", reason: "QueueTimeout" });
    expect(succeeded(decision)?.message).toBe(
      "pod nightly-1 (attempt 1) was not admitted by Kueue within its 10m queue timeout (spec.queueTimeout) in LocalQueue team-a; Kueue's last word: Pending: couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 100m more needed",
    );
    expect(decision.status?.conditions?.find((c) => c.type === "LimitExceeded")).toMatchObject({
      status: "True",
      reason: "QueueTimeout",
    });
    expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
    expect(decision.finished?.limit).toBe("QueueTimeout");
    expect(decision.status).not.toHaveProperty("queuedSince");
    // The LimitFired event names the limit, its value and its level, as the other limits' do.
    expect(decision.events.find((e) => e.reason === "LimitFired")?.message).toBe(
      `QueueTimeout fired: queue timeout 10m (source spec, spec.queueTimeout): ${succeeded(decision)?.message}`,
    );
  });

  it("looks again by its queue deadline, however quiet Kueue is", () => {
    const decision = decideAt(590, QUEUED_SPEC, [gatedPod()], [NO_QUOTA]);
    expect(decision.requeueAfterMs).toBe(10_000);
  });

  it("writes nothing while only the clock moves, and again when Kueue's words change", () => {
    const first = decideAt(10, QUEUED_SPEC, [gatedPod()], [NO_QUOTA]);
    const stored = first.status ?? undefined;
    const again = decide({
      playbook: playbook(QUEUED_SPEC, stored),
      pods: [gatedPod()],
      now: at(40),
      settings: SETTINGS,
      workloads: [NO_QUOTA],
    });
    expect(again.status).toBeNull();
    const checks = workload([
      {
        type: "QuotaReserved",
        status: "True",
        reason: "QuotaReserved",
        message: "Quota reserved in ClusterQueue team-a-cq",
      },
      {
        type: "Admitted",
        status: "False",
        reason: "UnsatisfiedChecks",
        message: "The workload has failed admission checks",
      },
    ]);
    const changed = decide({
      playbook: playbook(QUEUED_SPEC, stored),
      pods: [gatedPod()],
      now: at(50),
      settings: SETTINGS,
      workloads: [checks],
    });
    expect(succeeded(changed)?.message).toContain(
      "team-a: UnsatisfiedChecks: The workload has failed admission checks",
    );
  });
});

describe("a pod Kueue holds though its run names no queue", () => {
  it("is reported as held by Kueue's gate, not as unschedulable", () => {
    const decision = decideAt(30, SPEC, [gatedPod(SPEC)]);
    expect(succeeded(decision)?.reason).toBe("Queued");
    expect(succeeded(decision)?.message).toMatch(
      /^pod nightly-1 \(attempt 1\) is held by Kueue's admission gate though the run names no queue: .*manageJobsWithoutQueueName.*set spec\.queueName/,
    );
    expect(succeeded(decision)?.message).not.toContain("SchedulingGated");
  });
});

describe("a pod Kueue admitted", () => {
  const admitted = (seconds: number) =>
    workload([
      {
        type: "QuotaReserved",
        status: "True",
        reason: "QuotaReserved",
        message: "Quota reserved",
        lastTransitionTime: at(seconds).toISOString(),
      },
      {
        type: "Admitted",
        status: "True",
        reason: "Admitted",
        message: "The workload is admitted",
        lastTransitionTime: at(seconds).toISOString(),
      },
    ]);
  const ungated = () => {
    const view = pod(1, { phase: "Pending", spec: QUEUED_SPEC, created: T0 });
    view.status = {
      phase: "Pending",
      conditions: [
        {
          type: "PodScheduled",
          status: "False",
          reason: "Unschedulable",
          message: "0/1 nodes are available",
        },
      ],
    };
    return view;
  };

  it("counts its start timeout from the admission, not from its creation", () => {
    // Created at T0, admitted at 20m: its 5m start window runs to 25m.
    const before = decideAt(24 * 60, QUEUED_SPEC, [ungated()], [admitted(20 * 60)]);
    expect(before.finished).toBeUndefined();
    const after = decideAt(25 * 60, QUEUED_SPEC, [ungated()], [admitted(20 * 60)]);
    expect(succeeded(after)?.reason).toBe("StartTimeout");
  });

  it("says queuedSince only while queued: it goes once Kueue admits the pod", () => {
    const queued = decideAt(10, QUEUED_SPEC, [gatedPod()], [NO_QUOTA]);
    expect(queued.status?.queuedSince).toBe(T0.toISOString());
    const next = decide({
      playbook: playbook(QUEUED_SPEC, queued.status ?? undefined),
      pods: [ungated()],
      now: at(30),
      settings: SETTINGS,
      workloads: [admitted(20)],
    });
    expect(next.status?.phase).toBe("Pending");
    expect(next.status).not.toHaveProperty("queuedSince");
  });

  it("is not ended for a ceiling its time in the queue would have used", () => {
    // A 30m ceiling, 40m in the queue: the ceiling counts from the admission.
    const decision = decideAt(42 * 60, QUEUED_SPEC, [ungated()], [admitted(40 * 60)]);
    expect(decision.finished).toBeUndefined();
  });
});

describe("the reasons Kueue brings", () => {
  it("QueueTimeout is a limit (exit 124); Preempted a lost outcome (exit 3)", () => {
    expect(isLimitReason("QueueTimeout")).toBe(true);
    expect(exitCodeForReason("QueueTimeout")).toBe(124);
    expect(isLimitReason("Preempted")).toBe(false);
    expect(exitCodeForReason("Preempted")).toBe(3);
  });
});
