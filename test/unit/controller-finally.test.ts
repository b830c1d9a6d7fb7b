// spec.finally on a cluster, as pure decisions: the controller's flags, the policy's maximum and
// allowlist over finally tasks, the pod's containers and deadline, and the status and metrics a
// finished run's report (or its absence) gives them.
import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import { PLAN_ANNOTATION, parsePlan } from "../../src/api/plan.js";
import { PlaybookSpecSchema, type PlaybookStatus } from "../../src/api/playbook.js";
import { PolicySpecSchema } from "../../src/api/policy.js";
import { policyProblems } from "../../src/api/policy-consistency.js";
import type { TaskOutcome } from "../../src/api/report.js";
import { limitDefaults, loadControllerConfig } from "../../src/controller/config.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { finishedRun } from "../../src/controller/pods/finished-run.js";
import { buildPod, DEADLINE_MARGIN_SECONDS } from "../../src/controller/pods/pod-builder.js";
import {
  at,
  createdPod,
  governed,
  playbook,
  pod,
  recordedStatus,
  report,
  SETTINGS,
  succeeded,
  T0,
} from "./controller-fixtures.js";

/** The controller's settings, with the finally tasks' own image allowed where no policy says. */
const ALLOWING = { ...SETTINGS, allowedImages: ["registry.example/*"] };

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: ALLOWING, ...partial };
}

const FINALLY = {
  finallyCeiling: "2m",
  finally: [
    { name: "unlock", run: "unlock" },
    { name: "page", run: "page", image: "registry.example/pager:1" },
  ],
};

describe("the controller's finally flags", () => {
  it("default to a 5m finally ceiling and a 1h maximum, and refuse a default above the maximum", () => {
    const config = loadControllerConfig({}, {});
    expect(config).toMatchObject({ defaultFinallyCeiling: 300_000, maxFinallyCeiling: 3_600_000 });
    expect(limitDefaults(config)).toMatchObject({
      finallyCeilingMs: 300_000,
      maxFinallyCeiling: { ms: 3_600_000, where: "the controller's --max-finally-ceiling" },
    });
    expect(loadControllerConfig({ defaultFinallyCeiling: "90s" }, {}).defaultFinallyCeiling).toBe(90_000);
    expect(loadControllerConfig({}, { PLAYBOOK_MAX_FINALLY_CEILING: "10m" }).maxFinallyCeiling).toBe(600_000);
    expect(() => loadControllerConfig({ defaultFinallyCeiling: "2h" }, {})).toThrow(
      "--default-finally-ceiling ($PLAYBOOK_DEFAULT_FINALLY_CEILING): 2h is longer than the maximum finallyCeiling 1h (--max-finally-ceiling)",
    );
    expect(() => loadControllerConfig({ defaultFinallyCeiling: "0s" }, {})).toThrow(
      "--default-finally-ceiling ($PLAYBOOK_DEFAULT_FINALLY_CEILING): must be longer than 0s",
    );
  });

  it("refuse a finallyCeiling over --max-finally-ceiling: InvalidSpec naming the field, the value and the flag", () => {
    const settings = {
      ...ALLOWING,
      defaults: limitDefaults(loadControllerConfig({ maxFinallyCeiling: "10m" }, {})),
    };
    const decision = decide(input({ playbook: playbook({ ...FINALLY, finallyCeiling: "20m" }), settings }));
    expect(succeeded(decision.status)).toMatchObject({
      reason: "InvalidSpec",
      message:
        "spec.finallyCeiling: 20m is longer than the maximum finallyCeiling 10m (the controller's --max-finally-ceiling)",
    });
    expect(decision.actions).toEqual([]);
  });
});

describe("a Playbook with finally tasks under its namespace's policy", () => {
  const rules = governed({
    defaults: { finallyCeiling: "3m" },
    maximums: { finallyCeiling: "10m", taskTimeout: "5m" },
    allowedImages: ["registry.example/*"],
  });

  // The fixture's main task has a 10m timeout: over this policy's maximum task timeout.
  const stored = (spec: Record<string, unknown>) =>
    playbook({ tasks: [{ name: "build", run: "make" }], ...spec });

  it("takes the policy's finallyCeiling, shown with source policy and carried in the plan", () => {
    const decision = decide(input({ playbook: stored({ finally: FINALLY.finally }), rules }));
    expect((decision.status ?? decision.pending)?.limits?.finallyCeiling).toEqual({
      value: "3m",
      source: "policy",
    });
    const plan = parsePlan(createdPod(decision.actions).metadata.annotations[PLAN_ANNOTATION] ?? "");
    expect(plan.ok && plan.plan.defaults).toMatchObject({
      finallyCeilingMs: 180_000,
      policy: { finallyCeilingMs: 180_000 },
    });
  });

  it.each([
    {
      name: "a finallyCeiling over the maximum",
      spec: { ...FINALLY, finallyCeiling: "1h" },
      says: "spec.finallyCeiling: 1h is longer than the namespace's maximum finallyCeiling 10m (PlaybookPolicy default, spec.maximums.finallyCeiling)",
      field: "spec.finallyCeiling",
    },
    {
      name: "a finally task image outside the allowlist",
      spec: { finally: [{ name: "clean", run: "true", image: "docker.io/evil:latest" }] },
      says: 'spec.finally[0].image: "docker.io/evil:latest" is not an allowed image: PlaybookPolicy default allows registry.example/*',
      field: "spec.finally[].image",
    },
    {
      name: "a finally task timeout over the maximum task timeout",
      spec: { finallyCeiling: "10m", finally: [{ name: "clean", run: "true", timeout: "6m" }] },
      says: "spec.finally[0].timeout: 6m is longer than the namespace's maximum task timeout 5m (PlaybookPolicy default, spec.maximums.taskTimeout)",
      field: "spec.finally[].timeout",
    },
  ])("refuses $name: InvalidSpec, no pod", ({ spec, says, field }) => {
    const decision = decide(input({ playbook: stored(spec), rules }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(decision.status)?.message).toContain(says);
    expect(decision.actions).toEqual([]);
    expect(decision.finished?.policyRefusals).toEqual([field]);
  });

  it("refuses a policy's default finallyCeiling over the maximum only for a Playbook with finally tasks", () => {
    const loose = governed({
      defaults: { finallyCeiling: "20m" },
      maximums: { finallyCeiling: "10m" },
      allowedImages: ["registry.example/*"],
    });
    const without = decide(input({ playbook: playbook(), rules: loose }));
    expect(without.actions.map((a) => a.type)).toEqual(["createPod"]);
    const withFinally = decide(input({ playbook: stored({ finally: FINALLY.finally }), rules: loose }));
    expect(succeeded(withFinally.status)?.message).toBe(
      "spec: 20m (the namespace policy's default finally ceiling) is longer than the namespace's maximum finallyCeiling 10m (PlaybookPolicy default, spec.maximums.finallyCeiling)",
    );
  });

  it("says when the policy's default finallyCeiling passes its maximum or the controller's", () => {
    const spec = PolicySpecSchema.parse({
      defaults: { finallyCeiling: "2h" },
      maximums: { finallyCeiling: "1h" },
    });
    expect(policyProblems({ name: "default", spec }, 86_400_000, 300_000, 5_400_000)).toEqual([
      "spec.defaults.finallyCeiling: 2h is longer than spec.maximums.finallyCeiling 1h",
      "spec.defaults.finallyCeiling: 2h is longer than the controller's maximum finallyCeiling 1h30m",
    ]);
  });
});

describe("the pod of a run with finally tasks", () => {
  const spec = PlaybookSpecSchema.parse({
    ceiling: "10m",
    killGrace: "20s",
    tasks: [
      { name: "build", run: "make" },
      { name: "migrate", run: "migrate", image: "registry.example/db:1" },
    ],
    ...FINALLY,
  });
  const limits = resolveLimits(spec, SETTINGS.defaults);
  const built = buildPod({
    playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
    spec,
    limits,
    defaults: SETTINGS.defaults,
    attempt: 1,
    runStart: T0,
    now: T0,
    runnerImage: "runner:1",
  });

  it("holds a container per distinct image of the main and the finally tasks, and places each finally task", () => {
    const containers = built.spec.containers as { name: string; image: string }[];
    expect(containers.map((c) => [c.name, c.image])).toEqual([
      ["runner", "runner:1"],
      ["task-1", "runner:1"],
      ["task-2", "registry.example/db:1"],
      ["task-3", "registry.example/pager:1"],
    ]);
    const plan = parsePlan(built.metadata.annotations[PLAN_ANNOTATION] ?? "");
    expect(plan.ok && plan.plan.tasks).toEqual([{ container: "task-1" }, { container: "task-2" }]);
    expect(plan.ok && plan.plan.finally).toEqual([{ container: "task-1" }, { container: "task-3" }]);
  });

  it("leaves the finally tasks their ceiling and its killGrace in its deadline and in its grace, which a cancel gives the runner", () => {
    // The ceiling, killGrace, then the finally ceiling and killGrace again, and the margin.
    expect(built.spec.activeDeadlineSeconds).toBe(600 + 20 + 120 + 20 + DEADLINE_MARGIN_SECONDS);
    expect(built.spec.terminationGracePeriodSeconds).toBe(20 + 120 + 20 + DEADLINE_MARGIN_SECONDS);
  });

  it("is built as before without finally tasks: no plan.finally, no window", () => {
    const plain = PlaybookSpecSchema.parse({ ceiling: "10m", killGrace: "20s", tasks: spec.tasks });
    const pod = buildPod({
      playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
      spec: plain,
      limits: resolveLimits(plain, SETTINGS.defaults),
      defaults: SETTINGS.defaults,
      attempt: 1,
      runStart: T0,
      now: T0,
      runnerImage: "runner:1",
    });
    expect(pod.spec.activeDeadlineSeconds).toBe(600 + 20 + DEADLINE_MARGIN_SECONDS);
    const plan = parsePlan(pod.metadata.annotations[PLAN_ANNOTATION] ?? "");
    expect(plan.ok && plan.plan).not.toHaveProperty("finally");
  });
});

const task = (name: string, outcome: Partial<TaskOutcome> = {}): TaskOutcome => ({
  name,
  phase: "Succeeded",
  attempts: 1,
  exitCode: 0,
  signal: null,
  startTime: at(1),
  completionTime: at(2),
  ...outcome,
});

describe("a finished run with finally tasks", () => {
  // Whole, as pod() takes it (playbook() adds it to the fixture's spec).
  const spec = { ceiling: "30m", ...FINALLY, tasks: [{ name: "build", run: "make" }] };
  const started = () => recordedStatus(decide(input({ playbook: playbook(spec) })));
  const ended = (message: string, exitCode: number) =>
    pod(1, { phase: "Failed", spec, terminated: { exitCode, message } });

  it("shows them in status.finally from the report, the run's reason its main task's", () => {
    const message = report({
      phase: "Failed",
      reason: "TaskFailed",
      tasks: [task("build", { phase: "Failed", exitCode: 2 })],
      finally: [
        task("unlock", { startTime: at(3), completionTime: at(4) }),
        task("page", { startTime: at(4), completionTime: at(5) }),
      ],
    });
    const decision = decide(
      input({ playbook: playbook(spec, started()), pods: [ended(message, 1)], now: at(61) }),
    );
    expect(succeeded(decision.status)).toMatchObject({ reason: "TaskFailed" });
    expect(decision.status?.endingTask).toBe("build");
    expect(decision.status?.finally).toMatchObject([
      { name: "unlock", phase: "Succeeded", attempts: 1, image: "runner:test" },
      { name: "page", phase: "Succeeded", attempts: 1, image: "registry.example/pager:1" },
    ]);
    expect(decision.status?.limits?.finallyCeiling).toEqual({ value: "2m", source: "spec" });
    // Both finally tasks are counted with the main one, by phase.
    expect(decision.finished?.tasks.map((t) => t.phase)).toEqual(["Failed", "Succeeded", "Succeeded"]);
  });

  it("names a finally task that failed a run whose main tasks succeeded as the task that ended it", () => {
    const message = report({
      phase: "Failed",
      reason: "TaskFailed",
      tasks: [task("build")],
      finally: [task("unlock", { phase: "Failed", exitCode: 3 }), task("page")],
    });
    const decision = decide(
      input({ playbook: playbook(spec, started()), pods: [ended(message, 1)], now: at(61) }),
    );
    expect(succeeded(decision.status)).toMatchObject({ reason: "TaskFailed" });
    expect(succeeded(decision.status)?.message).toMatch(/^finally task unlock /);
    expect(decision.status?.endingTask).toBe("unlock");
  });

  it("does not trust a report that leaves out the finally tasks", () => {
    const message = report({ phase: "Succeeded", reason: "Succeeded", tasks: [task("build")] });
    const decision = decide(
      input({ playbook: playbook(spec, started()), pods: [ended(message, 0)], now: at(61) }),
    );
    expect(succeeded(decision.status)).toMatchObject({ reason: "RunnerLost" });
    expect(succeeded(decision.status)?.message).toContain(
      "the report is invalid: it lists 0 finally tasks, the plan has 2",
    );
  });

  it("without a trusted report shows each finally task as not known to have run, unverified, as its main tasks' progress is", () => {
    const status: PlaybookStatus = {
      ...started(),
      tasks: [{ name: "build", phase: "Running", attempts: 1, verified: false }],
    };
    const lost = pod(1, { phase: "Failed", spec, terminated: { exitCode: 137, reason: "OOMKilled" } });
    const decision = decide(input({ playbook: playbook(spec, status), pods: [lost], now: at(61) }));
    expect(succeeded(decision.status)).toMatchObject({ reason: "RunnerLost" });
    expect(decision.status?.finally).toEqual(
      ["unlock", "page"].map((name) => ({
        name,
        phase: "Cancelled",
        attempts: 0,
        message:
          "not reported: the run ended without the runner's report, and progress does not follow finally tasks, so whether this one ran is not known",
        verified: false,
      })),
    );
    expect(decision.finished?.tasks).toEqual([]);
  });
});

describe("a finished run's metrics", () => {
  it("hold the ceiling against the main tasks' end, not the finally tasks' time after it", () => {
    const spec = PlaybookSpecSchema.parse({
      ceiling: "100s",
      tasks: [{ name: "build", run: "make", timeout: "50s" }],
      finally: [{ name: "clean", run: "clean", timeout: "40s" }],
    });
    const limits = resolveLimits(spec, SETTINGS.defaults);
    const status: PlaybookStatus = {
      startTime: at(0).toISOString(),
      completionTime: at(90).toISOString(),
      tasks: [
        {
          name: "build",
          phase: "Succeeded",
          attempts: 1,
          startTime: at(0).toISOString(),
          completionTime: at(25).toISOString(),
        },
      ],
      finally: [
        {
          name: "clean",
          phase: "Succeeded",
          attempts: 1,
          startTime: at(30).toISOString(),
          completionTime: at(50).toISOString(),
        },
      ],
    };
    const run = finishedRun(status, "Succeeded", limits, true);
    expect(run.tasks).toEqual([
      { name: "build", phase: "Succeeded", durationSeconds: 25 },
      { name: "clean", phase: "Succeeded", durationSeconds: 20 },
    ]);
    expect(run.usage).toEqual([
      { limit: "TaskTimeout", ratio: 0.5, task: "build" },
      { limit: "TaskTimeout", ratio: 0.5, task: "clean" },
      { limit: "RunCeiling", ratio: 0.25 },
    ]);
  });
});
