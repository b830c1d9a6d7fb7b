// What `playbook describe` prints of a Playbook (describe-playbook.ts): before the run starts, its
// limits as the controller would resolve them under the namespace's policy; once started, what
// status.limits holds it to; the pod's whole bound and the longest run with their sources; the tasks.
import { describe, expect, it } from "vitest";
import { builtInControllerDefaults } from "../../src/api/controller-limits.js";
import { describeRunLimits, resolveLimits } from "../../src/api/limits.js";
import { type PlaybookSpec, PlaybookSpecSchema, type PlaybookStatus } from "../../src/api/playbook.js";
import { defaultsUnder, PolicySpecSchema, policyRulesOf } from "../../src/api/policy.js";
import { describePlaybook, type PolicyRead } from "../../src/cli/describe-playbook.js";
import { limitDefaults, loadControllerConfig } from "../../src/controller/config.js";

const CONTROLLER = limitDefaults(loadControllerConfig({}, {}));
const NOW = "2026-12-07T01:00:00Z";

const specOf = (ceiling?: string) =>
  PlaybookSpecSchema.parse({
    ...(ceiling ? { ceiling } : {}),
    tasks: [
      { name: "build", run: "make", timeout: "5m" },
      { name: "test", run: "make test" },
    ],
  });

function policy(spec: unknown): PolicyRead {
  return {
    kind: "found",
    rules: policyRulesOf({ metadata: { name: "default" }, spec: PolicySpecSchema.parse(spec) }),
  };
}
const underCeiling = policy({ maximums: { ceiling: "30m" }, defaults: { killGrace: "20s" } });

const described = (spec: PlaybookSpec, status: PlaybookStatus | undefined, read: PolicyRead) =>
  describePlaybook({ name: "nightly", namespace: "ops", spec, status }, read, CONTROLLER);

const lineOf = (lines: string[], start: string) => lines.find((line) => line.startsWith(start));

describe("playbook describe", () => {
  it("before the run starts: the limits as the controller would resolve them now, the pod bound and the longest run", () => {
    const lines = described(specOf("20m"), undefined, underCeiling);
    expect(lines.slice(0, 7)).toEqual([
      "Name:       nightly",
      "Namespace:  ops",
      "Phase:      Pending",
      "Succeeded:  not yet set",
      "Policy:     default",
      "Limits:     not started: as the controller would resolve it now (with its built-in defaults; its flags may set others)",
      "  ceiling 20m (spec), stall 10m (default), killGrace 20s (policy), startTimeout 5m (default; on a cluster only)",
    ]);
    expect(lines).toContain(
      "  at most: ceiling 30m (policy), killGrace 5m (default), finallyCeiling within the ceiling's maximum (policy)",
    );
    expect(lineOf(lines, "  pod bound")).toBe(
      "  pod bound 20m25s (activeDeadlineSeconds 1225): ceiling 20m (spec) + killGrace 20s (policy) + margin 5s; at most 35m5s: ceiling 30m (policy) + killGrace 5m (default) + margin 5s",
    );
    expect(lineOf(lines, "  longest run")).toBe(
      "  longest run: 25m20s from its first pod's creation: startTimeout 5m (default) + ceiling 20m (spec) + killGrace 20s (policy); up to 3 pods (1 + backoffLimit 2 (default)) share the ceiling",
    );
    expect(lines.some((line) => line.includes("refuses"))).toBe(false);
    expect(lines.at(-1)).toBe("Tasks:      none reported yet");
  });

  it("takes the controller's built-in defaults, as a controller started without its limit flags has them", () => {
    expect(builtInControllerDefaults()).toEqual(CONTROLLER);
  });

  it("says what the policy would refuse in a run not started", () => {
    const lines = described(specOf(), undefined, underCeiling);
    expect(lines).toContain(
      "  the policy refuses spec: 1h (the default ceiling) is longer than the namespace's maximum ceiling 30m (PlaybookPolicy default, spec.maximums.ceiling)",
    );
  });

  it("once started: the limits status.limits holds the run to, whatever the policy says since, and each task's row", () => {
    const spec = specOf();
    // Started under a policy whose default ceiling was 10m; the policy has changed since.
    const then = policy({ defaults: { ceiling: "10m" } });
    const held = resolveLimits(
      spec,
      defaultsUnder(then.kind === "found" ? then.rules : undefined, CONTROLLER),
    );
    const status: PlaybookStatus = {
      phase: "Failed",
      limits: describeRunLimits(held),
      conditions: [
        {
          type: "Succeeded",
          status: "False",
          reason: "TimedOut",
          message: "task build exceeded its timeout 5m (task)",
          lastTransitionTime: NOW,
        },
      ],
      tasks: [
        {
          name: "build",
          phase: "TimedOut",
          limit: "TaskTimeout",
          limitValue: "5m",
          limitSource: "task",
          attempts: 1,
          message: "exceeded its timeout 5m",
        },
        { name: "test", phase: "Skipped", attempts: 0 },
      ],
    };
    const lines = described(spec, status, underCeiling);
    expect(lines.slice(2, 7)).toEqual([
      "Phase:      Failed",
      "Succeeded:  False (TimedOut): task build exceeded its timeout 5m (task)",
      "Policy:     default",
      "Limits:     as the run is held to them (status.limits)",
      "  ceiling 10m (policy), stall 10m (default), killGrace 10s (default), startTimeout 5m (default; on a cluster only)",
    ]);
    expect(lineOf(lines, "  pod bound")).toMatch(
      /^ {2}pod bound 10m15s \(activeDeadlineSeconds 615\): ceiling 10m \(policy\) \+ killGrace 10s \(default\) \+ margin 5s; at most 35m5s/,
    );
    expect(lines.slice(-3)).toEqual([
      "Tasks:",
      "  build  TimedOut  TaskTimeout 5m (task)  attempts 1: exceeded its timeout 5m",
      "  test  Skipped  attempts 0",
    ]);
  });

  it("says in one line that the policy is missing or not readable", () => {
    expect(described(specOf("20m"), undefined, { kind: "none" })).toContain(
      "Policy:     none (no PlaybookPolicy default in namespace ops): the controller's defaults and maximums apply",
    );
    expect(described(specOf("20m"), undefined, { kind: "unreadable", why: "forbidden by RBAC" })).toContain(
      "Policy:     not readable (forbidden by RBAC): shown without it",
    );
  });

  it("shows each placement field the pod carries with its level: spec, policy default, policy enforced", () => {
    const spec = PlaybookSpecSchema.parse({
      tasks: [{ name: "build", run: "make" }],
      nodeSelector: { pool: "batch" },
      runtimeClassName: "gvisor",
      podMetadata: { annotations: { "sidecar.istio.io/inject": "false" } },
    });
    const read = policy({
      defaults: { tolerations: [{ key: "spot", operator: "Exists", effect: "NoSchedule" }] },
      enforced: { nodeSelector: { "example.com/tenant": "team-a" } },
    });
    const lines = described(spec, undefined, read);
    const start = lines.indexOf("Placement:  as the controller would build the pod now");
    expect(start).toBeGreaterThan(0);
    expect(lines.slice(start + 1, start + 6)).toEqual([
      "  nodeSelector  pool=batch  (spec)",
      "  nodeSelector  example.com/tenant=team-a  (policy enforced)",
      "  tolerations  spot exists:NoSchedule  (policy default)",
      "  runtimeClassName  gvisor  (spec)",
      "  podMetadata.annotations  sidecar.istio.io/inject=false  (spec)",
    ]);
  });
});
