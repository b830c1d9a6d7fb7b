// Whether the run's own pod was changed after its creation in a way that could reach its runner or
// its tasks (docs/design.md, "A pod someone changed"). A live pod takes two changes: new container
// images (`kubectl set image`: the kubelet restarts a container whose image changed, under any
// restart policy) and ephemeral containers (`kubectl debug`, the pods/ephemeralcontainers
// subresource). The pod shares one process namespace, so an ephemeral container sees the runner's
// pid whatever its targetContainerName; what the kernel lets it do there depends on its user and
// capabilities alone: a signal needs the target's user (or CAP_KILL), /proc/PID/root, ptrace and
// the like need ptrace access (the same user and group, or CAP_SYS_PTRACE). The runner's user is
// enough: a signal opens the Node runner's inspector.
// Pure readers of the pod as the API server shows it.
import { z } from "zod";
import { TASK_CONTAINERS_ENV_VAR } from "../../api/task-images.js";
import { type PodView, RUNNER_CONTAINER } from "../objects.js";
import { AGENT_VOLUME } from "./task-containers.js";

/** What one change of the pod can reach: the runner (its report is not believed) or only tasks. */
export type Reach = "runner" | "tasks";

export interface PodChange {
  reach: Reach;
  /** In words, naming what changed: "ephemeral container debugger runs as uid 65532 (the runner's)". */
  what: string;
  /** A key for the change, stable across passes (for an event said once). */
  key: string;
}

/**
 * The pod's changes judged for a report: `changed` names the first that could reach the runner
 * (its report is not believed), `unverified` the ones that could reach only tasks (the report is
 * the runner's, but a task's work may not be the Playbook's alone).
 */
export type ChangeVerdict =
  | { verdict: "unchanged" }
  | { verdict: "changed"; change: PodChange }
  | { verdict: "unverified"; changes: PodChange[] };

const SecurityContextSchema = z
  .looseObject({
    runAsUser: z.number().int().nullable().optional(),
    privileged: z.boolean().nullable().optional(),
    allowPrivilegeEscalation: z.boolean().nullable().optional(),
    capabilities: z
      .looseObject({
        add: z.array(z.string()).nullable().optional(),
        drop: z.array(z.string()).nullable().optional(),
      })
      .nullable()
      .optional(),
  })
  .nullable()
  .optional();

const MountSchema = z.looseObject({ name: z.string(), readOnly: z.boolean().nullable().optional() });

const ContainerSchema = z.looseObject({
  name: z.string(),
  image: z.string().optional(),
  securityContext: SecurityContextSchema,
  volumeMounts: z.array(MountSchema).nullable().optional(),
  env: z
    .array(z.looseObject({ name: z.string(), value: z.string().nullable().optional() }))
    .nullable()
    .optional(),
  targetContainerName: z.string().nullable().optional(),
});
type Container = z.infer<typeof ContainerSchema>;

const Time = z
  .union([z.string(), z.date().transform((d) => d.toISOString())])
  .nullable()
  .optional();

const StatusSchema = z.looseObject({
  name: z.string(),
  restartCount: z.number().int().nullable().optional(),
  state: z
    .looseObject({
      running: z.looseObject({ startedAt: Time }).nullable().optional(),
      terminated: z.looseObject({ startedAt: Time, finishedAt: Time }).nullable().optional(),
    })
    .nullable()
    .optional(),
  lastState: z
    .looseObject({ terminated: z.looseObject({ startedAt: Time }).nullable().optional() })
    .nullable()
    .optional(),
});

/** The parts of a pod this module reads, whatever else it holds. */
const ChangeablePodSchema = z.looseObject({
  spec: z
    .looseObject({
      securityContext: z
        .looseObject({ runAsUser: z.number().int().nullable().optional() })
        .nullable()
        .optional(),
      containers: z.array(ContainerSchema).nullable().optional(),
      ephemeralContainers: z.array(ContainerSchema).nullable().optional(),
      volumes: z
        .array(
          z.looseObject({
            name: z.string(),
            image: z.looseObject({ reference: z.string().optional() }).nullable().optional(),
          }),
        )
        .nullable()
        .optional(),
    })
    .nullable()
    .optional(),
  status: z
    .looseObject({
      containerStatuses: z.array(StatusSchema).nullable().optional(),
      ephemeralContainerStatuses: z.array(StatusSchema).nullable().optional(),
    })
    .nullable()
    .optional(),
});
type ChangeablePod = z.infer<typeof ChangeablePodSchema>;

/** Who runs as whom in the pod as built: the runner's user and each task container's. */
interface PodUsers {
  pod: number | undefined;
  runner: number | undefined;
  /** uid -> the task container that runs as it */
  tasks: Map<number, string>;
  /** Volumes the runner mounts writable (its socket and cancel files, the agent it places). */
  runnerWrites: Set<string>;
  /** Volumes a task container mounts writable (the workspace). */
  tasksWrite: Set<string>;
}

const userOf = (container: Container, pod: number | undefined) =>
  container.securityContext?.runAsUser ?? pod ?? undefined;

const writableMounts = (container: Container) =>
  (container.volumeMounts ?? []).filter((m) => m.readOnly !== true).map((m) => m.name);

function usersOf(pod: ChangeablePod): PodUsers {
  const podUser = pod.spec?.securityContext?.runAsUser ?? undefined;
  const users: PodUsers = {
    pod: podUser,
    runner: undefined,
    tasks: new Map(),
    runnerWrites: new Set(),
    tasksWrite: new Set(),
  };
  for (const container of pod.spec?.containers ?? []) {
    const uid = userOf(container, podUser);
    if (container.name === RUNNER_CONTAINER) {
      users.runner = uid;
      for (const name of writableMounts(container)) users.runnerWrites.add(name);
    } else {
      if (uid !== undefined && !users.tasks.has(uid)) users.tasks.set(uid, container.name);
      for (const name of writableMounts(container)) users.tasksWrite.add(name);
    }
  }
  return users;
}

/**
 * What one ephemeral container could reach, and why; undefined when neither the runner nor a task.
 * It reaches the runner when it may act as the runner's user or gain a capability: it runs as root
 * or as the runner's user, or as a user the controller cannot see (no runAsUser on it or the pod:
 * its image's), it is privileged or adds a capability, it may gain privileges through a setuid or
 * file-capability binary of its image (allowPrivilegeEscalation not false and not every
 * capability dropped), or it mounts writable a volume the runner writes. It reaches only a task
 * container's processes when it runs as that container's user, or only what tasks read when it
 * mounts the workspace writable. Otherwise (another user, no capability it could gain) the kernel
 * keeps it from the runner's signals, /proc/PID/root and memory.
 */
export function ephemeralReach(
  container: Container,
  users: PodUsers,
): { reach: Reach; why: string } | undefined {
  const context = container.securityContext ?? {};
  const uid = userOf(container, users.pod);
  const added = (context.capabilities?.add ?? []).filter((c) => c !== "");
  const dropsAll = (context.capabilities?.drop ?? []).some((c) => c.toUpperCase() === "ALL");
  if (context.privileged === true) return { reach: "runner", why: "is privileged" };
  if (added.length > 0) return { reach: "runner", why: `adds capabilities ${added.join(", ")}` };
  if (uid === undefined)
    return {
      reach: "runner",
      why: "sets no runAsUser (nor does the pod): its image's user may be root or the runner's",
    };
  if (uid === 0) return { reach: "runner", why: "runs as root (uid 0)" };
  if (uid === users.runner) return { reach: "runner", why: `runs as uid ${uid} (the runner's)` };
  if (!dropsAll && context.allowPrivilegeEscalation !== false)
    return {
      reach: "runner",
      why: `runs as uid ${uid} but may gain privileges (allowPrivilegeEscalation is not false and it does not drop ALL capabilities): a setuid binary of its image could make it root or the runner's user`,
    };
  const runnerVolume = writableMounts(container).find((name) => users.runnerWrites.has(name));
  if (runnerVolume !== undefined)
    return { reach: "runner", why: `mounts volume ${runnerVolume}, which the runner writes, writable` };
  const task = users.tasks.get(uid);
  if (task !== undefined)
    return { reach: "tasks", why: `runs as uid ${uid} (${task}'s): it can reach that container's tasks` };
  const taskVolume = writableMounts(container).find((name) => users.tasksWrite.has(name));
  if (taskVolume !== undefined)
    return { reach: "tasks", why: `mounts volume ${taskVolume} writable: it can change what tasks read` };
  return undefined;
}

const secondOf = (time: string | null | undefined) => {
  const ms = Date.parse(time ?? "");
  return Number.isNaN(ms) ? undefined : Math.floor(ms / 1000);
};

/**
 * Whether an ephemeral container has run while the runner did, as far as the pod's status shows:
 * it started, and (once the runner ended at `runnerEnd`) not in a later second than that end. The
 * kubelet writes the pod's status whole, from one look at the runtime, so a status that shows the
 * runner ended and this container never started means it had not started by then.
 */
function ranWithRunner(pod: ChangeablePod, name: string, runnerEnd: string | null | undefined): boolean {
  const status = pod.status?.ephemeralContainerStatuses?.find((s) => s.name === name);
  const start =
    status?.state?.running?.startedAt ??
    status?.state?.terminated?.startedAt ??
    status?.lastState?.terminated?.startedAt;
  if (start === undefined || start === null) return false;
  if (runnerEnd === undefined) return true;
  const end = secondOf(runnerEnd);
  const second = secondOf(start);
  return end === undefined || second === undefined || second <= end;
}

/** The task containers' images as the runner's environment (fixed at creation) names them. */
function builtTaskImages(runner: Container | undefined): Record<string, string> {
  const value = runner?.env?.find((e) => e.name === TASK_CONTAINERS_ENV_VAR)?.value;
  if (!value) return {};
  try {
    const parsed = z.record(z.string(), z.string()).safeParse(JSON.parse(value));
    return parsed.success ? parsed.data : {};
  } catch {
    return {};
  }
}

/**
 * The containers whose image is not the one built: a task container's against the image the
 * runner's environment names for it, the runner's against the agent's image volume (the runner
 * image itself, where the agent comes that way); and any container the kubelet restarted, which
 * under restartPolicy Never only a change of its definition does.
 */
function imageChanges(pod: ChangeablePod): PodChange[] {
  const containers = pod.spec?.containers ?? [];
  const runner = containers.find((c) => c.name === RUNNER_CONTAINER);
  const built: Record<string, string> = { ...builtTaskImages(runner) };
  const agentImage = pod.spec?.volumes?.find((v) => v.name === AGENT_VOLUME)?.image?.reference;
  if (agentImage) built[RUNNER_CONTAINER] = agentImage;
  const changes: PodChange[] = [];
  for (const container of containers) {
    const want = built[container.name];
    if (want === undefined || container.image === want) continue;
    changes.push({
      reach: "runner",
      what: `container ${container.name} runs image ${container.image ?? "(none)"}, the controller built it with ${want}`,
      key: `image/${container.name}/${container.image ?? ""}`,
    });
  }
  for (const status of pod.status?.containerStatuses ?? []) {
    const restarts = status.restartCount ?? 0;
    if (restarts === 0) continue;
    changes.push({
      reach: "runner",
      what: `container ${status.name} was restarted (restartCount ${restarts}), which under restartPolicy Never only a change of its definition (its image) does`,
      key: `restart/${status.name}`,
    });
  }
  return changes;
}

/**
 * Every change of the pod since its creation that reaches the runner or a task: its containers'
 * images, and its ephemeral containers that have run while the runner did (`runnerEnd`: the
 * runner container's finishedAt once it ended, null when it ended at a time the pod does not say).
 * One that never started, or started after the runner ended, came too late to reach it.
 */
export function podChanges(raw: PodView, runnerEnd?: string | null): PodChange[] {
  const parsed = ChangeablePodSchema.safeParse(raw);
  if (!parsed.success) {
    return [{ reach: "runner", what: "its spec cannot be read", key: "unreadable" }];
  }
  const pod = parsed.data;
  const users = usersOf(pod);
  const changes = imageChanges(pod);
  for (const container of pod.spec?.ephemeralContainers ?? []) {
    if (!ranWithRunner(pod, container.name, runnerEnd)) continue;
    const reach = ephemeralReach(container, users);
    if (!reach) continue;
    const target = container.targetContainerName ? ` (target ${container.targetContainerName})` : "";
    changes.push({
      reach: reach.reach,
      what: `ephemeral container ${container.name}${target} ${reach.why}`,
      key: `ephemeral/${container.name}`,
    });
  }
  return changes;
}

/** The verdict for the report of a runner that ended at `runnerEnd`. */
export function judgePodChanges(pod: PodView, runnerEnd?: string | null): ChangeVerdict {
  const changes = podChanges(pod, runnerEnd);
  const change = changes.find((c) => c.reach === "runner");
  if (change) return { verdict: "changed", change };
  return changes.length > 0 ? { verdict: "unverified", changes } : { verdict: "unchanged" };
}

/** "the pod was changed after its creation: ..." for a status message. */
export function describeChange(change: PodChange): string {
  return `the pod was changed after its creation: ${change.what}`;
}
