import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseDuration } from "../../src/api/duration.js";
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
import { PolicySpecSchema, policyRules } from "../../src/api/policy.js";
import { limitDefaults, loadControllerConfig } from "../../src/controller/config.js";
import {
  activeDeadlineSeconds,
  alternatePodName,
  buildPod,
  DEADLINE_MARGIN_SECONDS,
  podNameFor,
} from "../../src/controller/pods/pod-builder.js";
import {
  podServiceAccountToken,
  withoutServiceAccountToken,
} from "../../src/controller/pods/service-account-token.js";
import { validateSpec } from "../../src/controller/run-plan.js";
import { at, playbook, SETTINGS, T0 } from "./controller-fixtures.js";

type Container = Record<string, unknown> & { securityContext?: Record<string, unknown> };

/**
 * What the restricted Pod Security Standard (v1.36) refuses in a pod, as the API server's
 * PodSecurity admission checks it: no host namespaces or host paths, only its volume types, no
 * privilege, non-root, RuntimeDefault seccomp, no privilege escalation, every capability dropped.
 */
function restrictedViolations(pod: { spec: Record<string, unknown> }): string[] {
  const spec = pod.spec as Record<string, unknown> & { securityContext?: Record<string, unknown> };
  const problems: string[] = [];
  for (const host of ["hostNetwork", "hostPID", "hostIPC"]) if (spec[host]) problems.push(host);
  const allowed = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    // Since v1.35: an image volume is read-only and pulled as a container's image is.
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
  ];
  for (const volume of (spec.volumes ?? []) as Record<string, unknown>[]) {
    const kinds = Object.keys(volume).filter((k) => k !== "name");
    if (!kinds.every((k) => allowed.includes(k)))
      problems.push(`volume ${String(volume.name)}: ${kinds.join()}`);
  }
  const podContext = spec.securityContext ?? {};
  const containers = [
    ...((spec.initContainers ?? []) as Container[]),
    ...((spec.containers ?? []) as Container[]),
  ];
  for (const c of containers) {
    const sc = c.securityContext ?? {};
    const name = String(c.name);
    if (sc.privileged) problems.push(`${name}: privileged`);
    if (sc.allowPrivilegeEscalation !== false) problems.push(`${name}: allowPrivilegeEscalation`);
    const caps = (sc.capabilities ?? {}) as { drop?: string[]; add?: string[] };
    if (!caps.drop?.includes("ALL")) problems.push(`${name}: capabilities not dropped`);
    if ((caps.add ?? []).some((cap) => cap !== "NET_BIND_SERVICE"))
      problems.push(`${name}: capabilities added`);
    if ((sc.runAsNonRoot ?? podContext.runAsNonRoot) !== true) problems.push(`${name}: runAsNonRoot`);
    if ((sc.runAsUser ?? podContext.runAsUser) === 0) problems.push(`${name}: runAsUser 0`);
    const seccomp = (sc.seccompProfile ?? podContext.seccompProfile) as { type?: string } | undefined;
    if (seccomp?.type !== "RuntimeDefault" && seccomp?.type !== "Localhost")
      problems.push(`${name}: seccomp`);
    if (c.ports && (c.ports as { hostPort?: number }[]).some((p) => p.hostPort))
      problems.push(`${name}: hostPort`);
  }
  return problems;
}

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

  it("builds from the controller's whole defaults: its maximum killGrace, checked at the start, is not in the plan", () => {
    const defaults = limitDefaults(loadControllerConfig({}, {}));
    expect(defaults.maxKillGrace).toBeDefined();
    const built = buildPod({ ...request, defaults, limits: resolveLimits(spec, defaults) });
    const plan = RunPlanSchema.parse(JSON.parse(built.metadata.annotations[PLAN_ANNOTATION] ?? ""));
    expect(plan.defaults).not.toHaveProperty("maxKillGrace");
    expect(plan.defaults.killGraceMs).toBe(defaults.killGraceMs);
  });
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
    expect(restrictedViolations(pod)).toEqual([]);
    // The pod-level user is the sandbox's (pause, PID 1): no container runs as it.
    expect(pod.spec.securityContext).toEqual({
      runAsNonRoot: true,
      runAsUser: 65535,
      runAsGroup: 65535,
      fsGroup: 1000,
      seccompProfile: { type: "RuntimeDefault" },
    });
    // The runner runs as its own user, in the tasks' group: no task can signal or trace it.
    expect(container.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      capabilities: { drop: ["ALL"] },
      runAsUser: 65532,
      runAsGroup: 1000,
    });
  });

  it("runs the sandbox (PID 1) as a user and group no container uses, so no task can signal or trace it", () => {
    const sandbox = pod.spec.securityContext as { runAsUser: number; runAsGroup: number };
    const containers = pod.spec.containers as { name: string; securityContext: Record<string, unknown> }[];
    for (const c of containers) {
      // Every container names its own user and group: none falls back to the sandbox's.
      expect(c.securityContext.runAsUser, c.name).toBeTypeOf("number");
      expect(c.securityContext.runAsUser, c.name).not.toBe(sandbox.runAsUser);
      expect(c.securityContext.runAsGroup, c.name).not.toBe(sandbox.runAsGroup);
    }
  });

  it("shares the pod's PID namespace, so the sandbox reaps what tasks orphan", () => {
    expect(pod.spec.shareProcessNamespace).toBe(true);
  });

  it("runs the pod runner with the plan from an annotation, as a file, its report only from its own file", () => {
    expect(container.name).toBe("runner");
    expect(container.image).toBe("runner:1");
    expect(container.command).toEqual(["playbook", "pod-runner", "--plan", "/run/playbook/plan.json"]);
    // The plan's digest, fixed with the pod (a pod's env cannot change; its annotations can).
    const carried = parsePlan(pod.metadata.annotations["playbook.dev/plan"] ?? "");
    expect(carried.ok && container.env).toEqual([
      { name: "PLAYBOOK_PLAN_DIGEST", value: carried.ok ? planDigest(carried.plan) : "" },
      { name: "PLAYBOOK_TASK_CONTAINERS", value: JSON.stringify({ "task-1": "runner:1" }) },
      // What is left of the ceiling at the build, a duration the runner counts on its node's clock.
      { name: "PLAYBOOK_CEILING_LEFT_MS", value: "600000" },
      { name: "PLAYBOOK_TASK_UIDS", value: JSON.stringify({ "task-1": 1000 }) },
    ]);
    expect(container.volumeMounts).toEqual([
      { name: "plan", mountPath: "/run/playbook", readOnly: true },
      { name: "playbook-run", mountPath: "/playbook/run" },
      { name: "playbook-agent", mountPath: "/playbook/agent" },
    ]);
    expect(pod.spec.volumes).toEqual([
      {
        name: "plan",
        downwardAPI: {
          items: [
            { path: "plan.json", fieldRef: { fieldPath: "metadata.annotations['playbook.dev/plan']" } },
          ],
        },
      },
      { name: "playbook-agent", emptyDir: { sizeLimit: "64Mi" } },
      { name: "playbook-run", emptyDir: { sizeLimit: "16Mi" } },
      { name: "workspace", emptyDir: {} },
    ]);
    expect(container.terminationMessagePolicy).toBe("File");
    const plan = RunPlanSchema.parse(JSON.parse(pod.metadata.annotations[PLAN_ANNOTATION] ?? ""));
    expect(plan).toMatchObject({
      name: "nightly",
      namespace: "ops",
      runStartTime: T0.toISOString(),
      defaults: SETTINGS.defaults,
      spec: { tasks: [{ name: "a", run: "true" }] },
      tasks: [{ container: "task-1" }],
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

describe("the pod of a Playbook whose tasks name their images", () => {
  const imaged = PlaybookSpecSchema.parse({
    ceiling: "30m",
    image: "registry.example/tools:3",
    resources: { limits: { memory: "256Mi" } },
    tasks: [
      { name: "dump", image: "postgres:16", run: "pg_dump > /workspace/db.sql" },
      { name: "check", run: "test -s /workspace/db.sql" },
      { name: "upload", image: "amazon/aws-cli:2", run: "aws s3 cp /workspace/db.sql s3://b/" },
      { name: "again", image: "postgres:16", run: "true" },
    ],
  });
  const pod = buildPod({
    ...request,
    spec: imaged,
    limits: resolveLimits(imaged, SETTINGS.defaults),
    pod: { image: "registry.example/tools:3", resources: imaged.resources, backoffLimit: 2 },
  });
  const containers = pod.spec.containers as Container[];

  it("holds the runner and one container per distinct image, in first-use order", () => {
    expect(containers.map((c) => [c.name, c.image])).toEqual([
      ["runner", "runner:1"],
      ["task-1", "postgres:16"],
      ["task-2", "registry.example/tools:3"],
      ["task-3", "amazon/aws-cli:2"],
    ]);
    const runner = containers[0] ?? {};
    expect(
      (runner.env as { name: string; value: string }[]).find((e) => e.name === "PLAYBOOK_TASK_CONTAINERS")
        ?.value,
    ).toBe(
      JSON.stringify({
        "task-1": "postgres:16",
        "task-2": "registry.example/tools:3",
        "task-3": "amazon/aws-cli:2",
      }),
    );
    // Each container's user, which its agent proves before the runner takes its hello.
    expect(
      (runner.env as { name: string; value: string }[]).find((e) => e.name === "PLAYBOOK_TASK_UIDS")?.value,
    ).toBe(JSON.stringify({ "task-1": 1000, "task-2": 1001, "task-3": 1002 }));
    expect(containers.slice(1).map((c) => (c.securityContext as { runAsUser?: number }).runAsUser)).toEqual([
      1000, 1001, 1002,
    ]);
  });

  it("tells the runner each task's container in the plan", () => {
    const plan = RunPlanSchema.parse(JSON.parse(pod.metadata.annotations[PLAN_ANNOTATION] ?? ""));
    expect(plan.tasks).toEqual([
      { container: "task-1" },
      { container: "task-2" },
      { container: "task-3" },
      { container: "task-1" },
    ]);
  });

  it("runs the agent in each task container, on the shared workspace, as the tasks' user, with the task resources", () => {
    expect(containers[1]).toEqual({
      name: "task-1",
      image: "postgres:16",
      command: ["/playbook/agent/agent", "/playbook/run/runner.sock", "task-1"],
      workingDir: "/workspace",
      volumeMounts: [
        { name: "playbook-agent", mountPath: "/playbook/agent", readOnly: true },
        { name: "playbook-run", mountPath: "/playbook/run", readOnly: true },
        { name: "workspace", mountPath: "/workspace" },
      ],
      securityContext: {
        allowPrivilegeEscalation: false,
        capabilities: { drop: ["ALL"] },
        runAsUser: 1000,
        runAsGroup: 1000,
      },
      resources: { limits: { memory: "256Mi" } },
    });
    // The runner's share is its own, whatever the tasks ask for.
    expect(containers[0]?.resources).toEqual({
      requests: { cpu: "50m", memory: "128Mi" },
      limits: { memory: "512Mi" },
    });
  });

  it("places the agent from the runner container's postStart hook, with no init container", () => {
    expect(pod.spec.initContainers).toBeUndefined();
    const runner = containers[0] ?? {};
    expect(runner.lifecycle).toEqual({
      postStart: {
        exec: { command: ["/usr/local/lib/playbook/agent", "--install", "/playbook/agent"] },
      },
    });
    expect(runner.volumeMounts).toContainEqual({ name: "playbook-agent", mountPath: "/playbook/agent" });
    // The runner is the first container: the kubelet starts the task containers after its hook.
    expect(containers[0]?.name).toBe("runner");
  });

  it("with image volumes: mounts the runner image read-only in each task container, whose command is its agent; no hook, no copy", () => {
    const mounted = buildPod({
      ...request,
      spec: imaged,
      limits: resolveLimits(imaged, SETTINGS.defaults),
      pod: { image: "registry.example/tools:3", resources: imaged.resources, backoffLimit: 2 },
      agentDelivery: "image-volume",
    });
    const all = mounted.spec.containers as Container[];
    expect(mounted.spec.initContainers).toBeUndefined();
    expect(all[0]?.lifecycle).toBeUndefined();
    expect(all[0]?.volumeMounts).not.toContainEqual(expect.objectContaining({ name: "playbook-agent" }));
    expect(mounted.spec.volumes).toContainEqual({ name: "playbook-agent", image: { reference: "runner:1" } });
    for (const task of all.slice(1)) {
      expect(task.command).toEqual([
        "/playbook/agent/usr/local/lib/playbook/agent",
        "/playbook/run/runner.sock",
        task.name,
      ]);
      expect(task.volumeMounts).toContainEqual({
        name: "playbook-agent",
        mountPath: "/playbook/agent",
        readOnly: true,
      });
    }
    expect(restrictedViolations(mounted)).toEqual([]);
    // Never both: no emptyDir for the agent beside the image.
    expect(
      (mounted.spec.volumes as Record<string, unknown>[]).filter((v) => v.name === "playbook-agent"),
    ).toHaveLength(1);
  });

  it("runs each task container as a user of its own, in the pod's group", () => {
    expect(containers.slice(1).map((c) => [c.name, c.securityContext?.runAsUser])).toEqual([
      ["task-1", 1000],
      ["task-2", 1001],
      ["task-3", 1002],
    ]);
    expect(containers.map((c) => c.securityContext?.runAsGroup)).toEqual([1000, 1000, 1000, 1000]);
  });

  it("passes restricted, every container in one process namespace", () => {
    expect(restrictedViolations(pod)).toEqual([]);
    expect(pod.spec.shareProcessNamespace).toBe(true);
  });

  it("runs tasks that name no image in the runner image, in a task container of their own", () => {
    const plain = buildPod(request);
    expect((plain.spec.containers as Container[]).map((c) => [c.name, c.image])).toEqual([
      ["runner", "runner:1"],
      ["task-1", "runner:1"],
    ]);
  });
});

describe("the service account's token (issue 33 item 3)", () => {
  type Mount = { name: string; mountPath: string; readOnly?: boolean };
  const TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
  const mountsOf = (c: Container) => (c.volumeMounts ?? []) as Mount[];
  const tokenMount = (c: Container) => mountsOf(c).find((m) => m.mountPath === TOKEN_DIR);
  const imaged = PlaybookSpecSchema.parse({
    ceiling: "10m",
    serviceAccountName: "deployer",
    tasks: [
      { name: "build", run: "make" },
      { name: "dump", image: "postgres:16", run: "pg_dump" },
    ],
  });
  const withAccount = (delivery: "image-volume" | "post-start") =>
    buildPod({
      ...request,
      spec: imaged,
      limits: resolveLimits(imaged, SETTINGS.defaults),
      agentDelivery: delivery,
    });

  it.each(["post-start", "image-volume"] as const)(
    "with a service account set (%s): mounted read-only in every task container, never in the runner's",
    (delivery) => {
      const pod = withAccount(delivery);
      expect(pod.spec.serviceAccountName).toBe("deployer");
      // Nothing the API server's admission would add to every container, the runner's too.
      expect(pod.spec.automountServiceAccountToken).toBe(false);
      const [runner, ...tasks] = pod.spec.containers as Container[];
      expect(runner?.name).toBe("runner");
      expect(runner && mountsOf(runner).map((m) => m.mountPath)).not.toContain(TOKEN_DIR);
      expect(tasks.map((c) => [c.name, tokenMount(c)])).toEqual([
        ["task-1", { name: "serviceaccount-token", mountPath: TOKEN_DIR, readOnly: true }],
        ["task-2", { name: "serviceaccount-token", mountPath: TOKEN_DIR, readOnly: true }],
      ]);
      expect(
        (pod.spec.volumes as Record<string, unknown>[]).find((v) => v.name === "serviceaccount-token"),
      ).toEqual({
        name: "serviceaccount-token",
        projected: {
          defaultMode: 0o644,
          sources: [
            { serviceAccountToken: { path: "token", expirationSeconds: 3600 } },
            { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
            {
              downwardAPI: {
                items: [
                  { path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } },
                ],
              },
            },
          ],
        },
      });
      expect(restrictedViolations(pod)).toEqual([]);
    },
  );

  it("without a service account: no token anywhere (the namespace's default account gets none)", () => {
    const pod = buildPod(request);
    expect(pod.spec.automountServiceAccountToken).toBe(false);
    expect(pod.spec.serviceAccountName).toBeUndefined();
    expect((pod.spec.volumes as { name: string }[]).map((v) => v.name)).not.toContain("serviceaccount-token");
    for (const c of pod.spec.containers as Container[]) expect(tokenMount(c)).toBeUndefined();
  });

  it("a service account that disables automount: the pod is made without the token, the rest unchanged", () => {
    const pod = withAccount("post-start");
    expect(podServiceAccountToken(pod)).toBe("deployer");
    const bare = withoutServiceAccountToken(pod);
    expect(podServiceAccountToken(bare)).toBeUndefined();
    expect(bare.spec.automountServiceAccountToken).toBe(false);
    expect(bare.spec.serviceAccountName).toBe("deployer");
    for (const c of bare.spec.containers as Container[]) expect(tokenMount(c)).toBeUndefined();
    expect((bare.spec.volumes as { name: string }[]).map((v) => v.name)).not.toContain(
      "serviceaccount-token",
    );
    // The built pod itself is left as it was.
    expect(podServiceAccountToken(pod)).toBe("deployer");
    expect(restrictedViolations(bare)).toEqual([]);
  });
});

describe("the pod's activeDeadlineSeconds under the namespace's maximums", () => {
  const controller = {
    ...SETTINGS.defaults,
    maxKillGrace: { ms: 300_000, where: "the controller's --max-kill-grace" },
  };
  const rules = policyRules(
    {
      name: "default",
      spec: PolicySpecSchema.parse({ maximums: { ceiling: "10m", killGrace: "30s", finallyCeiling: "2m" } }),
    },
    { runnerImage: "runner:test", allowedServiceAccounts: [], allowedImages: [] },
  );
  const stored = (spec: Record<string, unknown>) =>
    playbook({ tasks: [{ name: "a", run: "true" }], ...spec });
  const seconds = (text: string) => parseDuration(text) / 1000;

  it("never passes the maximum ceiling plus the maximum killGrace and the margin, and with finally tasks their maximum ceiling and killGrace again; what would is refused", () => {
    const durations = fc.constantFrom(
      "0s",
      "1s",
      "9s",
      "30s",
      "31s",
      "2m",
      "2m1s",
      "5m",
      "10m",
      "10m1s",
      "1h",
      "1000h",
    );
    const finallyCeilings = fc.option(durations, { nil: undefined });
    fc.assert(
      fc.property(
        durations,
        durations,
        finallyCeilings,
        fc.boolean(),
        (ceiling, killGrace, finallyCeiling, withFinally) => {
          const spec = {
            ceiling,
            killGrace,
            ...(finallyCeiling !== undefined ? { finallyCeiling } : {}),
            ...(withFinally ? { finally: [{ name: "clean", run: "true" }] } : {}),
          };
          const checked = validateSpec(stored(spec), controller, rules);
          // Without spec.finallyCeiling, the default 5m: over this namespace's 2m maximum.
          const finallyMs = finallyCeiling === undefined ? 300 : seconds(finallyCeiling);
          const finallyFits =
            finallyCeiling === undefined && !withFinally ? true : finallyMs > 0 && finallyMs <= 120;
          const fits =
            seconds(ceiling) > 0 && seconds(ceiling) <= 600 && seconds(killGrace) <= 30 && finallyFits;
          expect(checked.ok).toBe(fits);
          if (!checked.ok) return;
          const finallyWindow = withFinally ? 120 + 30 : 0;
          expect(activeDeadlineSeconds(checked.limits, T0, T0)).toBeLessThanOrEqual(
            600 + 30 + finallyWindow + DEADLINE_MARGIN_SECONDS,
          );
        },
      ),
    );
  });

  it("names the field, the value, the maximum and its level", () => {
    const checked = validateSpec(stored({ ceiling: "3s", killGrace: "1000h" }), controller, rules);
    expect(checked.ok || checked.message).toBe(
      "spec.killGrace: 1000h is longer than the maximum killGrace 5m (the controller's --max-kill-grace)",
    );
    const underPolicy = validateSpec(stored({ ceiling: "3s", killGrace: "1m" }), controller, rules);
    expect(underPolicy.ok || underPolicy.message).toBe(
      "spec.killGrace: 1m is longer than the namespace's maximum killGrace 30s (PlaybookPolicy default, spec.maximums.killGrace)",
    );
  });
});
