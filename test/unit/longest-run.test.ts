// The longest a run can take (issue 53): each pod it may create waits up to queueTimeout for
// Kueue, which the ceiling does not count; the ceiling is shared by all its pods; the last pod's
// start, killGrace and the finally tasks' window come on top. Pure.
import { describe, expect, it } from "vitest";
import { type LimitDefaults, preemptionCap, resolveLimits } from "../../src/api/limits.js";
import { longestRun, type RunPods } from "../../src/api/longest-run.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";

const DEFAULTS: LimitDefaults = {
  ceilingMs: 3_600_000,
  maxCeilingMs: 86_400_000,
  stallMs: 600_000,
  killGraceMs: 10_000,
  maxPreemptions: 5,
};
const limitsOf = (spec: Record<string, unknown>) =>
  resolveLimits(PlaybookSpecSchema.parse({ tasks: [{ name: "a", run: "true" }], ...spec }), DEFAULTS);
const pods = (limits: ReturnType<typeof limitsOf>, over: Partial<RunPods> = {}): RunPods => ({
  queued: true,
  backoffLimit: { value: 2, source: "default" },
  onPreemption: "Requeue",
  maxPreemptions: preemptionCap(limits),
  ...over,
});

describe("the longest a run can take", () => {
  it("is (1 + backoffLimit + maxPreemptions) × queueTimeout + startTimeout + ceiling + killGrace + the finally window", () => {
    const limits = limitsOf({ queueTimeout: "30m", ceiling: "1h", finally: [{ name: "f", run: "true" }] });
    const run = longestRun(limits, pods(limits));
    expect(run.pods).toBe(8);
    expect(run.queueMs).toBe(8 * 1_800_000);
    // startTimeout 5m, ceiling 1h, killGrace 10s, finallyCeiling 5m and its killGrace 10s.
    expect(run.runMs).toBe(300_000 + 3_600_000 + 10_000 + 300_000 + 10_000);
    expect(run.ms).toBe(8 * 1_800_000 + run.runMs);
  });

  it("counts no requeues under onPreemption Fail, and no queue wait without a queue", () => {
    const limits = limitsOf({ queueTimeout: "30m" });
    expect(longestRun(limits, pods(limits, { onPreemption: "Fail" })).pods).toBe(3);
    const plain = longestRun(limits, pods(limits, { queued: false }));
    expect(plain).toMatchObject({ pods: 3, queueMs: 0 });
    expect(plain.ms).toBe(300_000 + 3_600_000 + 10_000);
  });

  it("has no bound for a queued run with no queueTimeout at any level", () => {
    const limits = limitsOf({});
    expect(longestRun(limits, pods(limits))).toMatchObject({ ms: null, queueMs: null, pods: 8 });
  });

  it("is bounded once a policy sets a maximum queueTimeout, even for a spec that sets none", () => {
    const limits = resolveLimits(PlaybookSpecSchema.parse({ tasks: [{ name: "a", run: "true" }] }), {
      ...DEFAULTS,
      policy: { maximumQueueTimeoutMs: 3_600_000, maximumMaxPreemptions: 1 },
    });
    expect(longestRun(limits, pods(limits)).ms).toBe(4 * 3_600_000 + 300_000 + 3_600_000 + 10_000);
  });
});
