// spec.finally and spec.finallyCeiling: what is refused before anything runs, each problem naming
// its field, value and bound; and the report's finally rows, which decide the reason only of a run
// whose main tasks succeeded.
import { describe, expect, it } from "vitest";
import { checkLimits, finallyWindowMs, LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import {
  decodeReport,
  encodeReport,
  InvalidReportError,
  type RunOutcome,
  type TaskOutcome,
} from "../../src/api/report.js";
import { expandReport } from "../../src/api/report-expand.js";
import { MAX_TASK_IMAGES } from "../../src/api/task-images.js";

const spec = (fields: object) =>
  PlaybookSpecSchema.parse({ tasks: [{ name: "work", run: "true" }], ...fields });

describe("finally limits", () => {
  it("resolve finallyCeiling through spec, policy and default, and each finally task's own limits", () => {
    const withFinally = spec({ finally: [{ name: "clean", run: "true", timeout: "1m", stall: "10s" }] });
    expect(resolveLimits(withFinally, LOCAL_DEFAULTS).finallyCeiling).toEqual({
      ms: 300_000,
      source: "default",
      field: "the default finally ceiling",
    });
    const policy = { ...LOCAL_DEFAULTS, policy: { finallyCeilingMs: 120_000 } };
    expect(resolveLimits(withFinally, policy).finallyCeiling.source).toBe("policy");
    const own = resolveLimits({ ...withFinally, finallyCeiling: "3m" }, policy);
    expect(own.finallyCeiling).toEqual({ ms: 180_000, source: "spec", field: "spec.finallyCeiling" });
    expect(own.finally[0]).toMatchObject({
      name: "clean",
      timeout: { ms: 60_000, source: "task", field: "spec.finally[0].timeout" },
      stall: { ms: 10_000, source: "task", field: "spec.finally[0].stall" },
    });
    // The pod's deadline and grace grow by the finally ceiling and one more grace, only with finally tasks.
    expect(finallyWindowMs(own)).toBe(180_000 + 10_000);
    expect(finallyWindowMs(resolveLimits(spec({ finallyCeiling: "3m" }), LOCAL_DEFAULTS))).toBe(0);
  });

  it("refuse a finallyCeiling over its maximum, a finally timeout over it, and a name used twice", () => {
    const problems = checkLimits(
      spec({
        finallyCeiling: "2h",
        finally: [
          { name: "work", run: "true" },
          { name: "clean", run: "true", timeout: "3h" },
          { name: "clean", run: "true" },
        ],
      }),
      LOCAL_DEFAULTS,
    );
    expect(problems).toEqual(
      expect.arrayContaining([
        {
          path: "spec.finallyCeiling",
          message: "2h is longer than the maximum finallyCeiling 1h (playbook run's own maximum)",
        },
        { path: "spec.finally[1].timeout", message: "3h is longer than spec.finallyCeiling 2h" },
        {
          path: "spec.finally[0].name",
          message:
            '"work" is already used by spec.tasks[0]; task names must be unique across spec.tasks and spec.finally',
        },
        {
          path: "spec.finally[2].name",
          message:
            '"clean" is already used by spec.finally[1]; task names must be unique across spec.tasks and spec.finally',
        },
      ]),
    );
    expect(problems).toHaveLength(4);
  });

  it("refuse a default finallyCeiling over the maximum naming its level, only where finally tasks use it", () => {
    const defaults = { ...LOCAL_DEFAULTS, finallyCeilingMs: 7_200_000 };
    expect(checkLimits(spec({}), defaults)).toEqual([]);
    expect(checkLimits(spec({ finally: [{ name: "clean", run: "true" }] }), defaults)).toEqual([
      {
        path: "spec",
        message:
          "2h (the default finally ceiling) is longer than the maximum finallyCeiling 1h (playbook run's own maximum)",
      },
    ]);
  });

  it("count the finally tasks' images and plan text with the main tasks'", () => {
    const many = PlaybookSpecSchema.safeParse({
      tasks: [{ name: "a", run: "true", image: "img:1" }],
      finally: Array.from({ length: 16 }, (_, i) => ({ name: `f${i}`, run: "true", image: `img:${i + 2}` })),
    });
    expect(many.success).toBe(false);
    // The image one past the pod's bound is the (MAX_TASK_IMAGES)th finally task's: the main task has the first.
    expect(many.error?.issues[0]?.path).toEqual(["finally", MAX_TASK_IMAGES - 1, "image"]);
    const tooMany = PlaybookSpecSchema.safeParse({
      tasks: [{ name: "a", run: "true" }],
      finally: Array.from({ length: 21 }, (_, i) => ({ name: `f${i}`, run: "true" })),
    });
    expect(tooMany.error?.issues[0]).toMatchObject({
      path: ["finally"],
      message: "must list at most 20 tasks",
    });
  });
});

const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms);
const task = (name: string, phase: TaskOutcome["phase"], more: Partial<TaskOutcome> = {}): TaskOutcome => ({
  name,
  phase,
  attempts: phase === "Skipped" ? 0 : 1,
  exitCode: phase === "Succeeded" ? 0 : phase === "Failed" ? 1 : null,
  signal: null,
  ...more,
});
const outcome = (fields: Partial<RunOutcome>): RunOutcome => ({
  phase: "Succeeded",
  reason: "Succeeded",
  startTime: at(0),
  completionTime: at(1000),
  tasks: [task("work", "Succeeded")],
  ...fields,
});

describe("the report's finally rows", () => {
  it("are read back with their count checked", () => {
    const text = encodeReport(outcome({ finally: [task("clean", "Succeeded")] }));
    expect(decodeReport(text, 1, 1).fin).toEqual([{ p: "Succeeded" }]);
    expect(() => decodeReport(text, 1, 0)).toThrow("it lists 1 finally tasks, the plan has 0");
    expect(() => decodeReport(encodeReport(outcome({})), 1, 2)).toThrow(
      "it lists 0 finally tasks, the plan has 2",
    );
  });

  it("are refused where the runner never writes them so", () => {
    const refuse = (run: RunOutcome, why: string) =>
      expect(() => decodeReport(encodeReport(run), run.tasks.length, run.finally?.length ?? 0)).toThrow(
        new InvalidReportError(`self-contradictory: ${why}`),
      );
    refuse(
      outcome({ finally: [task("clean", "Failed")] }),
      "reason Succeeded but the main tasks succeeded and a finally task is Failed",
    );
    refuse(
      outcome({ phase: "Failed", reason: "TaskFailed", finally: [task("clean", "Succeeded")] }),
      "reason TaskFailed but every task succeeded",
    );
    refuse(
      outcome({
        phase: "Failed",
        reason: "TaskFailed",
        finally: [task("clean", "TimedOut", { limit: "RunCeiling" })],
      }),
      "finally task 0 names limit RunCeiling",
    );
    refuse(
      outcome({
        phase: "Failed",
        reason: "TaskTimeout",
        tasks: [task("work", "TimedOut", { limit: "FinallyCeiling" })],
      }),
      "task 0 names limit FinallyCeiling",
    );
  });

  it("keep the deciding finally task's message when the report must be compacted", () => {
    const long = "x".repeat(3000);
    const run = outcome({
      phase: "Failed",
      reason: "TaskFailed",
      tasks: Array.from({ length: 40 }, (_, i) => task(`main-${i}`, "Succeeded", { detail: long })),
      finally: [task("clean", "Failed", { detail: `lock busy ${long}` })],
    });
    const report = decodeReport(encodeReport(run), 40, 1);
    expect(report.tasks.every((row) => row.m === undefined)).toBe(true);
    expect(report.fin?.[0]?.m).toMatch(/^lock busy x+/);
  });

  it("name one the finally window left no time to start, though it does not decide the reason", () => {
    const parsed = spec({
      finallyCeiling: "5m",
      finally: [
        { name: "clean", run: "true" },
        { name: "release", run: "true" },
      ],
    });
    const why = "not started: the finally window 5m (spec.finallyCeiling) had passed";
    const run = outcome({
      finally: [task("clean", "Succeeded"), task("release", "Skipped", { detail: why })],
    });
    const expanded = expandReport(
      decodeReport(encodeReport(run), 1, 2),
      resolveLimits(parsed, LOCAL_DEFAULTS),
    );
    expect(expanded.reason).toBe("Succeeded");
    expect(expanded.finally?.[1]).toEqual({ name: "release", phase: "Skipped", attempts: 0, message: why });
    expect(expanded.message).toBe(`finally task release ${why}; the task succeeded`);
  });

  it("expand into status.finally with their limits and sources, apart from the main tasks", () => {
    const parsed = spec({
      finallyCeiling: "2m",
      finally: [
        { name: "clean", run: "true", timeout: "30s" },
        { name: "page", run: "true" },
        { name: "last", run: "true" },
      ],
    });
    const run = outcome({
      phase: "Failed",
      reason: "TaskFailed",
      finally: [
        task("clean", "TimedOut", { limit: "TaskTimeout", ending: "Exited" }),
        task("page", "TimedOut", { limit: "FinallyCeiling", ending: "Killed" }),
        task("last", "Skipped"),
      ],
    });
    const expanded = expandReport(
      decodeReport(encodeReport(run), 1, 3),
      resolveLimits(parsed, LOCAL_DEFAULTS),
      {
        finallyImages: ["tools:1", undefined, undefined],
      },
    );
    expect(expanded.tasks).toHaveLength(1);
    expect(expanded.finally).toEqual([
      expect.objectContaining({
        name: "clean",
        image: "tools:1",
        limit: "TaskTimeout",
        limitValue: "30s",
        limitSource: "task",
        message:
          "exceeded its 30s timeout (spec.finally[0].timeout); process group stopped within the 10s grace",
      }),
      expect.objectContaining({
        name: "page",
        limit: "FinallyCeiling",
        limitValue: "2m",
        limitSource: "spec",
      }),
      expect.objectContaining({ name: "last", phase: "Skipped", attempts: 0 }),
    ]);
    expect(expanded.message).toBe(
      "finally task clean exceeded its 30s timeout (spec.finally[0].timeout); process group stopped within the 10s grace; " +
        "finally task page was stopped by the 2m finally ceiling (spec.finallyCeiling); process group killed after 10s grace; " +
        "the task succeeded",
    );
  });
});
