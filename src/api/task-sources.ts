// What a task reads from the cluster besides its image (docs/secrets.md): env values from a
// Secret, a ConfigMap or the pod's own fields, whole Secrets and ConfigMaps as env (envFrom), and
// the Playbook's volumes mounted into the task's own container. Parsed as the API server parses a
// Pod's fields, with the paths the run's pod needs for itself (the workspace, the agent, the run
// directory, the service account's token) kept out of every mount. The CRD checks the same
// (crds/playbook.dev_playbooks.yaml).
import { z } from "zod";
import { DNS1123_LABEL, DNS1123_SUBDOMAIN } from "./dns-names.js";

/** A Secret's or ConfigMap's key, as the API server checks it (IsConfigMapKey). */
const CONFIG_KEY = /^[-._a-zA-Z0-9]+$/;
const ENV_PREFIX = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;
/** The pod fields a task may read through env[].valueFrom.fieldRef. */
export const FIELD_PATH_PATTERN =
  "^(metadata\\.name|metadata\\.namespace|metadata\\.uid|metadata\\.labels\\['[-._a-zA-Z0-9/]+'\\]|metadata\\.annotations\\['[-._a-zA-Z0-9/]+'\\])$";
const FIELD_PATH = new RegExp(FIELD_PATH_PATTERN);

/** The volume types a Playbook may name (and PlaybookPolicy.allowedVolumes' default); hostPath never. */
export const VOLUME_TYPES = [
  "secret",
  "configMap",
  "persistentVolumeClaim",
  "emptyDir",
  "projected",
  "downwardAPI",
  "ephemeral",
  "csi",
] as const;
export type VolumeType = (typeof VOLUME_TYPES)[number];
export const VOLUME_TYPES_TEXT = VOLUME_TYPES.join(", ");

/**
 * Paths the run's pod needs in every task container: no mount may be one of them, under one, or
 * above one (it would shadow it).
 */
export const RESERVED_MOUNT_PATHS = [
  "/workspace",
  "/playbook",
  "/var/run/secrets/kubernetes.io/serviceaccount",
] as const;
/** Volume names the pod's own volumes use: a Playbook's volume may not take one. */
export const RESERVED_VOLUME_NAMES = ["plan", "workspace", "serviceaccount-token"] as const;
export const RESERVED_VOLUME_PREFIX = "playbook-";
export const MAX_VOLUMES = 32;
export const MAX_VOLUME_MOUNTS = 16;
export const MAX_ENV_FROM = 32;

const ObjectName = z
  .string({ error: "is required" })
  .max(253, "must be at most 253 characters")
  .regex(DNS1123_SUBDOMAIN, "must be a DNS-1123 subdomain (lower case letters, digits, '-' and '.')");
const Key = z
  .string({ error: "is required" })
  .max(253, "must be at most 253 characters")
  .regex(CONFIG_KEY, "must be a key of letters, digits, '-', '_' and '.'");

const KeyRef = z.strictObject({ name: ObjectName, key: Key, optional: z.boolean().optional() });
const FieldRef = z.strictObject({
  apiVersion: z.literal("v1", { error: "must be v1" }).optional(),
  fieldPath: z
    .string({ error: "is required" })
    .regex(
      FIELD_PATH,
      "must be metadata.name, metadata.namespace, metadata.uid, metadata.labels['KEY'] or metadata.annotations['KEY']",
    ),
});

export const EnvVarSource = z
  .strictObject({
    secretKeyRef: KeyRef.optional(),
    configMapKeyRef: KeyRef.optional(),
    fieldRef: FieldRef.optional(),
  })
  .superRefine((source, ctx) => {
    const named = [source.secretKeyRef, source.configMapKeyRef, source.fieldRef].filter(Boolean).length;
    if (named !== 1) {
      ctx.addIssue({
        code: "custom",
        message: `must name exactly one of secretKeyRef, configMapKeyRef and fieldRef (it names ${named})`,
      });
    }
  });
export type EnvVarSource = z.infer<typeof EnvVarSource>;

const NameRef = z.strictObject({ name: ObjectName, optional: z.boolean().optional() });
export const EnvFromSource = z
  .strictObject({
    prefix: z.string().max(256, "must be at most 256 characters").regex(ENV_PREFIX).optional(),
    secretRef: NameRef.optional(),
    configMapRef: NameRef.optional(),
  })
  .superRefine((source, ctx) => {
    if (Boolean(source.secretRef) === Boolean(source.configMapRef)) {
      ctx.addIssue({ code: "custom", message: "must name exactly one of secretRef and configMapRef" });
    }
  });
export type EnvFromSource = z.infer<typeof EnvFromSource>;

/** Whether mounting at `path` would be, sit under, or shadow one of the pod's own paths. */
export function reservedPathProblem(path: string): string | undefined {
  const dir = path.replace(/\/+$/, "") || "/";
  for (const reserved of RESERVED_MOUNT_PATHS) {
    if (dir === reserved || dir.startsWith(`${reserved}/`) || `${reserved}/`.startsWith(`${dir}/`)) {
      return `${JSON.stringify(path)} would shadow ${reserved}, which the run's pod mounts itself (reserved: ${RESERVED_MOUNT_PATHS.join(", ")})`;
    }
  }
  return undefined;
}

const MountPath = z
  .string({ error: "is required" })
  .min(1, "must not be empty")
  .max(512, "must be at most 512 characters")
  .superRefine((path, ctx) => {
    if (!path.startsWith("/")) {
      ctx.addIssue({ code: "custom", message: `${JSON.stringify(path)} must be an absolute path` });
      return;
    }
    if (path.split("/").includes("..")) {
      ctx.addIssue({ code: "custom", message: `${JSON.stringify(path)} must not contain '..'` });
      return;
    }
    const problem = reservedPathProblem(path);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  });

export const VolumeMount = z.strictObject({
  name: z.string({ error: "is required" }).max(63).regex(DNS1123_LABEL, "must be a DNS-1123 label"),
  mountPath: MountPath,
  readOnly: z.boolean().optional(),
  subPath: z
    .string()
    .max(512, "must be at most 512 characters")
    .refine((sub) => !sub.startsWith("/") && !sub.split("/").includes(".."), {
      error: (issue) => `${JSON.stringify(issue.input)} must be a relative path without '..'`,
    })
    .optional(),
});
export type VolumeMount = z.infer<typeof VolumeMount>;

/** A volume source's own fields are the Pod's (the API server checks them on the pod). */
const SourceFields = z.record(z.string(), z.unknown());

const volumeTypeList = `one of ${VOLUME_TYPES_TEXT}`;

export const Volume = z
  .record(z.string(), z.unknown())
  .superRefine((volume, ctx) => {
    const name = volume.name;
    if (typeof name !== "string" || !DNS1123_LABEL.test(name) || name.length > 63) {
      ctx.addIssue({
        code: "custom",
        path: ["name"],
        message: `${JSON.stringify(name)} must be a DNS-1123 label of at most 63 characters`,
      });
    } else if (
      (RESERVED_VOLUME_NAMES as readonly string[]).includes(name) ||
      name.startsWith(RESERVED_VOLUME_PREFIX)
    ) {
      ctx.addIssue({
        code: "custom",
        path: ["name"],
        message: `${JSON.stringify(name)} is reserved for the run's pod (${RESERVED_VOLUME_NAMES.join(", ")} and ${RESERVED_VOLUME_PREFIX}*)`,
      });
    }
    const types = Object.keys(volume).filter((key) => key !== "name");
    for (const type of types) {
      if (!(VOLUME_TYPES as readonly string[]).includes(type)) {
        ctx.addIssue({
          code: "custom",
          path: [type],
          message: `volume type ${type} is not allowed: a volume must be ${volumeTypeList}`,
        });
      } else if (!SourceFields.safeParse(volume[type]).success) {
        ctx.addIssue({ code: "custom", path: [type], message: "must be an object" });
      }
    }
    if (types.length !== 1) {
      ctx.addIssue({
        code: "custom",
        message: `must name exactly one volume type (${volumeTypeList}); it names ${types.length ? types.join(", ") : "none"}`,
      });
    }
  })
  .transform((volume) => volume as { name: string } & Partial<Record<VolumeType, Record<string, unknown>>>);
export type Volume = z.infer<typeof Volume>;

/** The type a volume is (its one source key). */
export function volumeType(volume: Volume): string {
  return Object.keys(volume).find((key) => key !== "name") ?? "";
}

interface SourcedTask {
  env: readonly { name: string; valueFrom?: EnvVarSource | undefined }[];
  envFrom?: readonly EnvFromSource[] | undefined;
  volumeMounts?: readonly VolumeMount[] | undefined;
}

/** The checks across fields: every mount names a volume of the spec, no two mounts share a path. */
export function checkTaskSources(
  spec: {
    volumes?: readonly Volume[] | undefined;
    tasks: readonly SourcedTask[];
    finally?: readonly SourcedTask[] | undefined;
  },
  ctx: z.RefinementCtx,
): void {
  const names = new Set<string>();
  (spec.volumes ?? []).forEach((volume, index) => {
    if (names.has(volume.name)) {
      ctx.addIssue({
        code: "custom",
        path: ["volumes", index, "name"],
        message: `${JSON.stringify(volume.name)} is already the name of another volume`,
      });
    }
    names.add(volume.name);
  });
  const lists: ["tasks" | "finally", readonly SourcedTask[]][] = [
    ["tasks", spec.tasks],
    ["finally", spec.finally ?? []],
  ];
  for (const [list, tasks] of lists) {
    tasks.forEach((task, index) => {
      const paths = new Set<string>();
      (task.volumeMounts ?? []).forEach((mount, m) => {
        if (!names.has(mount.name)) {
          ctx.addIssue({
            code: "custom",
            path: [list, index, "volumeMounts", m, "name"],
            message: `${JSON.stringify(mount.name)} is not a volume of spec.volumes${names.size ? ` (${[...names].join(", ")})` : " (it lists none)"}`,
          });
        }
        const dir = mount.mountPath.replace(/\/+$/, "");
        if (paths.has(dir)) {
          ctx.addIssue({
            code: "custom",
            path: [list, index, "volumeMounts", m, "mountPath"],
            message: `${JSON.stringify(mount.mountPath)} is already the path of another mount of this task`,
          });
        }
        paths.add(dir);
      });
    });
  }
}

/** What a task's container carries for it: its env from sources, its envFrom and its mounts. */
export interface TaskSources {
  env: { name: string; valueFrom: EnvVarSource }[];
  envFrom: EnvFromSource[];
  volumeMounts: VolumeMount[];
}

/** A task's sources; undefined for a task that names none (it shares its image's plain container). */
export function taskSourcesOf(task: {
  env?: readonly { name: string; valueFrom?: EnvVarSource | undefined }[] | undefined;
  envFrom?: readonly EnvFromSource[] | undefined;
  volumeMounts?: readonly VolumeMount[] | undefined;
}): TaskSources | undefined {
  const env = (task.env ?? []).flatMap((v) =>
    v.valueFrom ? [{ name: v.name, valueFrom: v.valueFrom }] : [],
  );
  const envFrom = [...(task.envFrom ?? [])];
  const volumeMounts = [...(task.volumeMounts ?? [])];
  if (env.length === 0 && envFrom.length === 0 && volumeMounts.length === 0) return undefined;
  return { env, envFrom, volumeMounts };
}

/** The same text for the same sources: tasks of one image share a container only when theirs are equal. */
export function sourcesKey(sources: TaskSources | undefined): string {
  return sources === undefined ? "" : JSON.stringify(sources);
}

/** The Secrets a task's sources name (env, envFrom, secret volumes it mounts), sorted, each once. */
export function secretsNamed(sources: TaskSources | undefined, volumes: readonly Volume[] = []): string[] {
  if (!sources) return [];
  const names = new Set<string>();
  for (const env of sources.env) if (env.valueFrom.secretKeyRef) names.add(env.valueFrom.secretKeyRef.name);
  for (const from of sources.envFrom) if (from.secretRef) names.add(from.secretRef.name);
  for (const mount of sources.volumeMounts) {
    const volume = volumes.find((v) => v.name === mount.name);
    const secretName = volume?.secret?.secretName;
    if (typeof secretName === "string") names.add(secretName);
    for (const source of projectedSources(volume)) {
      const name = isRecord(source.secret) ? source.secret.name : undefined;
      if (typeof name === "string") names.add(name);
    }
  }
  return [...names].sort();
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function projectedSources(volume: Volume | undefined): Record<string, unknown>[] {
  const sources = volume?.projected?.sources;
  return Array.isArray(sources) ? sources.filter(isRecord) : [];
}
