// The namespace's maximums bound the pod's whole life: a policy that bounds the ceiling and says
// nothing of finally tasks holds their window within its ceiling, and maximums.taskTimeout bounds
// every task, main or finally, with a timeout of its own or without one.
import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import { PLAN_ANNOTATION, parsePlan } from "../../src/api/plan.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { describePodBound, startDeadlineSeconds } from "../../src/api/pod-bound.js";
import { PolicySpecSchema } from "../../src/api/policy.js";
import { policyProblems } from "../../src/api/policy-consistency.js";
import { limitDefaults, loadControllerConfig } from "../../src/controller/config.js";
import { type Action, decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { activeDeadlineSeconds, DEADLINE_MARGIN_SECONDS } from "../../src/controller/pods/pod-builder.js";
import { attemptDeadline } from "../../src/pod-runner/run.js";
import {
  createdPod,
  governed,
  playbook,
  recordedStatus,
  SETTINGS,
  succeeded,
  T0,
} from "./controller-fixtures.js";

/** The controller's own flags as they are by default: --max-finally-ceiling 1h, --max-kill-grace 5m. */
const CONTROLLER = { ...SETTINGS, defaults: limitDefaults(loadControllerConfig({}, {})) };

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: CONTROLLER, ...partial };
}

const planOf = (actions: Action[]) => {
  const read = parsePlan(createdPod(actions).metadata.annotations[PLAN_ANNOTATION] ?? "");
  if (!read.ok) throw new Error(read.problem);
  return read.plan;
};

/** The issue's policy: written before finally tasks existed, so it says nothing of them. */
const ISSUE_POLICY = { maximums: { ceiling: "10m", killGrace: "30s", taskTimeout: "10m" } };
const ONE_TASK = { tasks: [{ name: "build", run: "make" }] };
const CLEANUP = [{ name: "cleanup", run: "./cleanup" }];

describe("a policy that bounds the ceiling and says nothing of finally tasks", () => {
  const rules = governed(ISSUE_POLICY);

  it("refuses a finally window that does not fit in its maximum ceiling: InvalidSpec naming each part, no pod", () => {
    const decision = decide(
      input({
        playbook: playbook({
          ...ONE_TASK,
          ceiling: "10m",
          killGrace: "30s",
          finallyCeiling: "1h",
          finally: CLEANUP,
        }),
        rules,
      }),
    );
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(decision.status)?.message).toBe(
      "spec.finallyCeiling: the ceiling 10m (spec.ceiling) plus the finally tasks' window, finallyCeiling 1h (spec.finallyCeiling) and killGrace 30s (spec.killGrace), is 1h10m30s, longer than the namespace's maximum ceiling 10m (PlaybookPolicy default, spec.maximums.ceiling), which bounds the finally tasks too: the policy sets no spec.maximums.finallyCeiling",
    );
    expect(decision.actions).toEqual([]);
    expect(decision.finished?.policyRefusals).toEqual(["spec.finallyCeiling"]);
  });

  it("refuses the controller's default finallyCeiling too, at spec, naming where it comes from", () => {
    const decision = decide(
      input({ playbook: playbook({ ...ONE_TASK, ceiling: "8m", finally: CLEANUP }), rules }),
    );
    expect(succeeded(decision.status)?.message).toBe(
      "spec: the ceiling 8m (spec.ceiling) plus the finally tasks' window, finallyCeiling 5m (the default finally ceiling) and killGrace 10s (the default kill grace), is 13m10s, longer than the namespace's maximum ceiling 10m (PlaybookPolicy default, spec.maximums.ceiling), which bounds the finally tasks too: the policy sets no spec.maximums.finallyCeiling",
    );
  });

  it.each([
    { name: "no finally tasks, the ceiling at the maximum", spec: { ceiling: "10m", killGrace: "30s" } },
    {
      name: "finally tasks whose window fits",
      spec: { ceiling: "7m", killGrace: "30s", finallyCeiling: "2m30s", finally: CLEANUP },
    },
    { name: "a short ceiling and the default finallyCeiling", spec: { ceiling: "4m", finally: CLEANUP } },
  ])(
    "creates the pod for $name, its deadline within maximums.ceiling plus killGrace and the margin",
    ({ spec }) => {
      const decision = decide(input({ playbook: playbook({ ...ONE_TASK, ...spec }), rules }));
      const pod = createdPod(decision.actions);
      expect(pod.spec.activeDeadlineSeconds).toBeLessThanOrEqual(600 + 30 + DEADLINE_MARGIN_SECONDS);
    },
  );

  it("keeps the pod's deadline within the bound it gave before finally tasks, whatever the spec asks", () => {
    const bound = 600 + 30 + DEADLINE_MARGIN_SECONDS;
    for (const ceiling of ["1m", "5m", "9m", "10m"]) {
      for (const finallyCeiling of ["10s", "1m", "5m", "30m", "1h"]) {
        for (const killGrace of ["0s", "10s", "30s"]) {
          const decision = decide(
            input({
              playbook: playbook({ ...ONE_TASK, ceiling, killGrace, finallyCeiling, finally: CLEANUP }),
              rules,
            }),
          );
          const pod = decision.actions.find((a) => a.type === "createPod");
          if (pod?.type === "createPod")
            expect(pod.pod.spec.activeDeadlineSeconds).toBeLessThanOrEqual(bound);
          else expect(succeeded(decision.status)?.reason).toBe("InvalidSpec");
        }
      }
    }
  });
});

describe("the PodCreated event (kubectl describe pb)", () => {
  it("names each part of the pod's deadline and where it is set", () => {
    const rules = governed({ ...ISSUE_POLICY, defaults: { killGrace: "30s" } });
    const decision = decide(
      input({
        playbook: playbook({ ...ONE_TASK, ceiling: "7m", finallyCeiling: "2m", finally: CLEANUP }),
        rules,
      }),
    );
    expect(decision.events.find((e) => e.reason === "PodCreated")?.message).toBe(
      "Created pod nightly-1 (attempt 1) with activeDeadlineSeconds 605s (what is left of the ceiling 7m (spec.ceiling) + killGrace 30s (the namespace policy's default kill grace) + finallyCeiling 2m (spec.finallyCeiling) + killGrace 30s (the namespace policy's default kill grace) + margin 5s)",
    );
  });
});

describe("where the finally window has a maximum of its own", () => {
  it("takes the policy's maximums.finallyCeiling as it says: the window is added past the ceiling", () => {
    const rules = governed({ maximums: { ...ISSUE_POLICY.maximums, finallyCeiling: "15m" } });
    const decision = decide(
      input({
        playbook: playbook({
          ...ONE_TASK,
          ceiling: "10m",
          killGrace: "30s",
          finallyCeiling: "15m",
          finally: CLEANUP,
        }),
        rules,
      }),
    );
    expect(createdPod(decision.actions).spec.activeDeadlineSeconds).toBe(600 + 30 + 900 + 30 + 5);
  });

  it("takes the controller's --max-finally-ceiling in a namespace without a policy, as before", () => {
    const decision = decide(
      input({ playbook: playbook({ ...ONE_TASK, ceiling: "10m", finallyCeiling: "1h", finally: CLEANUP }) }),
    );
    expect(createdPod(decision.actions).spec.activeDeadlineSeconds).toBe(600 + 10 + 3600 + 10 + 5);
  });

  it("takes the controller's flags under a policy that bounds neither the ceiling nor the finally window", () => {
    const rules = governed({ maximums: { taskTimeout: "10m" } });
    const decision = decide(
      input({
        playbook: playbook({ ...ONE_TASK, ceiling: "10m", finallyCeiling: "1h", finally: CLEANUP }),
        rules,
      }),
    );
    expect(createdPod(decision.actions).spec.activeDeadlineSeconds).toBe(600 + 10 + 3600 + 10 + 5);
  });
});

describe("maximums.taskTimeout", () => {
  const rules = governed({ maximums: { ceiling: "1h", taskTimeout: "10m" } });
  const spec = {
    ceiling: "30m",
    finallyCeiling: "20m",
    tasks: [
      { name: "build", run: "make", timeout: "5m" },
      { name: "test", run: "make test" },
    ],
    finally: CLEANUP,
  };

  it("is the timeout of every task without one of its own, main or finally, with source policy", () => {
    const decision = decide(input({ playbook: playbook(spec), rules }));
    expect((decision.status ?? decision.pending)?.limits?.taskTimeout).toEqual({
      value: "10m",
      source: "policy",
    });
    const plan = planOf(decision.actions);
    expect(plan.defaults.policy).toMatchObject({ taskTimeoutMs: 600_000 });
    // What the runner resolves from the plan it is handed.
    const limits = resolveLimits(plan.spec, plan.defaults);
    expect(limits.tasks.map((task) => task.timeout)).toEqual([
      { ms: 300_000, source: "task", field: "spec.tasks[0].timeout" },
      { ms: 600_000, source: "policy", field: "the namespace policy's maximum task timeout" },
    ]);
    expect(limits.finally[0]?.timeout).toEqual({
      ms: 600_000,
      source: "policy",
      field: "the namespace policy's maximum task timeout",
    });
  });

  it("stops such a task at the maximum: the runner's deadline is TaskTimeout, not the ceiling", () => {
    const plan = planOf(decide(input({ playbook: playbook(spec), rules })).actions);
    const limits = resolveLimits(plan.spec, plan.defaults);
    const test = limits.tasks[1];
    const cleanup = limits.finally[0];
    if (!test || !cleanup) throw new Error("no tasks");
    expect(attemptDeadline(0, test, 1_800_000)).toEqual({ at: 600_000, limit: "TaskTimeout" });
    expect(attemptDeadline(0, cleanup, 1_200_000, "FinallyCeiling")).toEqual({
      at: 600_000,
      limit: "TaskTimeout",
    });
  });

  it("keeps the maximum the run started with when its pod is re-created after a loss", () => {
    const first = decide(input({ playbook: playbook(spec), rules }));
    const status = recordedStatus(first);
    const later = governed({ maximums: { ceiling: "1h", taskTimeout: "20m" } });
    const decision = decide(
      input({ playbook: playbook(spec, status), rules: later, now: new Date(T0.getTime() + 60_000) }),
    );
    expect(planOf(decision.actions).defaults.policy).toMatchObject({ taskTimeoutMs: 600_000 });
  });

  it("leaves a run without a policy's maximum as it was: no taskTimeout in its status or plan", () => {
    const decision = decide(input({ playbook: playbook(spec) }));
    expect((decision.status ?? decision.pending)?.limits).not.toHaveProperty("taskTimeout");
    expect(planOf(decision.actions).defaults.policy).toBeUndefined();
  });

  it("must be longer than 0s: a policy that says 0s cannot govern", () => {
    const policy = PolicySpecSchema.parse({ maximums: { taskTimeout: "0s" } });
    expect(policyProblems({ name: "default", spec: policy }, 86_400_000)).toEqual([
      "spec.maximums.taskTimeout: 0s must be longer than 0s",
    ]);
  });
});

describe("the pod's whole bound, as validate shows it", () => {
  it("is the activeDeadlineSeconds the controller gives the run's first pod", () => {
    for (const spec of [
      { ceiling: "10m" },
      { ceiling: "90s", killGrace: "1500ms", finally: CLEANUP },
      { ceiling: "7m", killGrace: "0s", finallyCeiling: "2m", finally: CLEANUP },
    ]) {
      const limits = resolveLimits(PlaybookSpecSchema.parse({ ...ONE_TASK, ...spec }), CONTROLLER.defaults);
      expect(startDeadlineSeconds(limits)).toBe(activeDeadlineSeconds(limits, T0, T0));
    }
  });

  const defaults = {
    ...CONTROLLER.defaults,
    policy: { killGraceMs: 30_000 },
  };
  const limits = (spec: Record<string, unknown>) =>
    resolveLimits(PlaybookSpecSchema.parse({ ...ONE_TASK, ...spec }), defaults);

  it("names each part and its level, and the namespace's bound", () => {
    expect(
      describePodBound(
        limits({ ceiling: "7m", finallyCeiling: "2m", finally: CLEANUP }),
        defaults,
        ISSUE_POLICY.maximums,
      ),
    ).toBe(
      "pod bound 10m5s (activeDeadlineSeconds 605): ceiling 7m (spec) + killGrace 30s (policy) + finallyCeiling 2m (spec) + killGrace 30s (policy) + margin 5s; at most 10m35s: ceiling 10m (policy) + killGrace 30s (policy) + margin 5s (the finally tasks' window within the ceiling's maximum: the policy sets no maximums.finallyCeiling)",
    );
    const own = (spec: Record<string, unknown>) =>
      resolveLimits(PlaybookSpecSchema.parse({ ...ONE_TASK, ...spec }), CONTROLLER.defaults);
    expect(describePodBound(own({ ceiling: "10m" }), CONTROLLER.defaults, undefined)).toBe(
      "pod bound 10m15s (activeDeadlineSeconds 615): ceiling 10m (spec) + killGrace 10s (default) + margin 5s; at most 24h5m5s: ceiling 24h (default) + killGrace 5m (default) + margin 5s",
    );
    expect(
      describePodBound(own({ ceiling: "10m", finally: CLEANUP }), CONTROLLER.defaults, {
        finallyCeiling: "10m",
      }),
    ).toBe(
      "pod bound 15m25s (activeDeadlineSeconds 925): ceiling 10m (spec) + killGrace 10s (default) + finallyCeiling 5m (default) + killGrace 10s (default) + margin 5s; at most 24h20m5s: ceiling 24h (default) + killGrace 5m (default) + finallyCeiling 10m (policy) + killGrace 5m (default) + margin 5s",
    );
  });
});
