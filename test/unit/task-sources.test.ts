// A task's Secrets, ConfigMaps and volumes: the fields as a Pod has them, refused with the field
// and the value named, and the pod built so that each source reaches only the containers of the
// tasks naming it, and the runner alone mounts the Secrets it masks.
import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { checkPolicy, PolicySpecSchema, policyRules } from "../../src/api/policy.js";
import { builtPodDifference } from "../../src/controller/pods/built-pod-difference.js";
import { buildPod } from "../../src/controller/pods/pod-builder.js";
import { SETTINGS, T0 } from "./controller-fixtures.js";
import {
  ENV_FROM_OF_BOTH_KINDS,
  FIELD_THE_POD_DOES_NOT_GIVE,
  VALUE_FROM_OF_TWO_SOURCES,
  VOLUME_OF_TWO_TYPES,
} from "./refused-task-sources.js";

type Container = {
  name: string;
  image: string;
  env?: { name: string; value?: string; valueFrom?: unknown }[];
  envFrom?: unknown[];
  volumeMounts?: { name: string; mountPath: string }[];
};

/** The first problem zod reports, as `path: message`. */
function problem(spec: unknown): string {
  const parsed = PlaybookSpecSchema.safeParse(spec);
  if (parsed.success) return "";
  const issue = parsed.error.issues[0];
  return `${issue?.path.join(".")}: ${issue?.message}`;
}

const dumpTask = {
  name: "dump",
  run: "pg_dump",
  env: [{ name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } }],
  volumeMounts: [{ name: "dumps", mountPath: "/dumps" }],
};
const SPEC = {
  volumes: [
    { name: "dumps", persistentVolumeClaim: { claimName: "dumps" } },
    { name: "s3", secret: { secretName: "s3-creds" } },
  ],
  tasks: [
    dumpTask,
    { name: "list", run: "ls /workspace" },
    {
      name: "upload",
      run: "aws s3 cp",
      envFrom: [{ configMapRef: { name: "upload-cfg" }, prefix: "UP_" }],
      volumeMounts: [
        { name: "dumps", mountPath: "/dumps", readOnly: true },
        { name: "s3", mountPath: "/etc/s3" },
      ],
    },
    { name: "again", run: "pg_dump", env: dumpTask.env, volumeMounts: dumpTask.volumeMounts },
    { name: "other-image", image: "postgres:16", run: "psql" },
  ],
};

function podOf(specInput: unknown) {
  const spec = PlaybookSpecSchema.parse(specInput);
  return buildPod({
    playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
    spec,
    limits: resolveLimits(spec, SETTINGS.defaults),
    defaults: SETTINGS.defaults,
    attempt: 1,
    runStart: T0,
    now: T0,
    runnerImage: "runner:1",
  });
}

describe("a task's env, envFrom and volumeMounts", () => {
  it("takes the fields as a Pod has them", () => {
    expect(problem(SPEC)).toBe("");
  });

  it.each([
    [
      "hostPath",
      { volumes: [{ name: "h", hostPath: { path: "/" } }], tasks: [{ name: "a", run: "true" }] },
      "volumes.0.hostPath: volume type hostPath is not allowed: a volume must be one of secret, configMap, persistentVolumeClaim, emptyDir, projected, downwardAPI, ephemeral, csi",
    ],
    [
      "two types in one volume",
      VOLUME_OF_TWO_TYPES,
      "volumes.0: must name exactly one volume type (one of secret, configMap, persistentVolumeClaim, emptyDir, projected, downwardAPI, ephemeral, csi); it names emptyDir, secret",
    ],
    [
      "a volume named as the pod's own",
      { volumes: [{ name: "workspace", emptyDir: {} }], tasks: [{ name: "a", run: "true" }] },
      'volumes.0.name: "workspace" is reserved for the run\'s pod (plan, workspace, serviceaccount-token and playbook-*)',
    ],
    [
      "a mount of no volume",
      { tasks: [{ name: "a", run: "true", volumeMounts: [{ name: "nope", mountPath: "/x" }] }] },
      'tasks.0.volumeMounts.0.name: "nope" is not a volume of spec.volumes (it lists none)',
    ],
    [
      "a mount over the workspace",
      {
        volumes: [{ name: "v", emptyDir: {} }],
        tasks: [{ name: "a", run: "true", volumeMounts: [{ name: "v", mountPath: "/workspace/x" }] }],
      },
      'tasks.0.volumeMounts.0.mountPath: "/workspace/x" would shadow /workspace, which the run\'s pod mounts itself (reserved: /workspace, /playbook, /var/run/secrets/kubernetes.io/serviceaccount)',
    ],
    [
      "a mount above the service account's token",
      {
        volumes: [{ name: "v", emptyDir: {} }],
        finally: [{ name: "f", run: "true", volumeMounts: [{ name: "v", mountPath: "/var/run" }] }],
        tasks: [{ name: "a", run: "true" }],
      },
      'finally.0.volumeMounts.0.mountPath: "/var/run" would shadow /var/run/secrets/kubernetes.io/serviceaccount, which the run\'s pod mounts itself (reserved: /workspace, /playbook, /var/run/secrets/kubernetes.io/serviceaccount)',
    ],
    [
      "a mount over the agent's and run directory's parent",
      {
        volumes: [{ name: "v", emptyDir: {} }],
        tasks: [{ name: "a", run: "true", volumeMounts: [{ name: "v", mountPath: "/playbook/run" }] }],
      },
      'tasks.0.volumeMounts.0.mountPath: "/playbook/run" would shadow /playbook, which the run\'s pod mounts itself (reserved: /workspace, /playbook, /var/run/secrets/kubernetes.io/serviceaccount)',
    ],
    [
      "a relative mount path",
      {
        volumes: [{ name: "v", emptyDir: {} }],
        tasks: [{ name: "a", run: "true", volumeMounts: [{ name: "v", mountPath: "dumps" }] }],
      },
      'tasks.0.volumeMounts.0.mountPath: "dumps" must be an absolute path',
    ],
    [
      "both value and valueFrom",
      {
        tasks: [
          {
            name: "a",
            run: "true",
            env: [{ name: "P", value: "x", valueFrom: { secretKeyRef: { name: "db", key: "p" } } }],
          },
        ],
      },
      "tasks.0.env.0.valueFrom: must not be set together with value",
    ],
    [
      "a valueFrom naming two sources",
      VALUE_FROM_OF_TWO_SOURCES,
      "tasks.0.env.0.valueFrom: must name exactly one of secretKeyRef, configMapKeyRef and fieldRef (it names 2)",
    ],
    [
      "a bad key",
      {
        tasks: [
          {
            name: "a",
            run: "true",
            env: [{ name: "P", valueFrom: { secretKeyRef: { name: "db", key: "a b" } } }],
          },
        ],
      },
      "tasks.0.env.0.valueFrom.secretKeyRef.key: must be a key of letters, digits, '-', '_' and '.'",
    ],
    [
      "a field the pod does not give",
      FIELD_THE_POD_DOES_NOT_GIVE,
      "tasks.0.env.0.valueFrom.fieldRef.fieldPath: must be metadata.name, metadata.namespace, metadata.uid, metadata.labels['KEY'] or metadata.annotations['KEY']",
    ],
    [
      "an envFrom naming both",
      ENV_FROM_OF_BOTH_KINDS,
      "tasks.0.envFrom.0: must name exactly one of secretRef and configMapRef",
    ],
  ])("refuses %s, naming the field and value", (_case, spec, message) => {
    expect(problem(spec)).toBe(message);
  });
});

describe("the pod of a run whose tasks name Secrets, ConfigMaps and volumes", () => {
  const pod = podOf(SPEC);
  const containers = pod.spec.containers as Container[];
  const volumes = pod.spec.volumes as Record<string, unknown>[];
  const containerOf = (name: string) => containers.find((c) => c.name === name);

  it("keys task containers by image and by the sources the tasks name", () => {
    expect(containers.map((c) => `${c.name} ${c.image}`)).toEqual([
      "runner runner:1",
      "task-1 runner:1", // dump and again: the db Secret, the dumps volume
      "task-2 runner:1", // list: nothing
      "task-3 runner:1", // upload: its ConfigMap, dumps and the s3 Secret
      "task-4 postgres:16",
    ]);
  });

  it("puts each task's env from sources and its mounts on its container alone", () => {
    expect(containerOf("task-1")?.env).toEqual([
      { name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } },
    ]);
    expect(containerOf("task-3")?.envFrom).toEqual([{ configMapRef: { name: "upload-cfg" }, prefix: "UP_" }]);
    for (const name of ["task-2", "task-4"]) {
      const plain = containerOf(name);
      expect(plain?.env).toBeUndefined();
      expect(plain?.envFrom).toBeUndefined();
      expect(plain?.volumeMounts?.map((m) => m.mountPath)).toEqual([
        "/playbook/agent",
        "/playbook/run",
        "/workspace",
      ]);
    }
    expect(containerOf("task-3")?.volumeMounts?.slice(3)).toEqual([
      { name: "dumps", mountPath: "/dumps", readOnly: true },
      { name: "s3", mountPath: "/etc/s3" },
    ]);
  });

  it("carries the Playbook's volumes, and the Secrets to mask in the runner's container alone", () => {
    expect(volumes.filter((v) => ["dumps", "s3"].includes(String(v.name)))).toEqual(SPEC.volumes);
    expect(volumes.filter((v) => String(v.name).startsWith("playbook-mask-"))).toEqual([
      { name: "playbook-mask-0", secret: { secretName: "db", optional: true } },
      { name: "playbook-mask-1", secret: { secretName: "s3-creds", optional: true } },
    ]);
    const runner = containerOf("runner");
    expect(runner?.env).toContainEqual({
      name: "PLAYBOOK_MASK_DIRS",
      value: "/run/playbook/masks/0:/run/playbook/masks/1",
    });
    expect(runner?.volumeMounts?.filter((m) => m.name.startsWith("playbook-mask-"))).toEqual([
      { name: "playbook-mask-0", mountPath: "/run/playbook/masks/0", readOnly: true },
      { name: "playbook-mask-1", mountPath: "/run/playbook/masks/1", readOnly: true },
    ]);
    for (const task of containers.filter((c) => c.name !== "runner")) {
      expect(task.volumeMounts?.some((m) => m.name.startsWith("playbook-mask-"))).toBe(false);
    }
  });

  it("sets no mask directories for a run that names no Secret", () => {
    const plain = podOf({ tasks: [{ name: "a", run: "true" }] });
    const runner = (plain.spec.containers as Container[])[0];
    expect(runner?.env?.map((e) => e.name)).not.toContain("PLAYBOOK_MASK_DIRS");
  });

  it("reads back as built with the API server's defaults, and not with a volume or mount changed", () => {
    const found = structuredClone(pod) as unknown as {
      spec: { volumes: Record<string, Record<string, unknown>>[]; containers: Container[] };
    };
    for (const volume of found.spec.volumes) {
      if (volume.secret) volume.secret.defaultMode = 0o644;
    }
    expect(builtPodDifference(found, pod, 0)).toBeUndefined();
    const swapped = structuredClone(found);
    const s3 = swapped.spec.volumes.find((v) => (v as { name?: unknown }).name === "s3");
    if (s3?.secret) s3.secret.secretName = "someone-elses";
    expect(builtPodDifference(swapped, pod, 0)).toBe(
      'spec.volumes[s3].secret.secretName is "someone-elses", the controller builds "s3-creds"',
    );
    const mounted = structuredClone(found);
    mounted.spec.containers[2]?.volumeMounts?.push({ name: "s3", mountPath: "/s3" });
    expect(builtPodDifference(mounted, pod, 0)).toBe(
      "spec.containers[task-2].volumeMounts is [playbook-agent, playbook-run, workspace, s3], the controller builds [playbook-agent, playbook-run, workspace]",
    );
  });
});

describe("PlaybookPolicy.allowedVolumes", () => {
  const spec = PlaybookSpecSchema.parse(SPEC);
  const limits = resolveLimits(spec, SETTINGS.defaults);
  const cluster = { runnerImage: "runner:1", allowedServiceAccounts: [], allowedImages: [] };
  const volumeProblems = (allowedVolumes?: string[]) =>
    checkPolicy(
      spec,
      limits,
      policyRules(
        { name: "default", spec: PolicySpecSchema.parse(allowedVolumes ? { allowedVolumes } : {}) },
        cluster,
      ),
    ).filter((p) => p.field === "spec.volumes");

  it("allows every type a Playbook may name when it lists none", () => {
    expect(volumeProblems()).toEqual([]);
  });

  it("refuses a volume of a type it does not list, naming the volume, its type and the allowed ones", () => {
    expect(volumeProblems(["secret", "emptyDir"])).toEqual([
      {
        path: "spec.volumes[0].persistentVolumeClaim",
        field: "spec.volumes",
        message:
          'volume "dumps" is of type persistentVolumeClaim, which the namespace does not allow: PlaybookPolicy default allows secret, emptyDir (spec.allowedVolumes)',
      },
    ]);
  });

  it("takes only the types a Playbook may name", () => {
    const parsed = PolicySpecSchema.safeParse({ allowedVolumes: ["hostPath"] });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.message).toBe(
      "must be one of secret, configMap, persistentVolumeClaim, emptyDir, projected, downwardAPI, ephemeral, csi",
    );
  });
});
