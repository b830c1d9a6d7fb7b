// The containers of a local run with image tasks, from the first start to the last removal: the
// run dir (socket, cancel files) and the workspace, the agent hub listening on the socket, one
// container per image, and the wait until every agent said hello. close() ends it all, whatever
// ended the run; a start that fails or is interrupted ends it too before it says why.
import { execFile } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Agent, type AgentHub, openAgentHub } from "./agent-hub.js";
import type { AgentLike } from "./agent-launcher.js";
import type { AgentRun } from "./agent-mode.js";
import { type Containment, openContainment } from "./containment.js";
import {
  type AgentFiles,
  listRunContainers,
  RUN_MOUNT,
  SOCKET_NAME,
  type StartedContainer,
  startTaskContainers,
  type TaskContainer,
  type TaskContainers,
  WORKSPACE_MOUNT,
} from "./local-containers.js";
import type { LocalEngine } from "./local-engine.js";
import { type ContainerProcess, containerDescendants, hostDescendants } from "./local-pids.js";

export interface LocalRunOptions {
  engine: LocalEngine;
  agent: AgentFiles;
  containers: readonly TaskContainer[];
  runId: string;
  /** how long the containers may take to start (pull included) and their agents to say hello */
  startTimeoutMs: number;
  /** spec.resources.limits, applied to each task container */
  limits?: { memory?: string; cpu?: string };
  /** the tasks that run in each container, named in the messages of a failed start */
  tasksOf?: (container: string) => string[];
  /** a start stopped by Ctrl-C */
  cancelSignal?: AbortSignal;
  /** progress lines: the start of each container, the engine's own lines (a pull) */
  say?: (line: string) => void;
}

/** An agent as the runner drives it, with its container's processes numbered as it numbers them. */
export type LocalAgent = AgentLike & {
  /** the container's live processes but the agent, in the container's numbering */
  descendants(): ContainerProcess[];
};

export interface LocalRun {
  /** the run dir on this machine (the containers see it at /playbook/run) */
  runDir: string;
  /** the workspace on this machine (the containers see it at /workspace) */
  workspace: string;
  agents: Map<string, LocalAgent>;
  /** the environment each container's image sets (PATH above all): a task's starts from it */
  imageEnv: Map<string, Record<string, string>>;
  /** runPlaybook's agent mode and containment for this run; containerOf: each task's container or null (host) */
  runOptions(containerOf: readonly (string | undefined)[]): {
    agents: AgentRun;
    containment: (runId: string) => Containment;
  };
  close(): Promise<void>;
}

/** The task containers did not start: nothing was run (exit 2). */
export class LocalStartError extends Error {
  override name = "LocalStartError";
}

function engineOutput(engine: LocalEngine, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(engine.command, args, { timeout: 60_000 }, (error, stdout, stderr) =>
      error
        ? reject(
            new Error(`${engine.command} ${args[0]} ${args[1] ?? ""}: ${stderr.trim() || error.message}`),
          )
        : resolve(stdout),
    );
  });
}

/** The host pid of a running container's first process (its agent). */
async function hostPidOf(engine: LocalEngine, container: StartedContainer): Promise<number> {
  const out = await engineOutput(engine, ["inspect", "--format", "{{.State.Pid}}", container.engineName]);
  const pid = Number(out.trim());
  if (!Number.isInteger(pid) || pid <= 0) {
    throw new LocalStartError(
      `container ${container.name} (${container.image}) is not running (pid ${out.trim()})`,
    );
  }
  return pid;
}

async function imageEnvOf(engine: LocalEngine, image: string): Promise<Record<string, string>> {
  const out = await engineOutput(engine, ["image", "inspect", "--format", "{{json .Config.Env}}", image]);
  const list = (JSON.parse(out.trim() || "null") as string[] | null) ?? [];
  // As the engines and the kubelet give a container that its image does not: a PATH, a HOME.
  const env: Record<string, string> = {
    PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME: process.getuid?.() === 0 ? "/root" : "/",
  };
  for (const entry of list) {
    const at = entry.indexOf("=");
    if (at > 0) env[entry.slice(0, at)] = entry.slice(at + 1);
  }
  return env;
}

function describeEnd(
  container: StartedContainer,
  result: { code: number | null; lines: string[] },
  tasks: readonly string[],
  engineKind: string,
): string {
  const said = result.lines.slice(-5).join(" | ");
  const of = tasks.length > 0 ? ` of task${tasks.length === 1 ? "" : "s"} ${tasks.join(", ")}` : "";
  return `container ${container.name}${of} (image ${container.image}) ended before its agent said hello (${engineKind} exit code ${result.code ?? "unknown"})${said ? `: ${said}` : ""}; nothing was run`;
}

const FENCE_ANSWER_MS = 5000;

/**
 * What holds a local run's processes: the host's containment (a cgroup, a subreaper) for the tasks
 * that run here, and the containers for the others. The runner shares the containers' user, so it
 * signals their processes itself, by their host pids; the end of the run is each agent's fence,
 * then the agents' quit, which ends each container (its first process gone, its namespace ends).
 */
function localContainment(
  host: Containment,
  agents: readonly LocalAgent[],
  agentHostPids: readonly number[],
  allInContainers: boolean,
  containers: readonly StartedContainer[],
): Containment {
  const inContainers = () => agentHostPids.flatMap((pid) => hostDescendants(pid));
  const named = containers.map((c) => `${c.name}: ${c.image}`).join(", ");
  return {
    kind: allInContainers ? "agents" : host.kind,
    description:
      `agents in ${containers.length} task container(s) (${named}), each the first process of its container: ` +
      `its tasks end with it${allInContainers ? "" : `; the tasks on this machine: ${host.description}`}`,
    command: host.command,
    ...(host.notices ? { notices: host.notices } : {}),
    members: () => [...host.members(), ...inContainers()],
    async killAll(until) {
      const fenced = await Promise.all(
        agents
          .filter((agent) => !agent.lost)
          .map((agent) =>
            Promise.race([
              agent.fence([]).catch(() => -1),
              new Promise<number>((resolve) => setTimeout(resolve, FENCE_ANSWER_MS, -1).unref()),
            ]),
          ),
      );
      const hostClean = await host.killAll(until);
      return hostClean && fenced.every((alive) => alive === 0) && inContainers().length === 0;
    },
    async close() {
      await Promise.all(
        agents.map((agent) =>
          Promise.race([
            agent.quit().catch(() => {}),
            new Promise<void>((resolve) => setTimeout(resolve, FENCE_ANSWER_MS).unref()),
          ]),
        ),
      );
      await host.close();
    },
  };
}

/** The agent, delegated to, with its container's processes. */
function withDescendants(agent: Agent, descendants: () => ContainerProcess[]): LocalAgent {
  return {
    get container() {
      return agent.container;
    },
    get pid() {
      return agent.pid;
    },
    get lost() {
      return agent.lost;
    },
    start: (spec) => agent.start(spec),
    kill: (target, signal) => agent.kill(target, signal),
    fence: (spare) => agent.fence(spare),
    quit: () => agent.quit(),
    descendants,
  };
}

export async function startLocalRun(options: LocalRunOptions): Promise<LocalRun> {
  const runDir = mkdtempSync(join(tmpdir(), "playbook-run-"));
  const workspace = mkdtempSync(join(tmpdir(), "playbook-workspace-"));
  mkdirSync(join(runDir, "cancel"));
  // The containers' user is this one (local-containers.ts): nobody else may reach the socket,
  // pose as an agent and be handed a task's environment. Read-only in the containers; the
  // workspace is theirs to write.
  chmodSync(runDir, 0o700);
  chmodSync(join(runDir, "cancel"), 0o700);
  let hub: AgentHub | undefined;
  let started: TaskContainers | undefined;
  const close = async () => {
    // The agents end their tasks and leave; the containers go with them, or are removed.
    if (hub) await Promise.race([hub.close(), new Promise((resolve) => setTimeout(resolve, 5000))]);
    if (started) await started.stop();
    rmSync(runDir, { recursive: true, force: true });
    rmSync(workspace, { recursive: true, force: true });
  };
  try {
    hub = await openAgentHub(join(runDir, SOCKET_NAME), {
      expect: options.containers.map((container) => container.name),
      mode: 0o600,
    });
    const names = options.containers.map((c) => `${c.name} ${c.image}`).join(", ");
    options.say?.(`playbook: starting task containers with ${options.engine.kind}: ${names}`);
    started = startTaskContainers({
      engine: options.engine,
      runId: options.runId,
      containers: options.containers,
      agent: options.agent,
      runDir,
      workspace,
      limits: options.limits,
      onLine: (container, line) => options.say?.(`playbook: ${container}: ${line}`),
    });
    const containers = started.containers;
    const endedEarly = Promise.race(
      containers.map((container) =>
        container.ended.then((result) => {
          throw new LocalStartError(
            describeEnd(container, result, options.tasksOf?.(container.name) ?? [], options.engine.kind),
          );
        }),
      ),
    );
    const cancelled = new Promise<never>((_, reject) => {
      const fail = () => reject(new LocalStartError("interrupted while the task containers were starting"));
      if (options.cancelSignal?.aborted) fail();
      options.cancelSignal?.addEventListener("abort", fail, { once: true });
    });
    endedEarly.catch(() => {});
    cancelled.catch(() => {});
    await Promise.race([
      hub.ready(options.startTimeoutMs).catch((error: Error) => {
        throw new LocalStartError(
          `the task containers did not all start within ${Math.round(options.startTimeoutMs / 1000)} s (startTimeout): ${error.message}; nothing was run`,
        );
      }),
      endedEarly,
      cancelled,
    ]);
    const agents = new Map<string, LocalAgent>();
    const imageEnv = new Map<string, Record<string, string>>();
    for (const container of containers) {
      const hostPid = await hostPidOf(options.engine, container);
      const agent = hub.agent(container.name);
      agents.set(
        container.name,
        withDescendants(agent, () => containerDescendants(hostPid)),
      );
      imageEnv.set(container.name, await imageEnvOf(options.engine, container.image));
    }
    const hostPids = new Map(
      await Promise.all(containers.map(async (c) => [c.name, await hostPidOf(options.engine, c)] as const)),
    );
    const images = Object.fromEntries(containers.map((c) => [c.name, c.image]));
    const agentRun = (containerOf: readonly (string | undefined)[]): AgentRun => ({
      containers: images,
      runDir,
      agent: (container) => agents.get(container) ?? null,
      agents: () => [...agents.values()],
      local: {
        containerOf: (index) => containerOf[index] ?? null,
        seenRunDir: RUN_MOUNT,
        baseEnv: (container) => imageEnv.get(container) ?? {},
      },
    });
    return {
      runDir,
      workspace,
      agents,
      imageEnv,
      runOptions: (containerOf) => ({
        agents: agentRun(containerOf),
        containment: (runId) =>
          localContainment(
            openContainment(runId),
            [...agents.values()],
            [...hostPids.values()],
            containerOf.every((container) => container !== undefined),
            containers,
          ),
      }),
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

export { listRunContainers, WORKSPACE_MOUNT };

/** Names the run's containers apart from any other run's on this machine. */
export function localRunId(): string {
  return `${process.pid.toString(16)}-${Math.floor(Math.random() * 2 ** 32)
    .toString(16)
    .padStart(8, "0")}`;
}
