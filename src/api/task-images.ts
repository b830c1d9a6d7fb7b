// The images a Playbook's tasks run in: each task's own (tasks[].image), else the Playbook's
// default (spec.image), else the namespace policy's default, else the runner image. Every distinct
// image is one container of the run's pod (task-1, task-2, ... in first-use order), so a Playbook
// may use at most MAX_TASK_IMAGES of them. The CRD checks the same syntax, length and count
// (crds/playbook.dev_playbooks.yaml).
import { z } from "zod";
import {
  type EnvFromSource,
  type EnvVarSource,
  sourcesKey,
  type TaskSources,
  taskSourcesOf,
  type VolumeMount,
} from "./task-sources.js";

/** Distinct task images a Playbook may use: each is a container of the run's pod, pulled and started with it. */
export const MAX_TASK_IMAGES = 8;
/** The CRD's maxLength of an image reference (a registry host, a path, a tag and a digest fit easily). */
export const MAX_IMAGE_LENGTH = 512;
/** The runner's env var naming each task container's image: {"task-1": "postgres:16"}. */
export const TASK_CONTAINERS_ENV_VAR = "PLAYBOOK_TASK_CONTAINERS";
/**
 * The runner's env var naming each task container's user, one of its own each: {"task-1": 1000}.
 * The runner takes an agent's hello only once it proved that user, and may then start a task
 * before every agent said hello (docs/agent.md, "The connection").
 */
export const TASK_UIDS_ENV_VAR = "PLAYBOOK_TASK_UIDS";
export const TASK_CONTAINER_PREFIX = "task-";

const DOMAIN_COMPONENT = "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?";
const PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
const TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}";
const DIGEST = "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";

/**
 * An image reference as the container runtimes read it (the distribution library's grammar, without
 * IPv6 hosts): `[host[:port]/]path[:tag][@digest]`, path components in lower case. The CRD's
 * pattern is this text.
 */
export const IMAGE_REFERENCE_PATTERN = `^(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*(?::[0-9]+)?/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*(?::${TAG})?(?:@${DIGEST})?$`;
const IMAGE_REFERENCE = new RegExp(IMAGE_REFERENCE_PATTERN);

export const IMAGE_REFERENCE_MESSAGE =
  "must be an image reference such as postgres:16, registry.example/team/tools:3 or name@sha256:<digest> (lower-case path, optional tag and digest)";

export function isImageReference(image: string): boolean {
  return image.length <= MAX_IMAGE_LENGTH && IMAGE_REFERENCE.test(image);
}

/** An image reference, checked as the CRD checks it. */
export const ImageReference = z
  .string()
  .min(1, "must not be empty")
  .max(MAX_IMAGE_LENGTH, `must be at most ${MAX_IMAGE_LENGTH} characters`)
  .regex(IMAGE_REFERENCE, IMAGE_REFERENCE_MESSAGE);

interface ImagedSpec {
  image?: string | undefined;
  tasks: readonly { image?: string | undefined }[];
  finally?: readonly { image?: string | undefined }[] | undefined;
}

/** Every task of a spec, the main ones then spec.finally's, with the field path of each. */
export function allTasksOf<T>(spec: { tasks: readonly T[]; finally?: readonly T[] | undefined }): {
  task: T;
  path: ["tasks" | "finally", number];
}[] {
  return [
    ...spec.tasks.map((task, index) => ({ task, path: ["tasks", index] as ["tasks", number] })),
    ...(spec.finally ?? []).map((task, index) => ({ task, path: ["finally", index] as ["finally", number] })),
  ];
}

/** Where a run's default task image comes from when spec.image is not set and the schema cannot know it. */
export const UNNAMED_DEFAULT = "the default image";

/**
 * The images a spec's tasks name, in first-use order, as the CRD counts them: a task without an
 * image counts spec.image, or one image more for the default the controller fills in.
 */
export function namedTaskImages(spec: ImagedSpec): {
  images: string[];
  firstUse: ["tasks" | "finally", number][];
} {
  const images: string[] = [];
  const firstUse: ["tasks" | "finally", number][] = [];
  for (const { task, path } of allTasksOf(spec)) {
    const image = task.image ?? spec.image ?? UNNAMED_DEFAULT;
    if (!images.includes(image)) {
      images.push(image);
      firstUse.push(path);
    }
  }
  return { images, firstUse };
}

/** Why `images` are too many for one pod, naming them. */
export function tooManyImagesMessage(images: readonly string[]): string {
  return `the tasks use ${images.length} distinct images (${images.join(", ")}); a Playbook's tasks may use at most ${MAX_TASK_IMAGES}, because each image is a container of the run's pod`;
}

/** The zod check of the spec: at most MAX_TASK_IMAGES, the issue at the task that brings one too many. */
export function checkTaskImageCount(spec: ImagedSpec, ctx: z.RefinementCtx): void {
  const { images, firstUse } = namedTaskImages(spec);
  if (images.length <= MAX_TASK_IMAGES) return;
  const [list, index] = firstUse[MAX_TASK_IMAGES] ?? ["tasks", 0];
  // The field that brings the image: the task's own, else spec.image, else the task (the default).
  const own = (list === "tasks" ? spec.tasks : (spec.finally ?? []))[index]?.image !== undefined;
  ctx.addIssue({
    code: "custom",
    path: own ? [list, index, "image"] : spec.image !== undefined ? ["image"] : [list, index],
    message: tooManyImagesMessage(images),
  });
}

export const taskContainerName = (k: number) => `${TASK_CONTAINER_PREFIX}${k}`;

/** The run's task containers: one per distinct effective image and set of sources, and each task's container. */
export interface TaskContainers {
  /** task-K → image, in first-use order, with the env and mounts from sources its tasks name (task-sources.ts). */
  containers: { name: string; image: string; sources?: TaskSources }[];
  /** Per task (by index), the container it runs in. */
  tasks: { container: string; image: string }[];
}

/** What a task names that its container must carry (task-sources.ts): its sources decide its container too. */
interface SourcedTask {
  image?: string | undefined;
  env?: readonly { name: string; valueFrom?: EnvVarSource | undefined }[] | undefined;
  envFrom?: readonly EnvFromSource[] | undefined;
  volumeMounts?: readonly VolumeMount[] | undefined;
}

/**
 * Each task's effective image and container, `defaultImage` for tasks that name none (spec.image
 * resolved). Containers are keyed by image and by the sources (Secrets, ConfigMaps, volumes) the
 * task names: a task shares a container only with tasks that name exactly the same, so a Secret
 * reaches no container of a task that does not name it (docs/secrets.md).
 */
export function resolveTaskContainers(tasks: readonly SourcedTask[], defaultImage: string): TaskContainers {
  const containers: TaskContainers["containers"] = [];
  const resolved = tasks.map((task) => {
    const image = task.image ?? defaultImage;
    const sources = taskSourcesOf(task);
    const key = sourcesKey(sources);
    let container = containers.find((c) => c.image === image && sourcesKey(c.sources) === key);
    if (!container) {
      container = { name: taskContainerName(containers.length + 1), image, ...(sources ? { sources } : {}) };
      containers.push(container);
    }
    return { container: container.name, image };
  });
  return { containers, tasks: resolved };
}

/** PLAYBOOK_TASK_CONTAINERS' value: {"task-1":"postgres:16",...}. */
export function taskContainersEnv(containers: TaskContainers["containers"]): string {
  return JSON.stringify(Object.fromEntries(containers.map((c) => [c.name, c.image])));
}

/** PLAYBOOK_TASK_UIDS' value: {"task-1":1000,...}, each container's user by its index. */
export function taskUidsEnv(
  containers: TaskContainers["containers"],
  uidOf: (index: number) => number,
): string {
  return JSON.stringify(Object.fromEntries(containers.map((c, index) => [c.name, uidOf(index)])));
}

/** The images the run's tasks use, for `playbook validate` and the status. */
export function describeTaskImage(image: string, runnerImage: string | undefined): string {
  return image === runnerImage ? `${image} (the runner image)` : image;
}

/** Task containers a pod may hold: images times the distinct sets of sources their tasks name. */
export const MAX_TASK_CONTAINERS = 16;

/** The zod check of the spec: at most MAX_TASK_CONTAINERS containers, the issue at the task that brings one too many. */
export function checkTaskContainerCount(
  spec: {
    image?: string | undefined;
    tasks: readonly SourcedTask[];
    finally?: readonly SourcedTask[] | undefined;
  },
  ctx: z.RefinementCtx,
): void {
  const keys: string[] = [];
  for (const { task, path } of allTasksOf(spec)) {
    const key = `${task.image ?? spec.image ?? UNNAMED_DEFAULT}\n${sourcesKey(taskSourcesOf(task))}`;
    if (keys.includes(key)) continue;
    keys.push(key);
    if (keys.length === MAX_TASK_CONTAINERS + 1) {
      ctx.addIssue({
        code: "custom",
        path,
        message: `the tasks need ${MAX_TASK_CONTAINERS + 1} or more containers (one per image and set of Secrets, ConfigMaps and volumes named); a pod holds at most ${MAX_TASK_CONTAINERS} task containers`,
      });
    }
  }
}
