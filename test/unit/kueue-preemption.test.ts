// A run's pod that Kueue stopped (issue 43): its TerminationTarget condition names Kueue's reason
// and message; the runner reported the SIGTERM as a cancel. Never a task's failure: Requeue (the
// default) creates a new pod that queues again, spending no attempt of backoffLimit; Fail ends the
// run Preempted (exit 3) with Kueue's words. The controller's finalizer keeps such a pod until the
// status records what followed it, and comes off at once after. Pure decisions.
import { describe, expect, it } from "vitest";
import { exitCodeForReason } from "../../src/api/exit-codes.js";
import { type LimitDefaults, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema, type PlaybookStatus } from "../../src/api/playbook.js";
import { PolicySpecSchema, policyLimitDefaults, policyRules } from "../../src/api/policy.js";
import type { TaskOutcome } from "../../src/api/report.js";
import { releaseActions } from "../../src/controller/kueue/kueue-finalizer.js";
import { admissionSeen, queueBudgetUsed } from "../../src/controller/kueue/kueue-hold.js";
import { KUEUE_TERMINATION_CONDITION, PREEMPTION_FINALIZER } from "../../src/controller/kueue/kueue-names.js";
import { kueueStopOf } from "../../src/controller/kueue/kueue-preemption.js";
import type { PodView } from "../../src/controller/objects.js";
import { planDefaults } from "../../src/controller/plan-digest.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { unbuiltReason } from "../../src/controller/playbook/trusted-pod.js";
import { builtPodDifference } from "../../src/controller/pods/built-pod-difference.js";
import { buildPod } from "../../src/controller/pods/pod-builder.js";
import {
  at,
  exitCodeOf,
  playbook,
  pod,
  recordedStatus,
  report,
  SETTINGS,
  SPEC,
  T0,
} from "./controller-fixtures.js";

const QUEUED = { ...SPEC, queueName: "team-a", backoffLimit: 0 };
const PREEMPTED_MESSAGE =
  "Preempted to accommodate a workload (UID: 5c1e, JobUID: 77ab) due to prioritization in the ClusterQueue; preemptor path: /team-cq; preemptee path: /team-cq";

const succeeded = (status: PlaybookStatus | null | undefined) =>
  status?.conditions?.find((c) => c.type === "Succeeded");

const task = (name: string, outcome: Partial<TaskOutcome>): TaskOutcome => ({
  name,
  phase: "Succeeded",
  attempts: 1,
  exitCode: 0,
  signal: null,
  startTime: at(1),
  completionTime: at(2),
  ...outcome,
});

/** The runner's report of the SIGTERM Kueue's deletion sent: build done, test cancelled. */
const CANCELLED = {
  phase: "Cancelled",
  reason: "Cancelled",
  tasks: [
    task("build", {}),
    task("test", { phase: "Cancelled", exitCode: null, signal: "SIGTERM", ending: "Exited" }),
  ],
} as const;

/** The pod of `attempt` as Kueue stopped it: its condition, its deletion, the runner's report. */
function stoppedPod(
  attempt: number,
  spec: Record<string, unknown> = QUEUED,
  outcome: { reason: string; phase: string; tasks: readonly TaskOutcome[] } = CANCELLED,
  reason = "WorkloadEvictedDueToPreempted",
  queuedMs?: number,
  defaults?: LimitDefaults,
): PodView {
  const view = pod(attempt, {
    queuedMs,
    ...(defaults ? { defaults } : {}),
    phase: "Failed",
    deleting: true,
    spec,
    terminated: { exitCode: exitCodeOf(outcome), message: report(outcome as never) },
  });
  view.status = {
    ...view.status,
    conditions: [{ type: KUEUE_TERMINATION_CONDITION, status: "True", reason, message: PREEMPTED_MESSAGE }],
  };
  return view;
}

function input(spec: Record<string, unknown>, pods: PodView[], status?: PlaybookStatus): ReconcileInput {
  const first = decide({ playbook: playbook(spec), pods: [], now: T0, settings: SETTINGS });
  return {
    playbook: playbook(spec, status ?? recordedStatus(first)),
    pods,
    now: at(70),
    settings: SETTINGS,
  };
}

describe("Kueue's words on a pod it stops", () => {
  it("are its TerminationTarget condition: the reason with and without Kueue's prefix, and the message", () => {
    expect(kueueStopOf(stoppedPod(1))).toEqual({
      condition: "WorkloadEvictedDueToPreempted",
      reason: "Preempted",
      message: PREEMPTED_MESSAGE,
    });
    expect(
      kueueStopOf(stoppedPod(1, QUEUED, CANCELLED, "WorkloadEvictedDueToPodsReadyTimeout"))?.reason,
    ).toBe("PodsReadyTimeout");
    expect(kueueStopOf(pod(1, { spec: QUEUED }))).toBeUndefined();
  });
});

describe("a run whose pod Kueue preempted, onPreemption Requeue (the default)", () => {
  const decision = decide(input(QUEUED, [stoppedPod(1)]));
  const created = decision.actions.find((a) => a.type === "createPod");

  it("creates a new pod that queues again, without spending an attempt of backoffLimit (0 here)", () => {
    expect(created?.type === "createPod" && created.pod.metadata.name).toBe("nightly-2");
    expect(created?.type === "createPod" && created.pod.metadata.labels["kueue.x-k8s.io/queue-name"]).toBe(
      "team-a",
    );
    expect(decision.finished).toBeUndefined();
    expect(decision.status).toMatchObject({
      phase: "Pending",
      podName: "nightly-2",
      podAttempts: 2,
      preemptions: 1,
    });
    expect(succeeded(decision.status)).toMatchObject({ status: "Unknown", reason: "Pending" });
    // The new pod runs the tasks from the first: the stopped pod's rows are not its.
    expect(decision.status?.tasks).toBeUndefined();
    expect(decision.preempted).toEqual({ reason: "Preempted" });
  });

  it("keeps the ceiling counting from the run's start", () => {
    if (created?.type !== "createPod") throw new Error("no pod created");
    // 70s of the 30m ceiling gone: the new pod's deadline is what is left, not a fresh ceiling.
    expect(created.pod.spec.activeDeadlineSeconds).toBe(1800 - 70 + 10 + 5);
    expect(created.pod.metadata.annotations["playbook.dev/run-start-time"]).toBe(T0.toISOString());
  });

  it("says what Kueue said in a Warning event", () => {
    const event = decision.events.find((e) => e.reason === "Preempted");
    expect(event?.type).toBe("Warning");
    expect(event?.message).toBe(
      `Kueue stopped pod nightly-1 (attempt 1): WorkloadEvictedDueToPreempted: ${PREEMPTED_MESSAGE}; 1 of 2 tasks had succeeded; created pod nightly-2 (attempt 2), which queues again and runs the tasks from the first; no attempt of backoffLimit spent (preemption 1 of maxPreemptions 5), the ceiling still counts from ${T0.toISOString()}`,
    );
  });

  it("still spends no attempt the second time, and a real loss after that still counts against backoffLimit", () => {
    const after = { ...(decision.status as PlaybookStatus), podUID: "pod-uid-2" };
    const again = decide(input(QUEUED, [stoppedPod(2)], after));
    expect(again.status).toMatchObject({ podName: "nightly-3", podAttempts: 3, preemptions: 2 });
    const lost = decide(input(QUEUED, [], { ...(again.status as PlaybookStatus), podUID: "pod-uid-3" }));
    expect(succeeded(lost.status)).toMatchObject({ status: "False", reason: "PodLost" });
    expect(succeeded(lost.status)?.message).toMatch(
      /the pod was lost 1 time, more than backoffLimit 0 allows$/,
    );
  });

  it("ends RunCeiling instead when the ceiling has passed", () => {
    const late = { ...input(QUEUED, [stoppedPod(1)]), now: at(1801) };
    const ended = decide(late);
    expect(succeeded(ended.status)).toMatchObject({ status: "False", reason: "RunCeiling" });
    expect(ended.actions.some((a) => a.type === "createPod")).toBe(false);
  });
});

describe("a run re-created after a preemption is not charged its pods' time in Kueue's queue", () => {
  /** `stoppedPod(attempt)`, created at `created` and admitted by Kueue (its gate gone) at `admitted`. */
  function queuedThenStopped(attempt: number, created: number, admitted: number, earlier?: number): PodView {
    const view = stoppedPod(attempt, QUEUED, CANCELLED, "WorkloadEvictedDueToPreempted", earlier);
    view.metadata.creationTimestamp = at(created).toISOString();
    view.status = {
      ...view.status,
      conditions: [
        ...(view.status?.conditions ?? []),
        { type: "PodScheduled", status: "True", lastTransitionTime: at(admitted).toISOString() },
      ],
    };
    return view;
  }
  const envOf = (action: unknown, name: string) => {
    const pod = (action as { pod: { spec: { containers: { env?: { name: string; value: string }[] }[] } } })
      .pod;
    return pod.spec.containers[0]?.env?.find((e) => e.name === name)?.value;
  };
  // Pod 1: created at T0, admitted 40s later, preempted at 70s.
  const decision = decide(input(QUEUED, [queuedThenStopped(1, 0, 40)]));
  const created = decision.actions.find((a) => a.type === "createPod");

  it("records the wait and moves the next pod's ceiling on by it", () => {
    if (created?.type !== "createPod") throw new Error("no pod created");
    expect(decision.status?.queuedMs).toBe(40_000);
    // 70s since the run's start, 40s of it queued: 30s of the 30m ceiling are gone, not 70s.
    expect(created.pod.spec.activeDeadlineSeconds).toBe(1800 - 30 + 10 + 5);
    expect(envOf(created, "PLAYBOOK_CEILING_LEFT_MS")).toBe(String((1800 - 30) * 1000));
    expect(created.pod.metadata.annotations["playbook.dev/run-start-time"]).toBe(T0.toISOString());
    expect(decision.events.find((e) => e.reason === "Preempted")?.message).toMatch(
      /the ceiling still counts from \S+, less the 40s its pods waited in Kueue's queue$/,
    );
  });

  it("is the pod the controller would build from its plan (the plan carries the wait)", () => {
    if (created?.type !== "createPod") throw new Error("no pod created");
    const view = {
      ...created.pod,
      metadata: { ...created.pod.metadata, uid: "pod-uid-2", creationTimestamp: at(70).toISOString() },
    } as unknown as PodView;
    const next = input(QUEUED, [view], decision.status as PlaybookStatus);
    expect(unbuiltReason({ ...next, now: at(71) }, view)).toBeUndefined();
  });

  it("adds each pod's wait: a second preemption keeps both", () => {
    const after = { ...(decision.status as PlaybookStatus), podUID: "pod-uid-2" };
    // Pod 2: created at 70s, admitted at 100s, preempted at 130s.
    const again = decide({ ...input(QUEUED, [queuedThenStopped(2, 70, 100, 40_000)], after), now: at(130) });
    const next = again.actions.find((a) => a.type === "createPod");
    if (next?.type !== "createPod") throw new Error("no pod created");
    expect(again.status?.queuedMs).toBe(70_000);
    expect(next.pod.spec.activeDeadlineSeconds).toBe(1800 - 60 + 10 + 5);
  });

  it("does not end the run RunCeiling while the ceiling, less the wait, has time left", () => {
    const late = decide({ ...input(QUEUED, [queuedThenStopped(1, 0, 40)]), now: at(1801) });
    expect(succeeded(late.status)?.reason).not.toBe("RunCeiling");
    expect(late.actions.some((a) => a.type === "createPod")).toBe(true);
    const later = decide({ ...input(QUEUED, [queuedThenStopped(1, 0, 40)]), now: at(1841) });
    expect(succeeded(later.status)).toMatchObject({ status: "False", reason: "RunCeiling" });
  });
});

describe("a run whose pod Kueue is stopping, its runner not ended yet", () => {
  it("is Running, saying so in Kueue's words", () => {
    const view = stoppedPod(1);
    view.status = { ...view.status, phase: "Running", containerStatuses: [] };
    const running = pod(1, { spec: QUEUED, deleting: true });
    running.status = { ...running.status, conditions: view.status.conditions };
    const decision = decide(input(QUEUED, [running]));
    expect(succeeded(decision.status)?.message).toBe(
      `pod nightly-1 is running (attempt 1); Kueue is stopping it: WorkloadEvictedDueToPreempted: ${PREEMPTED_MESSAGE}`,
    );
  });
});

describe("a run whose pod Kueue preempted, onPreemption Fail", () => {
  const spec = { ...QUEUED, onPreemption: "Fail" };
  const decision = decide(input(spec, [stoppedPod(1, spec)]));

  it("ends Preempted (exit 3, not a limit) with Kueue's reason and message, its tasks as the runner reported", () => {
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "Preempted" });
    expect(succeeded(decision.status)?.message).toBe(
      `Kueue stopped pod nightly-1 (attempt 1): WorkloadEvictedDueToPreempted: ${PREEMPTED_MESSAGE}; spec.onPreemption is Fail; 1 of 2 tasks had succeeded`,
    );
    expect(decision.status?.conditions?.find((c) => c.type === "LimitExceeded")).toBeUndefined();
    expect(decision.status?.phase).toBe("Failed");
    expect(decision.status?.tasks?.map((t) => [t.name, t.phase])).toEqual([
      ["build", "Succeeded"],
      ["test", "Cancelled"],
    ]);
    expect(decision.finished?.reason).toBe("Preempted");
    expect(exitCodeForReason("Preempted")).toBe(3);
    expect(decision.actions.some((a) => a.type === "createPod")).toBe(false);
    expect(decision.preempted).toEqual({ reason: "Preempted" });
  });

  it("says so in a Warning event", () => {
    const event = decision.events.find((e) => e.reason === "Preempted");
    expect(event).toMatchObject({ type: "Warning" });
    expect(event?.message).toMatch(/the run ends Preempted \(spec\.onPreemption: Fail\)$/);
  });
});

describe("a run preempted past its maxPreemptions", () => {
  const CLUSTER = { runnerImage: "runner:test", allowedServiceAccounts: [], allowedImages: [] };
  const governed = (policy: Record<string, unknown>) =>
    policyRules({ name: "default", generation: 1, spec: PolicySpecSchema.parse(policy) }, CLUSTER);
  /** Each preemption of the run, in turn: the decision on its `count`th stopped pod. */
  function preemptUntilEnded(spec: Record<string, unknown>, base: Partial<ReconcileInput> = {}) {
    const first = decide({ playbook: playbook(spec), pods: [], now: T0, settings: SETTINGS, ...base });
    let status = { ...(recordedStatus(first) as PlaybookStatus) };
    const decisions = [];
    for (let attempt = 1; attempt <= 10; attempt += 1) {
      const decision = decide({
        ...base,
        playbook: playbook(spec, status),
        pods: [
          stoppedPod(attempt, spec, CANCELLED, "WorkloadEvictedDueToPreempted", undefined, {
            ...(base.settings ?? SETTINGS).defaults,
            ...(base.rules ? { policy: policyLimitDefaults(base.rules) } : {}),
          }),
        ],
        now: at(70 * attempt),
        settings: base.settings ?? SETTINGS,
      });
      decisions.push(decision);
      if (decision.finished) return { decisions, status: first.pending ?? first.status };
      status = { ...(decision.status as PlaybookStatus), podUID: `pod-uid-${attempt + 1}` };
    }
    throw new Error("the run never ended");
  }

  it("requeues maxPreemptions times, then ends Preempted naming the count (spec.maxPreemptions 1)", () => {
    const { decisions } = preemptUntilEnded({ ...QUEUED, maxPreemptions: 1 });
    expect(decisions).toHaveLength(2);
    expect(decisions[0]?.status).toMatchObject({ podName: "nightly-2", preemptions: 1 });
    const last = decisions[1];
    expect(succeeded(last?.status)).toMatchObject({ status: "False", reason: "Preempted" });
    expect(succeeded(last?.status)?.message).toBe(
      `Kueue stopped pod nightly-2 (attempt 2): WorkloadEvictedDueToPreempted: ${PREEMPTED_MESSAGE}; 1 of 2 tasks had succeeded; preempted 2 times, past maxPreemptions 1 (spec)`,
    );
    expect(last?.status?.conditions?.find((c) => c.type === "LimitExceeded")).toBeUndefined();
    expect(last?.finished?.reason).toBe("Preempted");
    expect(last?.preempted).toEqual({ reason: "Preempted" });
    expect(last?.actions.some((a) => a.type === "createPod")).toBe(false);
    expect(last?.events.find((e) => e.reason === "Preempted")).toMatchObject({
      type: "Warning",
      message: expect.stringMatching(
        /; the run ends Preempted: preempted 2 times, past maxPreemptions 1 \(spec\)$/,
      ),
    });
  });

  it("ends at the first stop with maxPreemptions 0", () => {
    const { decisions } = preemptUntilEnded({ ...QUEUED, maxPreemptions: 0 });
    expect(decisions).toHaveLength(1);
    expect(succeeded(decisions[0]?.status)?.message).toMatch(
      /; preempted 1 time, past maxPreemptions 0 \(spec\)$/,
    );
  });

  it("takes the controller's default, 5, when neither the spec nor a policy says, and shows it", () => {
    const settings = { ...SETTINGS, defaults: { ...SETTINGS.defaults, maxPreemptions: 5 } };
    const { decisions } = preemptUntilEnded(QUEUED, { settings });
    expect(decisions).toHaveLength(6);
    expect(decisions[0]?.status?.limits?.maxPreemptions).toEqual({ value: 5, source: "default" });
    expect(succeeded(decisions[5]?.status)?.message).toMatch(
      /; preempted 6 times, past maxPreemptions 5 \(default\)$/,
    );
  });

  it("holds a run of an earlier version, whose plan has no maxPreemptions, to the default's 5", () => {
    const { decisions } = preemptUntilEnded(QUEUED);
    expect(decisions).toHaveLength(6);
    expect(decisions[0]?.status?.limits?.maxPreemptions).toBeUndefined();
  });

  it("takes the policy's default, then the policy's maximum, over the controller's", () => {
    const settings = { ...SETTINGS, defaults: { ...SETTINGS.defaults, maxPreemptions: 5 } };
    const byDefault = preemptUntilEnded(QUEUED, {
      settings,
      rules: governed({ defaults: { maxPreemptions: 2 } }),
    });
    expect(byDefault.decisions).toHaveLength(3);
    expect(byDefault.decisions[0]?.status?.limits?.maxPreemptions).toEqual({ value: 2, source: "policy" });
    expect(succeeded(byDefault.decisions[2]?.status)?.message).toMatch(
      /; preempted 3 times, past maxPreemptions 2 \(policy\)$/,
    );
    const byMaximum = preemptUntilEnded(QUEUED, {
      settings,
      rules: governed({ maximums: { maxPreemptions: 1 } }),
    });
    expect(byMaximum.decisions).toHaveLength(2);
    expect(byMaximum.decisions[0]?.status?.limits?.maxPreemptions).toEqual({ value: 1, source: "policy" });
  });

  it("refuses a spec past the policy's maximum before a pod exists", () => {
    const decision = decide({
      playbook: playbook({ ...QUEUED, maxPreemptions: 3 }),
      pods: [],
      now: T0,
      settings: SETTINGS,
      rules: governed({ maximums: { maxPreemptions: 2 } }),
    });
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(decision.status)?.message).toBe(
      "spec.maxPreemptions: 3 is more than the namespace's maximum maxPreemptions 2 (PlaybookPolicy default, spec.maximums.maxPreemptions)",
    );
  });
});

describe("a pod Kueue stopped that the run ended on its own", () => {
  it("is decided by its report: the run's own outcome came first", () => {
    const done = {
      phase: "Succeeded",
      reason: "Succeeded",
      tasks: [task("build", {}), task("test", {})],
    } as const;
    const decision = decide(input(QUEUED, [stoppedPod(1, QUEUED, done)]));
    expect(succeeded(decision.status)).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(decision.preempted).toBeUndefined();
  });
});

describe("a cancelled run whose pod Kueue stopped", () => {
  it("ends Cancelled: the cancel decides", () => {
    const started = input(QUEUED, [stoppedPod(1)]);
    const decision = decide({
      ...started,
      playbook: playbook({ ...QUEUED, cancel: true }, started.playbook.status),
    });
    expect(succeeded(decision.status)?.reason).toBe("Cancelled");
    expect(decision.actions.some((a) => a.type === "createPod")).toBe(false);
  });
});

describe("the controller's finalizer", () => {
  const held = (attempt: number, spec: Record<string, unknown> = QUEUED) => pod(attempt, { spec });

  it("is on every pod of a run that goes through Kueue, and on no other", () => {
    expect(held(1).metadata.finalizers).toEqual([PREEMPTION_FINALIZER]);
    expect(pod(1).metadata.finalizers).toBeUndefined();
  });

  it("is accepted by the comparison with the built pod, on or off, beside Kueue's own", () => {
    const spec = PlaybookSpecSchema.parse(QUEUED);
    const limits = resolveLimits(spec, SETTINGS.defaults);
    const built = buildPod({
      playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
      spec,
      limits,
      defaults: planDefaults(limits),
      attempt: 1,
      runStart: T0,
      now: T0,
      runnerImage: "runner:test",
    });
    expect(built.metadata.finalizers).toEqual([PREEMPTION_FINALIZER]);
    const found = structuredClone(built) as unknown as { metadata: Record<string, unknown> };
    found.metadata.finalizers = [PREEMPTION_FINALIZER, "kueue.x-k8s.io/managed"];
    expect(builtPodDifference(found, built, 0)).toBeUndefined();
    found.metadata.finalizers = ["kueue.x-k8s.io/managed"];
    expect(builtPodDifference(found, built, 0)).toBeUndefined();
  });

  it("stays on the current pod of a run that goes on, even as it is deleted", () => {
    const status = { podAttempts: 1, podName: "nightly-1" } as PlaybookStatus;
    expect(releaseActions(status, [stoppedPod(1)])).toEqual([]);
  });

  it("comes off a pod of an earlier attempt once the status records the next one", () => {
    const status = { podAttempts: 2, podName: "nightly-2" } as PlaybookStatus;
    expect(releaseActions(status, [stoppedPod(1), held(2)])).toEqual([
      { type: "releasePod", name: "nightly-1" },
    ]);
  });

  it("comes off every pod of a finished run (and a TTL's deletion is not held up)", () => {
    const spec = { ...QUEUED, onPreemption: "Fail" };
    const ended = decide(input(spec, [stoppedPod(1, spec)])).status as PlaybookStatus;
    expect(releaseActions(ended, [stoppedPod(1, spec)])).toEqual([{ type: "releasePod", name: "nightly-1" }]);
    // decide() releases it on the pass after the status recorded the run's end.
    const next = decide({ ...input(spec, [stoppedPod(1, spec)], ended) });
    expect(next.actions).toContainEqual({ type: "releasePod", name: "nightly-1" });
  });

  it("is not asked off a pod that does not carry it", () => {
    const status = { podAttempts: 2 } as PlaybookStatus;
    expect(releaseActions(status, [pod(1)])).toEqual([]);
  });
});

describe("the queue's figures", () => {
  it("observes the wait at the admission: creation to admission, once, with the pod's queue", () => {
    const view = pod(1, { spec: QUEUED, created: T0 });
    const queued = {
      podName: "nightly-1",
      conditions: [{ type: "Succeeded", status: "Unknown", reason: "Queued" }],
    } as PlaybookStatus;
    expect(admissionSeen(queued, view, at(95).getTime())).toEqual({ queue: "team-a", waitSeconds: 95 });
    const running = {
      podName: "nightly-1",
      conditions: [{ type: "Succeeded", status: "Unknown", reason: "Running" }],
    } as PlaybookStatus;
    expect(admissionSeen(running, view, at(95).getTime())).toBeUndefined();
    expect(admissionSeen(queued, pod(1, { created: T0 }), at(95).getTime())).toBeUndefined();
  });

  it("gives the share of the queue budget a held run has used", () => {
    const status = {
      queuedSince: T0.toISOString(),
      queue: { name: "team-a" },
      limits: { queueTimeout: { value: "10m", source: "spec" } },
      conditions: [{ type: "Succeeded", status: "Unknown", reason: "Queued" }],
    } as unknown as PlaybookStatus;
    expect(queueBudgetUsed(status, at(480))).toEqual({ queue: "team-a", ratio: 0.8 });
    const { limits: _none, ...unbounded } = status;
    expect(queueBudgetUsed(unbounded as PlaybookStatus, at(480))).toBeUndefined();
  });
});
