// The containers a run's pod holds besides the runner (docs/design.md, "Tasks in their own
// images"): an init container that copies the static agent from the runner image onto a shared
// volume, and one container per distinct task image whose only process is that agent, started by
// the runner over a unix socket. Every task container shares the pod's process namespace, user and
// group (1000), so an agent can signal any process of its tasks; the runner runs as another user,
// so no task can signal, trace or overwrite it.
import type { PodSettings } from "../../api/policy.js";
import type { TaskContainers } from "../../api/task-images.js";

/** The user and group of every task and agent (the pod's), and the group the runner shares with them. */
export const TASK_UID = 1000;
export const TASK_GID = 1000;

export const AGENT_INSTALL_CONTAINER = "agent-install";
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

/** The init container that places the agent: `cp`, the one tool it needs from the runner image. */
export function agentInstallContainer(runnerImage: string): Record<string, unknown> {
  return {
    name: AGENT_INSTALL_CONTAINER,
    image: runnerImage,
    command: ["cp", `${AGENT_SOURCE_DIR}/agent`, `${AGENT_SOURCE_DIR}/busybox`, `${AGENT_DIR}/`],
    volumeMounts: [{ name: AGENT_VOLUME, mountPath: AGENT_DIR }],
    securityContext: { ...RESTRICTED_CONTAINER, runAsUser: TASK_UID },
    resources: { requests: { cpu: "10m", memory: "16Mi" }, limits: { memory: "64Mi" } },
  };
}

/** One container per distinct task image: the agent, connecting to the runner's socket. */
export function taskContainers(
  plan: TaskContainers,
  resources: PodSettings["resources"],
): Record<string, unknown>[] {
  return plan.containers.map((container) => ({
    name: container.name,
    image: container.image,
    command: [`${AGENT_DIR}/agent`, RUNNER_SOCKET, container.name],
    workingDir: WORKSPACE_DIR,
    volumeMounts: [
      { name: AGENT_VOLUME, mountPath: AGENT_DIR, readOnly: true },
      // connect() to a unix socket works on a read-only mount; the cancel files stay the runner's.
      { name: RUN_VOLUME, mountPath: RUN_DIR, readOnly: true },
      { name: WORKSPACE_VOLUME, mountPath: WORKSPACE_DIR },
    ],
    securityContext: { ...RESTRICTED_CONTAINER, runAsUser: TASK_UID },
    ...(resources ? { resources } : {}),
  }));
}

/** The volumes the agent, the runner's socket and the shared workspace live on. */
export function taskVolumes(): Record<string, unknown>[] {
  return [
    { name: AGENT_VOLUME, emptyDir: { sizeLimit: "64Mi" } },
    { name: RUN_VOLUME, emptyDir: { sizeLimit: "16Mi" } },
    { name: WORKSPACE_VOLUME, emptyDir: {} },
  ];
}
