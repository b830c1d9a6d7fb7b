// The containers a run's pod holds besides the runner (docs/design.md, "Tasks in their own
// images"): one per distinct task image whose only process is the static agent, started by the
// runner over a unix socket. The agent reaches them from the runner image without an init
// container (each costs a whole kubelet pass), one of two ways (agent-delivery.ts): the runner's
// image mounted read-only as an `image` volume in every task container, or, where the cluster has
// no image volumes, placed on a shared emptyDir by the runner container's postStart hook, which
// the kubelet runs to its end before it starts the next container (the runner is the first). Every task container shares the pod's process namespace, user and
// group (1000), so an agent can signal any process of its tasks; the runner runs as another user,
// so no task can signal, trace or overwrite it.
import type { PodSettings } from "../../api/policy.js";
import type { TaskContainers } from "../../api/task-images.js";
import type { AgentDelivery } from "./agent-delivery.js";
import { serviceAccountTokenMount } from "./service-account-token.js";

/**
 * The user of the first task container and its agent; task-K runs as TASK_UID + K - 1, so no
 * process one container's tasks leave can signal, trace or read the environment of another's
 * (docs/design.md, "What a task can still do"). They share the group, the runner's too.
 */
export const TASK_UID = 1000;
export const TASK_GID = 1000;

/** The user of task container `index` (0-based, task-1 first). */
export const taskContainerUid = (index: number) => TASK_UID + index;

export const AGENT_VOLUME = "playbook-agent";
export const AGENT_DIR = "/playbook/agent";
/** Where the runner image holds the agent and the busybox a shell-less image's tasks run under. */
export const AGENT_SOURCE_DIR = "/usr/local/lib/playbook";
export const RUN_VOLUME = "playbook-run";
/** The runner's socket and cancel files: written by the runner, read-only to the tasks. */
export const RUN_DIR = "/playbook/run";
export const RUNNER_SOCKET = `${RUN_DIR}/runner.sock`;
export const WORKSPACE_VOLUME = "workspace";
/** Shared by every task container, and their default working directory. */
export const WORKSPACE_DIR = "/workspace";

/** What restricted Pod Security asks of every container; the pod adds the user and seccomp. */
export const RESTRICTED_CONTAINER = {
  allowPrivilegeEscalation: false,
  capabilities: { drop: ["ALL"] },
} as const;

/** The agent as a task container runs it: the runner image's own file, or the copy on the emptyDir. */
export function agentPath(delivery: AgentDelivery): string {
  return delivery === "image-volume" ? `${AGENT_DIR}${AGENT_SOURCE_DIR}/agent` : `${AGENT_DIR}/agent`;
}

/**
 * What the runner container adds to place the agent (post-start only): the agent volume,
 * writable, and a postStart hook that runs the agent's own `--install` (no shell: a binary that
 * writes each file under a temporary name and renames it, so a second run changes nothing).
 */
export function runnerAgentDelivery(delivery: AgentDelivery): {
  volumeMounts: Record<string, unknown>[];
  lifecycle?: Record<string, unknown>;
} {
  if (delivery === "image-volume") return { volumeMounts: [] };
  return {
    volumeMounts: [{ name: AGENT_VOLUME, mountPath: AGENT_DIR }],
    lifecycle: { postStart: { exec: { command: [`${AGENT_SOURCE_DIR}/agent`, "--install", AGENT_DIR] } } },
  };
}

/**
 * One container per distinct task image: the agent, connecting to the runner's socket; with the
 * service account's token where the pod mounts one (service-account-token.ts).
 */
export function taskContainers(
  plan: TaskContainers,
  resources: PodSettings["resources"],
  delivery: AgentDelivery,
  withToken = false,
): Record<string, unknown>[] {
  return plan.containers.map((container, index) => ({
    name: container.name,
    image: container.image,
    command: [agentPath(delivery), RUNNER_SOCKET, container.name],
    workingDir: WORKSPACE_DIR,
    // The env and envFrom from sources its tasks name: the kubelet sets them, the agent's hello
    // hands them to the runner, which starts this container's tasks from them (task-sources.ts).
    ...(container.sources?.env.length ? { env: container.sources.env } : {}),
    ...(container.sources?.envFrom.length ? { envFrom: container.sources.envFrom } : {}),
    volumeMounts: [
      { name: AGENT_VOLUME, mountPath: AGENT_DIR, readOnly: true },
      // connect() to a unix socket works on a read-only mount; the cancel files stay the runner's.
      { name: RUN_VOLUME, mountPath: RUN_DIR, readOnly: true },
      { name: WORKSPACE_VOLUME, mountPath: WORKSPACE_DIR },
      ...(withToken ? [serviceAccountTokenMount()] : []),
      ...(container.sources?.volumeMounts ?? []),
    ],
    securityContext: { ...RESTRICTED_CONTAINER, runAsUser: taskContainerUid(index), runAsGroup: TASK_GID },
    ...(resources ? { resources } : {}),
  }));
}

/**
 * The volumes the agent, the runner's socket and the shared workspace live on. An image volume
 * is the whole runner image (a subPath of one needs newer runtimes), pulled as its container is.
 */
export function taskVolumes(delivery: AgentDelivery, runnerImage: string): Record<string, unknown>[] {
  return [
    delivery === "image-volume"
      ? { name: AGENT_VOLUME, image: { reference: runnerImage } }
      : { name: AGENT_VOLUME, emptyDir: { sizeLimit: "64Mi" } },
    { name: RUN_VOLUME, emptyDir: { sizeLimit: "16Mi" } },
    { name: WORKSPACE_VOLUME, emptyDir: {} },
  ];
}
