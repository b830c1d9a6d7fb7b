// Whether the controller takes a runner's termination message as the run's outcome: only from a
// runner container that ended on its own, with the exit code its report's reason gives, tasks
// whose containers ran and times inside the runner container's life. The forge of issue 23 (a
// report claiming success written into the runner's file, then SIGKILL) is the first row.
import { describe, expect, it } from "vitest";
import type { RunOutcome, TaskOutcome } from "../../src/api/report.js";
import { decodeReport } from "../../src/api/report.js";
import { ControllerMetrics } from "../../src/controller/metrics.js";
import type { ContainerTerminated, PodView } from "../../src/controller/objects.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { CLOCK_SLACK_MS, type DistrustWhy, judgeReport } from "../../src/controller/pods/report-trust.js";
import {
  at,
  POSTGRES,
  playbook,
  pod,
  RAN_TASK,
  ran,
  report,
  SUCCEEDED,
  T0,
  TWO_IMAGE_SPEC,
  twoImageInput,
  twoImageStarted,
} from "./controller-fixtures.js";
import { sample } from "./metrics-text.js";

const SPEC = TWO_IMAGE_SPEC;
const NAMES = ["build", "test"];
const IMAGES = ["runner:test", POSTGRES];

const skipped = (name: string): TaskOutcome => ({
  name,
  phase: "Skipped",
  attempts: 0,
  exitCode: null,
  signal: null,
});

const FAILED: Pick<RunOutcome, "phase" | "reason" | "tasks"> = {
  phase: "Failed",
  reason: "TaskFailed",
  tasks: [ran("build", 2, 5, { phase: "Failed", exitCode: 7 }), skipped("test")],
};
const TIMED_OUT: Pick<RunOutcome, "phase" | "reason" | "tasks"> = {
  phase: "Failed",
  reason: "TaskTimeout",
  tasks: [
    ran("build", 2, 5, { phase: "TimedOut", limit: "TaskTimeout", ending: "Exited", exitCode: null }),
    skipped("test"),
  ],
};
const CANCELLED: Pick<RunOutcome, "phase" | "reason" | "tasks"> = {
  phase: "Cancelled",
  reason: "Cancelled",
  tasks: [ran("build", 2, 5, { phase: "Cancelled", ending: "Exited", exitCode: null }), skipped("test")],
};

type TaskState = NonNullable<NonNullable<PodView["status"]>["containerStatuses"]>[number]["state"];

interface Case {
  name: string;
  outcome: Pick<RunOutcome, "phase" | "reason" | "tasks"> & Partial<RunOutcome>;
  /** The runner container's end: started at 1s, finished at 10s, exit 0 unless told. */
  runner?: Partial<ContainerTerminated>;
  /** task-2's state (postgres); task-1's ran 1s..10s. */
  task2?: TaskState;
  why?: DistrustWhy;
  problem?: RegExp;
}

const cases: Case[] = [
  { name: "Succeeded, exit 0", outcome: SUCCEEDED },
  { name: "TaskFailed, exit 1", outcome: FAILED, runner: { exitCode: 1, reason: "Error" } },
  { name: "TaskTimeout, exit 124", outcome: TIMED_OUT, runner: { exitCode: 124, reason: "Error" } },
  {
    name: "Cancelled, exit 130 (the kubelet's SIGTERM at the deadline or a deletion, answered)",
    outcome: CANCELLED,
    runner: { exitCode: 130, reason: "Error" },
  },
  {
    name: "the forge: Succeeded written by someone else, the runner SIGKILLed (exit 137, Error)",
    outcome: SUCCEEDED,
    runner: { exitCode: 137, reason: "Error" },
    why: "killed",
    problem:
      /^the runner container was killed by SIGKILL \(exit code 137\) and did not end on its own, so its termination message is not its report$/,
  },
  {
    name: "the runner killed by SIGTERM it did not handle (exit 143)",
    outcome: CANCELLED,
    runner: { exitCode: 143, reason: "Error" },
    why: "killed",
    problem: /killed by SIGTERM \(exit code 143\)/,
  },
  {
    name: "a signal the kubelet names",
    outcome: SUCCEEDED,
    runner: { exitCode: 0, signal: 9 },
    why: "killed",
    problem: /killed by SIGKILL \(exit code 0\)/,
  },
  {
    name: "OOMKilled",
    outcome: SUCCEEDED,
    runner: { exitCode: 137, reason: "OOMKilled" },
    why: "killed",
    problem: /did not end on its own \(OOMKilled, exit code 137\)/,
  },
  {
    name: "Succeeded, but the runner exited 1",
    outcome: SUCCEEDED,
    runner: { exitCode: 1, reason: "Error" },
    why: "exit-code",
    problem:
      /^the runner exited with code 1, which its report does not explain \(a runner that reports Succeeded exits 0\)/,
  },
  {
    name: "TaskFailed, but the runner exited 0",
    outcome: FAILED,
    why: "exit-code",
    problem:
      /exited with code 0, which its report does not explain \(a runner that reports TaskFailed exits 1\)/,
  },
  {
    name: "Succeeded, but the runner exited 130",
    outcome: SUCCEEDED,
    runner: { exitCode: 130, reason: "Error" },
    why: "exit-code",
    problem: /exited with code 130/,
  },
  {
    name: "Succeeded, its exit lost by the runtime (containerd restarted: exit 255, Unknown, finished when it came back)",
    outcome: SUCCEEDED,
    runner: { exitCode: 255, reason: "Unknown", finishedAt: at(30).toISOString() },
  },
  {
    name: "TaskFailed, its exit lost by the runtime",
    outcome: FAILED,
    runner: { exitCode: 255, reason: "Unknown" },
  },
  {
    name: "exit 255 the runner's own (Error): not explained by the report",
    outcome: SUCCEEDED,
    runner: { exitCode: 255, reason: "Error" },
    why: "exit-code",
    problem: /exited with code 255, which its report does not explain/,
  },
  {
    name: "its exit lost by the runtime, the report's times still held to the container's life",
    outcome: { ...SUCCEEDED, completionTime: at(40) },
    runner: { exitCode: 255, reason: "Unknown", finishedAt: at(30).toISOString() },
    why: "times",
    problem: /the run ended at 2026-01-01T00:00:40\.000Z, outside the runner container's life/,
  },
  {
    name: "test ran, says the report, but its container still waits for its image",
    outcome: SUCCEEDED,
    task2: { waiting: { reason: "ImagePullBackOff" } },
    why: "never-started",
    problem:
      /^the report says task test ran \(Succeeded\), but its container task-2 never started, so the report is not trusted$/,
  },
  {
    name: "test ran, says the report, but its container ended without ever starting",
    outcome: SUCCEEDED,
    task2: { terminated: { exitCode: 137, reason: "ContainerStatusUnknown" } },
    why: "never-started",
    problem: /task test ran \(Succeeded\), but its container task-2 never started/,
  },
  {
    name: "test failed, the report naming its container lost: it never started (its agent never said hello)",
    outcome: {
      phase: "Failed",
      reason: "TaskFailed",
      tasks: [
        ran("build", 2, 5),
        ran("test", 5, 6, { phase: "Failed", exitCode: null, lostContainer: "task-2" }),
      ],
    },
    runner: { exitCode: 1, reason: "Error" },
    task2: { waiting: { reason: "ImagePullBackOff" } },
  },
  {
    name: "test skipped in a container that never started",
    outcome: FAILED,
    runner: { exitCode: 1, reason: "Error" },
    task2: { waiting: { reason: "ImagePullBackOff" } },
  },
  {
    name: "a task that started before the runner container did",
    // The report counts from the run's start, which may be before the pod's (a re-created pod).
    outcome: { ...SUCCEEDED, startTime: at(-30), tasks: [ran("build", -5, 5), ran("test", 5, 9)] },
    why: "times",
    problem:
      /^the report says task build ran 2025-12-31T23:59:55\.000Z\.\.2026-01-01T00:00:05\.000Z, outside the runner container's life \(2026-01-01T00:00:01\.000Z\.\.2026-01-01T00:00:10\.000Z\), so the report is not trusted$/,
  },
  {
    name: "a task that ended after the runner container did",
    outcome: { ...SUCCEEDED, tasks: [ran("build", 2, 5), ran("test", 5, 30)] },
    why: "times",
    problem: /task test ran .*, outside the runner container's life/,
  },
  {
    name: "a run that ended after the runner container did",
    outcome: { ...SUCCEEDED, completionTime: at(40) },
    why: "times",
    problem:
      /^the report says the run ended at 2026-01-01T00:00:40\.000Z, outside the runner container's life/,
  },
  {
    name: "times within the clock's slack: a task from just before startedAt to the end of finishedAt's second",
    outcome: {
      ...SUCCEEDED,
      completionTime: new Date(at(11).getTime() + CLOCK_SLACK_MS),
      tasks: [ran("build", 1 - CLOCK_SLACK_MS / 1000, 5), ran("test", 5, 11 + CLOCK_SLACK_MS / 1000)],
    },
  },
];

/** The pod of SPEC, its runner ended as `c.runner` says (1s..10s, exit 0), task-1 ran 1s..10s. */
function endedPod(c: Pick<Case, "runner" | "task2"> & { message?: string }): PodView {
  const base = pod(1, { phase: "Failed", spec: SPEC, startedAt: at(1) });
  const runner: ContainerTerminated = {
    exitCode: 0,
    reason: "Completed",
    startedAt: at(1).toISOString(),
    finishedAt: at(10).toISOString(),
    ...(c.message !== undefined ? { message: c.message } : {}),
    ...c.runner,
  };
  return {
    ...base,
    status: {
      ...base.status,
      containerStatuses: [
        { name: "runner", state: { terminated: runner } },
        { name: "task-1", state: RAN_TASK },
        { name: "task-2", state: c.task2 ?? RAN_TASK },
      ],
    },
  };
}

function messageOf(outcome: Case["outcome"]): string {
  return report({ startTime: T0, completionTime: at(9), ...outcome });
}

describe("judgeReport", () => {
  it("reads the pod the fixtures build: task-1 is the runner image's container, task-2 postgres'", () => {
    expect(endedPod({}).spec?.containers?.map((c) => [c.name, c.image])).toEqual([
      ["runner", "runner:test"],
      ["task-1", "runner:test"],
      ["task-2", POSTGRES],
    ]);
  });

  it.each(cases)("$name", ({ outcome, runner, task2, why, problem }) => {
    const message = messageOf(outcome);
    const ended = endedPod({ runner, task2, message });
    const terminated = ended.status?.containerStatuses?.[0]?.state?.terminated as ContainerTerminated;
    const trust = judgeReport(ended, terminated, decodeReport(message, 2), NAMES, IMAGES);
    if (why === undefined) {
      expect(trust).toEqual({ trusted: true });
      return;
    }
    expect(trust).toMatchObject({ trusted: false, why });
    if (!trust.trusted) expect(trust.problem).toMatch(problem ?? /./);
  });
});

describe("judgeReport on issue 33's checks", () => {
  const judge = (outcome: Case["outcome"], images: readonly string[], runStart?: string) => {
    const message = messageOf(outcome);
    const ended = endedPod({ message });
    const terminated = ended.status?.containerStatuses?.[0]?.state?.terminated as ContainerTerminated;
    return judgeReport(ended, terminated, decodeReport(message, 2), NAMES, images, runStart);
  };

  it("distrusts a report whose run start is after the run's own start (status.startTime is taken from it)", () => {
    const trust = judge({ ...SUCCEEDED, startTime: at(5) }, IMAGES, T0.toISOString());
    expect(trust).toMatchObject({ trusted: false, why: "times" });
    if (!trust.trusted)
      expect(trust.problem).toBe(
        `the report says the run started at ${at(5).toISOString()}, after the run's start ${T0.toISOString()}, so the report is not trusted`,
      );
    expect(judge({ ...SUCCEEDED }, IMAGES, T0.toISOString())).toEqual({ trusted: true });
  });

  it("distrusts a report of a task whose image no container of the pod runs (the never-started check without a container)", () => {
    const trust = judge({ ...SUCCEEDED }, ["runner:test", "attacker/anything:1"]);
    expect(trust).toMatchObject({ trusted: false, why: "never-started" });
    if (!trust.trusted)
      expect(trust.problem).toBe(
        "the report says task test ran (Succeeded), but no single container of the pod runs its image attacker/anything:1, so the report is not trusted",
      );
  });
});

describe("a report the controller does not trust", () => {
  const input = twoImageInput;
  const started = twoImageStarted;
  const decideEnded = (c: Pick<Case, "runner" | "task2" | "outcome">) =>
    decide(
      input({
        playbook: playbook(SPEC, started()),
        pods: [endedPod({ ...c, message: messageOf(c.outcome) })],
        now: at(20),
      }),
    );

  it("ends the forged run RunnerLost, saying why, not Succeeded; counted with why=killed", async () => {
    const decision = decideEnded({ outcome: SUCCEEDED, runner: { exitCode: 137, reason: "Error" } });
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toBe(
      "pod nightly-1 ended without a valid runner report (Error, exit code 137): the runner container was killed by SIGKILL (exit code 137) and did not end on its own, so its termination message is not its report",
    );
    // The forged rows are not shown: no task is Succeeded.
    expect((decision.status?.tasks ?? []).filter((t) => t.phase === "Succeeded")).toEqual([]);
    expect(decision.finished).toMatchObject({ reason: "RunnerLost", distrust: "killed" });
    const metrics = new ControllerMetrics({ defaults: false });
    metrics.recordStarted({ namespace: "ops" });
    if (decision.finished) metrics.recordFinished(decision.finished, { namespace: "ops" });
    const text = await metrics.registry.metrics();
    expect(sample(text, "playbook_untrusted_reports_total", { namespace: "ops", why: "killed" })).toBe(1);
    expect(sample(text, "playbook_untrusted_reports_total", { namespace: "ops", why: "times" })).toBe(0);
    expect(sample(text, "playbook_runs_total", { namespace: "ops", reason: "RunnerLost" })).toBe(1);
  });

  const unexplained: { what: string; c: Pick<Case, "runner" | "task2" | "outcome">; why: DistrustWhy }[] = [
    { what: "an exit code", c: { outcome: SUCCEEDED, runner: { exitCode: 1 } }, why: "exit-code" },
    {
      what: "a container that never started",
      c: { outcome: SUCCEEDED, task2: { waiting: { reason: "ErrImagePull" } } },
      why: "never-started",
    },
    {
      what: "times",
      c: { outcome: { ...SUCCEEDED, tasks: [ran("build", 2, 5), ran("test", 5, 60)] } },
      why: "times",
    },
  ];
  it.each(unexplained)("ends the run RunnerLost for $what its report does not explain", ({ c, why }) => {
    const decision = decideEnded(c);
    const condition = decision.status?.conditions?.find((x) => x.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toMatch(/^pod nightly-1 ended without a valid runner report \(.*\): the /);
    expect(condition?.message).toMatch(/not trusted$/);
    expect(decision.finished).toMatchObject({ reason: "RunnerLost", distrust: why });
  });

  it("counts nothing when a killed runner left no message (nothing was distrusted)", () => {
    const ended = endedPod({ runner: { exitCode: 137, reason: "Error" } });
    const decision = decide(input({ playbook: playbook(SPEC, started()), pods: [ended], now: at(20) }));
    expect(decision.finished?.reason).toBe("RunnerLost");
    expect(decision.finished?.distrust).toBeUndefined();
  });

  it("keeps PodDeadlineExceeded when the kubelet stopped the pod and the killed runner's report is not trusted", () => {
    const base = endedPod({
      runner: { exitCode: 137, reason: "Error" },
      message: messageOf({ ...SUCCEEDED, completionTime: at(5) }),
    });
    const ended: PodView = {
      ...base,
      spec: { ...base.spec, activeDeadlineSeconds: 8 },
      status: { ...base.status, reason: "DeadlineExceeded", startTime: at(1).toISOString() },
    };
    const decision = decide(input({ playbook: playbook(SPEC, started()), pods: [ended], now: at(20) }));
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "PodDeadlineExceeded" });
    expect(decision.finished).toMatchObject({ reason: "PodDeadlineExceeded", distrust: "killed" });
  });

  it("names a task container whose agent was killed (a task may kill its own agent): the task fails, never a success", () => {
    const outcome = {
      ...FAILED,
      tasks: [
        ran("build", 2, 5),
        ran("test", 5, 6, { phase: "Failed", exitCode: null, lostContainer: "task-2" }),
      ],
    };
    const decision = decideEnded({
      outcome,
      runner: { exitCode: 1, reason: "Error" },
      task2: {
        terminated: {
          exitCode: 137,
          reason: "Error",
          startedAt: at(1).toISOString(),
          finishedAt: at(6).toISOString(),
        },
      },
    });
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({
      status: "False",
      reason: "TaskFailed",
      message:
        "task test failed: container task-2 (image postgres:16) ended: its agent was killed by SIGKILL (exit 137)",
    });
  });
});

describe("judgeReport of tasks in two containers of one image (tasks naming different Secrets)", () => {
  const SAME = ["runner:test", "runner:test"];
  const sameImagePod = (task2?: Case["task2"]): { ended: PodView; message: string } => {
    const message = messageOf(SUCCEEDED);
    const ended = endedPod({ message, ...(task2 ? { task2 } : {}) });
    const containers = (ended.spec?.containers ?? []).map((c) => ({ ...c, image: "runner:test" }));
    return { ended: { ...ended, spec: { ...ended.spec, containers } }, message };
  };
  const judgeSame = (ended: PodView, message: string, placed?: string[]) =>
    judgeReport(
      ended,
      ended.status?.containerStatuses?.[0]?.state?.terminated as ContainerTerminated,
      decodeReport(message, 2),
      NAMES,
      SAME,
      undefined,
      placed,
    );

  it("believes the report by the container the plan placed each task in", () => {
    const { ended, message } = sameImagePod();
    expect(judgeSame(ended, message, ["task-1", "task-2"])).toEqual({ trusted: true });
  });

  it("cannot tell the containers apart by image alone", () => {
    const { ended, message } = sameImagePod();
    expect(judgeSame(ended, message)).toMatchObject({ trusted: false, why: "never-started" });
  });

  it("distrusts a task reported run whose own container never started, though another of its image did", () => {
    const { ended, message } = sameImagePod({ waiting: { reason: "CreateContainerConfigError" } });
    const trust = judgeSame(ended, message, ["task-1", "task-2"]);
    expect(trust).toMatchObject({ trusted: false, why: "never-started" });
    if (!trust.trusted) expect(trust.problem).toContain("its container task-2 never started");
  });
});
