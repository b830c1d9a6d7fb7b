// Agent mode: the pod runner of a Playbook whose tasks run in their own images. Every task
// container runs an agent (agent/agent.c) that connects to the runner's socket in the run dir;
// each attempt is started through the agent of its task's container (agent-launcher.ts), and
// the end of the run is a fence: every agent SIGKILLs every process it may signal in the pod's
// shared process namespace but the agents, then quits. See docs/design.md ("Agent mode").
import { mkdirSync } from "node:fs";
import { join, posix } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import type { TaskSpec } from "../api/playbook.js";
import { type AgentHub, openAgentHub } from "./agent-hub.js";
import { type AgentLike, type AttemptsSeen, agentLauncher, descendantsOf } from "./agent-launcher.js";
import type { Containment } from "./containment.js";
import type { Launcher } from "./launcher.js";
import { describeProcesses, isStopped, processesOf } from "./proc-tree.js";

/** JSON object: task container name → its image. Set on the pod's runner container. */
export const TASK_CONTAINERS_VAR = "PLAYBOOK_TASK_CONTAINERS";
/** JSON object: task container name → the user its agent runs as, one of its own each. Set on the pod's runner container. */
export const TASK_UIDS_VAR = "PLAYBOOK_TASK_UIDS";
/** The directory shared with the task containers: the socket and the cancel files. */
export const RUN_DIR_VAR = "PLAYBOOK_RUN_DIR";
export const DEFAULT_RUN_DIR = "/playbook/run";
/** How long the runner waits for every agent's hello before it gives the run up. */
export const AGENT_HELLO_VAR = "PLAYBOOK_AGENT_HELLO_TIMEOUT_MS";
export const DEFAULT_AGENT_HELLO_MS = 60_000;

const TaskContainersSchema = z.record(z.string().min(1).max(63), z.string().min(1));
const TaskUidsSchema = z.record(
  z.string().min(1).max(63),
  z
    .number()
    .int()
    .min(1)
    .max(2 ** 31 - 1),
);

/** What runPlaybook needs of agent mode. */
export interface AgentRun {
  /** task container name → image, in the pod's order */
  containers: Readonly<Record<string, string>>;
  runDir: string;
  /** the agent of a container; null when it never said hello */
  agent(container: string): AgentLike | null;
  /** every agent that said hello */
  agents(): AgentLike[];
  /**
   * A local run (`playbook run`, local-run.ts): each task's container, null for a task that runs
   * on the host (it names no image); the run dir as the tasks see it (/playbook/run), where the
   * runner's is elsewhere; and the environment each container's image sets, which its tasks
   * start from instead of the runner's.
   */
  local?: {
    containerOf(index: number): string | null;
    seenRunDir: string;
    baseEnv(container: string): Record<string, string>;
  };
  /** containers whose agent did not say hello in time: the run starts nothing */
  missing?: readonly string[];
  /**
   * Where each container runs under a user of its own (a pod): waits, at most `withinMs` and the
   * hello deadline, for `container`'s agent only, so a task starts once its own agent is in.
   * Absent: every agent said hello before the run began (or never will).
   */
  arrive?(container: string, withinMs: number, signal?: AbortSignal): Promise<void>;
  /** per task (by index), its container as the controller resolved it (the plan's `tasks`) */
  taskContainers?: readonly string[];
}

/**
 * Opens the runner's socket in the run dir. With `uids` (each container's user, one of its own
 * each), an agent is taken once it proved its user, and each task waits for its own container's
 * agent only (`arrive`), within `helloMs` of now. Without, it waits, at most `helloMs`, for the
 * agent of every task container to say hello: a task that read another container's key could
 * otherwise take that agent's place. The caller closes the hub once the run is over.
 */
export async function openAgentRun(
  containers: Readonly<Record<string, string>>,
  runDir: string,
  helloMs: number,
  taskContainers?: readonly string[],
  uids?: Readonly<Record<string, number>>,
): Promise<{ run: AgentRun; hub: AgentHub; problem?: string }> {
  mkdirSync(runDir, { recursive: true });
  const expect = Object.keys(containers);
  const hub = await openAgentHub(join(runDir, "runner.sock"), { expect, ...(uids ? { uids } : {}) });
  const helloBy = performance.now() + helloMs;
  let problem: string | undefined;
  if (!uids) {
    try {
      await hub.ready(helloMs);
    } catch (error) {
      problem = (error as Error).message;
    }
  }
  const agentOf = (container: string): AgentLike | null => {
    try {
      return hub.agent(container);
    } catch {
      return null;
    }
  };
  // With `uids`, none is missing yet: each task finds out whether its own agent came (`arrive`).
  const missing = uids ? [] : expect.filter((container) => agentOf(container) === null);
  return {
    hub,
    ...(problem !== undefined ? { problem } : {}),
    run: {
      containers,
      runDir,
      agent: agentOf,
      agents: () => hub.agents(),
      missing,
      ...(taskContainers ? { taskContainers } : {}),
      ...(uids
        ? {
            async arrive(container: string, withinMs: number, signal?: AbortSignal) {
              await hub.readyFor(
                container,
                Math.max(0, Math.min(withinMs, helloBy - performance.now())),
                signal,
              );
            },
          }
        : {}),
    },
  };
}

/**
 * Parses $PLAYBOOK_TASK_UIDS for `containers`; null when unset (every agent is then awaited before
 * the first task). Each container must have a user, and no two the same: a proof of the user
 * tells an agent from another container's tasks only where their users differ.
 */
export function taskUidsFrom(
  env: NodeJS.ProcessEnv,
  containers: Readonly<Record<string, string>>,
): Record<string, number> | null {
  const text = env[TASK_UIDS_VAR];
  if (text === undefined || text === "") return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`$${TASK_UIDS_VAR} is not JSON: ${text.slice(0, 200)}`);
  }
  const parsed = TaskUidsSchema.safeParse(json);
  const names = Object.keys(containers);
  if (
    !parsed.success ||
    names.some((name) => parsed.data[name] === undefined) ||
    Object.keys(parsed.data).length !== names.length ||
    new Set(Object.values(parsed.data)).size !== names.length
  ) {
    throw new Error(
      `$${TASK_UIDS_VAR} must give each task container (${names.join(", ")}) a user id of its own, over 0: ${text.slice(0, 200)}`,
    );
  }
  return parsed.data;
}

/** Parses $PLAYBOOK_TASK_CONTAINERS; null when unset (the pod runner runs tasks itself). */
export function taskContainersFrom(env: NodeJS.ProcessEnv): Record<string, string> | null {
  const text = env[TASK_CONTAINERS_VAR];
  if (text === undefined || text === "") return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`$${TASK_CONTAINERS_VAR} is not JSON: ${text.slice(0, 200)}`);
  }
  const parsed = TaskContainersSchema.safeParse(json);
  if (!parsed.success || Object.keys(parsed.data).length === 0) {
    throw new Error(`$${TASK_CONTAINERS_VAR} must be a non-empty object of container name to image`);
  }
  return parsed.data;
}

/**
 * The container a task runs in: the one the controller resolved into the plan (`planned`), else
 * the only one, else the first whose image is the task's.
 */
export function containerOfTask(
  task: TaskSpec,
  containers: Readonly<Record<string, string>>,
  planned?: string,
): string {
  const names = Object.keys(containers);
  if (planned !== undefined) return planned;
  if (names.length === 1) return names[0] as string;
  const image = (task as { image?: string }).image;
  return names.find((name) => containers[name] === image) ?? (names[0] as string);
}

/** The cancel file of an attempt: in the run dir, which the task containers mount read-only. */
export function agentCancelFileOf(runDir: string): (attemptId: string) => string {
  const dir = join(runDir, "cancel");
  // Readable by the tasks (another uid, the pod's group): the files are 0644.
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  return (attemptId) => join(dir, attemptId);
}

/**
 * The run's attempts by container and start, so that a live process of a task container is
 * told to the attempt it belongs to (its cancel file) without reading its environment.
 */
export function attemptsSeen(run: AgentRun): AttemptsSeen {
  const byContainer = new Map<string, { attemptId: string; startedFrom: number }[]>();
  return {
    started(container, attemptId, startedFrom) {
      const list = byContainer.get(container) ?? [];
      list.push({ attemptId, startedFrom });
      byContainer.set(container, list);
    },
    liveAttempts() {
      const live = new Set<string>();
      for (const agent of run.agents()) {
        const list = byContainer.get(agent.container);
        if (agent.lost || !list) continue;
        for (const entry of descendantsOf(agent)) {
          // The latest attempt there that started no later than the process.
          let owner: string | undefined;
          for (const attempt of list) if (attempt.startedFrom <= entry.start) owner = attempt.attemptId;
          if (owner !== undefined) live.add(owner);
        }
      }
      return live;
    },
  };
}

/** One launcher per container, made when first needed. */
export function agentLaunchers(
  run: AgentRun,
  attempts?: AttemptsSeen,
): (container: string) => Launcher | null {
  const made = new Map<string, Launcher>();
  return (container) => {
    const known = made.get(container);
    if (known) return known;
    const agent = run.agent(container);
    if (!agent) return null;
    const seenRunDir = run.local?.seenRunDir;
    const launcher = agentLauncher(
      agent,
      () => run.agents(),
      attempts,
      seenRunDir === undefined ? undefined : (attemptId) => posix.join(seenRunDir, "cancel", attemptId),
    );
    made.set(container, launcher);
    return launcher;
  };
}

/** How long the fence may take per agent before the run gives it up (the agent bounds it at 2 s). */
const FENCE_ANSWER_MS = 5000;
/** A pod's agent that a task stopped: it answers nothing until continued (a local run's never is). */
const stoppedInPod = (agent: AgentLike) => agent.descendants === undefined && isStopped(agent.pid);

/** How long the runner looks for the tasks' processes to go after a fence that left some. */
const FENCE_CONFIRM_MS = 3000;

/**
 * Whether every process of the agents' users but the agents is gone, looked for until `ms` pass.
 * Only in a pod's shared process namespace: a local run's containers have namespaces of their own.
 */
async function remainingTaskProcesses(agents: readonly AgentLike[], ms: number): Promise<number[] | null> {
  // Root's processes are the whole machine's (a pod's tasks never run as root): nothing to look for.
  const inPod = (agent: AgentLike) =>
    agent.descendants === undefined && agent.uid !== undefined && agent.uid !== 0;
  if (agents.length === 0 || !agents.every(inPod)) return null;
  const uids = new Set(agents.map((agent) => agent.uid as number));
  // PID 1 is not spared: the pod's sandbox (pause) runs as a user of its own, no agent's, so it
  // is never among these; a PID 1 of a task's user is not the sandbox, and is left.
  const spared = new Set(agents.map((agent) => agent.pid));
  const until = performance.now() + ms;
  for (;;) {
    const left = processesOf(uids, spared);
    if (left.length === 0 || performance.now() >= until) return left;
    await sleep(50);
  }
}

/**
 * The agents hold the run's processes: every task's process is a descendant of its container's
 * agent (a child subreaper), and the fence ends whatever the tasks did to their session or
 * environment. `spare` adds pids the fence must leave (the runner's own, when it shares the uid).
 */
export function agentContainment(
  run: AgentRun,
  spare: readonly number[] = [process.pid],
  attempts?: AttemptsSeen,
): Containment {
  const names = Object.keys(run.containers);
  /** What the last unclean fence left unconfirmed, in words. */
  let unconfirmed: string | undefined;
  const owners = () => {
    const owner = new Map<number, AgentLike>();
    for (const agent of run.agents()) {
      if (agent.lost) continue;
      for (const entry of descendantsOf(agent)) owner.set(entry.pid, agent);
    }
    return owner;
  };
  return {
    kind: "agents",
    description:
      `agents in ${names.length} task container(s) (${names.map((name) => `${name}: ${run.containers[name]}`).join(", ")}): ` +
      "each is the subreaper of its container's tasks and signals them for the runner; the run ends with " +
      "a fence that kills every process in the pod's process namespace but the agents",
    command: (runText, shell) => ({ file: shell[0] ?? "sh", args: [...shell.slice(1), "-c", runText] }),
    members: () => [...owners().keys()],
    ...(attempts ? { liveAttempts: () => attempts.liveAttempts() } : {}),
    signal(pid, signal) {
      const agent = owners().get(pid);
      if (!agent) return;
      try {
        agent.kill(pid, signal);
      } catch {
        // gone: it killed its descendants as it left
      }
    },
    async killAll() {
      const live = run.agents().filter((agent) => !agent.lost);
      const pids = [...live.map((agent) => agent.pid), ...spare];
      const answers = await Promise.all(
        live.map(async (agent) => {
          let timer: NodeJS.Timeout | undefined;
          // A stopped agent answers nothing: its container's processes are not known to be dead.
          if (stoppedInPod(agent)) return -1;
          try {
            return await Promise.race([
              agent.fence(pids),
              new Promise<number>((resolve) => {
                timer = setTimeout(() => resolve(-1), FENCE_ANSWER_MS);
              }),
            ]);
          } catch {
            return -1;
          } finally {
            clearTimeout(timer);
          }
        }),
      );
      unconfirmed = undefined;
      if (answers.every((alive) => alive === 0)) return true;
      // An agent that found a process still dying when its sweep ran out (one in the kernel's
      // hands under memory pressure) did not see it end: in a pod the runner sees every process of
      // the tasks' users, and looks until none is left or the time is up.
      const left = await remainingTaskProcesses(live, FENCE_CONFIRM_MS);
      if (left !== null && left.length === 0) return true;
      const silent = live.filter((_, index) => answers[index] === -1).map((agent) => agent.container);
      unconfirmed = [
        silent.length > 0 ? `no fence answer from the agent of ${silent.join(", ")}` : undefined,
        left && left.length > 0 ? `still running: ${describeProcesses(left)}` : undefined,
      ]
        .filter(Boolean)
        .join("; ");
      return false;
    },
    unconfirmed: () => unconfirmed || undefined,
    // Q to every agent: each ends its descendants and exits, and with it its container.
    async close() {
      await Promise.all(
        run.agents().map(async (agent) => {
          let timer: NodeJS.Timeout | undefined;
          if (stoppedInPod(agent)) return;
          try {
            await Promise.race([
              agent.quit(),
              new Promise<void>((resolve) => {
                timer = setTimeout(resolve, FENCE_ANSWER_MS);
              }),
            ]);
          } catch {
            // already gone
          } finally {
            clearTimeout(timer);
          }
        }),
      );
    },
  };
}
