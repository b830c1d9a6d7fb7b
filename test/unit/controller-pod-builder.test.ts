import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import { PLAN_ENV_VAR, RunPlanSchema } from "../../src/api/plan.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { activeDeadlineSeconds, buildPod, podNameFor } from "../../src/controller/pod-builder.js";
import { at, SETTINGS, T0 } from "./controller-fixtures.js";

const spec = PlaybookSpecSchema.parse({
  ceiling: "10m",
  killGrace: "20s",
  tasks: [{ name: "a", run: "true" }],
});
const limits = resolveLimits(spec, SETTINGS.defaults);
const request = {
  playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
  spec,
  limits,
  defaults: SETTINGS.defaults,
  attempt: 1,
  runStart: T0,
  now: T0,
  runnerImage: "runner:1",
};

describe("the pod of an attempt", () => {
  const pod = buildPod(request);
  const container = (pod.spec.containers as Record<string, unknown>[])[0] ?? {};

  it("is named by playbook and attempt, labelled and owned by its Playbook", () => {
    expect(pod.metadata.name).toBe("nightly-1");
    expect(pod.metadata.labels).toEqual({
      "playbook.dev/name": "nightly",
      "playbook.dev/pod-attempt": "1",
      "app.kubernetes.io/managed-by": "playbook-controller",
    });
    expect(pod.metadata.ownerReferences).toEqual([
      {
        apiVersion: "playbook.dev/v1alpha1",
        kind: "Playbook",
        name: "nightly",
        uid: "uid-1",
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
  });

  it("never restarts, and gives the kubelet the ceiling plus killGrace and margin", () => {
    expect(pod.spec.restartPolicy).toBe("Never");
    expect(pod.spec.activeDeadlineSeconds).toBe(600 + 20 + 5);
    expect(pod.spec.terminationGracePeriodSeconds).toBe(25);
  });

  it("passes the restricted Pod Security Standard", () => {
    expect(pod.spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: "RuntimeDefault" },
    });
    expect(container.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      capabilities: { drop: ["ALL"] },
      runAsNonRoot: true,
      runAsUser: 65532,
      seccompProfile: { type: "RuntimeDefault" },
    });
  });

  it("shares the pod's PID namespace, so the sandbox reaps what tasks orphan", () => {
    expect(pod.spec.shareProcessNamespace).toBe(true);
  });

  it("runs the pod runner with the resolved plan and falls back to logs for its message", () => {
    expect(container.command).toEqual(["playbook", "pod-runner"]);
    expect(container.terminationMessagePolicy).toBe("FallbackToLogsOnError");
    const env = container.env as { name: string; value: string }[];
    const plan = RunPlanSchema.parse(JSON.parse(env.find((e) => e.name === PLAN_ENV_VAR)?.value ?? ""));
    expect(plan).toMatchObject({
      name: "nightly",
      namespace: "ops",
      runStartTime: T0.toISOString(),
      defaults: SETTINGS.defaults,
    });
  });

  it("counts the deadline of a re-created pod from the run's start", () => {
    expect(activeDeadlineSeconds(limits, T0, at(400))).toBe(200 + 20 + 5);
    expect(activeDeadlineSeconds(limits, T0, at(4000))).toBe(0 + 20 + 5);
  });

  it("keeps long names within 63 characters and distinct", () => {
    const long = "a".repeat(100);
    const name = podNameFor(long, 12);
    expect(name.length).toBeLessThanOrEqual(63);
    expect(name.endsWith("-12")).toBe(true);
    expect(podNameFor(`${long}b`, 12)).not.toBe(name);
  });
});
