// Hostile termination messages reaching the controller: truncated reports, reports of another
// version, reports that contradict themselves, random JSON and random bytes. Whatever the pod
// says, decide() settles the run — RunnerLost with the reason when the report is not valid — and
// never throws. Property-based with fast-check (fixed seed, printed by fast-check on failure).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { exitCodeForReason } from "../../src/api/exit-codes.js";
import { type PlaybookStatus, PlaybookStatusSchema } from "../../src/api/playbook.js";
import {
  decodeReport,
  encodeReport,
  InvalidReportError,
  REPORT_MAX_BYTES,
  RUNNER_REASONS,
  type RunnerReason,
  type RunOutcome,
  type TaskOutcome,
} from "../../src/api/report.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { at, playbook, pod, recordedStatus, SETTINGS, T0 } from "./controller-fixtures.js";

const SEED = Number(process.env.PROPERTY_SEED ?? 20261130);
const RUNS = 150;
const run = <T>(property: fc.IProperty<T>) => fc.assert(property, { seed: SEED, numRuns: RUNS });

/** The fixture Playbook's two tasks, as the plan the report is decoded against. */
const TASKS = ["build", "test"] as const;

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

const started = (): PlaybookStatus => {
  const first = decide(input({}));
  return recordedStatus(first);
};

/** The runner's exit code after writing `message`: its report's reason's, else 1 (it failed). */
function runnerExitCode(message: string): number {
  try {
    return exitCodeForReason(decodeReport(message.trim(), TASKS.length).reason);
  } catch {
    return 1;
  }
}

/** decide() on a pod whose runner ended with this termination message. */
function settleWith(message: string) {
  const ended = pod(1, {
    phase: "Failed",
    terminated: { exitCode: runnerExitCode(message), reason: "Error", message },
  });
  return decide(input({ playbook: playbook({}, started()), pods: [ended], now: at(120) }));
}

const succeededCondition = (status: PlaybookStatus | null) =>
  status?.conditions?.find((c) => c.type === "Succeeded");

/** What the API server would take: the status schema, the CRD's 32768-character message, real dates. */
function expectWritableStatus(status: PlaybookStatus | null) {
  expect(status).not.toBeNull();
  expect(() => PlaybookStatusSchema.parse(status)).not.toThrow();
  for (const condition of status?.conditions ?? []) {
    expect(condition.message.length).toBeLessThanOrEqual(32768);
  }
  for (const task of status?.tasks ?? []) {
    for (const time of [task.startTime, task.completionTime]) {
      if (time !== undefined) expect(Number.isNaN(Date.parse(time))).toBe(false);
    }
  }
}

/** The run settles RunnerLost, the condition saying that the report was not valid and what the kubelet said. */
function expectRunnerLost(message: string) {
  const decision = settleWith(message);
  expectWritableStatus(decision.status);
  const condition = succeededCondition(decision.status);
  expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
  expect(condition?.message).toContain(
    "pod nightly-1 ended without a valid runner report (Error, exit code 1)",
  );
  expect(decision.finished?.reason).toBe("RunnerLost");
  return condition?.message ?? "";
}

/** Either the report is valid and decides the run, or the run is RunnerLost; never a throw. */
function expectSettled(message: string) {
  let valid: RunnerReason | undefined;
  try {
    valid = decodeReport(message.trim(), TASKS.length).reason;
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidReportError);
  }
  const decision = settleWith(message);
  expectWritableStatus(decision.status);
  const reason = succeededCondition(decision.status)?.reason;
  if (valid === undefined) expect(reason).toBe("RunnerLost");
  // A runner that says it was cancelled though nobody asked was stopped from outside: a lost pod.
  else if (valid === "Cancelled") expect(decision.actions.map((a) => a.type)).toEqual(["createPod"]);
  else expect(reason).toBe(valid);
}

// ---- generators -------------------------------------------------------------------------

const time = fc.integer({ min: 0, max: 3_600_000 }).map((ms) => at(ms / 1000));

/** A task outcome of the given phase, with the fields the runner would give it. */
const taskOf = (name: string, phase: TaskOutcome["phase"], limit?: TaskOutcome["limit"]) =>
  fc.record({ startTime: time, detail: fc.option(fc.string({ maxLength: 300 }), { nil: undefined }) }).map(
    ({ startTime, detail }): TaskOutcome => ({
      name,
      phase,
      attempts: phase === "Skipped" ? 0 : 1,
      exitCode: phase === "Succeeded" ? 0 : phase === "Failed" ? 2 : null,
      signal: phase === "TimedOut" || phase === "Cancelled" ? "SIGTERM" : null,
      ...(limit ? { limit, ending: "Exited" as const } : {}),
      ...(phase === "Skipped" ? {} : { startTime, completionTime: new Date(startTime.getTime() + 1000) }),
      ...(detail ? { detail } : {}),
    }),
  );

/** A consistent outcome of the fixture's two tasks, as the runner would report it. */
const outcome: fc.Arbitrary<RunOutcome> = fc.constantFrom(...RUNNER_REASONS).chain((reason) => {
  const phase = reason === "Succeeded" ? "Succeeded" : reason === "Cancelled" ? "Cancelled" : "Failed";
  const decidingPhase: TaskOutcome["phase"] =
    reason === "TaskFailed" ? "Failed" : reason === "Cancelled" ? "Cancelled" : "TimedOut";
  const limit =
    reason === "TaskTimeout" || reason === "StallLimit" || reason === "RunCeiling" ? reason : undefined;
  const tasks =
    reason === "Succeeded"
      ? fc.tuple(taskOf("build", "Succeeded"), taskOf("test", "Succeeded"))
      : fc.oneof(
          fc.tuple(taskOf("build", decidingPhase, limit), taskOf("test", "Skipped")),
          fc.tuple(taskOf("build", "Succeeded"), taskOf("test", decidingPhase, limit)),
        );
  return tasks.map(
    (list): RunOutcome => ({ phase, reason, startTime: T0, completionTime: at(3600), tasks: list }),
  );
});

const validReport = outcome.map((o) => encodeReport(o));

/** A valid report cut at an arbitrary byte (the rest lost, as a full disk or a kill would leave it). */
const truncatedReport = validReport.chain((text) => {
  const bytes = Buffer.from(text);
  return fc.integer({ min: 0, max: bytes.length - 1 }).map((cut) => bytes.subarray(0, cut).toString("utf8"));
});

/** A report too long for a termination message, cut where the kubelet cuts: 4096 bytes, first or last. */
const oversizedReport = fc
  .tuple(outcome, fc.string({ minLength: 1, maxLength: 20 }), fc.boolean())
  .map(([o, filler, keepEnd]) => {
    const report = JSON.parse(encodeReport(o));
    report.tasks[0].m = filler.repeat(Math.ceil(5000 / filler.length));
    const bytes = Buffer.from(JSON.stringify(report));
    const kept = keepEnd
      ? bytes.subarray(bytes.length - REPORT_MAX_BYTES)
      : bytes.subarray(0, REPORT_MAX_BYTES);
    return kept.toString("utf8");
  });

/** A valid report of another version of the runner. */
const otherVersion = fc
  .tuple(
    validReport,
    fc.oneof(
      fc.integer().filter((v) => v !== 1),
      fc.constant("1"),
      fc.constant(null),
    ),
  )
  .map(([text, v]) => JSON.stringify({ ...JSON.parse(text), v }));

/** A valid report with one field replaced by arbitrary JSON (wrong types, huge numbers, dates past the year 275760). */
const mutatedReport = fc
  .tuple(
    validReport,
    fc.constantFrom(
      "v",
      "phase",
      "reason",
      "start",
      "end",
      "tasks",
      "c",
      "p",
      "a",
      "x",
      "sig",
      "l",
      "e",
      "t",
      "m",
    ),
    fc.oneof(
      fc.jsonValue(),
      fc.constantFrom(
        1e300,
        -1,
        2 ** 53,
        8.64e15,
        [0, 8.64e15],
        [0, 2 ** 53 - 1],
        "+275760-09-13T00:00:00.001Z",
      ),
    ),
    fc.nat({ max: 1 }),
  )
  .map(([text, field, value, index]) => {
    const report = JSON.parse(text);
    if (["v", "phase", "reason", "start", "end", "tasks", "c"].includes(field)) report[field] = value;
    else report.tasks[index][field] = value;
    return JSON.stringify(report);
  });

/** A valid report whose reason, phase and tasks' phases disagree. */
const contradictoryReport = fc
  .tuple(validReport, fc.constantFrom(...RUNNER_REASONS), fc.constantFrom("Succeeded", "Failed", "Cancelled"))
  .map(([text, reason, phase]) => JSON.stringify({ ...JSON.parse(text), reason, phase }));

const randomBytes = fc
  .uint8Array({ maxLength: 5000 })
  .chain((bytes) =>
    fc.constantFrom(Buffer.from(bytes).toString("utf8"), Buffer.from(bytes).toString("latin1")),
  );

// ---- properties -------------------------------------------------------------------------

describe("a runner report the controller reads", () => {
  it("settles with the report's own reason when the report is valid", () => {
    run(
      fc.property(validReport, (text) => {
        expect(Buffer.byteLength(text)).toBeLessThanOrEqual(REPORT_MAX_BYTES);
        expectSettled(text);
        expect(succeededCondition(settleWith(text).status)?.reason).not.toBe("RunnerLost");
      }),
    );
  });

  it.each([
    ["cut at an arbitrary byte", truncatedReport],
    ["cut at the kubelet's 4096 bytes", oversizedReport],
    ["of another version", otherVersion],
  ])("settles RunnerLost for a report %s", (_name, reports) => {
    run(fc.property(reports, (text) => void expectRunnerLost(text)));
  });

  it.each([
    ["a report with one field of the wrong type or range", mutatedReport],
    ["a report that contradicts itself", contradictoryReport],
    ["random JSON", fc.json()],
    ["random bytes", randomBytes],
    ["random text", fc.string({ unit: "binary", maxLength: 5000 })],
  ])("never throws on %s, and settles RunnerLost unless it is a valid report", (_name, reports) => {
    run(fc.property(reports as fc.Arbitrary<string>, (text) => expectSettled(text)));
  });
});

describe("named bad reports", () => {
  const valid = (fields: Record<string, unknown> = {}, tasks?: unknown[]) =>
    JSON.stringify({
      ...JSON.parse(
        encodeReport({
          phase: "Failed",
          reason: "TaskFailed",
          startTime: T0,
          completionTime: at(60),
          tasks: [
            {
              name: "build",
              phase: "Failed",
              attempts: 1,
              exitCode: 2,
              signal: null,
              startTime: at(1),
              completionTime: at(2),
            },
            { name: "test", phase: "Skipped", attempts: 0, exitCode: null, signal: null },
          ],
        }),
      ),
      ...(tasks ? { tasks } : {}),
      ...fields,
    });

  it.each([
    ["an empty message", "", "the termination message is empty"],
    ["what an OOM kill leaves", "Killed\n", "the report is not JSON: Killed"],
    ["JSON null", "null", "does not match the report schema"],
    ["a JSON array", "[]", "does not match the report schema"],
    ["a number too big for a double", "1e999", "does not match the report schema"],
    ["a report cut mid-way", valid().slice(0, 40), "the report is not JSON"],
    [
      "a report of version 2",
      valid({ v: 2 }),
      "the report is of report version 2; this controller reads version 1",
    ],
    [
      "a report without a version",
      valid({ v: undefined }),
      "the report is of report version (none); this controller reads version 1",
    ],
    [
      "a report for three tasks",
      valid({}, [{ p: "Succeeded" }, { p: "Succeeded" }, { p: "Succeeded" }]),
      "lists 3 tasks, the plan has 2",
    ],
    [
      "a task time past the last date JavaScript can hold",
      valid({}, [{ p: "Failed", x: 2, t: [0, 8.64e15] }, { p: "Skipped" }]),
      "tasks.0.t.1",
    ],
    [
      "a Succeeded run whose task failed",
      valid({ phase: "Succeeded", reason: "Succeeded" }),
      "the report is self-contradictory: it says the run Succeeded but task 0 is Failed",
    ],
    [
      "a phase that does not go with its reason",
      valid({ phase: "Succeeded" }),
      "phase Succeeded does not go with reason TaskFailed",
    ],
    [
      "a TaskTimeout whose deciding task did not time out",
      valid({ reason: "TaskTimeout" }),
      "reason TaskTimeout but the task that ended the run (0) is Failed",
    ],
    [
      "a limit on a task that did not time out",
      valid({}, [{ p: "Failed", x: 2, l: "StallLimit" }, { p: "Skipped" }]),
      "task 0 names limit StallLimit but is Failed",
    ],
    [
      "a report longer than a termination message holds",
      valid({}, [{ p: "Failed", x: 2, m: "x".repeat(5000) }, { p: "Skipped" }]),
      "more than the 4096 a termination message holds",
    ],
  ])("settles RunnerLost for %s, saying why", (_name, text, says) => {
    expect(expectRunnerLost(text)).toContain(says);
  });

  it("still settles the valid report these were made from", () => {
    expect(succeededCondition(settleWith(valid()).status)).toMatchObject({
      reason: "TaskFailed",
      message: "task build exited with code 2",
    });
  });
});
