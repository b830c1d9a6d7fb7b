import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import {
  MAX_PLAN_BYTES,
  PLAN_ANNOTATION,
  PlanTooLargeError,
  parsePlan,
  planDigest,
  RunPlanSchema,
} from "../../src/api/plan.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import {
  activeDeadlineSeconds,
  alternatePodName,
  buildPod,
  podNameFor,
} from "../../src/controller/pod-builder.js";
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

  it("runs the pod runner with the plan from an annotation, as a file, and falls back to logs for its message", () => {
    expect(container.command).toEqual(["playbook", "pod-runner", "--plan", "/run/playbook/plan.json"]);
    // The plan's digest, fixed with the pod (a pod's env cannot change; its annotations can).
    const carried = parsePlan(pod.metadata.annotations["playbook.dev/plan"] ?? "");
    expect(carried.ok && container.env).toEqual([
      { name: "PLAYBOOK_PLAN_DIGEST", value: carried.ok ? planDigest(carried.plan) : "" },
    ]);
    expect(container.volumeMounts).toEqual([{ name: "plan", mountPath: "/run/playbook", readOnly: true }]);
    expect(pod.spec.volumes).toEqual([
      {
        name: "plan",
        downwardAPI: {
          items: [
            { path: "plan.json", fieldRef: { fieldPath: "metadata.annotations['playbook.dev/plan']" } },
          ],
        },
      },
    ]);
    expect(container.terminationMessagePolicy).toBe("FallbackToLogsOnError");
    const plan = RunPlanSchema.parse(JSON.parse(pod.metadata.annotations[PLAN_ANNOTATION] ?? ""));
    expect(plan).toMatchObject({
      name: "nightly",
      namespace: "ops",
      runStartTime: T0.toISOString(),
      defaults: SETTINGS.defaults,
      spec: { tasks: [{ name: "a", run: "true" }] },
    });
  });

  it("carries the largest plan the CRD admits, and refuses one whose escaped JSON a pod cannot hold", () => {
    const largest = PlaybookSpecSchema.parse({
      tasks: [
        ...["a", "b", "c"].map((name) => ({ name, run: "x".repeat(65_536) })),
        { name: "d", run: "x".repeat(204_800 - 3 * (96 + 1 + 65_536) - 96 - 1) },
      ],
    });
    const fits = buildPod({ ...request, spec: largest, limits: resolveLimits(largest, SETTINGS.defaults) });
    expect(Buffer.byteLength(fits.metadata.annotations[PLAN_ANNOTATION] ?? "")).toBeLessThanOrEqual(
      MAX_PLAN_BYTES,
    );
    // One character more is refused with the CRD's words, as the API server refuses it.
    const over = PlaybookSpecSchema.safeParse({
      tasks: [...largest.tasks.slice(0, 3), { name: "d", run: `${largest.tasks[3]?.run}x` }],
    });
    expect(over.error?.issues[0]?.message).toContain("is too large to run: 204801 characters");
    // Each control character becomes six in JSON (\u0001).
    const escaped = PlaybookSpecSchema.parse({ tasks: [{ name: "a", run: "\u0001".repeat(60_000) }] });
    expect(() =>
      buildPod({ ...request, spec: escaped, limits: resolveLimits(escaped, SETTINGS.defaults) }),
    ).toThrow(PlanTooLargeError);
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

  it("gives the alternate name <playbook>-<attempt>-<first 8 of the UID>, within 63 characters too", () => {
    const uid = "3F2A9C1E-7B4D-4E0A-9C2B-1D5E6F708192";
    expect(alternatePodName("nightly", 2, uid)).toBe("nightly-2-3f2a9c1e");
    const long = alternatePodName("a".repeat(100), 12, uid);
    expect(long.length).toBeLessThanOrEqual(63);
    expect(long.endsWith("-12-3f2a9c1e")).toBe(true);
    expect(long).not.toBe(podNameFor("a".repeat(100), 12));
  });
});
