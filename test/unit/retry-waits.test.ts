// The retry waits: where each comes from (task → spec → policy → default), what the schema refuses,
// the sequence of waits with a fixed random source, and how progress shows a wait.
import { describe, expect, it } from "vitest";
import { describeRunLimits, LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { InvalidPlaybookError, parsePlaybookManifest } from "../../src/api/manifest.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { PolicySpecSchema, policyLimitDefaults, policyRules } from "../../src/api/policy.js";
import { parseProgressLine } from "../../src/api/progress-record.js";
import { expandReport } from "../../src/api/report-expand.js";
import { Progress } from "../../src/cli/progress.js";
import { ProgressLineReader } from "../../src/cli/progress-lines.js";
import { planDefaults, planDefaultsFromStatus } from "../../src/controller/plan-digest.js";
import { ProgressRecorder } from "../../src/pod-runner/progress-recorder.js";
import { retryCapMs, retryWaitMs } from "../../src/pod-runner/retry-wait.js";
import type { RunEvent } from "../../src/pod-runner/run.js";

const header = "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata:\n  name: demo\n";

function problemsOf(yaml: string): string[] {
  try {
    parsePlaybookManifest(header + yaml, LOCAL_DEFAULTS, "demo.yaml");
  } catch (error) {
    if (error instanceof InvalidPlaybookError) return error.problems.map((p) => `${p.path}: ${p.message}`);
    throw error;
  }
  return [];
}

describe("retry waits resolved", () => {
  const policy = policyRules(
    {
      name: "default",
      spec: PolicySpecSchema.parse({ defaults: { retryDelay: "5s", retryBackoff: 3, retryMaxDelay: "2m" } }),
    },
    { runnerImage: "runner:1", allowedServiceAccounts: [], allowedImages: [] },
  );
  const spec = PlaybookSpecSchema.parse({
    retryDelay: "2s",
    tasks: [
      { name: "own", run: "true", retryDelay: "250ms", retryBackoff: 1.5, retryMaxDelay: "10s" },
      { name: "inherits", run: "true" },
    ],
    finally: [{ name: "cleanup", run: "true", retryBackoff: 4 }],
  });

  it("takes each from the task, else the spec, else the policy, else the default, naming the level", () => {
    const limits = resolveLimits(spec, { ...LOCAL_DEFAULTS, policy: policyLimitDefaults(policy) });
    expect(limits.tasks[0]?.retryWaits).toEqual({
      delay: { ms: 250, source: "task", field: "spec.tasks[0].retryDelay" },
      backoff: { value: 1.5, source: "task", field: "spec.tasks[0].retryBackoff" },
      maxDelay: { ms: 10_000, source: "task", field: "spec.tasks[0].retryMaxDelay" },
    });
    expect(limits.tasks[1]?.retryWaits).toEqual({
      delay: { ms: 2000, source: "spec", field: "spec.retryDelay" },
      backoff: { value: 3, source: "policy", field: "the namespace policy's default retry backoff" },
      maxDelay: { ms: 120_000, source: "policy", field: "the namespace policy's default retry max delay" },
    });
    expect(limits.finally[0]?.retryWaits?.backoff).toEqual({
      value: 4,
      source: "task",
      field: "spec.finally[0].retryBackoff",
    });
  });

  it("falls back to the defaults of DESIGN.md: 1s, factor 2, at most 1m", () => {
    const limits = resolveLimits(
      PlaybookSpecSchema.parse({ tasks: [{ name: "a", run: "true" }] }),
      LOCAL_DEFAULTS,
    );
    expect(limits.tasks[0]?.retryWaits).toMatchObject({
      delay: { ms: 1000, source: "default" },
      backoff: { value: 2, source: "default" },
      maxDelay: { ms: 60_000, source: "default" },
    });
  });

  it.each([
    [
      "a backoff under 1",
      "spec:\n  tasks:\n    - {name: a, run: 'true', retryBackoff: 0.5}\n",
      "spec.tasks[0].retryBackoff: 0.5 must be a factor from 1 (the same wait each time) to 10",
    ],
    [
      "a backoff that is a string",
      "spec:\n  retryBackoff: twice\n  tasks:\n    - {name: a, run: 'true'}\n",
      'spec.retryBackoff: "twice" must be a number such as 2',
    ],
    [
      "a delay that is no duration",
      "spec:\n  finally:\n    - {name: b, run: 'true', retryDelay: soon}\n  tasks:\n    - {name: a, run: 'true'}\n",
      "spec.finally[0].retryDelay:",
    ],
  ])("refuses %s, naming the field and the value", (_name, yaml, expected) => {
    expect(problemsOf(yaml).join("\n")).toContain(expected);
  });
});

describe("the policy's retry waits in a run's plan", () => {
  const spec = PlaybookSpecSchema.parse({ tasks: [{ name: "a", run: "true", retries: 1 }] });

  it("are carried by the plan and by status.limits, so a lost pod's plan is rebuilt the same", () => {
    const policy = { retryDelayMs: 5000, retryBackoff: 3, retryMaxDelayMs: 120_000 };
    const limits = resolveLimits(spec, { ...LOCAL_DEFAULTS, policy });
    const fromPlan = planDefaults(limits);
    expect(fromPlan.policy).toEqual(policy);
    const status = describeRunLimits(limits);
    expect(status).toMatchObject({
      retryDelay: { value: "5s", source: "policy" },
      retryBackoff: { value: "3", source: "policy" },
      retryMaxDelay: { value: "2m", source: "policy" },
    });
    expect(planDefaultsFromStatus({ limits: status })).toEqual(fromPlan);
    expect(resolveLimits(spec, fromPlan).tasks[0]?.retryWaits).toEqual(limits.tasks[0]?.retryWaits);
  });

  it("leave the plan and status.limits of a run without them as they were", () => {
    const limits = resolveLimits(spec, LOCAL_DEFAULTS);
    expect(planDefaults(limits).policy).toBeUndefined();
    expect(Object.keys(describeRunLimits(limits))).not.toContain("retryDelay");
  });
});

describe("the sequence of waits", () => {
  const waits = resolveLimits(
    PlaybookSpecSchema.parse({
      tasks: [{ name: "a", run: "true", retryDelay: "1s", retryBackoff: 2, retryMaxDelay: "5s" }],
    }),
    LOCAL_DEFAULTS,
  ).tasks[0]?.retryWaits;
  if (!waits) throw new Error("no waits");

  it("grows by the factor up to retryMaxDelay", () => {
    expect([1, 2, 3, 4, 5].map((n) => retryCapMs(waits, n))).toEqual([1000, 2000, 4000, 5000, 5000]);
  });

  it("jitters each wait into [half, all] of its cap", () => {
    expect([1, 2, 3, 4].map((n) => retryWaitMs(waits, n, () => 0))).toEqual([500, 1000, 2000, 2500]);
    expect([1, 2, 3, 4].map((n) => retryWaitMs(waits, n, () => 0.5))).toEqual([750, 1500, 3000, 3750]);
    expect([1, 2, 3, 4].map((n) => retryWaitMs(waits, n, () => 1))).toEqual([1000, 2000, 4000, 5000]);
  });
});

describe("a wait shown", () => {
  const spec = PlaybookSpecSchema.parse({ tasks: [{ name: "fetch", run: "true", retries: 2 }] });
  const limits = resolveLimits(spec, LOCAL_DEFAULTS);
  const retrying: RunEvent = {
    type: "task-retrying",
    index: 0,
    name: "fetch",
    attempt: 2,
    attempts: 3,
    exitCode: 1,
    signal: null,
    delayMs: 4000,
  };

  it("on the progress line, read back as the same event", () => {
    const lines: string[] = [];
    const out = { write: (text: string) => lines.push(text) } as unknown as NodeJS.WritableStream;
    const progress = new Progress({ out, tty: false, limits, outputBytes: () => 0 });
    progress.event(retrying);
    const line = lines.join("").trim();
    expect(line).toBe("playbook: task fetch exited with code 1; retrying in 4s (attempt 2/3)");
    const read = new ProgressLineReader([{ name: "fetch", retries: 2 }]).read(line);
    expect(read).toEqual({ kind: "event", event: retrying });
  });

  it("in the progress record, which status.tasks shows while the task waits", () => {
    const start = new Date("2026-01-01T00:00:00Z");
    const recorder = new ProgressRecorder(1, start);
    recorder.event(
      { type: "task-started", index: 0, name: "fetch", attempt: 1, limits: limits.tasks[0] as never },
      start.getTime() + 100,
    );
    expect(recorder.event(retrying, start.getTime() + 300)).toBe(true);
    const record = parseProgressLine(recorder.line(recorder.snapshot()), 1);
    expect(record?.tasks[0]).toMatchObject({ p: "Running", m: "retrying in 4s (attempt 2/3)", s: 100 });
    const { s: _s, ...task } = record?.tasks[0] ?? { p: "Pending" };
    const status = expandReport(
      {
        v: 1,
        phase: "Succeeded",
        reason: "Succeeded",
        start: start.toISOString(),
        end: start.toISOString(),
        tasks: [task],
      },
      limits,
    ).tasks[0];
    expect(status).toMatchObject({
      name: "fetch",
      phase: "Running",
      message: "retrying in 4s (attempt 2/3)",
    });
  });
});
