// Kueue's fields of the API (issue 43): spec.queueName, priorityClassName, queueTimeout and
// onPreemption, the policy's defaults and maximum, the controller's flags, and status.limits.
import { describe, expect, it } from "vitest";
import { describeRunLimits, LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { InvalidPlaybookError, parsePlaybookManifest } from "../../src/api/manifest.js";
import {
  checkPolicy,
  type PolicySpec,
  PolicySpecSchema,
  podSettings,
  policyLimitDefaults,
  policyRules,
} from "../../src/api/policy.js";
import { policyProblems } from "../../src/api/policy-consistency.js";
import { limitDefaults, loadControllerConfig } from "../../src/controller/config.js";
import { planDefaults, planDefaultsFromStatus } from "../../src/controller/plan-digest.js";

const header = "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata:\n  name: demo\n";
const task = "  tasks:\n    - {name: a, run: 'true'}\n";

function parse(specLines: string) {
  return parsePlaybookManifest(`${header}spec:\n${specLines}${task}`, LOCAL_DEFAULTS, "demo.yaml");
}

function problemsOf(specLines: string): string[] {
  try {
    parse(specLines);
  } catch (error) {
    if (error instanceof InvalidPlaybookError) return error.problems.map((p) => `${p.path}: ${p.message}`);
    throw error;
  }
  return [];
}

const CLUSTER = { runnerImage: "runner:test", allowedServiceAccounts: [], allowedImages: [] };
const governed = (spec: PolicySpec, cluster: Record<string, unknown> = {}) =>
  policyRules(
    { name: "default", generation: 1, spec: PolicySpecSchema.parse(spec) },
    { ...CLUSTER, ...cluster },
  );

describe("a Playbook's Kueue fields", () => {
  it("reads queueName, priorityClassName, queueTimeout and onPreemption as written", () => {
    const playbook = parse(
      "  queueName: team-a\n  priorityClassName: high\n  queueTimeout: 1h\n  onPreemption: Fail\n",
    );
    expect(playbook.spec).toMatchObject({
      queueName: "team-a",
      priorityClassName: "high",
      queueTimeout: "1h",
      onPreemption: "Fail",
    });
  });

  it("adds no field to a spec that sets none, so the plan of a run without Kueue stays the one it was", () => {
    const spec = parse("").spec;
    for (const field of ["queueName", "priorityClassName", "queueTimeout", "onPreemption"]) {
      expect(spec).not.toHaveProperty(field);
    }
  });

  it.each([
    [
      "a queue name that is no DNS subdomain",
      "  queueName: Team_A\n",
      'spec.queueName: "Team_A" must be a DNS-1123 subdomain',
    ],
    ["a queue name longer than a label value", `  queueName: ${"q".repeat(64)}\n`, "spec.queueName: "],
    [
      "a priority class name with a slash",
      "  priorityClassName: a/b\n",
      'spec.priorityClassName: "a/b" must be a DNS-1123 subdomain',
    ],
    [
      "an unknown onPreemption",
      "  onPreemption: Retry\n",
      'spec.onPreemption: "Retry" must be Requeue or Fail',
    ],
    ["a malformed queue timeout", "  queueTimeout: soon\n", 'spec.queueTimeout: "soon" is not a duration'],
    [
      "a queue timeout of 0s",
      "  queueTimeout: 0s\n",
      "spec.queueTimeout: 0s would end the run at once: a queue timeout must be longer than 0s",
    ],
    ["a negative maxPreemptions", "  maxPreemptions: -1\n", "spec.maxPreemptions: "],
    ["a maxPreemptions above 100", "  maxPreemptions: 101\n", "spec.maxPreemptions: "],
    ["a maxPreemptions that is no whole number", "  maxPreemptions: 1.5\n", "spec.maxPreemptions: "],
  ])("refuses %s, naming the field and the value", (_name, lines, expected) => {
    const problems = problemsOf(lines);
    expect(
      problems.some((p) => p.startsWith(expected)),
      problems.join("\n"),
    ).toBe(true);
  });

  it("refuses a queue name longer than 63 characters saying why", () => {
    expect(problemsOf(`  queueName: ${"q".repeat(64)}\n`).join("\n")).toContain("at most 63 characters");
  });
});

describe("the queue timeout's levels", () => {
  const spec = (lines: string) => parse(lines).spec;

  it("is none at every level by default, and status.limits then shows none", () => {
    const limits = resolveLimits(spec(""), LOCAL_DEFAULTS);
    expect(limits.queueTimeout).toBeNull();
    expect(describeRunLimits(limits)).not.toHaveProperty("queueTimeout");
  });

  it("comes from the spec, else the policy, else the controller, naming its level in status.limits", () => {
    const policy = { queueTimeoutMs: 1_800_000 };
    const controller = { ...LOCAL_DEFAULTS, queueTimeoutMs: 600_000 };
    expect(
      describeRunLimits(resolveLimits(spec("  queueTimeout: 2h\n"), { ...controller, policy })).queueTimeout,
    ).toEqual({ value: "2h", source: "spec" });
    expect(describeRunLimits(resolveLimits(spec(""), { ...controller, policy })).queueTimeout).toEqual({
      value: "30m",
      source: "policy",
    });
    expect(describeRunLimits(resolveLimits(spec(""), controller)).queueTimeout).toEqual({
      value: "10m",
      source: "default",
    });
  });

  it("rebuilds from status.limits the plan defaults it was resolved with", () => {
    const controller = { ...LOCAL_DEFAULTS, queueTimeoutMs: 600_000 };
    for (const defaults of [controller, { ...controller, policy: { queueTimeoutMs: 1_800_000 } }]) {
      const limits = resolveLimits(spec(""), defaults);
      const fromPlan = planDefaults(limits);
      const fromStatus = planDefaultsFromStatus({ limits: describeRunLimits(limits) });
      expect(fromStatus).toEqual(fromPlan);
      expect(resolveLimits(spec(""), fromPlan).queueTimeout).toEqual(limits.queueTimeout);
    }
  });

  it("leaves the plan defaults of a run without a queue timeout as they were", () => {
    const limits = resolveLimits(spec(""), LOCAL_DEFAULTS);
    const defaults = planDefaults(limits);
    expect(defaults).not.toHaveProperty("queueTimeoutMs");
    expect(defaults.policy).toBeUndefined();
  });
});

describe("maxPreemptions' levels", () => {
  const spec = (lines: string) => parse(lines).spec;
  const controller = { ...LOCAL_DEFAULTS, maxPreemptions: 5 };

  it("is unset for a local run, which no queue stops", () => {
    expect(resolveLimits(spec(""), LOCAL_DEFAULTS).maxPreemptions).toBeNull();
    expect(describeRunLimits(resolveLimits(spec(""), LOCAL_DEFAULTS))).not.toHaveProperty("maxPreemptions");
  });

  it("comes from the spec, else the policy's default, else the controller's within the policy's maximum", () => {
    const shown = (lines: string, policy?: Record<string, number>) =>
      describeRunLimits(resolveLimits(spec(lines), { ...controller, ...(policy ? { policy } : {}) }))
        .maxPreemptions;
    expect(shown("  maxPreemptions: 1\n", { maxPreemptions: 2 })).toEqual({ value: 1, source: "spec" });
    expect(shown("", { maxPreemptions: 2, maximumMaxPreemptions: 3 })).toEqual({
      value: 2,
      source: "policy",
    });
    expect(shown("")).toEqual({ value: 5, source: "default" });
    expect(shown("", { maximumMaxPreemptions: 8 })).toEqual({ value: 5, source: "default" });
    expect(shown("", { maximumMaxPreemptions: 3 })).toEqual({ value: 3, source: "policy" });
  });

  it("rebuilds from status.limits the plan defaults it was resolved with", () => {
    for (const defaults of [
      controller,
      { ...controller, policy: { maxPreemptions: 2 } },
      { ...controller, policy: { maximumMaxPreemptions: 1 } },
    ]) {
      const limits = resolveLimits(spec(""), defaults);
      const fromPlan = planDefaults(limits);
      expect(planDefaultsFromStatus({ limits: describeRunLimits(limits) })).toEqual(fromPlan);
      expect(resolveLimits(spec(""), fromPlan).maxPreemptions).toMatchObject({
        value: limits.maxPreemptions?.value,
        source: limits.maxPreemptions?.source,
      });
    }
  });

  it("is refused past the policy's maximum, naming the value, the bound and where it is set", () => {
    const rules = governed({ maximums: { maxPreemptions: 2 } });
    const own = spec("  maxPreemptions: 3\n");
    expect(checkPolicy(own, resolveLimits(own, controller), rules)).toEqual([
      {
        path: "spec.maxPreemptions",
        field: "spec.maxPreemptions",
        message:
          "3 is more than the namespace's maximum maxPreemptions 2 (PlaybookPolicy default, spec.maximums.maxPreemptions)",
      },
    ]);
    expect(
      policyProblems(
        { name: "default", spec: { defaults: { maxPreemptions: 4 }, maximums: { maxPreemptions: 2 } } },
        86_400_000,
      ),
    ).toEqual(["spec.defaults.maxPreemptions: 4 is more than spec.maximums.maxPreemptions 2"]);
  });
});

describe("the namespace policy's Kueue fields", () => {
  const playbook = (lines: string) => parse(lines).spec;

  it("gives its queue name and queue timeout to a Playbook that sets neither", () => {
    const rules = governed({ defaults: { queueName: "team-a", queueTimeout: "20m" } });
    const spec = playbook("");
    expect(podSettings(spec, rules).queue).toEqual({ name: "team-a", source: "policy" });
    const limits = resolveLimits(spec, { ...LOCAL_DEFAULTS, policy: policyLimitDefaults(rules) });
    expect(limits.queueTimeout).toMatchObject({ ms: 1_200_000, source: "policy" });
  });

  it("lets the spec's queue win, and the controller's default queue come last", () => {
    const rules = governed({ defaults: { queueName: "team-a" } }, { defaultQueueName: "shared" });
    expect(podSettings(playbook("  queueName: mine\n"), rules).queue).toEqual({
      name: "mine",
      source: "spec",
    });
    expect(podSettings(playbook(""), governed({}, { defaultQueueName: "shared" })).queue).toEqual({
      name: "shared",
      source: "default",
    });
    expect(podSettings(playbook(""), governed({})).queue).toBeUndefined();
  });

  it("refuses a queue timeout longer than its maximum, naming the value and the bound", () => {
    const rules = governed({ maximums: { queueTimeout: "1h" } });
    const spec = playbook("  queueTimeout: 2h\n");
    const problems = checkPolicy(spec, resolveLimits(spec, LOCAL_DEFAULTS), rules);
    expect(problems).toEqual([
      {
        path: "spec.queueTimeout",
        field: "spec.queueTimeout",
        message:
          "2h is longer than the namespace's maximum queueTimeout 1h (PlaybookPolicy default, spec.maximums.queueTimeout)",
      },
    ]);
  });

  it("refuses a controller default above the namespace's maximum, naming where it came from", () => {
    const rules = governed({ maximums: { queueTimeout: "1h" } });
    const spec = playbook("");
    const limits = resolveLimits(spec, { ...LOCAL_DEFAULTS, queueTimeoutMs: 7_200_000 });
    expect(checkPolicy(spec, limits, rules).map((p) => `${p.path}: ${p.message}`)).toEqual([
      "spec: 2h (the default queue timeout) is longer than the namespace's maximum queueTimeout 1h (PlaybookPolicy default, spec.maximums.queueTimeout)",
    ]);
  });

  it("bounds a Playbook that sets no queue timeout by its maximum: never none under a maximum", () => {
    const rules = governed({ maximums: { queueTimeout: "1h" } });
    const spec = playbook("");
    const resolved = (controller: typeof LOCAL_DEFAULTS) =>
      resolveLimits(spec, { ...controller, policy: policyLimitDefaults(rules) });
    // No default at any level: the maximum.
    expect(resolved(LOCAL_DEFAULTS).queueTimeout).toMatchObject({ ms: 3_600_000, source: "policy" });
    expect(describeRunLimits(resolved(LOCAL_DEFAULTS)).queueTimeout).toEqual({
      value: "1h",
      source: "policy",
    });
    // The controller's default within the maximum stays; one past it gives way to the maximum, unrefused.
    expect(resolved({ ...LOCAL_DEFAULTS, queueTimeoutMs: 600_000 }).queueTimeout).toMatchObject({
      ms: 600_000,
      source: "default",
    });
    const above = resolved({ ...LOCAL_DEFAULTS, queueTimeoutMs: 7_200_000 });
    expect(above.queueTimeout).toMatchObject({ ms: 3_600_000, source: "policy" });
    expect(checkPolicy(spec, above, rules)).toEqual([]);
    // The run's plan carries it as the policy's: rebuilt from status.limits, it resolves the same.
    const fromStatus = planDefaultsFromStatus({ limits: describeRunLimits(above) });
    expect(fromStatus && resolveLimits(spec, fromStatus).queueTimeout).toEqual({
      ms: 3_600_000,
      source: "policy",
      field: "the namespace policy's default queue timeout",
    });
  });

  it("reports a default queue timeout above its own maximum", () => {
    expect(
      policyProblems(
        { name: "default", spec: { defaults: { queueTimeout: "2h" }, maximums: { queueTimeout: "1h" } } },
        86_400_000,
      ),
    ).toEqual(["spec.defaults.queueTimeout: 2h is longer than spec.maximums.queueTimeout 1h"]);
  });

  it.each([
    [{ defaults: { queueName: "Team A" } }, "defaults.queueName"],
    [{ defaults: { queueTimeout: "later" } }, "defaults.queueTimeout"],
    [{ maximums: { queueTimeout: "x" } }, "maximums.queueTimeout"],
  ])("refuses a bad %j at its field", (spec, path) => {
    const parsed = PolicySpecSchema.safeParse(spec);
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues.map((i) => i.path.join("."))).toContain(path);
  });
});

describe("the controller's Kueue flags", () => {
  it("sets no queue timeout, no default queue and no Kueue watch unless told", () => {
    const config = loadControllerConfig({}, {});
    expect(config.defaultQueueTimeout).toBeUndefined();
    expect(config.defaultQueueName).toBeUndefined();
    expect(config.kueue).toBe(false);
    expect(limitDefaults(config)).not.toHaveProperty("queueTimeoutMs");
  });

  it("caps requeues at 5 unless told, and takes --default-max-preemptions", () => {
    expect(limitDefaults(loadControllerConfig({}, {})).maxPreemptions).toBe(5);
    expect(limitDefaults(loadControllerConfig({ defaultMaxPreemptions: "0" }, {})).maxPreemptions).toBe(0);
    expect(
      limitDefaults(loadControllerConfig({}, { PLAYBOOK_DEFAULT_MAX_PREEMPTIONS: "2" })).maxPreemptions,
    ).toBe(2);
  });

  it("takes a default queue timeout and queue name", () => {
    const config = loadControllerConfig(
      { defaultQueueTimeout: "45m", defaultQueueName: "shared", kueue: "true" },
      {},
    );
    expect(limitDefaults(config).queueTimeoutMs).toBe(2_700_000);
    expect(config.defaultQueueName).toBe("shared");
    expect(config.kueue).toBe(true);
  });

  it.each([
    [
      { defaultQueueTimeout: "0s" },
      "--default-queue-timeout ($PLAYBOOK_DEFAULT_QUEUE_TIMEOUT): 0s must be longer than 0s",
    ],
    [{ defaultMaxPreemptions: "101" }, "--default-max-preemptions ($PLAYBOOK_DEFAULT_MAX_PREEMPTIONS): "],
    [
      { defaultQueueName: "Shared_Q" },
      "--default-queue-name ($PLAYBOOK_DEFAULT_QUEUE_NAME): must be a LocalQueue name",
    ],
  ])("refuses %j naming the flag", (flags, expected) => {
    expect(() => loadControllerConfig(flags, {})).toThrow(expected);
  });
});
